//===- PieceLoops.cpp - Loops split at a concatenation's pieces -----------===//
#include "dynafuse/Lowering/PieceLoops.h"

namespace dynafuse {

namespace {

/// The dims along which value's position is its reader's, given those of
/// the reader (same): a pad moves the dims it pads, a slice its sliced dim,
/// and a broadcast operand the dims it does not span.
std::vector<bool> passedDims(const Value *value,
                             const std::vector<SymExpr> &readerSizes,
                             std::vector<bool> same) {
  for (size_t d = 0; d < same.size(); ++d)
    if (value->type.sizes[d] != readerSizes[d])
      same[d] = false;
  return same;
}

} // namespace

std::optional<PieceSplit> pieceSplitOf(const LoweringState &state,
                                       const LoweringStep &step) {
  if (step.externNode || step.members.empty())
    return std::nullopt;
  const std::vector<SymExpr> &sizes = step.members[0]->type.sizes;
  std::set<const Value *> members(step.members.begin(), step.members.end());
  for (const Value *member : step.members)
    if (member->type.sizes != sizes)
      return std::nullopt;
  std::optional<PieceSplit> best;
  // Each value reached, with the dims along which its position is still
  // the loop's (pads and slices of a pool's taps keep the channels').
  std::vector<std::pair<const Value *, std::vector<bool>>> pending;
  for (const Value *member : step.members)
    pending.push_back({member, std::vector<bool>(sizes.size(), true)});
  std::set<const Value *> seen;
  while (!pending.empty()) {
    auto [value, same] = pending.back();
    pending.pop_back();
    if (!seen.insert(value).second || !value->producer ||
        (state.isBuffer(value) && !members.count(value)) ||
        value->type.rank() != sizes.size())
      continue;
    const Node &node = *value->producer;
    if (node.op == Op::Cat) {
      PieceSplit split;
      split.dim = size_t(normalizeDim(node, node.intAttr("dim", 0),
                                      sizes.size()));
      if (!same[split.dim])
        continue;
      for (const Operand &piece : node.operands)
        if (piece.value->type.sizes[split.dim].isConstant())
          split.lengths.push_back(piece.value->type.sizes[split.dim].constant());
      if (split.lengths.size() == node.operands.size() &&
          split.lengths.size() >= 2 &&
          (!best || split.lengths.size() > best->lengths.size()))
        best = split;
      continue;
    }
    if (node.op == Op::Pad || node.op == Op::Slice) {
      const Value *source = node.operands[0].value;
      if (source->type.rank() != sizes.size())
        continue;
      std::vector<bool> kept = passedDims(source, value->type.sizes, same);
      if (node.op == Op::Pad) {
        std::vector<int64_t> pad = intListAttr(node, "pad", {});
        for (size_t p = 0; p < pad.size() / 2 && p < kept.size(); ++p)
          if (pad[2 * p] != 0 || pad[2 * p + 1] != 0)
            kept[kept.size() - 1 - p] = false;
      } else {
        kept[size_t(normalizeDim(node, node.intAttr("dim", 0),
                                 kept.size()))] = false;
      }
      pending.push_back({source, kept});
      continue;
    }
    if (kindOf(node) != OpKind::Pointwise)
      continue;
    // Operands of the members' shape are read at the same position; the
    // broadcast ones are not where the loop's position goes.
    for (const Operand &operand : node.operands)
      if (operand.isValue() &&
          operand.value->type.rank() == value->type.rank())
        pending.push_back(
            {operand.value, passedDims(operand.value, value->type.sizes, same)});
  }
  return best;
}

} // namespace dynafuse

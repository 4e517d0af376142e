//===- PieceLoops.cpp - Loops split at a concatenation's pieces -----------===//
#include "dynafuse/Lowering/PieceLoops.h"

#include "dynafuse/Graph/ViewRules.h"

#include <map>
#include <string>

namespace dynafuse {

namespace {

/// The loop dim along which each of value's dims is the loop's position
/// (-1 where it is not), given its reader's (readerDims): a broadcast
/// operand's dims that it does not span are not.
std::vector<int> passedDims(const Value *value,
                            const std::vector<SymExpr> &readerSizes,
                            std::vector<int> readerDims) {
  for (size_t d = 0; d < readerDims.size(); ++d)
    if (value->type.sizes[d] != readerSizes[d])
      readerDims[d] = -1;
  return readerDims;
}

/// Through a remapping view (transpose, permute, unsqueeze, a slice): its
/// operand's dims that read the loop's position along one loop dim. The
/// view's own index remap, applied to one symbol per dim, tells: an operand
/// dim read at exactly a loop dim's symbol, and as long as that dim of the
/// view, follows that loop dim (a slice's narrowed dim, `x[..., :4]` of a
/// concatenation of two 4-wide pieces, spans part of its operand's dim:
/// the operand's pieces are not the loop's).
std::vector<int> remappedDims(const Node &node, const Value *result,
                              const std::vector<int> &resultDims) {
  std::vector<SymExpr> index;
  std::map<std::string, size_t> resultDimOf;
  for (size_t d = 0; d < resultDims.size(); ++d) {
    std::string name = "r" + std::to_string(d);
    index.push_back(SymExpr::symbol(name));
    resultDimOf[name] = d;
  }
  std::vector<SymExpr> read = remapViewIndex(node, 0, index);
  const std::vector<SymExpr> &operandSizes = node.operands[0].value->type.sizes;
  std::vector<int> dims(read.size(), -1);
  for (size_t d = 0; d < read.size() && d < operandSizes.size(); ++d) {
    if (!read[d].isSymbol())
      continue;
    auto found = resultDimOf.find(read[d].symbolName());
    if (found != resultDimOf.end() &&
        operandSizes[d] == result->type.sizes[found->second])
      dims[d] = resultDims[found->second];
  }
  return dims;
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
  // Each value reached, with the loop dim each of its dims follows (pads
  // and slices of a pool's taps keep the channels'; a transposed
  // concatenation moves its dim).
  std::vector<std::pair<const Value *, std::vector<int>>> pending;
  std::vector<int> identity(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d)
    identity[d] = int(d);
  for (const Value *member : step.members)
    pending.push_back({member, identity});
  std::set<const Value *> seen;
  while (!pending.empty()) {
    auto [value, dims] = pending.back();
    pending.pop_back();
    if (!seen.insert(value).second || !value->producer ||
        (state.isBuffer(value) && !members.count(value)))
      continue;
    const Node &node = *value->producer;
    if (node.op == Op::Cat) {
      int64_t catDim =
          normalizeDim(node, node.intAttr("dim", 0), value->type.rank());
      if (dims[size_t(catDim)] < 0)
        continue;
      PieceSplit split;
      split.dim = size_t(dims[size_t(catDim)]);
      int64_t total = 0;
      for (const Operand &piece : node.operands)
        if (piece.value->type.sizes[size_t(catDim)].isConstant()) {
          split.lengths.push_back(
              piece.value->type.sizes[size_t(catDim)].constant());
          total += split.lengths.back();
        }
      // The pieces must tile the loop's extent, or the split loops would
      // run past it (and store out of bounds).
      if (split.lengths.size() == node.operands.size() &&
          sizes[split.dim] == SymExpr(total) && split.lengths.size() >= 2 &&
          (!best || split.lengths.size() > best->lengths.size()))
        best = split;
      continue;
    }
    if (node.op == Op::Pad) {
      const Value *source = node.operands[0].value;
      if (source->type.rank() != dims.size())
        continue;
      std::vector<int> kept = passedDims(source, value->type.sizes, dims);
      std::vector<int64_t> pad = intListAttr(node, "pad", {});
      for (size_t p = 0; p < pad.size() / 2 && p < kept.size(); ++p)
        if (pad[2 * p] != 0 || pad[2 * p + 1] != 0)
          kept[kept.size() - 1 - p] = -1;
      pending.push_back({source, kept});
      continue;
    }
    const OpInfo *info = opInfoOf(node);
    if (kindOf(node) == OpKind::View && info && info->view &&
        info->view->form == ViewForm::Remap && node.operands[0].isValue()) {
      pending.push_back(
          {node.operands[0].value, remappedDims(node, value, dims)});
      continue;
    }
    if (kindOf(node) != OpKind::Pointwise)
      continue;
    // Operands of the members' shape are read at the same position; the
    // broadcast ones are not where the loop's position goes.
    for (const Operand &operand : node.operands)
      if (operand.isValue() &&
          operand.value->type.rank() == value->type.rank())
        pending.push_back({operand.value,
                           passedDims(operand.value, value->type.sizes, dims)});
  }
  return best;
}

} // namespace dynafuse

//===- PieceLoops.cpp - Loops split at a concatenation's pieces -----------===//
#include "dynafuse/Lowering/PieceLoops.h"

namespace dynafuse {

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
  std::vector<const Value *> pending(step.members.begin(), step.members.end());
  std::set<const Value *> seen;
  while (!pending.empty()) {
    const Value *value = pending.back();
    pending.pop_back();
    if (!seen.insert(value).second || !value->producer ||
        (state.isBuffer(value) && !members.count(value)) ||
        value->type.sizes != sizes)
      continue;
    const Node &node = *value->producer;
    if (node.op == "cat") {
      PieceSplit split;
      split.dim = size_t(normalizeDim(node, node.intAttr("dim", 0),
                                      sizes.size()));
      for (const Operand &piece : node.operands)
        if (piece.value->type.sizes[split.dim].isConstant())
          split.lengths.push_back(piece.value->type.sizes[split.dim].constant());
      if (split.lengths.size() == node.operands.size() &&
          split.lengths.size() >= 2 &&
          (!best || split.lengths.size() > best->lengths.size()))
        best = split;
      continue;
    }
    if (kindOf(node) != OpKind::Pointwise)
      continue;
    // Operands of the members' shape are read at the same position; the
    // broadcast ones are not where the loop's position goes.
    for (const Operand &operand : node.operands)
      if (operand.isValue())
        pending.push_back(operand.value);
  }
  return best;
}

} // namespace dynafuse

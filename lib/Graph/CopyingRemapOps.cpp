//===- CopyingRemapOps.cpp - flip, roll, repeat ---------------------------===//
//
// View ops of the graph IR whose index remap no strides express: the result
// is never a view of its operand without a copy (noStridedForm), but the
// element emitter computes its elements in place by the remap, as for every
// view op (ViewOps.cpp has the others).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Graph/ViewRules.h"

#include <set>

namespace dynafuse {
namespace {

using Index = std::vector<SymExpr>;

Index remapFlip(const Node &node, size_t, const Index &index) {
  const TensorType &input = operandType(node, 0);
  Index in = index;
  if (input.rank() == 0) // flip(0) of a 0-dim tensor is itself, as in eager
    return in;
  for (int64_t dim : intListAttr(node, "dims", {})) {
    int64_t d = normalizeDim(node, dim, input.rank());
    in[d] = input.sizes[d] - 1 - index[d];
  }
  return in;
}

/// roll and flip: eager's checks of their dims (a roll of a 0-dim tensor
/// takes no dim; one shift per dim), the shape unchanged.
std::vector<TensorType> inferRoll(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<int64_t> dims = intListAttr(node, "dims", {});
  if (!dims.empty() && input.rank() == 0)
    opError(node, "dimension specified as " + std::to_string(dims[0]) +
                      " but the tensor has no dimensions");
  for (int64_t dim : dims)
    normalizeDim(node, dim, input.rank());
  size_t shifts = intListAttr(node, "shifts", {}).size();
  if (dims.empty() ? shifts != 1 : shifts != dims.size())
    opError(node, "shifts and dimensions must align");
  return {likeFirstOperand(node, input.sizes)};
}

std::vector<TensorType> inferFlip(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::set<int64_t> seen;
  for (int64_t dim : intListAttr(node, "dims", {}))
    if (!seen.insert(normalizeDim(node, dim, input.rank())).second)
      opError(node, "dims has duplicates");
  return {likeFirstOperand(node, input.sizes)};
}

/// The index `shift` places before `index` along an extent of `size`
/// (> 0): (index - shift) mod size, written with non-negative operands for a
/// symbolic size as for a constant one.
SymExpr rolledIndex(const SymExpr &index, int64_t shift, const SymExpr &size) {
  if (size.isConstant())
    return mod(index + (size.constant() - modInt(shift, size.constant())),
               size);
  if (shift >= 0)
    return mod(index + (size - mod(SymExpr(shift), size)), size);
  return mod(index + mod(SymExpr(-shift), size), size);
}

Index remapRoll(const Node &node, size_t, const Index &index) {
  const TensorType &input = operandType(node, 0);
  Index in = index;
  std::vector<int64_t> shifts = intListAttr(node, "shifts", {});
  std::vector<int64_t> dims = intListAttr(node, "dims", {});
  // An empty tensor has no element to roll: its index stays as it is (in
  // the loops, which run no iteration), with no modulo by its zero size.
  // Symbolic sizes are at least 2 (capture specializes 0 and 1).
  if (dims.empty() && input.numel() != SymExpr(0)) {
    SymExpr flat = linearizeIndex(index, input.sizes);
    in = delinearizeIndex(rolledIndex(flat, shifts.at(0), input.numel()),
                          input.sizes);
  }
  for (size_t s = 0; s < dims.size(); ++s) {
    if (input.rank() == 0)
      opError(node, "dimension specified but the tensor has no dimensions");
    int64_t d = normalizeDim(node, dims[s], input.rank());
    if (input.sizes[d] == SymExpr(0))
      continue;
    in[d] = rolledIndex(in[d], shifts.at(s), input.sizes[d]);
  }
  return in;
}

std::vector<TensorType> inferRepeat(const Node &node) {
  const TensorType &input = operandType(node, 0);
  // Repeats may be symbolic (x.repeat(n, 1) with n an int argument).
  std::vector<SymExpr> repeats = symListAttr(node, "repeats", {});
  if (repeats.size() < input.rank())
    opError(node, "needs at least one repeat per dimension");
  size_t lead = repeats.size() - input.rank();
  std::vector<SymExpr> sizes;
  for (size_t k = 0; k < repeats.size(); ++k) {
    if (repeats[k].isConstant() && repeats[k].constant() < 0)
      opError(node, "repeats must not be negative");
    SymExpr base = k < lead ? SymExpr(1) : input.sizes[k - lead];
    sizes.push_back(base * repeats[k]);
  }
  return {likeFirstOperand(node, sizes)};
}

Index remapRepeat(const Node &node, size_t, const Index &index) {
  const TensorType &input = operandType(node, 0);
  size_t lead = index.size() - input.rank();
  Index in;
  // A zero size leaves no element to repeat: the index stays (no modulo).
  for (size_t k = 0; k < input.rank(); ++k)
    in.push_back(input.sizes[k] == SymExpr(0)
                     ? index[lead + k]
                     : mod(index[lead + k], input.sizes[k]));
  return in;
}

} // namespace

void addCopyingRemapOps(std::vector<OpInfo> &table) {
#include "dynafuse/Ops/CopyingRemapOps.inc"
}

} // namespace dynafuse

//===- ReductionOps.cpp - Reductions of the graph IR ----------------------===//
//
// Primitive reductions lowering understands directly: sum, prod, amax, amin,
// any, all over a set of dims ("dims"; empty means all), argmax/argmin over
// one dim ("dim"; absent means the flattened tensor) and max_dim/min_dim
// (values and indices). All take "keepdim".
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpRegistry.h"

#include <set>

namespace dynafuse {

std::vector<int64_t> reducedDims(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<int64_t> dims;
  if (node.attribute("dim")) {
    dims = intListAttr(node, "dim", {});
  } else {
    dims = intListAttr(node, "dims", {});
  }
  std::set<int64_t> unique;
  for (int64_t dim : dims)
    if (input.rank() > 0)
      unique.insert(normalizeDim(node, dim, input.rank()));
    else
      normalizeDim(node, dim, 0);
  if (dims.empty())
    for (size_t k = 0; k < input.rank(); ++k)
      unique.insert(int64_t(k));
  return std::vector<int64_t>(unique.begin(), unique.end());
}

std::vector<SymExpr> reducedShape(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<int64_t> dims = reducedDims(node);
  bool keepdim = boolAttr(node, "keepdim", false);
  std::vector<SymExpr> sizes;
  for (size_t k = 0; k < input.rank(); ++k) {
    bool reduced =
        std::find(dims.begin(), dims.end(), int64_t(k)) != dims.end();
    if (!reduced)
      sizes.push_back(input.sizes[k]);
    else if (keepdim)
      sizes.push_back(SymExpr(1));
  }
  return sizes;
}

namespace {

TensorType resultLike(const Node &node, DType dtype) {
  TensorType result;
  result.dtype = dtype;
  result.sizes = reducedShape(node);
  result.device = operandType(node, 0).device;
  return result;
}

/// A reduction over a non-empty set must not reduce an empty dim for ops
/// without an identity (max, argmax).
void requireNonEmpty(const Node &node) {
  const TensorType &input = operandType(node, 0);
  for (int64_t dim : reducedDims(node))
    if (input.rank() > 0 && input.sizes[dim] == SymExpr(0))
      opError(node, "cannot reduce over an empty dimension (no identity)");
}

OpInfo reduction(Op name, std::vector<std::string> attributes,
                 ShapeRule infer) {
  return shapedOp(name, OpKind::Reduction, 1, std::move(attributes),
                  std::move(infer));
}

/// sum and prod: integers and bool accumulate in i64 unless "dtype" says.
std::vector<TensorType> inferSum(const Node &node) {
  DType input = operandType(node, 0).dtype;
  DType result = isIntegral(input) ? DType::I64 : input;
  if (const Attribute *dtype = node.attribute("dtype")) {
    if (!std::holds_alternative<DType>(*dtype))
      opError(node, "attribute 'dtype' must be a dtype");
    result = std::get<DType>(*dtype);
  }
  return {resultLike(node, result)};
}

std::vector<TensorType> inferExtreme(const Node &node) {
  requireNonEmpty(node);
  return {resultLike(node, operandType(node, 0).dtype)};
}

std::vector<TensorType> inferLogical(const Node &node) {
  return {resultLike(node, DType::Bool)};
}

std::vector<TensorType> inferArg(const Node &node) {
  requireNonEmpty(node);
  if (intListAttr(node, "dim", {0}).size() != 1)
    opError(node, "takes a single 'dim'");
  if (operandType(node, 0).dtype == DType::Bool)
    opError(node, "not implemented for bool");
  return {resultLike(node, DType::I64)};
}

std::vector<TensorType> inferValuesAndIndices(const Node &node) {
  if (!node.attribute("dim"))
    opError(node, "needs a 'dim'");
  requireNonEmpty(node);
  return {resultLike(node, operandType(node, 0).dtype),
          resultLike(node, DType::I64)};
}

/// max and min of bools (amax, amin, max_dim, min_dim): the same reduction
/// of the values as i32, whose values are cast back (bool has no ordered
/// reduction in the loop IR; eager orders False < True).
std::vector<Value *> extremeOfBools(Graph &graph, const Node &node) {
  Node &reduced = *graph.addNode(
      node.op,
      {Operand(emit(graph, node, Op::Cast, {node.operands[0].value},
                    {{"dtype", DType::I32}}))},
      node.attributes, node.location);
  reduced.recompute = node.recompute;
  std::vector<Value *> results = reduced.results;
  results[0] =
      emit(graph, node, Op::Cast, {results[0]}, {{"dtype", DType::Bool}});
  return results;
}

bool reducesBools(const Node &node) {
  return node.operands.size() == 1 && node.operands[0].isValue() &&
         node.operands[0].value->type.dtype == DType::Bool;
}

OpInfo extremeReduction(Op name, std::vector<std::string> attributes,
                        ShapeRule infer) {
  OpInfo info = reduction(name, std::move(attributes), std::move(infer));
  info.decompose = extremeOfBools;
  info.decomposesWhen = reducesBools;
  return info;
}

} // namespace

/// The entries: from include/dynafuse/Ops/ReductionOps.py.
void addReductionOps(std::vector<OpInfo> &table) {
#include "dynafuse/Ops/ReductionOps.inc"
}

} // namespace dynafuse

//===- DataMovementOps.cpp - Concatenation, padding, gathers, generators --===//
//
// View-kind ops that are not a plain index remap of one operand: cat (the
// operand whose range holds the index), pad (masked), gather, index_select
// and embedding (indices loaded from a tensor), and ops computed from the
// index alone (arange, full, full_like, tril, triu). Each entry names the
// ViewForm the element emitter computes it by.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Graph/ViewRules.h"

#include <cmath>

namespace dynafuse {
namespace {

std::vector<TensorType> inferTriangle(const Node &node) {
  if (operandType(node, 0).rank() < 2)
    opError(node, "needs a tensor of at least 2 dims");
  return inferSameShape(node);
}

std::vector<TensorType> inferPad(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<int64_t> pad = intListAttr(node, "pad", {});
  if (pad.size() % 2 != 0 || pad.size() / 2 > input.rank())
    opError(node, "pad needs a (before, after) pair per padded dim");
  std::vector<SymExpr> sizes = input.sizes;
  for (size_t p = 0; p < pad.size() / 2; ++p) {
    if (pad[2 * p] < 0 || pad[2 * p + 1] < 0)
      opError(node, "negative padding is not supported");
    size_t dim = input.rank() - 1 - p;
    sizes[dim] = sizes[dim] + pad[2 * p] + pad[2 * p + 1];
  }
  return {likeFirstOperand(node, sizes)};
}

std::vector<TensorType> inferCat(const Node &node) {
  const TensorType &first = operandType(node, 0);
  for (size_t i = 0; i < node.operands.size(); ++i)
    if (operandType(node, i).rank() == 0)
      opError(node, "zero-dimensional tensor (at position " +
                        std::to_string(i) + ") cannot be concatenated");
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), first.rank());
  TensorType result = likeFirstOperand(node, first.sizes);
  result.sizes[dim] = SymExpr(0);
  for (size_t i = 0; i < node.operands.size(); ++i) {
    const TensorType &type = operandType(node, i);
    if (type.rank() != first.rank())
      opError(node, "operands must have the same rank");
    for (size_t k = 0; k < type.rank(); ++k)
      if (int64_t(k) != dim && type.sizes[k] != first.sizes[k])
        opError(node, "operand sizes differ in dimension " + std::to_string(k));
    result.sizes[dim] = result.sizes[dim] + type.sizes[dim];
    result.dtype = promoteTypes(result.dtype, type.dtype);
  }
  return {result};
}

std::vector<TensorType> inferIndexSelect(const Node &node) {
  const TensorType &input = operandType(node, 0);
  const TensorType &index = operandType(node, 1);
  if (index.rank() > 1 || isFloating(index.dtype) || index.dtype == DType::Bool)
    opError(node, "index must be a 1-D integer tensor");
  std::vector<SymExpr> sizes = input.sizes;
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), input.rank());
  if (input.rank() > 0)
    sizes[dim] = index.numel();
  return {likeFirstOperand(node, sizes)};
}

std::vector<TensorType> inferGather(const Node &node) {
  const TensorType &input = operandType(node, 0);
  const TensorType &index = operandType(node, 1);
  if (index.rank() != input.rank() || isFloating(index.dtype) ||
      index.dtype == DType::Bool)
    opError(node, "index must be an integer tensor of the input's rank");
  normalizeDim(node, node.intAttr("dim", 0), input.rank());
  return {likeFirstOperand(node, index.sizes)};
}

/// embedding(indices, weight), in torch's argument order.
std::vector<TensorType> inferEmbedding(const Node &node) {
  const TensorType &indices = operandType(node, 0);
  const TensorType &weight = operandType(node, 1);
  if (weight.rank() != 2 || isFloating(indices.dtype) ||
      indices.dtype == DType::Bool)
    opError(node, "needs a 2-D weight and integer indices");
  std::vector<SymExpr> sizes = indices.sizes;
  sizes.push_back(weight.sizes[1]);
  TensorType result = likeFirstOperand(node, sizes);
  result.dtype = weight.dtype;
  return {result};
}

DType dtypeAttr(const Node &node, DType fallback) {
  const Attribute *dtype = node.attribute("dtype");
  if (!dtype)
    return fallback;
  if (!std::holds_alternative<DType>(*dtype))
    opError(node, "attribute 'dtype' must be a dtype");
  return std::get<DType>(*dtype);
}

std::vector<TensorType> inferArange(const Node &node) {
  const Attribute *symbolicEnd = node.attribute("end");
  if (symbolicEnd && std::holds_alternative<SymExpr>(*symbolicEnd)) {
    // arange(T), arange(a, T, k) with integer start and step: ceil((T -
    // start) / step) elements, T >= start by capture's guards.
    int64_t step = node.intAttr("step", 1);
    if (step <= 0)
      opError(node, "a symbolic range needs a positive integer step");
    SymExpr span = std::get<SymExpr>(*symbolicEnd) - node.intAttr("start", 0);
    TensorType result;
    result.dtype = dtypeAttr(node, DType::I64);
    result.sizes = {step == 1 ? span : floorDiv(span + (step - 1), step)};
    result.device = node.stringAttr("device", "cpu");
    return {result};
  }
  double start = floatAttr(node, "start", 0), end = floatAttr(node, "end", 0);
  double step = floatAttr(node, "step", 1);
  if (step == 0 || (end - start) / step < 0)
    opError(node, "invalid range");
  bool integral = true;
  for (const char *name : {"start", "end", "step"}) {
    const Attribute *value = node.attribute(name);
    integral &= !value || std::holds_alternative<int64_t>(*value);
  }
  TensorType result;
  result.dtype = dtypeAttr(node, integral ? DType::I64 : DType::F32);
  result.sizes = {SymExpr(int64_t(std::ceil((end - start) / step)))};
  result.device = node.stringAttr("device", "cpu");
  return {result};
}

std::vector<TensorType> inferFull(const Node &node) {
  TensorType result;
  result.dtype = dtypeAttr(node, DType::F32);
  for (const SymExpr &size : symListAttr(node, "shape", {})) {
    if (size.isConstant() && size.constant() < 0)
      opError(node, "sizes must not be negative");
    result.sizes.push_back(size);
  }
  result.device = node.stringAttr("device", "cpu");
  return {result};
}

std::vector<TensorType> inferFullLike(const Node &node) {
  TensorType result = likeFirstOperand(node, operandType(node, 0).sizes);
  result.dtype = dtypeAttr(node, result.dtype);
  return {result};
}

OpInfo dataMovement(Op name, int arity, std::vector<std::string> attributes,
                    ShapeRule infer, ViewForm form, int indexedOperand = -1) {
  OpInfo info = shapedOp(name, OpKind::View, arity, std::move(attributes),
                         std::move(infer));
  ViewRule rule;
  rule.form = form;
  info.view = std::make_shared<const ViewRule>(std::move(rule));
  info.indexedOperand = indexedOperand;
  return info;
}

/// uniform {shape, dtype, offset}(seed): numbers uniform in [0, 1), element
/// i (row-major) being random(seed, offset + i) (the loop IR's `random`);
/// the seed is a 0-dim i64 tensor drawn from torch's generator for every
/// run, and a graph's uniform ops take disjoint offsets, so streams and
/// runs all differ.
std::vector<TensorType> inferUniform(const Node &node) {
  const TensorType &seed = operandType(node, 0);
  if (seed.dtype != DType::I64 || seed.rank() != 0)
    opError(node, "the seed must be a 0-dim i64 tensor");
  TensorType result;
  result.dtype = dtypeAttr(node, DType::F32);
  if (result.dtype != DType::F32 && result.dtype != DType::F64)
    opError(node, "uniform numbers are f32 or f64");
  result.sizes = symListAttr(node, "shape", {});
  result.device = seed.device;
  return {result};
}

} // namespace

void addDataMovementOps(std::vector<OpInfo> &table) {
#include "dynafuse/Ops/DataMovementOps.inc"
}

} // namespace dynafuse

//===- ViewOps.cpp - Views, data movement and generators of the graph IR --===//
//
// Ops whose elements are other tensors' elements at remapped indices
// (reshape, permute, slice, cat, gather, ...) and ops computed from the index
// alone (arange, full, tril). Lowering turns each into index arithmetic; no
// op here copies data by itself.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpRegistry.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dynafuse {
namespace {

int64_t constantSize(const Node &node, const SymExpr &size) {
  if (!size.isConstant())
    opError(node, "needs a static size here, got " + size.str());
  return size.constant();
}

std::vector<SymExpr> constants(const std::vector<int64_t> &values) {
  return std::vector<SymExpr>(values.begin(), values.end());
}

std::vector<TensorType> inferReshape(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<int64_t> shape = intListAttr(node, "shape", {});
  SymExpr known(1);
  int inferred = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == -1) {
      if (inferred >= 0)
        opError(node, "only one dimension can be -1");
      inferred = int(k);
    } else if (shape[k] < 0) {
      opError(node, "invalid size " + std::to_string(shape[k]));
    } else {
      known = known * shape[k];
    }
  }
  std::vector<SymExpr> sizes = constants(shape);
  SymExpr numel = input.numel();
  if (inferred >= 0) {
    if (known == SymExpr(0) || !numel.isConstant() || !known.isConstant() ||
        numel.constant() % known.constant() != 0)
      opError(node, "cannot infer the -1 size of shape for " +
                        std::to_string(0) + " elements");
    sizes[inferred] = SymExpr(numel.constant() / known.constant());
    known = numel;
  }
  if (known != numel)
    opError(node, "shape has " + known.str() + " elements but the input has " +
                      numel.str());
  return {likeFirstOperand(node, sizes)};
}

std::vector<TensorType> inferPermute(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<int64_t> dims = intListAttr(node, "dims", {});
  if (dims.size() != input.rank())
    opError(node, "needs one dim per input dimension");
  std::vector<bool> seen(input.rank(), false);
  std::vector<SymExpr> sizes;
  for (int64_t dim : dims) {
    int64_t d = normalizeDim(node, dim, input.rank());
    if (seen[d])
      opError(node, "repeated dim " + std::to_string(dim));
    seen[d] = true;
    sizes.push_back(input.sizes[d]);
  }
  return {likeFirstOperand(node, sizes)};
}

std::vector<TensorType> inferTranspose(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<SymExpr> sizes = input.sizes;
  if (input.rank() == 0)
    return {likeFirstOperand(node, sizes)};
  int64_t a = normalizeDim(node, node.intAttr("dim0", 0), input.rank());
  int64_t b = normalizeDim(node, node.intAttr("dim1", 1), input.rank());
  std::swap(sizes[a], sizes[b]);
  return {likeFirstOperand(node, sizes)};
}

std::vector<TensorType> inferExpand(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<int64_t> shape = intListAttr(node, "shape", {});
  if (shape.size() < input.rank())
    opError(node, "the target shape has fewer dims than the input");
  size_t lead = shape.size() - input.rank();
  std::vector<SymExpr> sizes;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (k < lead) {
      if (shape[k] < 0)
        opError(node, "-1 is not allowed for new leading dims");
      sizes.push_back(SymExpr(shape[k]));
      continue;
    }
    const SymExpr &current = input.sizes[k - lead];
    if (shape[k] == -1 || SymExpr(shape[k]) == current) {
      sizes.push_back(current);
      continue;
    }
    if (current != SymExpr(1))
      opError(node, "cannot expand size " + current.str() + " to " +
                        std::to_string(shape[k]));
    sizes.push_back(SymExpr(shape[k]));
  }
  return {likeFirstOperand(node, sizes)};
}

std::vector<TensorType> inferSqueeze(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<int64_t> dims = intListAttr(node, "dims", {});
  std::vector<SymExpr> sizes;
  for (size_t k = 0; k < input.rank(); ++k) {
    bool listed = dims.empty();
    for (int64_t dim : dims)
      listed |= normalizeDim(node, dim, input.rank()) == int64_t(k);
    if (!(listed && input.sizes[k] == SymExpr(1)))
      sizes.push_back(input.sizes[k]);
  }
  return {likeFirstOperand(node, sizes)};
}

std::vector<TensorType> inferUnsqueeze(const Node &node) {
  const TensorType &input = operandType(node, 0);
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), input.rank() + 1);
  std::vector<SymExpr> sizes = input.sizes;
  sizes.insert(sizes.begin() + dim, SymExpr(1));
  return {likeFirstOperand(node, sizes)};
}

std::vector<TensorType> inferFlatten(const Node &node) {
  const TensorType &input = operandType(node, 0);
  if (input.rank() == 0)
    return {likeFirstOperand(node, {SymExpr(1)})};
  int64_t start =
      normalizeDim(node, node.intAttr("start_dim", 0), input.rank());
  int64_t end = normalizeDim(node, node.intAttr("end_dim", -1), input.rank());
  if (start > end)
    opError(node, "start_dim must not come after end_dim");
  std::vector<SymExpr> sizes(input.sizes.begin(), input.sizes.begin() + start);
  SymExpr merged(1);
  for (int64_t k = start; k <= end; ++k)
    merged = merged * input.sizes[k];
  sizes.push_back(merged);
  sizes.insert(sizes.end(), input.sizes.begin() + end + 1, input.sizes.end());
  return {likeFirstOperand(node, sizes)};
}

std::vector<TensorType> inferSelect(const Node &node) {
  const TensorType &input = operandType(node, 0);
  if (input.rank() == 0)
    opError(node, "cannot select from a 0-dim tensor");
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), input.rank());
  int64_t size = constantSize(node, input.sizes[dim]);
  int64_t index = node.intAttr("index", 0);
  if (index < -size || index >= size)
    opError(node, "index " + std::to_string(index) +
                      " is out of range for size " + std::to_string(size));
  std::vector<SymExpr> sizes = input.sizes;
  sizes.erase(sizes.begin() + dim);
  return {likeFirstOperand(node, sizes)};
}

} // namespace

SliceBounds sliceBounds(const Node &node) {
  const TensorType &input = operandType(node, 0);
  if (input.rank() == 0)
    opError(node, "cannot slice a 0-dim tensor");
  SliceBounds bounds;
  bounds.dim = normalizeDim(node, node.intAttr("dim", 0), input.rank());
  int64_t size = constantSize(node, input.sizes[bounds.dim]);
  bounds.step = node.intAttr("step", 1);
  if (bounds.step <= 0)
    opError(node, "slice step must be positive");
  int64_t start = node.intAttr("start", 0);
  int64_t end = node.intAttr("end", std::numeric_limits<int64_t>::max());
  if (node.op == "narrow") {
    start = start < 0 ? start + size : start;
    end = start + node.intAttr("length", 0);
    if (start < 0 || end > size || end < start)
      opError(node, "narrow is out of range");
  }
  auto clampIndex = [size](int64_t index) {
    if (index < 0)
      index += size;
    return std::min(std::max<int64_t>(index, 0), size);
  };
  bounds.start = clampIndex(start);
  end = clampIndex(end);
  bounds.length = end > bounds.start
                      ? (end - bounds.start + bounds.step - 1) / bounds.step
                      : 0;
  return bounds;
}

namespace {

std::vector<TensorType> inferSlice(const Node &node) {
  SliceBounds bounds = sliceBounds(node);
  std::vector<SymExpr> sizes = operandType(node, 0).sizes;
  sizes[bounds.dim] = SymExpr(bounds.length);
  return {likeFirstOperand(node, sizes)};
}

std::vector<TensorType> inferSameShape(const Node &node) {
  return {likeFirstOperand(node, operandType(node, 0).sizes)};
}

std::vector<TensorType> inferTriangle(const Node &node) {
  if (operandType(node, 0).rank() < 2)
    opError(node, "needs a tensor of at least 2 dims");
  return inferSameShape(node);
}

std::vector<TensorType> inferRepeat(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<int64_t> repeats = intListAttr(node, "repeats", {});
  if (repeats.size() < input.rank())
    opError(node, "needs at least one repeat per dimension");
  size_t lead = repeats.size() - input.rank();
  std::vector<SymExpr> sizes;
  for (size_t k = 0; k < repeats.size(); ++k) {
    if (repeats[k] < 0)
      opError(node, "repeats must not be negative");
    SymExpr base = k < lead ? SymExpr(1) : input.sizes[k - lead];
    sizes.push_back(base * repeats[k]);
  }
  return {likeFirstOperand(node, sizes)};
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

/// split {sizes = [...]} (already resolved by capture) or {size = n}; chunk
/// {chunks = n}; unbind.
std::vector<TensorType> inferSplit(const Node &node) {
  const TensorType &input = operandType(node, 0);
  if (input.rank() == 0)
    opError(node, "cannot split a 0-dim tensor");
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), input.rank());
  int64_t total = constantSize(node, input.sizes[dim]);
  std::vector<TensorType> results;
  for (int64_t length : splitLengths(node, total)) {
    std::vector<SymExpr> sizes = input.sizes;
    if (node.op == "unbind")
      sizes.erase(sizes.begin() + dim);
    else
      sizes[dim] = SymExpr(length);
    results.push_back(likeFirstOperand(node, sizes));
  }
  return results;
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
  for (int64_t size : intListAttr(node, "shape", {})) {
    if (size < 0)
      opError(node, "sizes must not be negative");
    result.sizes.push_back(SymExpr(size));
  }
  result.device = node.stringAttr("device", "cpu");
  return {result};
}

std::vector<TensorType> inferFullLike(const Node &node) {
  TensorType result = likeFirstOperand(node, operandType(node, 0).sizes);
  result.dtype = dtypeAttr(node, result.dtype);
  return {result};
}

OpInfo view(const std::string &name, int arity,
            std::vector<std::string> attributes, ShapeRule infer) {
  return shapedOp(name, OpKind::View, arity, std::move(attributes),
                  std::move(infer));
}

} // namespace

std::vector<int64_t> splitLengths(const Node &node, int64_t total) {
  if (node.op == "unbind")
    return std::vector<int64_t>(size_t(total), 1);
  std::vector<int64_t> lengths;
  if (node.op == "chunk") {
    int64_t chunks = node.intAttr("chunks", 1);
    if (chunks <= 0)
      opError(node, "chunks must be positive");
    int64_t size = (total + chunks - 1) / chunks;
    for (int64_t at = 0; at < total || (total == 0 && lengths.empty());
         at += std::max<int64_t>(size, 1))
      lengths.push_back(std::min(size, total - at));
    return lengths;
  }
  if (node.attribute("sizes")) {
    lengths = intListAttr(node, "sizes", {});
    int64_t sum = 0;
    for (int64_t length : lengths)
      sum += length;
    if (sum != total)
      opError(node, "split sizes add up to " + std::to_string(sum) + ", not " +
                        std::to_string(total));
    return lengths;
  }
  int64_t size = node.intAttr("size", 1);
  if (size <= 0)
    opError(node, "split size must be positive");
  for (int64_t at = 0; at < total; at += size)
    lengths.push_back(std::min(size, total - at));
  if (lengths.empty())
    lengths.push_back(0);
  return lengths;
}

void addViewOps(std::vector<OpInfo> &table) {
  table.push_back(view("reshape", 1, {"shape"}, inferReshape));
  table.push_back(view("permute", 1, {"dims"}, inferPermute));
  table.push_back(view("transpose", 1, {"dim0", "dim1"}, inferTranspose));
  table.push_back(view("expand", 1, {"shape"}, inferExpand));
  table.push_back(view("squeeze", 1, {"dims"}, inferSqueeze));
  table.push_back(view("unsqueeze", 1, {"dim"}, inferUnsqueeze));
  table.push_back(view("flatten", 1, {"start_dim", "end_dim"}, inferFlatten));
  table.push_back(view("select", 1, {"dim", "index"}, inferSelect));
  table.push_back(
      view("slice", 1, {"dim", "start", "end", "step"}, inferSlice));
  table.push_back(view("narrow", 1, {"dim", "start", "length"}, inferSlice));
  table.push_back(view("contiguous", 1, {}, inferSameShape));
  table.push_back(view("flip", 1, {"dims"}, inferSameShape));
  table.push_back(view("roll", 1, {"shifts", "dims"}, inferSameShape));
  table.push_back(view("tril", 1, {"diagonal"}, inferTriangle));
  table.push_back(view("triu", 1, {"diagonal"}, inferTriangle));
  table.push_back(view("repeat", 1, {"repeats"}, inferRepeat));
  table.push_back(view("pad", 1, {"pad", "value"}, inferPad));
  table.push_back(view("cat", -1, {"dim"}, inferCat));
  table.push_back(view("split", 1, {"dim", "size", "sizes"}, inferSplit));
  table.push_back(view("chunk", 1, {"dim", "chunks"}, inferSplit));
  table.push_back(view("unbind", 1, {"dim"}, inferSplit));
  table.push_back(view("index_select", 2, {"dim"}, inferIndexSelect));
  table.push_back(view("gather", 2, {"dim"}, inferGather));
  table.push_back(view("embedding", 2, {}, inferEmbedding));
  table.push_back(view("arange", 0, {"start", "end", "step", "dtype", "device"},
                       inferArange));
  table.push_back(
      view("full", 0, {"shape", "value", "dtype", "device"}, inferFull));
  table.push_back(view("full_like", 1, {"value", "dtype"}, inferFullLike));
}

} // namespace dynafuse

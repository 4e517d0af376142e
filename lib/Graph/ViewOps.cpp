//===- ViewOps.cpp - View ops of the graph IR: shape, remap, strided form -===//
//
// Ops whose elements are operand 0's elements at remapped indices (reshape,
// permute, slice, split, ...). Each op's table entry holds its three rules
// together: the shape rule (result types), the index remap (the operand
// index of a result index, which lowering turns into index arithmetic) and
// the strided form (the result's sizes, strides and offset given the
// operand's, so extern ops read it without a copy), or noStridedForm where
// the result is never such a view. Data movement ops that are not plain
// remaps (cat, pad, gather, generators) are in DataMovementOps.cpp.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Graph/ViewRules.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <set>

namespace dynafuse {
namespace {

using Index = std::vector<SymExpr>;
using Strided = std::optional<StridedView>;

int64_t constantSize(const Node &node, const SymExpr &size) {
  if (!size.isConstant())
    opError(node, "needs a static size here, got " + size.str());
  return size.constant();
}

/// The strided form of ops whose result is never a view without a copy.
const StridedRule noStridedForm = nullptr;

//===----------------------------------------------------------------------===//
// reshape, flatten: the same elements in row-major order
//===----------------------------------------------------------------------===//

std::vector<TensorType> inferReshape(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<SymExpr> sizes = symListAttr(node, "shape", {});
  SymExpr known(1);
  int inferred = -1;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] == SymExpr(-1)) {
      if (inferred >= 0)
        opError(node, "only one dimension can be -1");
      inferred = int(k);
    } else if (sizes[k].isConstant() && sizes[k].constant() < 0) {
      opError(node, "invalid size " + sizes[k].str());
    } else {
      known = known * sizes[k];
    }
  }
  SymExpr numel = input.numel();
  if (inferred >= 0) {
    // numel over the known sizes, exactly (symbolic sizes divide as
    // monomials: (s0*s1*768) // (s0*12) is s1*64).
    SymExpr quotient =
        known == SymExpr(0) ? SymExpr(0) : floorDiv(numel, known);
    if (known == SymExpr(0) || quotient * known != numel)
      opError(node, "cannot infer the -1 size of shape for " + numel.str() +
                        " elements");
    sizes[inferred] = quotient;
    known = numel;
  }
  // A size with a floor division is capture's resolved -1 (numel // the
  // other sizes), which it guards to divide exactly.
  bool guardedDivision = false;
  for (const SymExpr &size : sizes)
    guardedDivision |= size.str().find("//") != std::string::npos;
  if (known != numel && !guardedDivision)
    opError(node, "shape has " + known.str() + " elements but the input has " +
                      numel.str());
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

Index remapReshape(const Node &node, size_t, const Index &index) {
  return delinearizeIndex(linearizeIndex(index, node.results[0]->type.sizes),
                          operandType(node, 0).sizes);
}

Strided stridedReshape(const Node &node, size_t result, StridedView view) {
  return reshapedView(node.results[result]->type.sizes, std::move(view));
}

//===----------------------------------------------------------------------===//
// permute, transpose: dims reordered
//===----------------------------------------------------------------------===//

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

Index remapPermute(const Node &node, size_t, const Index &index) {
  size_t rank = operandType(node, 0).rank();
  Index in(rank);
  std::vector<int64_t> dims = intListAttr(node, "dims", {});
  for (size_t k = 0; k < dims.size(); ++k)
    in[normalizeDim(node, dims[k], rank)] = index[k];
  return in;
}

Strided stridedPermute(const Node &node, size_t, StridedView view) {
  size_t rank = view.sizes.size();
  std::vector<int64_t> dims = intListAttr(node, "dims", {});
  StridedView permuted = view;
  for (size_t k = 0; k < dims.size(); ++k) {
    int64_t d = normalizeDim(node, dims[k], rank);
    permuted.sizes[k] = view.sizes[d];
    permuted.strides[k] = view.strides[d];
  }
  return permuted;
}

std::vector<TensorType> inferTranspose(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<SymExpr> sizes = input.sizes;
  if (input.rank() == 0) { // dims 0 and -1 only, as in eager
    normalizeDim(node, node.intAttr("dim0", 0), 0);
    normalizeDim(node, node.intAttr("dim1", 1), 0);
    return {likeFirstOperand(node, sizes)};
  }
  int64_t a = normalizeDim(node, node.intAttr("dim0", 0), input.rank());
  int64_t b = normalizeDim(node, node.intAttr("dim1", 1), input.rank());
  std::swap(sizes[a], sizes[b]);
  return {likeFirstOperand(node, sizes)};
}

Index remapTranspose(const Node &node, size_t, const Index &index) {
  size_t rank = operandType(node, 0).rank();
  Index in = index;
  if (rank > 0)
    std::swap(in[normalizeDim(node, node.intAttr("dim0", 0), rank)],
              in[normalizeDim(node, node.intAttr("dim1", 1), rank)]);
  return in;
}

Strided stridedTranspose(const Node &node, size_t, StridedView view) {
  size_t rank = view.sizes.size();
  if (rank < 2) // the identity (its dims are one)
    return view;
  int64_t a = normalizeDim(node, node.intAttr("dim0", 0), rank);
  int64_t b = normalizeDim(node, node.intAttr("dim1", 1), rank);
  std::swap(view.sizes[a], view.sizes[b]);
  std::swap(view.strides[a], view.strides[b]);
  return view;
}

//===----------------------------------------------------------------------===//
// expand, squeeze, unsqueeze: size-1 dims broadcast, dropped or added
//===----------------------------------------------------------------------===//

std::vector<TensorType> inferExpand(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<SymExpr> shape = symListAttr(node, "shape", {});
  if (shape.size() < input.rank())
    opError(node, "the target shape has fewer dims than the input");
  size_t lead = shape.size() - input.rank();
  std::vector<SymExpr> sizes;
  for (size_t k = 0; k < shape.size(); ++k) {
    bool keep = shape[k] == SymExpr(-1);
    if (k < lead) {
      if (shape[k].isConstant() && shape[k].constant() < 0)
        opError(node, "-1 is not allowed for new leading dims");
      sizes.push_back(shape[k]);
      continue;
    }
    const SymExpr &current = input.sizes[k - lead];
    if (keep || shape[k] == current) {
      sizes.push_back(current);
      continue;
    }
    if (current != SymExpr(1))
      opError(node, "cannot expand size " + current.str() + " to " +
                        shape[k].str());
    sizes.push_back(shape[k]);
  }
  return {likeFirstOperand(node, sizes)};
}

Index remapExpand(const Node &node, size_t, const Index &index) {
  return broadcastIndex(index, operandType(node, 0).sizes);
}

Strided stridedExpand(const Node &node, size_t result, StridedView view) {
  size_t rank = view.sizes.size();
  const std::vector<SymExpr> &out = node.results[result]->type.sizes;
  size_t lead = out.size() - rank;
  std::vector<SymExpr> strides(lead, SymExpr(0));
  for (size_t k = 0; k < rank; ++k)
    strides.push_back(view.sizes[k] == out[lead + k] ? view.strides[k]
                                                     : SymExpr(0));
  view.sizes = out;
  view.strides = strides;
  return view;
}

/// Whether squeeze drops input dim k: a size-1 dim that "dims" lists, or
/// any size-1 dim when "dims" is absent (an empty list drops none, as
/// squeeze(x, ()) does).
bool squeezeDrops(const Node &node, const TensorType &input, size_t k) {
  bool listed = !node.attribute("dims");
  for (int64_t dim : intListAttr(node, "dims", {}))
    listed |= normalizeDim(node, dim, input.rank()) == int64_t(k);
  return listed && input.sizes[k] == SymExpr(1);
}

std::vector<TensorType> inferSqueeze(const Node &node) {
  const TensorType &input = operandType(node, 0);
  std::vector<SymExpr> sizes;
  for (size_t k = 0; k < input.rank(); ++k)
    if (!squeezeDrops(node, input, k))
      sizes.push_back(input.sizes[k]);
  return {likeFirstOperand(node, sizes)};
}

Index remapSqueeze(const Node &node, size_t, const Index &index) {
  const TensorType &input = operandType(node, 0);
  Index in;
  size_t next = 0;
  for (size_t k = 0; k < input.rank(); ++k)
    in.push_back(squeezeDrops(node, input, k) ? SymExpr(0) : index[next++]);
  return in;
}

/// The dims squeeze drops leave the view, with their strides.
Strided stridedSqueeze(const Node &node, size_t, StridedView view) {
  const TensorType &input = operandType(node, 0);
  StridedView squeezed;
  squeezed.offset = view.offset;
  for (size_t k = 0; k < input.rank() && k < view.sizes.size(); ++k) {
    if (squeezeDrops(node, input, k))
      continue;
    squeezed.sizes.push_back(view.sizes[k]);
    squeezed.strides.push_back(view.strides[k]);
  }
  return squeezed;
}

std::vector<TensorType> inferUnsqueeze(const Node &node) {
  const TensorType &input = operandType(node, 0);
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), input.rank() + 1);
  std::vector<SymExpr> sizes = input.sizes;
  sizes.insert(sizes.begin() + dim, SymExpr(1));
  return {likeFirstOperand(node, sizes)};
}

Index remapUnsqueeze(const Node &node, size_t, const Index &index) {
  size_t rank = operandType(node, 0).rank();
  Index in = index;
  in.erase(in.begin() + normalizeDim(node, node.intAttr("dim", 0), rank + 1));
  return in;
}

Strided stridedUnsqueeze(const Node &node, size_t, StridedView view) {
  size_t rank = view.sizes.size();
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), rank + 1);
  // torch's stride for the new dim: size * stride of the dim it precedes.
  SymExpr stride = size_t(dim) < rank
                       ? view.sizes[size_t(dim)] * view.strides[size_t(dim)]
                       : SymExpr(1);
  view.sizes.insert(view.sizes.begin() + dim, SymExpr(1));
  view.strides.insert(view.strides.begin() + dim, stride);
  return view;
}

//===----------------------------------------------------------------------===//
// select, slice, narrow: a sub-range of one dim
//===----------------------------------------------------------------------===//

std::vector<TensorType> inferSelect(const Node &node) {
  const TensorType &input = operandType(node, 0);
  if (input.rank() == 0)
    opError(node, "cannot select from a 0-dim tensor");
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), input.rank());
  int64_t index = node.intAttr("index", 0);
  // A symbolic size is at least 2 (capture's guard): indices -2..1 hold.
  int64_t size = input.sizes[dim].isConstant() ? input.sizes[dim].constant()
                                               : 2;
  if (index < -size || index >= size)
    opError(node, "index " + std::to_string(index) +
                      " is out of range for size " + input.sizes[dim].str());
  std::vector<SymExpr> sizes = input.sizes;
  sizes.erase(sizes.begin() + dim);
  return {likeFirstOperand(node, sizes)};
}

Index remapSelect(const Node &node, size_t, const Index &index) {
  const TensorType &input = operandType(node, 0);
  Index in = index;
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), input.rank());
  SymExpr at = node.intAttr("index", 0);
  if (at.constant() < 0)
    at = at + input.sizes[dim];
  in.insert(in.begin() + dim, at);
  return in;
}

Strided stridedSelect(const Node &node, size_t, StridedView view) {
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), view.sizes.size());
  SymExpr at = node.intAttr("index", 0);
  if (at.constant() < 0)
    at = at + view.sizes[dim];
  view.offset = view.offset + view.strides[dim] * at;
  view.sizes.erase(view.sizes.begin() + dim);
  view.strides.erase(view.strides.begin() + dim);
  return view;
}

} // namespace

SliceBounds sliceBounds(const Node &node) {
  const TensorType &input = operandType(node, 0);
  if (input.rank() == 0)
    opError(node, "cannot slice a 0-dim tensor");
  SliceBounds bounds;
  bounds.dim = normalizeDim(node, node.intAttr("dim", 0), input.rank());
  const SymExpr &size = input.sizes[bounds.dim];
  bounds.step = node.intAttr("step", 1);
  if (bounds.step <= 0)
    opError(node, "slice step must be positive");
  const int64_t open = std::numeric_limits<int64_t>::max();
  SymExpr start = symAttr(node, "start", 0);
  SymExpr end = symAttr(node, "end", open);
  if (node.op == Op::Narrow) {
    if (start.isConstant() && start.constant() < 0)
      start = start + size;
    end = start + symAttr(node, "length", 0);
    if (size.isConstant() && start.isConstant() && end.isConstant() &&
        (start.constant() < 0 || end.constant() > size.constant() ||
         end.constant() < start.constant()))
      opError(node, "narrow is out of range");
  }
  if (size.isConstant() && start.isConstant() && end.isConstant()) {
    int64_t extent = size.constant();
    auto clampIndex = [extent](int64_t index) {
      if (index < 0)
        index += extent;
      return std::min(std::max<int64_t>(index, 0), extent);
    };
    int64_t first = clampIndex(start.constant());
    int64_t last = clampIndex(end.constant());
    bounds.start = first;
    bounds.length =
        last > first ? (last - first + bounds.step - 1) / bounds.step : 0;
    return bounds;
  }
  // Symbolic: wrap negative constants and the open end; the rest is in
  // range by capture's guards.
  auto wrap = [&](const SymExpr &index) {
    if (index == SymExpr(open))
      return size;
    if (index.isConstant() && index.constant() < 0)
      return index + size;
    return index;
  };
  bounds.start = wrap(start);
  SymExpr span = wrap(end) - bounds.start;
  if (span.isConstant() && span.constant() <= 0)
    bounds.length = 0;
  else
    bounds.length = bounds.step == 1
                        ? span
                        : floorDiv(span + (bounds.step - 1), bounds.step);
  return bounds;
}

namespace {

std::vector<TensorType> inferSlice(const Node &node) {
  SliceBounds bounds = sliceBounds(node);
  std::vector<SymExpr> sizes = operandType(node, 0).sizes;
  sizes[bounds.dim] = bounds.length;
  return {likeFirstOperand(node, sizes)};
}

Index remapSlice(const Node &node, size_t, const Index &index) {
  SliceBounds bounds = sliceBounds(node);
  Index in = index;
  in[bounds.dim] = bounds.start + index[bounds.dim] * bounds.step;
  return in;
}

Strided stridedSlice(const Node &node, size_t, StridedView view) {
  SliceBounds bounds = sliceBounds(node);
  view.offset = view.offset + view.strides[bounds.dim] * bounds.start;
  view.sizes[bounds.dim] = bounds.length;
  view.strides[bounds.dim] = view.strides[bounds.dim] * bounds.step;
  return view;
}

//===----------------------------------------------------------------------===//
// split, chunk, unbind: consecutive pieces of one dim, one result each
//===----------------------------------------------------------------------===//

/// Where result `piece` starts along dim of size total.
int64_t pieceStart(const Node &node, int64_t total, size_t piece) {
  std::vector<int64_t> lengths = splitLengths(node, total);
  int64_t start = 0;
  for (size_t r = 0; r < piece; ++r)
    start += lengths[r];
  return start;
}

/// split {sizes = [...]} (already resolved by capture) or {size = n}; chunk
/// {chunks = n}; unbind (dropDim: the pieces lose the split dim).
std::vector<TensorType> inferPieces(const Node &node, bool dropDim) {
  const TensorType &input = operandType(node, 0);
  if (input.rank() == 0)
    opError(node, "cannot split a 0-dim tensor");
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), input.rank());
  int64_t total = constantSize(node, input.sizes[dim]);
  std::vector<TensorType> results;
  for (int64_t length : splitLengths(node, total)) {
    std::vector<SymExpr> sizes = input.sizes;
    if (dropDim)
      sizes.erase(sizes.begin() + dim);
    else
      sizes[dim] = SymExpr(length);
    results.push_back(likeFirstOperand(node, sizes));
  }
  return results;
}

Index remapPiece(const Node &node, size_t result, const Index &index,
                 bool dropDim) {
  const TensorType &input = operandType(node, 0);
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), input.rank());
  int64_t offset = pieceStart(node, input.sizes[dim].constant(), result);
  Index in = index;
  if (dropDim)
    in.insert(in.begin() + dim, SymExpr(offset));
  else
    in[dim] = index[dim] + offset;
  return in;
}

Strided stridedPiece(const Node &node, size_t result, StridedView view,
                     bool dropDim) {
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), view.sizes.size());
  if (!view.sizes[dim].isConstant())
    return std::nullopt;
  int64_t total = view.sizes[dim].constant();
  int64_t start = pieceStart(node, total, result);
  view.offset = view.offset + view.strides[dim] * start;
  if (dropDim) {
    view.sizes.erase(view.sizes.begin() + dim);
    view.strides.erase(view.strides.begin() + dim);
  } else {
    view.sizes[dim] = SymExpr(splitLengths(node, total)[result]);
  }
  return view;
}

std::vector<TensorType> inferSplit(const Node &node) {
  return inferPieces(node, false);
}
Index remapSplit(const Node &node, size_t result, const Index &index) {
  return remapPiece(node, result, index, false);
}
Strided stridedSplit(const Node &node, size_t result, StridedView view) {
  return stridedPiece(node, result, std::move(view), false);
}

std::vector<TensorType> inferUnbind(const Node &node) {
  return inferPieces(node, true);
}
Index remapUnbind(const Node &node, size_t result, const Index &index) {
  return remapPiece(node, result, index, true);
}
Strided stridedUnbind(const Node &node, size_t result, StridedView view) {
  return stridedPiece(node, result, std::move(view), true);
}

//===----------------------------------------------------------------------===//
// contiguous: a remap that is never a strided view (flip, roll and repeat,
// the others, are in CopyingRemapOps.cpp)
//===----------------------------------------------------------------------===//

Index remapIdentity(const Node &, size_t, const Index &index) {
  return index;
}

/// detach: the same elements, a view sharing its operand's memory (the
/// graph's mark that gradients stop there).
Strided stridedIdentity(const Node &, size_t, StridedView view) {
  return view;
}

} // namespace

OpInfo remapView(Op name, std::vector<std::string> attributes, ShapeRule infer,
                 IndexRemap remap, StridedRule strided) {
  assert(remap && "a view op needs its index remap");
  OpInfo info = shapedOp(name, OpKind::View, 1, std::move(attributes),
                         std::move(infer));
  ViewRule rule;
  rule.form = ViewForm::Remap;
  rule.remap = std::move(remap);
  rule.strided = std::move(strided);
  info.view = std::make_shared<const ViewRule>(std::move(rule));
  return info;
}

namespace {

/// split, chunk, unbind: torch returns their results as one tuple.
OpInfo pieces(OpInfo info) {
  info.resultsAreSequence = true;
  return info;
}

} // namespace

std::vector<int64_t> splitLengths(const Node &node, int64_t total) {
  if (node.op == Op::Unbind)
    return std::vector<int64_t>(size_t(total), 1);
  std::vector<int64_t> lengths;
  if (node.op == Op::Chunk) {
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

/// The entries: from include/dynafuse/Ops/ViewOps.py, CopyingRemapOps.py
/// and DataMovementOps.py.
void addViewOps(std::vector<OpInfo> &table) {
#include "dynafuse/Ops/ViewOps.inc"
  addCopyingRemapOps(table);
  addDataMovementOps(table);
}

} // namespace dynafuse

//===- StridedView.cpp - The strided form of view ops ---------------------===//
#include "dynafuse/Lowering/StridedView.h"

#include "dynafuse/Graph/OpRegistry.h"

#include <algorithm>

namespace dynafuse {

bool reshapeView(const std::vector<SymExpr> &newSizes, StridedView &view) {
  std::vector<int64_t> oldShape, newShape;
  for (const SymExpr &size : view.sizes) {
    if (!size.isConstant())
      return false;
    oldShape.push_back(size.constant());
  }
  for (const SymExpr &size : newSizes) {
    if (!size.isConstant())
      return false;
    newShape.push_back(size.constant());
  }
  std::vector<SymExpr> newStrides(newShape.size());
  if (oldShape.empty()) {
    for (SymExpr &stride : newStrides)
      stride = SymExpr(1);
  } else {
    int64_t viewD = int64_t(newShape.size()) - 1;
    SymExpr chunkBase = view.strides.back();
    int64_t tensorNumel = 1, viewNumel = 1;
    for (int64_t d = int64_t(oldShape.size()) - 1; d >= 0; --d) {
      tensorNumel *= oldShape[d];
      bool chunkEnds =
          d == 0 || (oldShape[d - 1] != 1 &&
                     view.strides[d - 1] != chunkBase * tensorNumel);
      if (!chunkEnds)
        continue;
      while (viewD >= 0 && (viewNumel < tensorNumel || newShape[viewD] == 1)) {
        newStrides[viewD] = chunkBase * viewNumel;
        viewNumel *= newShape[viewD];
        --viewD;
      }
      if (viewNumel != tensorNumel)
        return false;
      if (d > 0) {
        chunkBase = view.strides[d - 1];
        tensorNumel = viewNumel = 1;
      }
    }
    if (viewD != -1)
      return false;
  }
  view.sizes = newSizes;
  view.strides = newStrides;
  return true;
}

bool describeView(const Value *value, const std::set<const Value *> &buffers,
                  StridedView &view,
                  const std::map<const Value *, TensorType> *layouts) {
  if (buffers.count(value) || !value->producer) {
    const TensorType *type = &value->type;
    if (layouts && layouts->count(value))
      type = &layouts->at(value);
    view.base = value;
    view.sizes = type->sizes;
    view.strides = type->effectiveStrides();
    view.offset = SymExpr(0);
    return true;
  }
  const Node &node = *value->producer;
  if (node.operands.empty() || !node.operands[0].isValue() ||
      !describeView(node.operands[0].value, buffers, view, layouts))
    return false;
  size_t rank = view.sizes.size();
  if (node.op == "transpose" && rank >= 2) {
    int64_t a = normalizeDim(node, node.intAttr("dim0", 0), rank);
    int64_t b = normalizeDim(node, node.intAttr("dim1", 1), rank);
    std::swap(view.sizes[a], view.sizes[b]);
    std::swap(view.strides[a], view.strides[b]);
    return true;
  }
  if (node.op == "permute") {
    std::vector<int64_t> dims = intListAttr(node, "dims", {});
    StridedView permuted = view;
    for (size_t k = 0; k < dims.size(); ++k) {
      int64_t d = normalizeDim(node, dims[k], rank);
      permuted.sizes[k] = view.sizes[d];
      permuted.strides[k] = view.strides[d];
    }
    view = permuted;
    return true;
  }
  if (node.op == "unsqueeze") {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), rank + 1);
    // torch's stride for the new dim: size * stride of the dim it precedes.
    SymExpr stride = size_t(dim) < rank
                         ? view.sizes[size_t(dim)] * view.strides[size_t(dim)]
                         : SymExpr(1);
    view.sizes.insert(view.sizes.begin() + dim, SymExpr(1));
    view.strides.insert(view.strides.begin() + dim, stride);
    return true;
  }
  if (node.op == "expand") {
    const std::vector<SymExpr> &out = value->type.sizes;
    size_t lead = out.size() - rank;
    std::vector<SymExpr> strides(lead, SymExpr(0));
    for (size_t k = 0; k < rank; ++k)
      strides.push_back(view.sizes[k] == out[lead + k] ? view.strides[k]
                                                       : SymExpr(0));
    view.sizes = out;
    view.strides = strides;
    return true;
  }
  if (node.op == "slice" || node.op == "narrow") {
    SliceBounds bounds = sliceBounds(node);
    view.offset = view.offset + view.strides[bounds.dim] * bounds.start;
    view.sizes[bounds.dim] = SymExpr(bounds.length);
    view.strides[bounds.dim] = view.strides[bounds.dim] * bounds.step;
    return true;
  }
  if (node.op == "select") {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), rank);
    int64_t at = node.intAttr("index", 0);
    if (at < 0)
      at += view.sizes[dim].constant();
    view.offset = view.offset + view.strides[dim] * at;
    view.sizes.erase(view.sizes.begin() + dim);
    view.strides.erase(view.strides.begin() + dim);
    return true;
  }
  if (node.op == "split" || node.op == "chunk" || node.op == "unbind") {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), rank);
    if (!view.sizes[dim].isConstant())
      return false;
    std::vector<int64_t> lengths =
        splitLengths(node, view.sizes[dim].constant());
    size_t piece =
        size_t(std::find(node.results.begin(), node.results.end(), value) -
               node.results.begin());
    int64_t start = 0;
    for (size_t r = 0; r < piece; ++r)
      start += lengths[r];
    view.offset = view.offset + view.strides[dim] * start;
    if (node.op == "unbind") {
      view.sizes.erase(view.sizes.begin() + dim);
      view.strides.erase(view.strides.begin() + dim);
    } else {
      view.sizes[dim] = SymExpr(lengths[piece]);
    }
    return true;
  }
  if (node.op == "reshape" || node.op == "flatten")
    return reshapeView(value->type.sizes, view);
  return false;
}

} // namespace dynafuse

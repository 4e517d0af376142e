//===- ViewRules.cpp - Index remaps and strided forms of view ops ---------===//
//
// The entry points lowering calls for view ops (the rules themselves are in
// each op's table entry, ViewOps.cpp), and the index arithmetic they share.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/ViewRules.h"

#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {

std::vector<SymExpr> remapViewIndex(const Node &node, size_t resultIndex,
                                    const std::vector<SymExpr> &index) {
  const OpInfo *info = opInfoOf(node);
  if (!info || !info->view || !info->view->remap)
    fail("no lowering for view op '" + node.op + "'", node.location);
  return info->view->remap(node, resultIndex, index);
}

std::optional<StridedView> stridedViewOf(const Node &node, size_t resultIndex,
                                         StridedView operandView) {
  const OpInfo *info = opInfoOf(node);
  if (!info || !info->view || !info->view->strided)
    return std::nullopt;
  return info->view->strided(node, resultIndex, std::move(operandView));
}

std::optional<StridedView> reshapedView(const std::vector<SymExpr> &newSizes,
                                        StridedView view) {
  // Row-major data reshapes to row-major strides, symbolic sizes included.
  if (view.strides == contiguousStrides(view.sizes)) {
    view.sizes = newSizes;
    view.strides = contiguousStrides(newSizes);
    return view;
  }
  std::vector<int64_t> oldShape, newShape;
  for (const SymExpr &size : view.sizes) {
    if (!size.isConstant())
      return std::nullopt;
    oldShape.push_back(size.constant());
  }
  for (const SymExpr &size : newSizes) {
    if (!size.isConstant())
      return std::nullopt;
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
        return std::nullopt;
      if (d > 0) {
        chunkBase = view.strides[d - 1];
        tensorNumel = viewNumel = 1;
      }
    }
    if (viewD != -1)
      return std::nullopt;
  }
  view.sizes = newSizes;
  view.strides = newStrides;
  return view;
}

std::vector<SymExpr> broadcastIndex(const std::vector<SymExpr> &index,
                                    const std::vector<SymExpr> &operandSizes) {
  size_t offset = index.size() - operandSizes.size();
  std::vector<SymExpr> result;
  for (size_t k = 0; k < operandSizes.size(); ++k)
    result.push_back(operandSizes[k] == SymExpr(1) ? SymExpr(0)
                                                   : index[offset + k]);
  return result;
}

SymExpr linearizeIndex(const std::vector<SymExpr> &index,
                       const std::vector<SymExpr> &sizes) {
  SymExpr flat(0);
  for (size_t k = 0; k < index.size(); ++k)
    flat = flat * sizes[k] + index[k];
  return flat;
}

std::vector<SymExpr> delinearizeIndex(const SymExpr &flat,
                                      const std::vector<SymExpr> &sizes) {
  std::vector<SymExpr> index(sizes.size());
  SymExpr stride(1);
  for (size_t k = sizes.size(); k-- > 0;) {
    SymExpr quotient = floorDiv(flat, stride);
    index[k] = k == 0 ? quotient : mod(quotient, sizes[k]);
    stride = stride * sizes[k];
  }
  return index;
}

} // namespace dynafuse

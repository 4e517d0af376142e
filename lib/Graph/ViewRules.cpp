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
    fail("no lowering for view op '" + opName(node.op) + "'", node.location);
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
  // ATen's computeStride: the old dims fall into chunks of row-major
  // neighbours; each chunk must be exactly a run of the new dims, which
  // take strides from the chunk's innermost one. Symbolic sizes match
  // where their products are equal as expressions (sizes symbols stand for
  // are never 0 or 1, so a run equal here is equal in every call).
  std::vector<SymExpr> newStrides(newSizes.size());
  if (view.sizes.empty()) {
    for (SymExpr &stride : newStrides)
      stride = SymExpr(1);
  } else {
    const std::vector<SymExpr> &oldSizes = view.sizes;
    int64_t viewD = int64_t(newSizes.size()) - 1;
    SymExpr chunkBase = view.strides.back();
    SymExpr tensorNumel(1), viewNumel(1);
    auto fewer = [](const SymExpr &a, const SymExpr &b) {
      if (a.isConstant() && b.isConstant())
        return a.constant() < b.constant();
      return a != b; // grows past b, or matches it exactly
    };
    for (int64_t d = int64_t(oldSizes.size()) - 1; d >= 0; --d) {
      tensorNumel = tensorNumel * oldSizes[d];
      bool chunkEnds =
          d == 0 || (oldSizes[d - 1] != SymExpr(1) &&
                     view.strides[d - 1] != chunkBase * tensorNumel);
      if (!chunkEnds)
        continue;
      while (viewD >= 0 && (fewer(viewNumel, tensorNumel) ||
                            newSizes[viewD] == SymExpr(1))) {
        newStrides[viewD] = chunkBase * viewNumel;
        viewNumel = viewNumel * newSizes[viewD];
        --viewD;
      }
      if (viewNumel != tensorNumel)
        return std::nullopt;
      if (d > 0) {
        chunkBase = view.strides[d - 1];
        tensorNumel = viewNumel = SymExpr(1);
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

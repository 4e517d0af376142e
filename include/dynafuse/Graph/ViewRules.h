//===- ViewRules.h - Per view op: index remap and strided form --*- C++ -*-===//
//
// The lowering side of the view ops, kept in their op table entries (see
// ViewOps.cpp) beside their shape rules, as PointwiseRules.cpp is for
// pointwise ops: a view op that reads operand 0 at remapped indices
// (reshape, permute, slice, ...) gives the operand index of each result
// index (the element emitter's index arithmetic) and the strided form of
// its result given the operand's (what an extern op can read without a
// copy), or says that no strided form exists. Registering such an op
// without both is an error at table build time.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_VIEWRULES_H
#define DYNAFUSE_GRAPH_VIEWRULES_H

#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Support/SymExpr.h"

#include <functional>
#include <optional>
#include <vector>

namespace dynafuse {

class Node;

/// Elements at offset + sum(index[k] * strides[k]) of some buffer.
struct StridedView {
  std::vector<SymExpr> sizes;
  std::vector<SymExpr> strides;
  SymExpr offset;
};

/// How lowering computes an element of a view-kind op (OpKind::View).
enum class ViewForm {
  Remap,       ///< operand 0 at a remapped index (ViewRule::remap)
  Concat,      ///< cat: the operand whose range holds the index
  Pad,         ///< pad: the operand inside, the fill value outside
  Gather,      ///< gather: indices of the result's shape
  IndexSelect, ///< index_select: a 1-D index along one dim
  Embedding,   ///< embedding: rows of the weight picked by the indices
  Arange,      ///< arange: start + index * step
  Fill,        ///< full, full_like: the "value" attribute
  LowerTriangle, ///< tril: operand on or below the diagonal, else zero
  UpperTriangle, ///< triu: operand on or above the diagonal, else zero
  Random,      ///< uniform: counter-based numbers from operand 0's seed
};

/// The operand-0 index read for result `result`'s element at `index`.
using IndexRemap = std::function<std::vector<SymExpr>(
    const Node &node, size_t result, const std::vector<SymExpr> &index)>;
/// The strided form of result `result` given operand 0's.
using StridedRule = std::function<std::optional<StridedView>(
    const Node &node, size_t result, StridedView operand)>;

struct ViewRule {
  ViewForm form = ViewForm::Remap;
  /// Remap ops only: the index remapping.
  IndexRemap remap;
  /// Remap ops only: the strided form; null when the result is never a
  /// view of its operand without a copy (flip, roll, repeat, ...).
  StridedRule strided;
};

/// The operand-0 index of a Remap view node's result element at index.
std::vector<SymExpr> remapViewIndex(const Node &node, size_t resultIndex,
                                    const std::vector<SymExpr> &index);

/// The strided form of a view node's result resultIndex when its operand 0
/// has the strided form operandView; nullopt when that result cannot be
/// read without a copy (not a view op, no strided form, or one that the
/// operand's layout does not allow, e.g. a reshape of non-contiguous data).
std::optional<StridedView> stridedViewOf(const Node &node, size_t resultIndex,
                                         StridedView operandView);

/// view's elements with newSizes without a copy (the strides of torch's
/// computeStride); nullopt when the layout needs a copy.
std::optional<StridedView> reshapedView(const std::vector<SymExpr> &newSizes,
                                        StridedView view);

/// Index helpers shared by the remaps and the element emitter.
/// The index of an operand of shape operandSizes inside a result indexed by
/// index (right-aligned broadcasting: a size-1 dim is indexed with 0).
std::vector<SymExpr> broadcastIndex(const std::vector<SymExpr> &index,
                                    const std::vector<SymExpr> &operandSizes);
/// Row-major linear position of index in sizes.
SymExpr linearizeIndex(const std::vector<SymExpr> &index,
                       const std::vector<SymExpr> &sizes);
/// The index in sizes of row-major linear position flat.
std::vector<SymExpr> delinearizeIndex(const SymExpr &flat,
                                      const std::vector<SymExpr> &sizes);

/// A view op's entry: operand 0 read at remapped indices.
/// The strided form must be given, null where there is none.
OpInfo remapView(Op name, std::vector<std::string> attributes, ShapeRule infer,
                 IndexRemap remap, StridedRule strided);

} // namespace dynafuse

#endif

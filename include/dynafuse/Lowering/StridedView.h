//===- StridedView.h - The strided form of view ops -------------*- C++ -*-===//
//
// A chain of view ops over a buffer is, where torch could return it without
// a copy, one strided view: base buffer, sizes, strides and offset. Extern
// operands are passed through such views; outputs that view a graph input
// are returned as views, as eager returns them.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_STRIDEDVIEW_H
#define DYNAFUSE_LOWERING_STRIDEDVIEW_H

#include "dynafuse/Graph/Graph.h"

#include <map>
#include <set>
#include <vector>

namespace dynafuse {

/// A strided view of a buffer: what an extern op can read without a copy.
struct StridedView {
  const Value *base = nullptr;
  std::vector<SymExpr> sizes;
  std::vector<SymExpr> strides;
  SymExpr offset;
};

/// Strides for viewing view's elements with newSizes without a copy (the
/// algorithm of torch's computeStride); false when a copy would be needed.
bool reshapeView(const std::vector<SymExpr> &newSizes, StridedView &view);

/// The strided view value is of a buffer (a graph input or a member of
/// buffers), through view ops only; false when it is not one.
/// `layouts`: the strides buffers were given (a channels-last layout chosen
/// for a computed value), where they differ from the graph type's.
bool describeView(const Value *value, const std::set<const Value *> &buffers,
                  StridedView &view,
                  const std::map<const Value *, TensorType> *layouts = nullptr);

} // namespace dynafuse

#endif

//===- StridedView.h - Values as strided views of buffers -------*- C++ -*-===//
//
// A chain of view ops over a buffer is, where torch could return it without
// a copy, one strided view of that buffer: base buffer, sizes, strides and
// offset. Each op's step of the chain is its strided rule in the view-op
// table (Graph/ViewRules.h); this file walks the chain down to a buffer.
// Extern operands are passed through such views; outputs that view a graph
// input are returned as views, as eager returns them.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_STRIDEDVIEW_H
#define DYNAFUSE_LOWERING_STRIDEDVIEW_H

#include "dynafuse/Graph/Graph.h"
#include "dynafuse/Graph/ViewRules.h"

#include <map>
#include <set>

namespace dynafuse {

/// A strided view of a buffer: what an extern op can read without a copy.
struct BufferView {
  const Value *base = nullptr;
  StridedView view;
};

/// The strided view value is of a buffer (a graph input or a member of
/// buffers), through view ops only; false when it is not one.
/// `layouts`: the strides buffers were given (a channels-last layout chosen
/// for a computed value), where they differ from the graph type's.
bool describeView(const Value *value, const std::set<const Value *> &buffers,
                  BufferView &result,
                  const std::map<const Value *, TensorType> *layouts = nullptr);

} // namespace dynafuse

#endif

//===- StridedView.cpp - Values as strided views of buffers ---------------===//
#include "dynafuse/Lowering/StridedView.h"

#include <algorithm>

namespace dynafuse {

bool describeView(const Value *value, const std::set<const Value *> &buffers,
                  BufferView &result,
                  const std::map<const Value *, TensorType> *layouts) {
  if (buffers.count(value) || !value->producer) {
    const TensorType *type = &value->type;
    if (layouts && layouts->count(value))
      type = &layouts->at(value);
    result.base = value;
    result.view.sizes = type->sizes;
    result.view.strides = type->effectiveStrides();
    result.view.offset = SymExpr(0);
    return true;
  }
  const Node &node = *value->producer;
  if (node.operands.empty() || !node.operands[0].isValue() ||
      !describeView(node.operands[0].value, buffers, result, layouts))
    return false;
  size_t piece =
      size_t(std::find(node.results.begin(), node.results.end(), value) -
             node.results.begin());
  std::optional<StridedView> view = stridedViewOf(node, piece, result.view);
  if (!view)
    return false;
  result.view = std::move(*view);
  return true;
}

} // namespace dynafuse

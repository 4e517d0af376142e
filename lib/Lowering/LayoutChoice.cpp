//===- LayoutChoice.cpp - The memory order of each buffer -----------------===//
//
// The layout pass: a realized value's buffer is row-major unless a layout
// is worth following (a strided input its pointwise computation reads, a
// channels-last convolution network). Its loop order is its memory order,
// outermost dim first.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Lowering/LoweringPasses.h"

#include <algorithm>

namespace dynafuse {
namespace {

/// CPU convolution networks run channels-last inside the graph, as
/// Inductor's layout optimization does: oneDNN's NHWC convolutions skip
/// the reorders its NCHW path makes on every call (eager torchvision
/// batch 8: resnet18 159 -> 126 ms, mobilenet_v2 119 -> 81 ms with a
/// channels-last input). The first convolution's input is converted by
/// the torch bridge, everything after follows (pointwise epilogues and
/// pools keep a channels-last source's layout). Only when no graph
/// output has rank 4, so callers still get eager's layouts, and for two
/// convolutions or more: a single one (a vision transformer's patch
/// embedding) gains nothing from the layout and pays for converting its
/// input and weight on every call (vit's 16x16 stride-16 embedding: 0.67 ms
/// NCHW, 1.8 ms with the conversions).
bool prefersChannelsLast(const Graph &graph) {
  int convolutions = 0;
  for (const auto &node : graph.nodes)
    if (opInfoOf(*node)->startsChannelsLast && !node->results.empty() &&
        node->results[0]->type.device == "cpu")
      ++convolutions;
  for (const Value *output : graph.outputs)
    if (output->type.rank() == 4)
      return false;
  return convolutions >= 2;
}

/// A graph input with explicit, distinct positive strides and the same
/// sizes, reached from value through pointwise ops only.
const Value *layoutSource(const LoweringState &state, const Value *value,
                          const std::vector<SymExpr> &sizes) {
  if (value->type.sizes != sizes || !allConstant(sizes))
    return nullptr;
  bool externResult =
      value->producer && kindOf(*value->producer) == OpKind::Extern;
  if (!value->producer || externResult) {
    const std::vector<SymExpr> &strides = state.bufferType(value).strides;
    std::set<int64_t> distinct;
    for (size_t k = 0; k < strides.size(); ++k) {
      if (!strides[k].isConstant() || strides[k].constant() <= 0)
        return nullptr;
      if (sizes[k] != SymExpr(1))
        distinct.insert(strides[k].constant());
    }
    return !strides.empty() && distinct.size() > 1 ? value : nullptr;
  }
  if (kindOf(*value->producer) != OpKind::Pointwise)
    return nullptr;
  for (const Operand &operand : value->producer->operands)
    if (operand.isValue())
      if (const Value *found = layoutSource(state, operand.value, sizes))
        return found;
  return nullptr;
}

/// Pointwise results follow the layout of an input of the same shape they
/// are computed from, as eager's TensorIterator does (channels-last in,
/// channels-last out); the loops then run in that memory order.
void chooseLayout(LoweringState &state, const Value *value) {
  std::vector<size_t> order(value->type.rank());
  for (size_t k = 0; k < order.size(); ++k)
    order[k] = k;
  const Value *input = layoutSource(state, value, value->type.sizes);
  if (input) {
    const std::vector<SymExpr> &strides = state.bufferType(input).strides;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return strides[a].constant() > strides[b].constant();
    });
  }
  state.orderOf[value] = order;
  TensorType type = value->type;
  type.strides.clear();
  if (input) {
    type.strides.assign(order.size(), SymExpr(1));
    SymExpr running(1);
    for (size_t k = order.size(); k-- > 0;) {
      type.strides[order[k]] = running;
      running = running * type.sizes[order[k]];
    }
  }
  state.bufferTypes[value] = type;
}

/// Convolutions and pools of a buffer laid out channels-last (chosen
/// here for a computed value) give channels-last results, as ATen's do.
void followChannelsLast(LoweringState &state, const Node &node,
                        const Value *result) {
  const OpInfo *info = opInfoOf(node);
  if (state.convolutionsChannelsLast && info->startsChannelsLast &&
      result->type.rank() == 4) {
    TensorType type = result->type;
    type.strides = channelsLastStrides(type.sizes);
    state.bufferTypes[result] = type;
    return;
  }
  if (!info->keepsChannelsLast || !node.operands[0].isValue() ||
      result->type.rank() != 4 ||
      !isChannelsLast(state.bufferType(node.operands[0].value)))
    return;
  TensorType type = result->type;
  type.strides = channelsLastStrides(type.sizes);
  state.bufferTypes[result] = type;
}

} // namespace

void chooseLayouts(LoweringState &state) {
  state.convolutionsChannelsLast = prefersChannelsLast(state.graph);
  for (const auto &node : state.graph.nodes) {
    for (const Value *result : node->results) {
      if (!state.realized.count(result))
        continue;
      if (kindOf(*node) != OpKind::Extern)
        chooseLayout(state, result);
      else
        followChannelsLast(state, *node, result);
    }
  }
}

} // namespace dynafuse

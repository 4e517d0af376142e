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

/// Whether node is a depthwise convolution: one input channel per group
/// (mobilenet's and efficientnet's 3x3 and 5x5 layers).
bool isDepthwiseConvolution(const Node &node) {
  if (node.operands.size() < 2 || !node.operands[1].isValue())
    return false;
  const TensorType &weight = node.operands[1].value->type;
  return node.intAttr("groups", 1) > 1 && weight.rank() == 4 &&
         weight.sizes[1] == SymExpr(1);
}

/// CPU convolution networks run channels-last inside the graph when
/// oneDNN gets their weights in a layout it need not reorder on every call:
/// networks with depthwise convolutions (oneDNN's NHWC depthwise kernels
/// are much faster than its NCHW ones, and their tiny weights cost little
/// to reorder), and networks whose convolutions the torch bridge marked
/// weight_prepacked (their weights are kept in oneDNN's blocked layout, so
/// the NHWC kernels cost no reorder). The first convolution's input is
/// converted by the torch bridge, everything after follows (pointwise
/// epilogues and pools keep a channels-last source's layout). Unmarked
/// dense convolutions keep eager's layout: oneDNN would reorder their NCHW
/// parameters on every call. Measured at batch 1, 128x128 (eager = 1.0):
/// unmarked channels-last vs NCHW inside, resnet18 0.93x vs 1.14x, resnet50
/// 0.87x vs 1.13x, mobilenet_v2 1.27x vs 1.06x; with prepacked weights
/// channels-last, resnet18 1.39x, googlenet 1.63x (1.40x NCHW). Only when
/// no graph output has rank 4, so callers still get eager's layouts, and
/// for two convolutions or more: a single one (a vision transformer's patch
/// embedding) gains nothing and pays for converting its input.
bool prefersChannelsLast(const Graph &graph) {
  int convolutions = 0, prepacked = 0;
  bool depthwise = false;
  for (const auto &node : graph.nodes) {
    if (!opInfoOf(*node)->startsChannelsLast || node->results.empty() ||
        node->results[0]->type.device != "cpu")
      continue;
    ++convolutions;
    prepacked += boolAttr(*node, "weight_prepacked", false);
    depthwise = depthwise || isDepthwiseConvolution(*node);
  }
  for (const Value *output : graph.outputs)
    if (output->type.rank() == 4)
      return false;
  return convolutions >= 2 && (depthwise || prepacked >= 2);
}

/// The dims of a buffer with explicit strides from outermost to innermost
/// in memory: by constant stride, or, for symbolic strides, by walking a
/// dense layout up from stride 1 (each next stride the product of the
/// sizes inside it; dims of size 1 go outermost). Empty when the strides
/// are neither (or not worth following: one distinct stride).
std::vector<size_t> memoryOrder(const TensorType &type) {
  const std::vector<SymExpr> &strides = type.strides;
  size_t rank = strides.size();
  std::vector<size_t> order(rank);
  for (size_t k = 0; k < rank; ++k)
    order[k] = k;
  if (allConstant(strides)) {
    std::set<int64_t> distinct;
    for (size_t k = 0; k < rank; ++k) {
      if (strides[k].constant() <= 0)
        return {};
      if (type.sizes[k] != SymExpr(1))
        distinct.insert(strides[k].constant());
    }
    if (distinct.size() <= 1)
      return {};
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return strides[a].constant() > strides[b].constant();
    });
    return order;
  }
  std::vector<size_t> innerFirst;
  std::vector<bool> placed(rank, false);
  SymExpr running(1);
  for (size_t step = 0; step < rank; ++step) {
    size_t next = rank;
    for (size_t k = 0; k < rank && next == rank; ++k)
      if (!placed[k] && type.sizes[k] != SymExpr(1) && strides[k] == running)
        next = k;
    if (next == rank)
      break;
    placed[next] = true;
    innerFirst.push_back(next);
    running = running * type.sizes[next];
  }
  for (size_t k = rank; k-- > 0;)
    if (!placed[k]) {
      if (type.sizes[k] != SymExpr(1))
        return {}; // not a dense layout
      innerFirst.push_back(k);
    }
  return std::vector<size_t>(innerFirst.rbegin(), innerFirst.rend());
}

/// A graph input (or extern result) with explicit strides worth following
/// (memoryOrder) and the same sizes, reached from value through pointwise
/// ops, or of the same rank through pads, slices and concatenations.
const Value *layoutSource(const LoweringState &state, const Value *value,
                          const std::vector<SymExpr> &sizes) {
  if (value->type.sizes != sizes)
    return nullptr;
  bool externResult =
      value->producer && kindOf(*value->producer) == OpKind::Extern;
  if (!value->producer || externResult) {
    const TensorType &type = state.bufferType(value);
    return !type.strides.empty() && !memoryOrder(type).empty() ? value
                                                               : nullptr;
  }
  // Windows of a source (pad, slice: a pool's or a depthwise
  // convolution's taps) keep its dim order.
  const Node &producer = *value->producer;
  if ((producer.op == Op::Pad || producer.op == Op::Slice) &&
      producer.operands[0].isValue() &&
      producer.operands[0].value->type.rank() == sizes.size())
    return layoutSource(state, producer.operands[0].value,
                        producer.operands[0].value->type.sizes);
  // A concatenation keeps its pieces' dim order (an inception block's
  // branches, channels-last, concatenated along the channels).
  if (producer.op == Op::Cat) {
    for (const Operand &operand : producer.operands)
      if (operand.isValue() && operand.value->type.rank() == sizes.size())
        if (const Value *found = layoutSource(state, operand.value,
                                              operand.value->type.sizes))
          return found;
    return nullptr;
  }
  if (kindOf(producer) != OpKind::Pointwise)
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
  if (input)
    order = memoryOrder(state.bufferType(input));
  state.orderOf[value] = order;
  TensorType type = value->type;
  type.strides.clear();
  if (input)
    type.strides = stridesInOrder(type.sizes, order);
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

//===- WindowOps.cpp - Pools and depthwise convolutions as window taps ----===//
//
// max_pool2d, avg_pool2d and small depthwise conv2d (one input channel per
// group) decompose, on CPU, into the taps of their window: one strided
// slice of the (padded) input per kernel position, combined by maximum, by
// a sum and a division, or by multiply-adds with the weights of that
// position (a row of one copy of the weight with the channel innermost,
// decision 89). Fusion then makes the pool or convolution one loop nest
// with its epilogue (batch norm, activation) and its producer, instead of
// an ATen call and a pass over its result: measured at batch 1, oneDNN's
// depthwise kernels cost ~60 us a call on shufflenet's 8x8 layers, and
// ATen's channels-last max pools are slower than the fused taps at every
// size tried (docs/performance.md, decision 75).
//
// The pads: -inf for a max pool (ceil_mode's partial windows at the end
// read more -inf, which is what clipping them does), zero for the others.
// Average pools decompose only where every window has its full divisor
// (count_include_pad or no padding, no partial ceil_mode window), and
// depthwise convolutions only up to kDepthwiseTapLimit multiply-adds, where
// the taps beat oneDNN's kernel; larger ones stay extern.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpRegistry.h"

#include <algorithm>
#include <limits>

namespace dynafuse {
namespace {

/// Multiply-adds (output elements times kernel positions) up to which a
/// depthwise convolution runs as fused taps.
constexpr int64_t kDepthwiseTapLimit = int64_t(1) << 19;

/// One spatial dim of a window: its kernel positions, their spacing, the
/// step between windows, the padding before and the windows' count.
struct WindowDim {
  int64_t kernel, dilation, stride, padding, outputs, size;
  /// The padded extent the last window needs (past size + 2 * padding for
  /// ceil_mode's partial windows).
  int64_t needed() const {
    return (kernel - 1) * dilation + stride * (outputs - 1) + 1;
  }
  int64_t padAfter() const {
    return std::max(padding, needed() - size - padding);
  }
};

/// The two spatial dims of a pool or convolution over a 4-D floating input
/// with static spatial sizes; empty when the node does not have that form.
/// (Read from the operands and attributes only: a decomposition gets the
/// node without its results.)
std::vector<WindowDim> windowDims(const Node &node,
                                  const std::vector<int64_t> &kernel) {
  bool pool = node.op != Op::Conv2d; // a pool's stride defaults to its kernel
  if (node.operands.empty() || !node.operands[0].isValue())
    return {};
  const TensorType &x = node.operands[0].value->type;
  if (x.rank() != 4 || !isFloating(x.dtype))
    return {};
  std::vector<int64_t> stride = intListAttr(node, "stride", {});
  if (stride.empty())
    stride = pool ? kernel : std::vector<int64_t>{1};
  if (stride.size() == 1)
    stride.assign(2, stride[0]);
  std::vector<int64_t> padding = perDim(node, "padding", 2, 0);
  std::vector<int64_t> dilation = perDim(node, "dilation", 2, 1);
  bool ceilMode = boolAttr(node, "ceil_mode", false);
  if (kernel.size() != 2 || stride.size() != 2 || padding.size() != 2 ||
      dilation.size() != 2)
    return {};
  std::vector<WindowDim> dims;
  for (size_t d = 0; d < 2; ++d) {
    const SymExpr &in = x.sizes[2 + d];
    if (!in.isConstant() || in.constant() <= 0 || stride[d] <= 0 ||
        kernel[d] <= 0 || dilation[d] <= 0 || padding[d] < 0)
      return {};
    std::optional<int64_t> outputs =
        windowCount(in.constant(), kernel[d], stride[d], padding[d],
                    dilation[d], ceilMode);
    if (!outputs)
      return {};
    dims.push_back({kernel[d], dilation[d], stride[d], padding[d], *outputs,
                    in.constant()});
  }
  return dims;
}

/// Whether the node's result is one a decomposition may replace: a CPU
/// tensor without explicit strides (a result typed channels-last keeps
/// ATen's op and its layout).
bool replaceableResult(const Node &node) {
  return node.results.size() == 1 && node.results[0]->type.strides.empty() &&
         node.results[0]->type.device == "cpu";
}

std::vector<int64_t> poolKernel(const Node &node) {
  return perDim(node, "kernel_size", 2, 1);
}

/// x padded for the windows (nothing when no dim needs it).
Value *padded(Graph &graph, const Node &node, Value *x,
              const std::vector<WindowDim> &dims, double fill) {
  std::vector<int64_t> pad = {dims[1].padding, dims[1].padAfter(),
                              dims[0].padding, dims[0].padAfter()};
  if (std::all_of(pad.begin(), pad.end(), [](int64_t p) { return p == 0; }))
    return x;
  return emit(graph, node, Op::Pad, {x}, {{"pad", pad}, {"value", fill}});
}

/// The input under kernel position (kh, kw) of every window.
Value *tap(Graph &graph, const Node &node, Value *paddedInput,
           const std::vector<WindowDim> &dims, int64_t kh, int64_t kw) {
  Value *value = paddedInput;
  int64_t positions[2] = {kh, kw};
  for (size_t d = 0; d < 2; ++d) {
    int64_t start = positions[d] * dims[d].dilation;
    int64_t end = start + dims[d].stride * (dims[d].outputs - 1) + 1;
    if (start == 0 && dims[d].stride == 1 &&
        end == value->type.sizes[2 + d].constant())
      continue;
    value = emit(graph, node, Op::Slice, {value},
                 {{"dim", int64_t(2 + d)},
                  {"start", start},
                  {"end", end},
                  {"step", dims[d].stride}});
  }
  return value;
}

/// The kernel sizes of a depthwise conv2d (weight [C, 1, kh, kw], groups
/// C, as many output channels as input ones); empty otherwise.
std::vector<int64_t> depthwiseKernel(const Node &node) {
  if (node.op != Op::Conv2d || node.operands.size() < 2 ||
      !node.operands[1].isValue())
    return {};
  const TensorType &x = operandType(node, 0), &w = operandType(node, 1);
  int64_t groups = node.intAttr("groups", 1);
  if (w.rank() != 4 || x.rank() != 4 || groups <= 1 ||
      !allConstant(w.sizes) || w.sizes[1] != SymExpr(1) ||
      w.sizes[0] != SymExpr(groups) || x.sizes[1] != SymExpr(groups))
    return {};
  return {w.sizes[2].constant(), w.sizes[3].constant()};
}

} // namespace

bool maxPoolTakesWindowTaps(const Node &node) {
  return replaceableResult(node) && !windowDims(node, poolKernel(node)).empty();
}

std::vector<Value *> maxPoolAsWindowTaps(Graph &graph, const Node &node) {
  std::vector<WindowDim> dims = windowDims(node, poolKernel(node));
  Value *x = padded(graph, node, node.operands[0].value, dims,
                    -std::numeric_limits<double>::infinity());
  Value *result = nullptr;
  for (int64_t kh = 0; kh < dims[0].kernel; ++kh)
    for (int64_t kw = 0; kw < dims[1].kernel; ++kw) {
      Value *next = tap(graph, node, x, dims, kh, kw);
      result = result ? emit(graph, node, Op::Maximum, {result, next}) : next;
    }
  return {result};
}

bool avgPoolTakesWindowTaps(const Node &node) {
  std::vector<WindowDim> dims = windowDims(node, poolKernel(node));
  if (dims.empty() || !replaceableResult(node))
    return false;
  bool includePad = boolAttr(node, "count_include_pad", true);
  for (const WindowDim &dim : dims)
    if (dim.needed() > dim.size + 2 * dim.padding ||
        (!includePad && dim.padding > 0))
      return false;
  return true;
}

std::vector<Value *> avgPoolAsWindowTaps(Graph &graph, const Node &node) {
  std::vector<WindowDim> dims = windowDims(node, poolKernel(node));
  Value *x = padded(graph, node, node.operands[0].value, dims, 0.0);
  Value *sum = nullptr;
  for (int64_t kh = 0; kh < dims[0].kernel; ++kh)
    for (int64_t kw = 0; kw < dims[1].kernel; ++kw) {
      Value *next = tap(graph, node, x, dims, kh, kw);
      sum = sum ? emit(graph, node, Op::Add, {sum, next}) : next;
    }
  int64_t divisor = node.intAttr("divisor_override", 0);
  if (divisor == 0)
    divisor = dims[0].kernel * dims[1].kernel;
  return {emit(graph, node, Op::Div, {sum, Scalar::ofFloat(double(divisor))})};
}

bool depthwiseTakesWindowTaps(const Node &node) {
  std::vector<int64_t> kernel = depthwiseKernel(node);
  if (kernel.empty() || windowDims(node, kernel).empty() ||
      !replaceableResult(node))
    return false;
  const TensorType &y = node.results[0]->type;
  if (!allConstant(y.sizes))
    return false;
  int64_t taps = kernel[0] * kernel[1];
  for (const SymExpr &size : y.sizes)
    taps *= size.constant();
  return taps <= kDepthwiseTapLimit;
}

std::vector<Value *> depthwiseAsWindowTaps(Graph &graph, const Node &node) {
  std::vector<int64_t> kernel = depthwiseKernel(node);
  std::vector<WindowDim> dims = windowDims(node, kernel);
  Value *x = padded(graph, node, node.operands[0].value, dims, 0.0);
  Value *weight = node.operands[1].value;
  int64_t channels = weight->type.sizes[0].constant();
  std::vector<int64_t> perChannel = {channels, 1, 1};
  // The weight with the channel innermost, [kh, kw, C]: each tap's
  // weights are then one contiguous row, read a vector at a time where
  // the taps' innermost loop is the channel (channels-last), instead of a
  // column of channel stride kh * kw (RealizationPolicy realizes it).
  Value *tapWeights =
      emit(graph, node, Op::Contiguous,
           {emit(graph, node, Op::Permute,
                 {emit(graph, node, Op::Select, {weight},
                       {{"dim", int64_t(1)}, {"index", int64_t(0)}})},
                 {{"dims", std::vector<int64_t>{1, 2, 0}}})});
  Value *sum = nullptr;
  for (int64_t kh = 0; kh < dims[0].kernel; ++kh) {
    Value *row = emit(graph, node, Op::Select, {tapWeights},
                      {{"dim", int64_t(0)}, {"index", kh}});
    for (int64_t kw = 0; kw < dims[1].kernel; ++kw) {
      Value *w = emit(graph, node, Op::Select, {row},
                      {{"dim", int64_t(0)}, {"index", kw}});
      w = emit(graph, node, Op::Reshape, {w}, {{"shape", perChannel}});
      Value *term =
          emit(graph, node, Op::Mul, {tap(graph, node, x, dims, kh, kw), w});
      sum = sum ? emit(graph, node, Op::Add, {sum, term}) : term;
    }
  }
  if (node.operands.size() == 3 && node.operands[2].isValue())
    sum = emit(graph, node, Op::Add,
               {sum, emit(graph, node, Op::Reshape, {node.operands[2].value},
                          {{"shape", perChannel}})});
  return {sum};
}

} // namespace dynafuse

//===- TorchPackedConvolutions.cpp - Convolutions with reordered weights --===//
//
// Part of the torch bridge's packed weights (TorchPrepackedWeights.h). On
// every call ATen makes, oneDNN reorders a convolution's weight from its
// NCHW parameter into the blocked layout its kernels read; in a
// channels-last network that reorder costs more than the layout gains
// (LayoutChoice.cpp). A conv2d marked weight_prepacked keeps the weight
// reordered by mkldnn::_reorder_convolution_weight and runs through
// mkldnn::_convolution_pointwise, as oneDNN-based inference engines do.
//
// conv2d_bn steps (fuse-conv-epilogues) fold their eval batch norm into
// the weight and bias before the reorder and pass their activation to
// _convolution_pointwise as a post-op; the folded copy is kept while the
// weight, the bias and the four batch norm tensors are all unchanged. A
// residual (conv2d_bn's last operand, not a parameter) is added by
// _convolution_pointwise.binary's "add" post-op, before relu.
//
// Small convolutions stay with at::conv2d: _convolution_pointwise builds
// its primitive on each call (a ~45 us floor on this machine) where ATen
// runs a small 1x1 convolution in 8-20 us. Measured per convolution of
// mobilenet_v3_small and shufflenet_v2 at batch 1 (us, ATen channels-last
// vs prepacked): 16->72 1x1 at 32x32 (2.4 MFLOP) 36 vs 66, 24->24 1x1 at
// 16x16 16 vs 86; depthwise 3x3 and 5x5 70-110 vs 47-80 at every size;
// googlenet's 57 convolutions (all above 4 MFLOP) 19.4 ms vs 15.5 ms in
// sequence. Grouped ones (regnet's, resnext's) are faster prepacked at
// every size, on the AMD EPYC: 400 channels in 25 groups, 3x3 at 4x4
// (1.8 MFLOP) 47 vs 24, 96 in 12 groups at 8x8 45 vs 25, 1008 in 42
// groups at 4x4 128 vs 58 (decision 93). So: grouped and depthwise
// convolutions, and dense ones of 4 MFLOP or more.
// (Small 1x1 convolutions of channels-last inputs are not ATen's
// convolutions either: they run as matrix products, decision 87,
// TorchExternOps.cpp.)
//
//===----------------------------------------------------------------------===//
#include "TorchATenOps.h"
#include "TorchPrepackedWeights.h"

#include "dynafuse/Runtime/CompilerStats.h"
#include "dynafuse/Graph/ConvolutionEpilogues.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <chrono>

namespace dynafuse {

namespace {

/// Convolutions whose output has fewer elements keep the packed weight
/// without measuring: below 4 MB of output the two ran within 10% of
/// each other in every shape timed (ConvolutionChoice).
constexpr int64_t kMeasuredOutputElements = int64_t(1) << 20;

/// The oneDNN post-op of conv2d_bn's activation: its name and scalars.
std::pair<std::string, c10::List<std::optional<at::Scalar>>>
postOpOf(const ProgramStep &step) {
  c10::List<std::optional<at::Scalar>> scalars;
  std::string activation = attributeText(step.attributes, "activation", "none");
  if (activation == "hardtanh") {
    scalars.push_back(at::Scalar(attributeNumber(step.attributes, "min_val", -1.0)));
    scalars.push_back(at::Scalar(attributeNumber(step.attributes, "max_val", 1.0)));
  }
  if (activation == "silu")
    activation = "swish";
  return {activation, scalars};
}

} // namespace

std::optional<at::Tensor>
runPackedConvolution(StepWeights &weights, const ProgramStep &step,
                     const std::vector<at::Tensor> &tensors,
                     const ForwardInputs &inputs) {
  const at::Tensor &x = tensors.at(0), &w = tensors.at(1);
  bool folded = step.op == Op::Conv2dBn;
  bool residual = folded && attributeFlag(step.attributes, "residual");
  if (!at::hasMKLDNN() || x.dim() != 4 || w.dim() != 4 ||
      x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat ||
      !x.is_cpu() || x.size(0) == 0)
    return std::nullopt;
  std::vector<int64_t> stride = perDim(step.attributes, "stride", 2, 1);
  std::vector<int64_t> padding = perDim(step.attributes, "padding", 2, 0);
  std::vector<int64_t> dilation = perDim(step.attributes, "dilation", 2, 1);
  int64_t groups = perDim(step.attributes, "groups", 1, 1).at(0);
  int64_t spatial[2] = {x.size(2), x.size(3)};
  int64_t kernel[2] = {w.size(2), w.size(3)};
  if (groups == 1 &&
      convolutionFlops(w.numel(), x.size(0), spatial, kernel, stride.data(),
                       padding.data(), dilation.data()) < kPrepackMinFlops)
    return std::nullopt;

  // The parameters: the weight, then bias and batch norm tensors; a
  // residual is the last argument, and no parameter.
  std::vector<size_t> arguments;
  for (size_t arg = 1; arg < tensors.size() - (residual ? 1 : 0); ++arg)
    arguments.push_back(arg);
  std::vector<const at::Tensor *> parameters =
      parameterSources(weights, tensors, arguments, inputs);
  if (parameters.empty())
    return std::nullopt;
  auto [activation, scalars] =
      folded ? postOpOf(step)
             : std::make_pair(std::string("none"),
                              c10::List<std::optional<at::Scalar>>());
  // Whether the first calls time this convolution against at::conv2d (a
  // large output, and post-ops ATen has); only then is the plain weight kept.
  bool atenHasPostOps = activation == "none" || activation == "relu" ||
                        activation == "swish" || activation == "hardtanh";
  int64_t outputElements =
      x.size(0) * w.size(0) * (x.size(2) / stride[0]) * (x.size(3) / stride[1]);
  bool measured = atenHasPostOps && outputElements >= kMeasuredOutputElements;
  PackedWeight &packed = copyFor(weights, *parameters[0]);
  if (!packed.current(parameters, x.sizes())) {
    WeightPackingAllocations packing;
    static auto reorder =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("mkldnn::_reorder_convolution_weight", "")
            .typed<at::Tensor(const at::Tensor &, at::IntArrayRef,
                              at::IntArrayRef, at::IntArrayRef, int64_t,
                              at::OptionalIntArrayRef)>();
    at::Tensor weight = w.contiguous();
    packed.bias.reset();
    if (tensors.size() > 2 && !folded)
      packed.bias = tensors[2].contiguous();
    if (folded) {
      // Batch norm of the convolution: scale = gamma / sqrt(var + eps),
      // weight * scale per output channel, (bias - mean) * scale + beta.
      size_t norm = tensors.size() - 4 - (residual ? 1 : 0);
      const at::Tensor &mean = tensors[norm], &variance = tensors[norm + 1],
                       &gamma = tensors[norm + 2], &beta = tensors[norm + 3];
      double eps = attributeNumber(step.attributes, "eps", 1e-5);
      at::Tensor scale = gamma * at::rsqrt(variance + eps);
      weight = (weight * scale.reshape({-1, 1, 1, 1})).contiguous();
      at::Tensor bias = norm == 3 ? tensors[2] : at::zeros_like(mean);
      packed.bias = ((bias - mean) * scale + beta).contiguous();
      ++compilerStats().batchNormFolds;
    }
    packed.packed = reorder.call(weight, padding, stride, dilation, groups,
                                 x.sizes());
    packed.plain = measured ? weight : at::Tensor();
    packed.choice = ConvolutionChoice();
    packed.stamp(parameters, x.sizes());
    ++compilerStats().weightPrepacks;
  }
  static auto convolution =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mkldnn::_convolution_pointwise", "")
          .typed<at::Tensor(const at::Tensor &, const at::Tensor &,
                            const std::optional<at::Tensor> &, at::IntArrayRef,
                            at::IntArrayRef, at::IntArrayRef, int64_t,
                            c10::string_view,
                            c10::List<std::optional<at::Scalar>>,
                            std::optional<c10::string_view>)>();
  at::Tensor input = x;
  if (!x.is_contiguous() && !x.is_contiguous(at::MemoryFormat::ChannelsLast))
    input = x.contiguous(at::MemoryFormat::ChannelsLast);
  auto runPacked = [&, &activation = activation, &scalars = scalars] {
    if (!residual)
      return convolution.call(input, packed.packed, packed.bias, padding,
                              stride, dilation, groups, activation, scalars,
                              std::nullopt);
    static auto convolutionAdd =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("mkldnn::_convolution_pointwise", "binary")
            .typed<at::Tensor(
                const at::Tensor &, const at::Tensor &, const at::Tensor &,
                const std::optional<at::Tensor> &, at::IntArrayRef,
                at::IntArrayRef, at::IntArrayRef, int64_t, c10::string_view,
                std::optional<at::Scalar>, std::optional<c10::string_view>,
                c10::List<std::optional<at::Scalar>>,
                std::optional<c10::string_view>)>();
    std::optional<c10::string_view> unary;
    if (activation != "none")
      unary = activation; // relu, the shape rule's only choice
    return convolutionAdd.call(
        input, tensors.back(), packed.packed, packed.bias, padding, stride,
        dilation, groups, "add", std::nullopt, unary, scalars, std::nullopt);
  };
  // The same convolution through at::conv2d with the folded weight, its
  // residual and activation applied after (the post-ops ATen has).
  auto runATen = [&, &activation = activation, &scalars = scalars] {
    at::Tensor out = at::conv2d(input, packed.plain, packed.bias, stride,
                                padding, dilation, groups);
    if (residual)
      out.add_(tensors.back());
    if (activation == "relu")
      out.relu_();
    else if (activation == "swish")
      at::silu_(out);
    else if (activation == "hardtanh")
      at::hardtanh_(out, *scalars.get(0), *scalars.get(1));
    return out;
  };
  if (residual)
    ++compilerStats().convResidualAdds;
  ConvolutionChoice &choice = packed.choice;
  if (!measured || choice.packed.value_or(false))
    return runPacked();
  if (choice.packed)
    return runATen();
  // Measuring: calls alternate between the two, the first of each untimed.
  int call = choice.calls++;
  bool timePacked = call % 2 == 0;
  auto start = std::chrono::steady_clock::now();
  at::Tensor out = timePacked ? runPacked() : runATen();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (call >= 2) {
    double &best = timePacked ? choice.bestPacked : choice.bestATen;
    best = std::min(best, seconds);
  }
  if (choice.calls >= 2 + ConvolutionChoice::kTimedCalls) {
    choice.packed = choice.bestPacked <= choice.bestATen;
    // The loser's weight is not needed again (until a repacking).
    (*choice.packed ? packed.plain : packed.packed) = at::Tensor();
    ++compilerStats().convolutionChoices;
  }
  return out;
}

} // namespace dynafuse

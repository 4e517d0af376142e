//===- TorchPrepackedWeights.cpp - Convolution weights kept for oneDNN ----===//
//
// Part of the torch bridge (TorchBridge.h). On every call ATen makes,
// oneDNN reorders a convolution's weight from its NCHW parameter into the
// blocked layout its kernels read; in a channels-last network that reorder
// costs more than the layout gains (LayoutChoice.cpp). An inference graph
// whose convolution weight is a parameter can keep the reordered weight
// between calls, as oneDNN-based inference engines do:
//
// - markPrepackedConvolutions marks such conv2d nodes weight_prepacked
//   before lowering (which then lays the network out channels-last);
// - at run time each compiled entry's PrepackedWeights holds, per marked
//   step, the weight reordered by mkldnn::_reorder_convolution_weight and
//   runs the step through mkldnn::_convolution_pointwise. The reordered
//   weight is reused while the parameter is the same tensor, at the same
//   address, with the same version counter (an in-place update,
//   load_state_dict or an optimizer step bumps it), and the input has the
//   same sizes; otherwise the weight is reordered again.
// - conv2d_bn steps (fuse-conv-epilogues, run by markPrepackedConvolutions
//   unless DYNAFUSE_FOLD_BATCH_NORM=0) fold their eval batch norm into the
//   weight and bias before the reorder and pass their activation to
//   _convolution_pointwise as a post-op; the folded copy is kept while the
//   weight, the bias and the four batch norm tensors are all unchanged.
//   A residual (conv2d_bn's last operand, not a parameter) is added by
//   _convolution_pointwise.binary's "add" post-op, before relu.
//
// Small convolutions stay with at::conv2d: _convolution_pointwise builds
// its primitive on each call (a ~45 us floor on this machine) where ATen
// runs a small 1x1 convolution in 8-20 us. Measured per convolution of
// mobilenet_v3_small and shufflenet_v2 at batch 1 (us, ATen channels-last
// vs prepacked): 16->72 1x1 at 32x32 (2.4 MFLOP) 36 vs 66, 24->24 1x1 at
// 16x16 16 vs 86; depthwise 3x3 and 5x5 70-110 vs 47-80 at every size;
// googlenet's 57 convolutions (all above 4 MFLOP) 19.4 ms vs 15.5 ms in
// sequence. So: depthwise convolutions, and dense ones of 4 MFLOP or more.
//
//===----------------------------------------------------------------------===//
#include "TorchATenOps.h"
#include "TorchBridge.h"

#include "dynafuse/Capture/FrameCompiler.h"
#include "dynafuse/Graph/ConvolutionEpilogues.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace dynafuse {

namespace {

/// ATen's oneDNN build, usable on this CPU.
bool oneDnnAvailable() {
  static const bool available = at::hasMKLDNN();
  return available;
}

/// Where a parameter the packed weight was computed from stood when it was
/// packed: the same tensor, at the same address, at the same version.
struct ParameterStamp {
  c10::weak_intrusive_ptr<c10::TensorImpl> tensor;
  const void *data = nullptr;
  uint32_t version = 0;

  explicit ParameterStamp(const at::Tensor &source)
      : tensor(source.getIntrusivePtr()), data(source.data_ptr()),
        version(source._version()) {}
  bool sameTensor(const at::Tensor &source) const {
    return tensor.lock().get() == source.unsafeGetTensorImpl();
  }
  bool current(const at::Tensor &source) const {
    return sameTensor(source) && data == source.data_ptr() &&
           version == source._version();
  }
};

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

/// One marked step's prepacked weight (and, for conv2d_bn, the bias with
/// the batch norm folded in) and the parameters it was computed from.
struct PackedWeight {
  std::vector<ParameterStamp> stamps;
  std::vector<int64_t> inputSizes;
  at::Tensor packed;
  std::optional<at::Tensor> bias;
};

/// A marked step's packed weights: one per model instance calling it (two
/// instances of one class share a compiled entry, and would otherwise
/// repack on every call that alternates between them), the most recently
/// used last.
struct StepWeights {
  /// Per parameter argument (1: the weight; then bias and batch norm
  /// tensors): the graph input it is, -1 when the graph computes it (never
  /// packed). Empty before the first call.
  std::vector<int> inputs;
  std::vector<PackedWeight> copies;
};

/// Packed weights kept per step (distinct weight tensors calling it).
constexpr size_t kCopiesPerStep = 4;

class PrepackedWeights {
public:
  /// The result of conv2d or conv2d_bn step `step` through oneDNN with its
  /// weight kept reordered, or nullopt when ATen should run it.
  std::optional<at::Tensor> run(const ProgramStep &step,
                                const std::vector<at::Tensor> &tensors,
                                const ForwardInputs &inputs);

private:
  /// The parameters (arguments 1...) as the caller's tensors, with their
  /// version counters; empty when one is not a graph input.
  std::vector<const at::Tensor *> sources(StepWeights &weights,
                                          const ProgramStep &step,
                                          const std::vector<at::Tensor> &tensors,
                                          const ForwardInputs &inputs);
  std::mutex mutex;
  std::unordered_map<const ProgramStep *, StepWeights> byStep;
};

std::shared_ptr<PrepackedWeights> newPrepackedWeights() {
  return std::make_shared<PrepackedWeights>();
}

std::optional<at::Tensor>
runWithPrepackedWeight(PrepackedWeights &weights, const ProgramStep &step,
                       const std::vector<at::Tensor> &tensors,
                       const ForwardInputs &inputs) {
  return weights.run(step, tensors, inputs);
}

void markPrepackedConvolutions(Graph &graph, bool foldBatchNorm) {
  if (!oneDnnAvailable())
    return;
  for (const auto &node : graph.nodes) {
    if (node->op != "conv2d" || node->operands.size() < 2 ||
        !node->operands[1].isValue() || node->operands[1].value->producer ||
        node->results.empty())
      continue;
    const TensorType &type = node->results[0]->type;
    if (type.device == "cpu" && type.dtype == DType::F32)
      node->attributes["weight_prepacked"] = true;
  }
  if (foldBatchNorm)
    fuseConvolutionEpilogues(graph);
}

std::vector<const at::Tensor *>
PrepackedWeights::sources(StepWeights &weights, const ProgramStep &step,
                          const std::vector<at::Tensor> &tensors,
                          const ForwardInputs &inputs) {
  // A residual is the last argument, and no parameter.
  size_t parameterEnd =
      step.args.size() - (attributeFlag(step.attributes, "residual") ? 1 : 0);
  if (weights.inputs.empty())
    for (size_t arg = 1; arg < parameterEnd; ++arg) {
      int found = -1;
      for (size_t i = 0; inputs.names && i < inputs.names->size(); ++i)
        if ((*inputs.names)[i].name == step.args[arg])
          found = int(i);
      weights.inputs.push_back(found);
    }
  std::vector<const at::Tensor *> result;
  for (size_t arg = 1; arg < parameterEnd; ++arg) {
    int input = weights.inputs[arg - 1];
    if (input < 0 || !inputs.objects ||
        size_t(input) >= inputs.objects->size())
      return {};
    PyObject *object = (*inputs.objects)[size_t(input)];
    if (!THPVariable_Check(object))
      return {};
    const at::Tensor &source = THPVariable_Unpack(object);
    const at::Tensor &given = tensors.at(arg);
    if (source.data_ptr() != given.data_ptr() ||
        !source.sizes().equals(given.sizes()) ||
        !source.strides().equals(given.strides()))
      return {};
    result.push_back(&source);
  }
  return result;
}

std::optional<at::Tensor>
PrepackedWeights::run(const ProgramStep &step,
                      const std::vector<at::Tensor> &tensors,
                      const ForwardInputs &inputs) {
  const at::Tensor &x = tensors.at(0), &w = tensors.at(1);
  bool folded = step.op == "conv2d_bn";
  bool residual = folded && attributeFlag(step.attributes, "residual");
  if (!oneDnnAvailable() || x.dim() != 4 || w.dim() != 4 ||
      x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat ||
      !x.is_cpu() || x.size(0) == 0)
    return std::nullopt;
  std::vector<int64_t> stride = perDim(step.attributes, "stride", 2, 1);
  std::vector<int64_t> padding = perDim(step.attributes, "padding", 2, 0);
  std::vector<int64_t> dilation = perDim(step.attributes, "dilation", 2, 1);
  int64_t groups = perDim(step.attributes, "groups", 1, 1).at(0);
  bool depthwise = groups > 1 && w.size(1) == 1;
  int64_t spatial[2] = {x.size(2), x.size(3)};
  int64_t kernel[2] = {w.size(2), w.size(3)};
  if (!depthwise &&
      convolutionFlops(w.numel(), x.size(0), spatial, kernel, stride.data(),
                       padding.data(), dilation.data()) < kPrepackMinFlops)
    return std::nullopt;

  std::lock_guard<std::mutex> lock(mutex);
  StepWeights &weights = byStep[&step];
  std::vector<const at::Tensor *> parameters =
      sources(weights, step, tensors, inputs);
  if (parameters.empty())
    return std::nullopt;
  // This weight tensor's copy (moved last), else a new one in place of the
  // least recently used.
  std::vector<PackedWeight> &copies = weights.copies;
  auto mine = std::find_if(copies.begin(), copies.end(),
                           [&](const PackedWeight &copy) {
                             return !copy.stamps.empty() &&
                                    copy.stamps[0].sameTensor(*parameters[0]);
                           });
  if (mine != copies.end()) {
    std::rotate(mine, mine + 1, copies.end());
  } else {
    if (copies.size() >= kCopiesPerStep)
      copies.erase(copies.begin());
    copies.emplace_back();
  }
  PackedWeight &packed = copies.back();
  bool current = packed.packed.defined() &&
                 packed.stamps.size() == parameters.size() &&
                 packed.inputSizes == x.sizes().vec();
  for (size_t i = 0; current && i < parameters.size(); ++i)
    current = packed.stamps[i].current(*parameters[i]);
  if (!current) {
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
    packed.stamps.clear();
    for (const at::Tensor *parameter : parameters)
      packed.stamps.emplace_back(*parameter);
    packed.inputSizes = x.sizes().vec();
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
  auto [activation, scalars] =
      folded ? postOpOf(step)
             : std::make_pair(std::string("none"),
                              c10::List<std::optional<at::Scalar>>());
  if (residual) {
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
    const at::Tensor &other = tensors.back();
    std::optional<c10::string_view> unary;
    if (activation != "none")
      unary = activation; // relu, the shape rule's only choice
    ++compilerStats().convResidualAdds;
    return convolutionAdd.call(input, other, packed.packed, packed.bias,
                               padding, stride, dilation, groups, "add",
                               std::nullopt, unary, scalars, std::nullopt);
  }
  return convolution.call(input, packed.packed, packed.bias, padding, stride,
                          dilation, groups, activation, scalars, std::nullopt);
}

} // namespace dynafuse

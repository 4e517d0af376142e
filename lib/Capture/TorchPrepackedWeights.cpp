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

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/python_variable.h>

#include <mutex>
#include <unordered_map>

namespace dynafuse {

namespace {

/// Dense convolutions below this many FLOPs run faster through at::conv2d.
constexpr double kPrepackMinFlops = 4e6;

/// ATen's oneDNN build, usable on this CPU.
bool oneDnnAvailable() {
  static const bool available = at::hasMKLDNN();
  return available;
}

} // namespace

/// One marked step's reordered weight and what it was reordered from.
struct PackedWeight {
  /// The graph input the weight is: its index, -1 when the weight is
  /// computed by the graph (never packed), unset before the first call.
  std::optional<int> input;
  std::optional<c10::weak_intrusive_ptr<c10::TensorImpl>> source;
  const void *data = nullptr;
  uint32_t version = 0;
  std::vector<int64_t> inputSizes;
  at::Tensor packed;
};

class PrepackedWeights {
public:
  /// The result of conv2d step `step` through oneDNN with its weight kept
  /// reordered, or nullopt when at::conv2d should run it.
  std::optional<at::Tensor> run(const ProgramStep &step,
                                const std::vector<at::Tensor> &tensors,
                                const ForwardInputs &inputs);

private:
  const at::Tensor *weightSource(PackedWeight &packed, const ProgramStep &step,
                                 const ForwardInputs &inputs);
  std::mutex mutex;
  std::unordered_map<const ProgramStep *, PackedWeight> byStep;
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

void markPrepackedConvolutions(Graph &graph) {
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
}

const at::Tensor *PrepackedWeights::weightSource(PackedWeight &packed,
                                                 const ProgramStep &step,
                                                 const ForwardInputs &inputs) {
  if (!packed.input) {
    packed.input = -1;
    for (size_t i = 0; inputs.names && i < inputs.names->size(); ++i)
      if ((*inputs.names)[i].name == step.args.at(1))
        packed.input = int(i);
  }
  if (*packed.input < 0 || !inputs.objects ||
      size_t(*packed.input) >= inputs.objects->size())
    return nullptr;
  PyObject *object = (*inputs.objects)[size_t(*packed.input)];
  return THPVariable_Check(object) ? &THPVariable_Unpack(object) : nullptr;
}

std::optional<at::Tensor>
PrepackedWeights::run(const ProgramStep &step,
                      const std::vector<at::Tensor> &tensors,
                      const ForwardInputs &inputs) {
  const at::Tensor &x = tensors.at(0), &w = tensors.at(1);
  if (!oneDnnAvailable() || x.dim() != 4 || w.dim() != 4 ||
      x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat ||
      !x.is_cpu() || x.size(0) == 0)
    return std::nullopt;
  std::vector<int64_t> stride = perDim(step.attributes, "stride", 2, 1);
  std::vector<int64_t> padding = perDim(step.attributes, "padding", 2, 0);
  std::vector<int64_t> dilation = perDim(step.attributes, "dilation", 2, 1);
  int64_t groups = perDim(step.attributes, "groups", 1, 1).at(0);
  bool depthwise = groups > 1 && w.size(1) == 1;
  // FLOPs: 2 x weight elements x output positions.
  double flops = 2.0 * double(w.numel()) * double(x.size(0));
  for (size_t d = 0; d < 2; ++d) {
    int64_t span = dilation[d] * (w.size(2 + d) - 1) + 1;
    int64_t positions =
        (x.size(2 + d) + 2 * padding[d] - span) / stride[d] + 1;
    flops *= double(std::max<int64_t>(positions, 0));
  }
  if (!depthwise && flops < kPrepackMinFlops)
    return std::nullopt;

  std::lock_guard<std::mutex> lock(mutex);
  PackedWeight &packed = byStep[&step];
  const at::Tensor *source = weightSource(packed, step, inputs);
  if (!source || source->data_ptr() != w.data_ptr() ||
      !source->sizes().equals(w.sizes()) ||
      !source->strides().equals(w.strides()))
    return std::nullopt;
  uint32_t version = source->_version();
  bool current = packed.packed.defined() &&
                 packed.source &&
                 packed.source->lock().get() == source->unsafeGetTensorImpl() &&
                 packed.data == w.data_ptr() && packed.version == version &&
                 packed.inputSizes == x.sizes().vec();
  if (!current) {
    static auto reorder =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("mkldnn::_reorder_convolution_weight", "")
            .typed<at::Tensor(const at::Tensor &, at::IntArrayRef,
                              at::IntArrayRef, at::IntArrayRef, int64_t,
                              at::OptionalIntArrayRef)>();
    packed.packed = reorder.call(w.contiguous(), padding, stride, dilation,
                                 groups, x.sizes());
    packed.source.emplace(source->getIntrusivePtr());
    packed.data = w.data_ptr();
    packed.version = version;
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
  std::optional<at::Tensor> bias;
  if (tensors.size() > 2)
    bias = tensors[2].contiguous();
  at::Tensor input = x;
  if (!x.is_contiguous() && !x.is_contiguous(at::MemoryFormat::ChannelsLast))
    input = x.contiguous(at::MemoryFormat::ChannelsLast);
  return convolution.call(input, packed.packed, bias, padding, stride,
                          dilation, groups, "none",
                          c10::List<std::optional<at::Scalar>>(),
                          std::nullopt);
}

} // namespace dynafuse

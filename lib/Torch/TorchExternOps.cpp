//===- TorchExternOps.cpp - Extern ops and torch calls run by ATen --------===//
//
// Part of the torch bridge (TorchBridge.h): the extern steps of a compiled
// graph (matmul, convolution, pooling) dispatched to ATen on views of the
// graph's buffers, and the results of call_torch steps taken over.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Torch/TorchBridge.h"

#include "TorchATenOps.h"
#include "TorchTypes.h"

#include "dynafuse/Runtime/CompilerStats.h"
#include "dynafuse/Graph/ConvolutionEpilogues.h"
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Runtime/CachingAllocator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/python_variable.h>

namespace dynafuse {
namespace {

using Attributes = std::map<std::string, Attribute>;
using Tensors = std::vector<at::Tensor>;

std::vector<int64_t> ints(const Attributes &attributes, const std::string &name,
                          std::vector<int64_t> fallback) {
  auto found = attributes.find(name);
  if (found == attributes.end())
    return fallback;
  if (auto *list = std::get_if<std::vector<int64_t>>(&found->second))
    return *list;
  if (auto *value = std::get_if<int64_t>(&found->second))
    return {*value};
  fail("extern attribute '" + name + "' must be integers");
}

int64_t integer(const Attributes &attributes, const std::string &name,
                int64_t fallback) {
  return ints(attributes, name, {fallback}).at(0);
}

bool flag(const Attributes &attributes, const std::string &name) {
  auto found = attributes.find(name);
  if (found == attributes.end())
    return false;
  if (auto *value = std::get_if<bool>(&found->second))
    return *value;
  fail("extern attribute '" + name + "' must be true or false");
}

double number(const Attributes &attributes, const std::string &name,
              double fallback) {
  auto found = attributes.find(name);
  if (found == attributes.end())
    return fallback;
  if (auto *value = std::get_if<double>(&found->second))
    return *value;
  if (auto *value = std::get_if<int64_t>(&found->second))
    return double(*value);
  fail("extern attribute '" + name + "' must be a number");
}

at::Tensor view(const TensorArg &arg, const std::string &device) {
  return at::from_blob(arg.data, arg.sizes, arg.strides,
                       at::TensorOptions()
                           .dtype(toScalarType(arg.dtype))
                           .device(at::Device(device)));
}

/// The gradients convolution_backward computes, those output_mask selects.
Tensors convolutionBackward(Op, const Attributes &a, const Tensors &t,
                            const std::vector<int64_t> &) {
  size_t spatial = size_t(t[1].dim()) - 2;
  std::vector<int64_t> mask = ints(a, "output_mask", {});
  if (mask.size() != 3)
    fail("conv_backward needs an output_mask of 3 values");
  std::array<bool, 3> wanted = {mask[0] != 0, mask[1] != 0, mask[2] != 0};
  std::vector<int64_t> biasSizes = {t[2].size(0)};
  auto [input, weight, bias] = at::convolution_backward(
      t[0], t[1], t[2], wanted[2] ? at::OptionalIntArrayRef(biasSizes)
                                  : at::OptionalIntArrayRef(),
      perDim(a, "stride", spatial, 1), perDim(a, "padding", spatial, 0),
      perDim(a, "dilation", spatial, 1), false,
      std::vector<int64_t>(spatial, 0), integer(a, "groups", 1), wanted);
  std::vector<at::Tensor> results;
  for (auto [selected, tensor] :
       {std::pair{wanted[0], input}, {wanted[1], weight}, {wanted[2], bias}})
    if (selected)
      results.push_back(tensor);
  return results;
}

std::optional<int64_t> divisorOverride(const Attributes &a) {
  if (a.count("divisor_override"))
    return integer(a, "divisor_override", 1);
  return std::nullopt;
}

bool countIncludePad(const Attributes &a) {
  return !a.count("count_include_pad") || flag(a, "count_include_pad");
}

/// The backward kernels of the pools; max pooling takes the indices its
/// forward saved, or recomputes them from the input.
at::Tensor poolBackward(Op op, const Attributes &a,
                        const std::vector<at::Tensor> &t) {
  if (op == Op::AdaptiveAvgPool2dBackward)
    return at::_adaptive_avg_pool2d_backward(t[0], t[1]);
  std::vector<int64_t> kernel = ints(a, "kernel_size", {1});
  std::vector<int64_t> stride = ints(a, "stride", {});
  if (stride.empty())
    stride = kernel;
  if (op == Op::AvgPool2dBackward)
    return at::avg_pool2d_backward(t[0], t[1], kernel, stride,
                                   ints(a, "padding", {0}),
                                   flag(a, "ceil_mode"), countIncludePad(a),
                                   divisorOverride(a));
  std::vector<int64_t> padding = ints(a, "padding", {0});
  std::vector<int64_t> dilation = ints(a, "dilation", {1});
  bool ceil = flag(a, "ceil_mode");
  at::Tensor indices =
      t.size() > 2 ? t[2]
                   : std::get<1>(at::max_pool2d_with_indices(
                         t[1], kernel, stride, padding, dilation, ceil));
  return at::max_pool2d_with_indices_backward(t[0], t[1], kernel, stride,
                                              padding, dilation, ceil, indices);
}

/// Attention by ATen's CPU flash kernel (sdpa_flash: output and
/// logsumexp) and its backward (sdpa_flash_backward: dq, dk, dv).
Tensors flashAttention(Op op, const Attributes &a, const Tensors &operands,
                       const std::vector<int64_t> &) {
  Tensors t = operands;
  bool causal = flag(a, "is_causal");
  std::optional<double> scale;
  if (a.count("scale"))
    scale = number(a, "scale", 1.0);
  bool backward = op == Op::SdpaFlashBackward;
  size_t maskAt = backward ? 6 : 3;
  std::optional<at::Tensor> mask;
  if (t.size() > maskAt)
    mask = t[maskAt];
  // The kernel reads rows of q, k and v (and the gradient) contiguously.
  for (size_t i = 0; i < std::min<size_t>(t.size(), 4); ++i)
    if (t[i].stride(-1) != 1)
      t[i] = t[i].contiguous();
  if (!backward) {
    auto [out, rows] = at::_scaled_dot_product_flash_attention_for_cpu(
        t[0], t[1], t[2], 0.0, causal, mask, scale);
    return {out, rows};
  }
  auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      t[0], t[1], t[2], t[3], t[4], t[5], 0.0, causal, mask, scale);
  return {dq, dk, dv};
}

/// The backward kernels of gathers: gradients added at their indices into
/// zeros of the input's sizes (`sizes`, this run's).
at::Tensor indexedBackward(Op op, const Attributes &a,
                           const std::vector<at::Tensor> &t,
                           const std::vector<int64_t> &sizes) {
  if (op == Op::EmbeddingBackward) {
    int64_t padding = integer(a, "padding_idx", -1);
    return at::embedding_dense_backward(t[0], t[1], sizes[0], padding, false);
  }
  at::Tensor zeros = at::zeros(sizes, t[0].options());
  int64_t dim = integer(a, "dim", 0);
  if (op == Op::GatherBackward)
    return zeros.scatter_add_(dim, t[1], t[0]);
  return zeros.index_add_(dim, t[1], t[0]);
}

/// conv2d_bn where oneDNN's prepacked path declines (its parameters are
/// not the caller's tensors): ATen's convolution, eval batch norm, residual
/// add and activation in turn, as the graph had them.
at::Tensor convolutionBatchNorm(const Attributes &a,
                                const std::vector<at::Tensor> &t) {
  bool residual = flag(a, "residual");
  size_t norm = t.size() - 4 - (residual ? 1 : 0);
  std::optional<at::Tensor> bias;
  if (norm == 3)
    bias = t[2];
  at::Tensor y = at::conv2d(t[0], t[1], bias, perDim(a, "stride", 2, 1),
                            perDim(a, "padding", 2, 0),
                            perDim(a, "dilation", 2, 1),
                            integer(a, "groups", 1));
  y = at::batch_norm(y, t[norm + 2], t[norm + 3], t[norm], t[norm + 1],
                     /*training=*/false, /*momentum=*/0.0,
                     number(a, "eps", 1e-5), /*cudnn_enabled=*/false);
  if (residual)
    y = y + t.back();
  std::string activation = attributeText(a, "activation", "none");
  if (activation == "none")
    return y;
  std::optional<Op> op = findOp(activation);
  if (op == Op::Relu)
    return at::relu(y);
  if (op == Op::Hardtanh)
    return at::hardtanh(y, number(a, "min_val", -1), number(a, "max_val", 1));
  if (op == Op::Silu)
    return at::silu(y);
  if (op == Op::Hardswish)
    return at::hardswish(y);
  if (op == Op::Sigmoid)
    return at::sigmoid(y);
  fail("conv2d_bn: unknown activation '" + activation + "'");
}

/// A small pointwise convolution (1x1 kernel, stride 1, no padding, one
/// group, under kPrepackMinFlops) of a channels-last input as the matrix
/// product it is: the input viewed [N*H*W, Cin] times the weight viewed
/// [Cin, Cout] is the channels-last output. ATen's convolution sets up
/// oneDNN for each call, 64-79 us at shufflenet_v2's batch-8 sizes (2.4
/// MFLOP) against 32 us for at::mm; larger ones stay convolutions (on this
/// AMD machine MKL's sgemm runs its generic path: 8x64->256 at 56x56, 5.1
/// ms against oneDNN's 1.9 ms). Null where it does not apply.
std::optional<at::Tensor>
pointwiseConvolutionAsProduct(const Attributes &a, const at::Tensor &x,
                              const at::Tensor &w,
                              const std::optional<at::Tensor> &bias) {
  if (!x.is_cpu() || x.dim() != 4 || w.dim() != 4 || x.numel() == 0 ||
      w.size(2) != 1 || w.size(3) != 1 || integer(a, "groups", 1) != 1 ||
      perDim(a, "stride", 2, 1) != std::vector<int64_t>{1, 1} ||
      perDim(a, "padding", 2, 0) != std::vector<int64_t>{0, 0} ||
      !x.is_contiguous(at::MemoryFormat::ChannelsLast) ||
      x.scalar_type() != at::kFloat || w.scalar_type() != at::kFloat ||
      (bias && !bias->is_contiguous()))
    return std::nullopt;
  int64_t spatial[2] = {x.size(2), x.size(3)}, kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  if (convolutionFlops(w.numel(), x.size(0), spatial, kernel, stride, padding,
                       dilation) >= kPrepackMinFlops)
    return std::nullopt;
  int64_t channels = x.size(1), outputs = w.size(0);
  at::Tensor rows = x.permute({0, 2, 3, 1}).reshape({-1, channels});
  at::Tensor matrix = w.reshape({outputs, channels}).t();
  at::Tensor product = bias ? at::addmm(*bias, rows, matrix)
                            : at::mm(rows, matrix);
  ++compilerStats().pointwiseConvProducts;
  return product.view({x.size(0), x.size(2), x.size(3), outputs})
      .permute({0, 3, 1, 2});
}

/// conv1d and conv2d (a small pointwise conv2d as the product it is).
at::Tensor convolution(Op op, const Attributes &a,
                       const std::vector<at::Tensor> &t) {
  size_t spatial = op == Op::Conv1d ? 1 : 2;
  std::optional<at::Tensor> bias;
  if (t.size() > 2)
    bias = t[2];
  if (spatial == 2)
    if (std::optional<at::Tensor> product =
            pointwiseConvolutionAsProduct(a, t[0], t[1], bias))
      return *product;
  if (spatial == 1)
    return at::conv1d(t[0], t[1], bias, perDim(a, "stride", spatial, 1),
                      perDim(a, "padding", spatial, 0),
                      perDim(a, "dilation", spatial, 1),
                      integer(a, "groups", 1));
  return at::conv2d(t[0], t[1], bias, perDim(a, "stride", spatial, 1),
                    perDim(a, "padding", spatial, 0),
                    perDim(a, "dilation", spatial, 1), integer(a, "groups", 1));
}

/// How one extern op runs through ATen: its results from the operands'
/// tensors, its attributes and the first result's sizes (this run's).
using AtenRule = Tensors (*)(Op, const Attributes &, const Tensors &,
                             const std::vector<int64_t> &);

Tensors maxPoolWithIndices(Op, const Attributes &a, const Tensors &t,
                                   const std::vector<int64_t> &) {
  auto [pooled, indices] = at::max_pool2d_with_indices(
      t[0], ints(a, "kernel_size", {1}), ints(a, "stride", {}),
      ints(a, "padding", {0}), ints(a, "dilation", {1}), flag(a, "ceil_mode"));
  return {pooled, indices};
}

/// The rules: from include/dynafuse/Ops/ExternOps.py.
const std::map<Op, AtenRule> &atenRules() {
  static const std::map<Op, AtenRule> rules = [] {
    std::map<Op, AtenRule> table;
#include "dynafuse/Ops/ExternAten.inc"
    return table;
  }();
  return rules;
}

} // namespace

double attributeNumber(const Attributes &attributes, const std::string &name,
                       double fallback) {
  return number(attributes, name, fallback);
}

bool attributeFlag(const Attributes &attributes, const std::string &name) {
  return flag(attributes, name);
}

std::vector<int64_t> attributeInts(const Attributes &attributes,
                                   const std::string &name,
                                   std::vector<int64_t> fallback) {
  return ints(attributes, name, std::move(fallback));
}

std::string attributeText(const Attributes &attributes,
                          const std::string &name,
                          const std::string &fallback) {
  auto found = attributes.find(name);
  if (found == attributes.end())
    return fallback;
  if (auto *value = std::get_if<std::string>(&found->second))
    return *value;
  fail("extern attribute '" + name + "' must be a string");
}

std::vector<int64_t> perDim(const std::map<std::string, Attribute> &a,
                            const char *name, size_t spatial,
                            int64_t fallback) {
  std::vector<int64_t> values = ints(a, name, {fallback});
  if (values.size() == 1)
    values.assign(spatial, values[0]);
  return values;
}

std::vector<at::Tensor>
externResultsWithATen(Op op, const Attributes &a,
                      const std::vector<at::Tensor> &t,
                      const std::vector<int64_t> &firstSizes) {
  auto found = atenRules().find(op);
  if (found == atenRules().end())
    fail("no ATen implementation for extern op '" + opName(op) + "'");
  return found->second(op, a, t, firstSizes);
}

/// Whether strides are the channels-last strides of NCHW sizes.
static bool isChannelsLastLayout(const std::vector<int64_t> &sizes,
                                 const std::vector<int64_t> &strides) {
  if (sizes.size() != 4 || strides.size() != 4)
    return false;
  int64_t c = sizes[1], h = sizes[2], w = sizes[3];
  return strides == std::vector<int64_t>{h * w * c, 1, w * c, c};
}

/// Whether max pooling x is faster through a channels-last copy: ATen's
/// NCHW CPU kernel is scalar, its NHWC one vectorized over channels. With
/// 16 channels or more, copying in and the result back still wins by 3-6x
/// (benchmarks/pooling.py).
static bool poolsFasterChannelsLast(const at::Tensor &x) {
  return x.is_cpu() && x.dim() == 4 && x.size(1) >= 16 &&
         !x.is_contiguous(at::MemoryFormat::ChannelsLast);
}

/// An extern's result laid out as expected declares (channels-last stays
/// channels-last; under guard pages a guarded block, so kernels reading past
/// its end fault) and in its dtype; returns it, with its data in expected.
static at::Tensor adoptExternResult(at::Tensor result, TensorArg &expected) {
  if (result.scalar_type() != toScalarType(expected.dtype))
    result = result.to(toScalarType(expected.dtype));
  bool guard = CachingAllocator::globalUsesGuardPages() && result.is_cpu();
  if (guard || !result.strides().equals(expected.strides)) {
    at::Tensor laidOut =
        guard ? at::Tensor(at::detail::empty_strided_generic(
                    expected.sizes, expected.strides, poolAllocator(),
                    c10::DispatchKeySet(c10::DispatchKey::CPU),
                    result.scalar_type()))
              : at::empty_strided(expected.sizes, expected.strides,
                                  result.options());
    laidOut.copy_(result);
    result = std::move(laidOut);
  }
  expected.data = static_cast<char *>(result.data_ptr());
  return result;
}

struct HeldTensors::Impl {
  std::map<std::string, at::Tensor> tensors;
};

struct HeldTensorsAccess {
  static std::map<std::string, at::Tensor> &of(HeldTensors &held) {
    return held.impl->tensors;
  }
};

HeldTensors::HeldTensors() : impl(std::make_unique<Impl>()) {}
HeldTensors::~HeldTensors() = default;

void HeldTensors::release(const std::string &name) {
  impl->tensors.erase(name);
}

PyObject *HeldTensors::wrap(const std::string &name) const {
  auto found = impl->tensors.find(name);
  return found == impl->tensors.end() ? nullptr
                                      : THPVariable_Wrap(found->second);
}

void runExternOp(Op op, const Attributes &attributes,
                 const std::vector<TensorArg> &args,
                 std::vector<TensorArg> &expected, const std::string &device,
                 HeldTensors &held, const std::vector<std::string> &names,
                 const ExternReuse &reuse) {
  at::NoGradGuard noGrad;
  std::vector<at::Tensor> tensors;
  for (const TensorArg &arg : args)
    tensors.push_back(view(arg, device));
  std::vector<at::Tensor> results;
  try {
    // A convolution the lowering laid out channels-last gets its input in
    // that layout (a copy for the network's first one), so oneDNN takes
    // its NHWC path and returns the layout declared.
    const OpInfo *info = lookupOp(op);
    if (info && info->startsChannelsLast &&
        isChannelsLastLayout(expected[0].sizes, expected[0].strides) &&
        !tensors[0].is_contiguous(at::MemoryFormat::ChannelsLast))
      tensors[0] = tensors[0].contiguous(at::MemoryFormat::ChannelsLast);
    if ((op == Op::MaxPool2d || op == Op::MaxPool2dWithIndices) &&
        poolsFasterChannelsLast(tensors[0]))
      tensors[0] = tensors[0].contiguous(at::MemoryFormat::ChannelsLast);
    // An inference entry's packed weights and GEMM library first.
    std::optional<at::Tensor> library;
    if (reuse.weights && flag(attributes, "weight_prepacked"))
      library = runWithPrepackedWeight(*reuse.weights, *reuse.step, tensors,
                                       reuse.inputs);
    else if (reuse.weights)
      library = runProductWithGemmLibrary(*reuse.weights, op, tensors);
    results = library ? std::vector<at::Tensor>{*library}
                      : externResultsWithATen(op, attributes, tensors,
                                              expected[0].sizes);
  } catch (const c10::Error &error) {
    fail("extern " + opName(op) + " failed: " + error.what_without_backtrace());
  }
  if (results.size() != expected.size())
    fail("extern " + opName(op) + " produced " +
         std::to_string(results.size()) + " results, its type declares " +
         std::to_string(expected.size()));
  for (size_t i = 0; i < results.size(); ++i)
    if (!results[i].sizes().equals(expected[i].sizes))
      fail("extern " + opName(op) +
           " produced sizes that differ from its declared type");
  // A result sharing an argument's memory (an op that returned a view of
  // its input) gets its own: the executor frees an argument's storage
  // after its last reader, which the result would outlive.
  for (at::Tensor &result : results)
    for (const at::Tensor &tensor : tensors)
      if (result.is_alias_of(tensor)) {
        result = result.clone();
        break;
      }
  if (names.size() != results.size())
    fail("extern " + opName(op) + ": " + std::to_string(names.size()) +
         " result names for " + std::to_string(results.size()) + " results");
  std::map<std::string, at::Tensor> &kept = HeldTensorsAccess::of(held);
  for (size_t i = 0; i < results.size(); ++i)
    kept[names[i]] = adoptExternResult(std::move(results[i]), expected[i]);
}

PyObject *wrapTensorView(const TensorArg &arg, const std::string &device) {
  return THPVariable_Wrap(view(arg, device));
}

PyObject *adoptTorchResult(PyObject *result,
                           const std::vector<PyObject *> &inputs,
                           const TensorArg &expected, char **data) {
  at::NoGradGuard noGrad;
  at::Tensor tensor = THPVariable_Unpack(result);
  for (PyObject *input : inputs)
    if (tensor.is_alias_of(THPVariable_Unpack(input)))
      tensor = tensor.clone();
  if (!tensor.sizes().equals(expected.sizes))
    fail("returned sizes that differ from the ones found at capture");
  if (!tensor.strides().equals(expected.strides)) {
    // The layout capture declared (meta kernels may differ from real ones).
    at::Tensor laidOut =
        at::empty_strided(expected.sizes, expected.strides, tensor.options());
    laidOut.copy_(tensor);
    tensor = std::move(laidOut);
  }
  if (tensor.scalar_type() != toScalarType(expected.dtype))
    fail("returned a dtype that differs from the one found at capture");
  *data = static_cast<char *>(tensor.data_ptr());
  return THPVariable_Wrap(std::move(tensor));
}

} // namespace dynafuse

//===- TorchExternOps.cpp - Extern ops and torch calls run by ATen --------===//
//
// Part of the torch bridge (TorchBridge.h): the extern steps of a compiled
// graph (matmul, convolution, pooling) dispatched to ATen on views of the
// graph's buffers, and the results of call_torch steps taken over.
//
//===----------------------------------------------------------------------===//
#include "TorchBridge.h"

#include "TorchTypes.h"

#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Runtime/CachingAllocator.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/python_variable.h>

namespace dynafuse {
namespace {

using Attributes = std::map<std::string, Attribute>;

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

at::Tensor callAten(const std::string &op, const Attributes &a,
                    const std::vector<at::Tensor> &t) {
  if (op == "mm")
    return at::mm(t[0], t[1]);
  if (op == "bmm")
    return at::bmm(t[0], t[1]);
  if (op == "matmul")
    return at::matmul(t[0], t[1]);
  if (op == "addmm")
    return at::addmm(t[0], t[1], t[2], number(a, "beta", 1),
                     number(a, "alpha", 1));
  if (op == "baddbmm")
    return at::baddbmm(t[0], t[1], t[2], number(a, "beta", 1),
                       number(a, "alpha", 1));
  if (op == "conv1d" || op == "conv2d") {
    size_t spatial = op == "conv1d" ? 1 : 2;
    auto perDim = [&](const char *name, int64_t fallback) {
      std::vector<int64_t> values = ints(a, name, {fallback});
      if (values.size() == 1)
        values.assign(spatial, values[0]);
      return values;
    };
    std::optional<at::Tensor> bias;
    if (t.size() > 2)
      bias = t[2];
    if (spatial == 1)
      return at::conv1d(t[0], t[1], bias, perDim("stride", 1),
                        perDim("padding", 0), perDim("dilation", 1),
                        integer(a, "groups", 1));
    return at::conv2d(t[0], t[1], bias, perDim("stride", 1),
                      perDim("padding", 0), perDim("dilation", 1),
                      integer(a, "groups", 1));
  }
  if (op == "max_pool2d")
    return at::max_pool2d(t[0], ints(a, "kernel_size", {1}),
                          ints(a, "stride", {}), ints(a, "padding", {0}),
                          ints(a, "dilation", {1}), flag(a, "ceil_mode"));
  if (op == "avg_pool2d") {
    std::optional<int64_t> divisor;
    if (a.count("divisor_override"))
      divisor = integer(a, "divisor_override", 1);
    bool includePad =
        !a.count("count_include_pad") || flag(a, "count_include_pad");
    return at::avg_pool2d(t[0], ints(a, "kernel_size", {1}),
                          ints(a, "stride", {}), ints(a, "padding", {0}),
                          flag(a, "ceil_mode"), includePad, divisor);
  }
  if (op == "adaptive_avg_pool2d")
    return at::adaptive_avg_pool2d(t[0], ints(a, "output_size", {1}));
  fail("no ATen implementation for extern op '" + op + "'");
}

} // namespace

/// Whether strides are the channels-last strides of NCHW sizes.
static bool isChannelsLastLayout(const std::vector<int64_t> &sizes,
                                 const std::vector<int64_t> &strides) {
  if (sizes.size() != 4 || strides.size() != 4)
    return false;
  int64_t c = sizes[1], h = sizes[2], w = sizes[3];
  return strides == std::vector<int64_t>{h * w * c, 1, w * c, c};
}

PyObject *runExternOp(const std::string &op, const Attributes &attributes,
                      const std::vector<TensorArg> &args,
                      const TensorArg &expected, const std::string &device,
                      char **data) {
  at::NoGradGuard noGrad;
  std::vector<at::Tensor> tensors;
  for (const TensorArg &arg : args)
    tensors.push_back(view(arg, device));
  at::Tensor result;
  try {
    // A convolution the lowering laid out channels-last gets its input in
    // that layout (a copy for the network's first one), so oneDNN takes
    // its NHWC path and returns the layout declared.
    const OpInfo *info = lookupOp(op);
    if (info && info->startsChannelsLast &&
        isChannelsLastLayout(expected.sizes, expected.strides) &&
        !tensors[0].is_contiguous(at::MemoryFormat::ChannelsLast))
      tensors[0] = tensors[0].contiguous(at::MemoryFormat::ChannelsLast);
    result = callAten(op, attributes, tensors);
  } catch (const c10::Error &error) {
    fail("extern " + op + " failed: " + error.what_without_backtrace());
  }
  if (!result.sizes().equals(expected.sizes))
    fail("extern " + op + " produced sizes that differ from its declared type");
  if (result.scalar_type() != toScalarType(expected.dtype))
    result = result.to(toScalarType(expected.dtype));
  bool guard = CachingAllocator::globalUsesGuardPages() && result.is_cpu();
  if (guard || !result.strides().equals(expected.strides)) {
    // The declared layout (channels-last stays channels-last), and under
    // guard pages a guarded block, so kernels reading past its end fault.
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
  *data = static_cast<char *>(result.data_ptr());
  return THPVariable_Wrap(std::move(result));
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

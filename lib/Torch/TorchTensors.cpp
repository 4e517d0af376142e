//===- TorchTensors.cpp - Tensor metadata and views through ATen ----------===//
//
// Part of the torch bridge (TorchBridge.h): what guards and arguments read
// of a tensor, views and copies of tensors, and torch's global state (grad
// mode, autocast, default dtype).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Torch/TorchBridge.h"

#include "dynafuse/Support/PyRef.h"
#include "TorchTypes.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

namespace dynafuse {
namespace {

PyTypeObject *parameterType() {
  static PyObject *slot = nullptr;
  return reinterpret_cast<PyTypeObject *>(
      lookupOnce(slot, "torch.nn.parameter", "Parameter"));
}

} // namespace

PyObject *tensorClass() { return THPVariableClass; }

bool isAnyTensor(PyObject *object) { return THPVariable_Check(object); }

bool isPlainTensor(PyObject *object) {
  PyTypeObject *type = Py_TYPE(object);
  return type == reinterpret_cast<PyTypeObject *>(THPVariableClass) ||
         type == parameterType();
}

TensorMeta describeTensor(PyObject *object) {
  const at::Tensor &tensor = THPVariable_Unpack(object);
  TensorMeta meta;
  meta.scalarType = static_cast<int>(tensor.scalar_type());
  meta.dtype = fromScalarType(tensor.scalar_type());
  meta.dtypeName = c10::toString(tensor.scalar_type());
  meta.device = tensor.device().str();
  meta.deviceType = static_cast<int>(tensor.device().type());
  meta.deviceIndex = tensor.device().index();
  meta.sizes = tensor.sizes().vec();
  meta.strides = tensor.strides().vec();
  meta.requiresGrad = tensor.requires_grad();
  meta.data = static_cast<char *>(tensor.unsafeGetTensorImpl()->has_storage()
                                      ? tensor.data_ptr()
                                      : nullptr);
  return meta;
}

bool tensorMatches(PyObject *object, const TensorMeta &expected) {
  if (!isPlainTensor(object))
    return false;
  const at::Tensor &tensor = THPVariable_Unpack(object);
  c10::Device device = tensor.device();
  return static_cast<int>(tensor.scalar_type()) == expected.scalarType &&
         tensor.sizes().equals(expected.sizes) &&
         tensor.strides().equals(expected.strides) &&
         tensor.requires_grad() == expected.requiresGrad &&
         static_cast<int>(device.type()) == expected.deviceType &&
         device.index() == expected.deviceIndex;
}

bool tensorKindMatches(PyObject *object, const TensorMeta &expected,
                       std::vector<int64_t> &sizes,
                       std::vector<int64_t> &strides) {
  if (!isPlainTensor(object))
    return false;
  const at::Tensor &tensor = THPVariable_Unpack(object);
  c10::Device device = tensor.device();
  if (static_cast<int>(tensor.scalar_type()) != expected.scalarType ||
      tensor.requires_grad() != expected.requiresGrad ||
      static_cast<int>(device.type()) != expected.deviceType ||
      device.index() != expected.deviceIndex)
    return false;
  sizes.assign(tensor.sizes().begin(), tensor.sizes().end());
  strides.assign(tensor.strides().begin(), tensor.strides().end());
  return true;
}

void tensorView(PyObject *object, char **data, std::vector<int64_t> &sizes,
                std::vector<int64_t> &strides) {
  const at::Tensor &tensor = THPVariable_Unpack(object);
  *data = static_cast<char *>(tensor.unsafeGetTensorImpl()->has_storage()
                                  ? tensor.data_ptr()
                                  : nullptr);
  sizes.assign(tensor.sizes().begin(), tensor.sizes().end());
  strides.assign(tensor.strides().begin(), tensor.strides().end());
}

bool gradModeEnabled() { return at::GradMode::is_enabled(); }

AutocastState autocastState() {
  AutocastState state;
  state.cpu = at::autocast::is_autocast_enabled(at::kCPU);
  state.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
  state.cpuType = fromScalarType(at::autocast::get_autocast_dtype(at::kCPU))
                      .value_or(DType::F32);
  state.cudaType = fromScalarType(at::autocast::get_autocast_dtype(at::kCUDA))
                       .value_or(DType::F32);
  return state;
}

std::set<DType> slowHalfProductTypes() {
  static const std::set<DType> slow = [] {
    auto supported = [](const char *name) {
      auto op = c10::Dispatcher::singleton().findSchema({name, ""});
      return op && op->typed<bool()>().call();
    };
    std::set<DType> types;
    if (!supported("mkldnn::_is_mkldnn_bf16_supported"))
      types.insert(DType::BF16);
    if (!supported("mkldnn::_is_mkldnn_fp16_supported"))
      types.insert(DType::F16);
    return types;
  }();
  return slow;
}

AutocastSuspended::AutocastSuspended(const AutocastState &state)
    : suspended(state) {
  if (suspended.cpu)
    at::autocast::set_autocast_enabled(at::kCPU, false);
  if (suspended.cuda)
    at::autocast::set_autocast_enabled(at::kCUDA, false);
}

namespace {
void setAutocast(const AutocastState &state) {
  at::autocast::set_autocast_enabled(at::kCPU, state.cpu);
  at::autocast::set_autocast_dtype(at::kCPU, toScalarType(state.cpuType));
  at::autocast::set_autocast_enabled(at::kCUDA, state.cuda);
  at::autocast::set_autocast_dtype(at::kCUDA, toScalarType(state.cudaType));
}
} // namespace

AutocastApplied::AutocastApplied(const AutocastState &wanted)
    : before(autocastState()) {
  setAutocast(wanted);
}

AutocastApplied::~AutocastApplied() { setAutocast(before); }

AutocastSuspended::~AutocastSuspended() {
  if (suspended.cpu)
    at::autocast::set_autocast_enabled(at::kCPU, true);
  if (suspended.cuda)
    at::autocast::set_autocast_enabled(at::kCUDA, true);
}

bool torchModesActive() {
  return at::impl::PythonTorchFunctionTLS::stack_len() > 0 ||
         c10::impl::TorchDispatchModeTLS::stack_len() > 0;
}

bool defaultDtypeIsFloat32() {
  return at::get_default_dtype() == caffe2::TypeMeta::Make<float>();
}

std::optional<DType> dtypeFromObject(PyObject *object) {
  if (!THPDtype_Check(object))
    return std::nullopt;
  return fromScalarType(reinterpret_cast<THPDtype *>(object)->scalar_type);
}

namespace {
/// An uninitialized tensor of type's (static) sizes and strides on device.
at::Tensor emptyOfType(const TensorType &type, at::Device device) {
  std::vector<int64_t> sizes, strides;
  for (const SymExpr &size : type.sizes)
    sizes.push_back(size.constant());
  for (const SymExpr &stride : type.strides)
    strides.push_back(stride.constant());
  auto options =
      at::TensorOptions().dtype(toScalarType(type.dtype)).device(device);
  return strides.empty() ? at::empty(sizes, options)
                         : at::empty_strided(sizes, strides, options);
}
} // namespace

PyObject *newMetaTensor(const TensorType &type) {
  return THPVariable_Wrap(emptyOfType(type, at::kMeta));
}

PyObject *newZeroTensor(const TensorType &type) {
  return THPVariable_Wrap(emptyOfType(type, at::kCPU).zero_());
}

PyObject *viewOfTensor(PyObject *base, const std::vector<int64_t> &sizes,
                       const std::vector<int64_t> &strides, int64_t offset) {
  const at::Tensor &tensor = THPVariable_Unpack(base);
  return THPVariable_Wrap(
      tensor.as_strided(sizes, strides, tensor.storage_offset() + offset));
}

bool tensorsShareStorage(PyObject *a, PyObject *b) {
  if (!THPVariable_Check(a) || !THPVariable_Check(b))
    return false;
  return THPVariable_Unpack(a).is_alias_of(THPVariable_Unpack(b));
}

void copyIntoTensor(PyObject *dst, PyObject *src) {
  at::NoGradGuard noGrad;
  THPVariable_Unpack(dst).copy_(THPVariable_Unpack(src));
}

std::vector<int64_t> permutedDenseStrides(PyObject *object) {
  const at::Tensor &tensor = THPVariable_Unpack(object);
  if (tensor.dim() == 0 || tensor.numel() <= 1 || tensor.is_contiguous() ||
      !tensor.is_non_overlapping_and_dense())
    return {};
  return tensor.strides().vec();
}

bool tensorIsView(PyObject *object) {
  return THPVariable_Unpack(object).is_view();
}

bool isCudaTensor(PyObject *object) {
  return THPVariable_Check(object) && THPVariable_Unpack(object).is_cuda();
}

std::string deviceSpelling(PyObject *deviceOrString) {
  if (!PyUnicode_CheckExact(deviceOrString) &&
      std::string(Py_TYPE(deviceOrString)->tp_name) != "torch.device")
    return "";
  PyRef text = PyRef::steal(PyObject_Str(deviceOrString));
  const char *utf8 = text ? PyUnicode_AsUTF8(text.get()) : nullptr;
  if (!utf8) {
    PyErr_Clear();
    return "";
  }
  std::string device = utf8;
  return device == "cuda" ? std::string("cuda:0") : device;
}

} // namespace dynafuse

namespace dynafuse {

PyObject *newRandomSeed(const std::string &device) {
  try {
    at::NoGradGuard noGrad;
    at::Tensor seed =
        at::randint(int64_t(1) << 62, {},
                    at::TensorOptions().dtype(at::kLong).device(device));
    return THPVariable_Wrap(std::move(seed));
  } catch (const std::exception &error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
}

} // namespace dynafuse

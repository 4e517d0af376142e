//===- TorchBridge.cpp - What capture needs from PyTorch ------------------===//
#include "TorchBridge.h"

#include <ATen/ATen.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

namespace dynafuse {
namespace {

std::optional<DType> fromScalarType(at::ScalarType type) {
  switch (type) {
  case at::kBool:
    return DType::Bool;
  case at::kInt:
    return DType::I32;
  case at::kLong:
    return DType::I64;
  case at::kHalf:
    return DType::F16;
  case at::kBFloat16:
    return DType::BF16;
  case at::kFloat:
    return DType::F32;
  case at::kDouble:
    return DType::F64;
  default:
    return std::nullopt;
  }
}

at::ScalarType toScalarType(DType type) {
  switch (type) {
  case DType::Bool:
    return at::kBool;
  case DType::I32:
    return at::kInt;
  case DType::I64:
    return at::kLong;
  case DType::F16:
    return at::kHalf;
  case DType::BF16:
    return at::kBFloat16;
  case DType::F32:
    return at::kFloat;
  case DType::F64:
    return at::kDouble;
  }
  return at::kFloat;
}

PyTypeObject *parameterType() {
  static PyTypeObject *type = [] {
    PyObject *module = PyImport_ImportModule("torch.nn.parameter");
    PyObject *cls =
        module ? PyObject_GetAttrString(module, "Parameter") : nullptr;
    Py_XDECREF(module);
    if (!cls)
      PyErr_Clear();
    return reinterpret_cast<PyTypeObject *>(cls);
  }();
  return type;
}

} // namespace

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
  return static_cast<int>(tensor.scalar_type()) == expected.scalarType &&
         tensor.sizes().equals(expected.sizes) &&
         tensor.strides().equals(expected.strides) &&
         tensor.requires_grad() == expected.requiresGrad &&
         tensor.device().str() == expected.device;
}

PyObject *newTensor(const std::vector<int64_t> &sizes, DType dtype,
                    const std::string &device, char **data) {
  at::Tensor tensor = at::empty(sizes, at::TensorOptions()
                                           .dtype(toScalarType(dtype))
                                           .device(at::Device(device)));
  *data = static_cast<char *>(tensor.data_ptr());
  return THPVariable_Wrap(std::move(tensor));
}

bool gradModeEnabled() { return at::GradMode::is_enabled(); }

bool defaultDtypeIsFloat32() {
  return at::get_default_dtype() == caffe2::TypeMeta::Make<float>();
}

std::optional<DType> dtypeFromObject(PyObject *object) {
  if (!THPDtype_Check(object))
    return std::nullopt;
  return fromScalarType(reinterpret_cast<THPDtype *>(object)->scalar_type);
}

} // namespace dynafuse

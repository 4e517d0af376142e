//===- ObjectKinds.cpp - What capture tells of an object at a glance ------===//
#include "ObjectKinds.h"

#include "dynafuse/Torch/TorchBridge.h"

namespace dynafuse {
namespace capture {

bool isModule(PyObject *object) {
  PyObject *cls = moduleClass();
  return cls && !PyType_Check(object) &&
         PyObject_TypeCheck(object, reinterpret_cast<PyTypeObject *>(cls));
}

bool isInstanceOf(PyObject *object, const char *name) {
  PyRef nn = PyRef::steal(PyImport_ImportModule("torch.nn"));
  PyRef cls =
      PyRef::steal(nn ? PyObject_GetAttrString(nn.get(), name) : nullptr);
  int result = cls ? PyObject_IsInstance(object, cls.get()) : 0;
  if (result < 0 || !cls)
    PyErr_Clear();
  return result == 1;
}

bool isTorchClassInstance(PyObject *object) {
  PyRef module = PyRef::steal(PyObject_GetAttrString(
      reinterpret_cast<PyObject *>(Py_TYPE(object)), "__module__"));
  if (!module || !PyUnicode_Check(module.get())) {
    PyErr_Clear();
    return false;
  }
  return std::string(PyUnicode_AsUTF8(module.get())).rfind("torch", 0) == 0;
}

PyObject *moduleClass() {
  static PyObject *slot = nullptr;
  return lookupOnce(slot, "torch.nn", "Module");
}

/// Whether callable is what nn.Module's class dict holds under `name` now.
static bool isModuleClassEntry(PyObject *callable, const char *name) {
  PyObject *cls = moduleClass();
  if (!cls || !PyType_Check(cls))
    return false;
  PyObject *entry = PyDict_GetItemString(
      reinterpret_cast<PyTypeObject *>(cls)->tp_dict, name);
  return entry && entry == callable;
}

bool isModuleInit(PyObject *callable) {
  return isModuleClassEntry(callable, "__init__");
}

bool isModuleCall(PyObject *callable) {
  return isModuleClassEntry(callable, "__call__");
}

PyObject *orderedDictType() {
  static PyObject *slot = nullptr;
  return lookupOnce(slot, "collections", "OrderedDict");
}

bool isTorchAssert(PyObject *object) {
  static PyObject *slot = nullptr;
  return object == lookupOnce(slot, "torch", "_assert");
}

bool onlyLogsUsage(PyObject *callable) {
  // torchvision's and torch's API-usage logging: no effect on what a model
  // computes (TorchDynamo skips them too).
  PyRef module = PyRef::steal(PyObject_GetAttrString(callable, "__module__"));
  PyRef name = PyRef::steal(PyObject_GetAttrString(callable, "__qualname__"));
  PyErr_Clear();
  if (!module || !name || !PyUnicode_Check(module.get()) ||
      !PyUnicode_Check(name.get()))
    return false;
  std::string qualified = std::string(PyUnicode_AsUTF8(module.get())) + "." +
                          PyUnicode_AsUTF8(name.get());
  return qualified == "torchvision.utils._log_api_usage_once" ||
         qualified == "torch._C._log_api_usage_once";
}

/// math.sqrt, math.log, ...: pure functions of numbers.
bool isMathFunction(PyObject *callable) {
  static PyObject *slot = nullptr;
  PyObject *math = lookupOnce(slot, "math", nullptr);
  if (!math || !PyCFunction_Check(callable))
    return false;
  PyObject *self = PyCFunction_GET_SELF(callable);
  return self == math;
}

PyObject *osEnviron() {
  static PyObject *slot = nullptr;
  return lookupOnce(slot, "os", "environ");
}

bool isEnvironment(PyObject *object) {
  PyObject *environ = osEnviron();
  return environ && object == environ;
}

PyObject *tensorMethodObject(const std::string &name, bool base) {
  PyObject *owner =
      base ? reinterpret_cast<PyObject *>(
                 reinterpret_cast<PyTypeObject *>(tensorClass())->tp_base)
           : tensorClass();
  PyObject *object = PyObject_GetAttrString(owner, name.c_str());
  if (!object)
    PyErr_Clear();
  return object;
}

bool isMetadataMethod(const std::string &name) {
  return name == "size" || name == "dim" || name == "numel" ||
         name == "ndimension" || name == "nelement" ||
         name == "is_floating_point" || name == "is_complex" ||
         name == "is_signed";
}

PyRef dtypeObject(DType dtype) {
  static const char *names[] = {"bool",     "int32",   "int64",  "float16",
                                "bfloat16", "float32", "float64"};
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  return PyRef::steal(torch ? PyObject_GetAttrString(
                                  torch.get(), names[static_cast<int>(dtype)])
                            : nullptr);
}

PyRef deviceObject(const std::string &device) {
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  return PyRef::steal(
      torch ? PyObject_CallMethod(torch.get(), "device", "s", device.c_str())
            : nullptr);
}

bool isSizeLike(const VarPtr &var) {
  return var->kind == Var::Kind::SymInt ||
         (var->kind == Var::Kind::Constant &&
          PyLong_CheckExact(var->object.get()));
}

PyRef constantValueOf(const VarPtr &var) {
  if (var->kind == Var::Kind::Constant)
    return var->object;
  if (var->kind != Var::Kind::Tuple || !var->keys.empty())
    return PyRef();
  PyRef items = PyRef::steal(PyList_New(0));
  for (const VarPtr &item : var->items) {
    PyRef value = constantValueOf(item);
    if (!value)
      return PyRef();
    PyList_Append(items.get(), value.get());
  }
  if (var->isSet)
    return PyRef::steal(PySet_New(items.get()));
  return var->isList ? items : PyRef::steal(PyList_AsTuple(items.get()));
}

bool constantCallArguments(const std::vector<VarPtr> &args,
                           const Keywords &keywords, PyRef &positional,
                           PyRef &named) {
  positional = PyRef::steal(PyTuple_New(Py_ssize_t(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    PyRef value = constantValueOf(args[i]);
    if (!value)
      return false;
    PyTuple_SET_ITEM(positional.get(), Py_ssize_t(i), value.release());
  }
  named = PyRef::steal(PyDict_New());
  for (const auto &[key, value] : keywords) {
    PyRef object = constantValueOf(value);
    if (!object)
      return false;
    PyDict_SetItemString(named.get(), key.c_str(), object.get());
  }
  return true;
}

bool comparableAtCapture(const VarPtr &var) {
  if (var->kind == Var::Kind::Constant)
    return true;
  if (var->kind != Var::Kind::Object)
    return false;
  PyObject *object = var->object.get();
  if (!object || !var->method.empty() || isModule(object))
    return false;
  if (isTorchValueObject(object))
    return true;
  // Objects pinned by an identity guard (read from a source) or made from
  // constants, whose equality is C code that reads nothing mutable: classes
  // and functions (identity), enum members (their value).
  static PyObject *enumSlot = nullptr;
  PyObject *enumType = lookupOnce(enumSlot, "enum", "Enum");
  if (PyType_Check(object) || PyFunction_Check(object) ||
      PyCFunction_Check(object))
    return true;
  if (!enumType || PyObject_IsInstance(object, enumType) != 1) {
    PyErr_Clear();
    return false;
  }
  PyRef eq = PyRef::steal(PyUnicode_InternFromString("__eq__"));
  PyObject *equality = _PyType_Lookup(Py_TYPE(object), eq.get());
  return equality && !PyFunction_Check(equality);
}

bool madeDuringCapture(const VarPtr &var) {
  return var->kind == Var::Kind::NewObject ||
         ((var->kind == Var::Kind::Dict ||
           (var->kind == Var::Kind::Tuple && (var->isList || var->isSet))) &&
          var->source < 0);
}

} // namespace capture
} // namespace dynafuse

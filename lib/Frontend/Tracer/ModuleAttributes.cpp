//===- ModuleAttributes.cpp - nn.Module attributes read in C --------------===//
#include "ModuleAttributes.h"

namespace dynafuse {
namespace {

/// nn.Module.__getattr__ and object.__getattribute__ as class dicts hold
/// them (borrowed from torch's class, which lives as long as the process);
/// null before torch is imported or when it has no such function.
struct ModuleLookup {
  PyObject *moduleGetattr = nullptr;
  PyObject *objectGetattribute = nullptr;
  PyObject *names[3] = {nullptr, nullptr, nullptr};
};

const ModuleLookup *moduleLookup() {
  static ModuleLookup lookup;
  static bool tried = false;
  if (tried)
    return lookup.moduleGetattr ? &lookup : nullptr;
  PyObject *modules = PyImport_GetModuleDict();
  PyObject *torchModule =
      PyDict_GetItemString(modules, "torch.nn.modules.module");
  if (!torchModule)
    return nullptr; // torch not imported yet: try again later
  tried = true;
  PyRef cls = PyRef::steal(PyObject_GetAttrString(torchModule, "Module"));
  if (!cls || !PyType_Check(cls.get())) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject *getattrName = PyUnicode_InternFromString("__getattr__");
  PyObject *getattributeName = PyUnicode_InternFromString("__getattribute__");
  lookup.moduleGetattr = _PyType_Lookup(
      reinterpret_cast<PyTypeObject *>(cls.get()), getattrName);
  lookup.objectGetattribute =
      _PyType_Lookup(&PyBaseObject_Type, getattributeName);
  Py_XINCREF(lookup.moduleGetattr);
  Py_XINCREF(lookup.objectGetattribute);
  lookup.names[0] = PyUnicode_InternFromString("_parameters");
  lookup.names[1] = PyUnicode_InternFromString("_buffers");
  lookup.names[2] = PyUnicode_InternFromString("_modules");
  return lookup.moduleGetattr ? &lookup : nullptr;
}

/// Whether objects of `type` are looked up as nn.Module does it.
bool hasModuleLookup(PyTypeObject *type, const ModuleLookup &lookup) {
  static PyObject *getattrName = PyUnicode_InternFromString("__getattr__");
  static PyObject *getattributeName =
      PyUnicode_InternFromString("__getattribute__");
  return _PyType_Lookup(type, getattrName) == lookup.moduleGetattr &&
         _PyType_Lookup(type, getattributeName) == lookup.objectGetattribute;
}

} // namespace

PyRef getAttribute(PyObject *object, PyObject *name) {
  const ModuleLookup *lookup = moduleLookup();
  PyTypeObject *type = Py_TYPE(object);
  if (!lookup || !PyUnicode_CheckExact(name) ||
      !hasModuleLookup(type, *lookup) || _PyType_Lookup(type, name))
    return PyRef::steal(PyObject_GetAttr(object, name));
  PyRef dict = PyRef::steal(PyObject_GenericGetDict(object, nullptr));
  if (!dict || !PyDict_Check(dict.get())) {
    PyErr_Clear();
    return PyRef::steal(PyObject_GetAttr(object, name));
  }
  if (PyObject *value = PyDict_GetItemWithError(dict.get(), name))
    return PyRef::borrow(value);
  if (PyErr_Occurred())
    return PyRef();
  for (PyObject *place : lookup->names) {
    PyObject *entries = PyDict_GetItemWithError(dict.get(), place);
    if (!entries && PyErr_Occurred())
      return PyRef();
    if (!entries || !PyDict_Check(entries))
      continue;
    if (PyObject *value = PyDict_GetItemWithError(entries, name))
      return PyRef::borrow(value);
    if (PyErr_Occurred())
      return PyRef();
  }
  // Not there: the full lookup raises the AttributeError torch raises.
  return PyRef::steal(PyObject_GetAttr(object, name));
}

} // namespace dynafuse

//===- TracerSuper.cpp - super(), in its zero- and two-argument forms -----===//
//
// super() inside a method of a Python object (an nn.Module's forward calling
// its base class's): a proxy var whose attributes are the Python methods
// found past the class in type(self)'s MRO, bound to self and guarded as
// SuperAttr sources (Guards.h). 3.11 calls super() and reads the attribute;
// 3.12 and 3.13 do both in LOAD_SUPER_ATTR. (super() inside torch.Tensor's
// own methods is superOfTensor, TracerTorchCalls.cpp.)
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

namespace dynafuse {
namespace capture {

void BytecodeTracer::loadSuperAttr(int arg) {
  VarPtr self = pop();
  VarPtr cls = pop();
  VarPtr superType = pop();
  // Bit 1: super(cls, self) spelled out; clear for super() (the
  // interpreter passes no arguments and super reads the frame).
  std::vector<VarPtr> args;
  if (arg & 2)
    args = {cls, self};
  VarPtr base = callAny(superType, args, {});
  VarPtr attr =
      loadAttr(base, PyTuple_GET_ITEM(current.code->co_names, arg >> 2));
  if (arg & 1)
    pushCallable(attr);
  else
    push(attr);
}

VarPtr BytecodeTracer::superOfObject(const std::vector<VarPtr> &args) {
  VarPtr cls, self;
  if (args.size() == 2) {
    cls = args[0];
    self = args[1];
  } else if (args.empty() && current.code->co_argcount > 0) {
    // super() reads the method's __class__ cell and its first argument.
    PyRef freeNames = PyRef::steal(PyCode_GetFreevars(current.code));
    int firstFree = current.code->co_nlocalsplus - current.code->co_nfreevars;
    for (Py_ssize_t i = 0; freeNames && i < PyTuple_GET_SIZE(freeNames.get());
         ++i)
      if (PyUnicode_CompareWithASCIIString(
              PyTuple_GET_ITEM(freeNames.get(), i), "__class__") == 0)
        cls = loadDeref(firstFree + int(i));
    PyErr_Clear();
    self = current.locals[0] ? current.locals[0] : loadLocal(0);
    if (self->kind == Var::Kind::Cell)
      self = self->items.empty() ? nullptr : self->items[0];
  }
  if (cls && self && self->kind == Var::Kind::NewObject &&
      cls->kind == Var::Kind::Object && cls->object &&
      PyType_Check(cls->object.get()) &&
      PyObject_IsSubclass(self->function->object.get(), cls->object.get()) ==
          1) {
    VarPtr proxy = makeVar(Var::Kind::Object);
    proxy->method = "super";
    proxy->object = cls->object;
    proxy->function = cls;
    proxy->self = self;
    return proxy;
  }
  PyErr_Clear();
  if (!cls || !self || cls->kind != Var::Kind::Object ||
      self->kind != Var::Kind::Object || !cls->object ||
      !PyType_Check(cls->object.get()) || !self->object ||
      PyObject_IsInstance(self->object.get(), cls->object.get()) != 1) {
    PyErr_Clear();
    return nullptr;
  }
  VarPtr proxy = makeVar(Var::Kind::Object);
  proxy->method = "super";
  proxy->object = PyRef::steal(PyObject_CallFunctionObjArgs(
      reinterpret_cast<PyObject *>(&PySuper_Type), cls->object.get(),
      self->object.get(), nullptr));
  if (!proxy->object) {
    PyErr_Clear();
    return nullptr;
  }
  proxy->function = cls;
  proxy->self = self;
  return proxy;
}

VarPtr BytecodeTracer::superAttr(const VarPtr &proxy, PyObject *name) {
  PyObject *cls = proxy->function->object.get();
  if (proxy->self->kind == Var::Kind::NewObject) {
    const VarPtr &self = proxy->self;
    PyObject *entry = lookupInClass(self->function->object.get(), cls, name);
    if (entry && PyFunction_Check(entry)) {
      VarPtr method = makeVar(Var::Kind::BoundMethod);
      method->self = self;
      method->function = objects.classEntry(self->function, name, cls);
      return method;
    }
    if (entry && (Py_TYPE(entry) == &PyMethodDescr_Type ||
                  Py_TYPE(entry) == &PyWrapperDescr_Type))
      return objects.slotMethod(self, PyUnicode_AsUTF8(name));
    unsupported(std::string("super().") + PyUnicode_AsUTF8(name) +
                " of an object made during capture");
  }
  PyObject *found = lookupPastClass(proxy->self->object.get(), cls, name);
  PyObject *selfObject = proxy->self->object.get();
  std::string wanted = PyUnicode_AsUTF8(name);
  PyTypeObject *base = Py_TYPE(selfObject)->tp_base;
  bool dictBase = base == &PyDict_Type ||
                  reinterpret_cast<PyObject *>(base) == orderedDictType();
  if (found &&
      (Py_TYPE(found) == &PyMethodDescr_Type ||
       Py_TYPE(found) == &PyWrapperDescr_Type) &&
      PyDict_Check(selfObject) && dictBase && wanted == "__getitem__") {
    // dict's own item read on a dict subclass read from a source
    // (transformers' ACT2CLS registry): the one entry asked for, guarded;
    // a missing key breaks (eager raises KeyError).
    VarPtr getItem = makeVar(Var::Kind::Object);
    getItem->method = "dict.__getitem__ of a source";
    getItem->self = proxy->self;
    return getItem;
  }
  if (found && Py_TYPE(found) == &PyMethodDescr_Type &&
      PyDict_Check(selfObject) && dictBase &&
      (wanted == "get" || wanted == "keys" || wanted == "values" ||
       wanted == "items")) {
    // dict's own read methods on a dict subclass read from a source (a
    // registry): its items, each guarded with the dict's length.
    int source = sourceOfObject(proxy->self);
    VarPtr snapshot = PyDict_Size(selfObject) <= 64
                          ? dictOfSource(selfObject, source)
                          : nullptr;
    if (!snapshot && wanted == "get") {
      // A large registry: dict.get reads the one entry asked for, guarded
      // (ObjectValues::call).
      VarPtr get = makeVar(Var::Kind::Object);
      get->method = "dict.get of a source";
      get->self = proxy->self;
      return get;
    }
    if (!snapshot)
      unsupported("super()." + wanted + " of a large dict or one with keys "
                  "that are not strings");
    snapshot->source = source;
    return loadAttr(snapshot, name);
  }
  if (!found || !PyFunction_Check(found))
    unsupported(std::string("super().") + PyUnicode_AsUTF8(name) +
                " that is not a method defined in Python");
  Source source;
  source.kind = Source::Kind::SuperAttr;
  source.parent = sourceOfObject(proxy->self);
  source.fixed = PyRef::borrow(cls);
  source.name = PyRef::borrow(name);
  VarPtr method = makeVar(Var::Kind::BoundMethod);
  method->self = proxy->self;
  method->function = classify(found, guardBuilder.addSource(std::move(source)));
  return method;
}

} // namespace capture
} // namespace dynafuse

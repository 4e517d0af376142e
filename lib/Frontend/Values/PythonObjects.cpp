//===- PythonObjects.cpp - Instances of Python classes on the trace -------===//
//
// `Output(last_hidden_state=h)`, `DynamicCache()`, a dataclass: calling a
// plain Python class makes a NewObject var. Its __init__ is inlined with the
// var as self; attribute stores go into its instance dict (a Dict var), and
// for dict subclasses (transformers' ModelOutput) item stores into its dict
// content. Reads look at the class first as Python does (data descriptors,
// then the instance dict, then methods and class attributes), each class
// entry read through a guarded ClassEntry source. Properties, on these and on
// objects read from sources, run their getter inlined. A run rebuilds such an
// object from its state (ResultBuilder::newObject in RunEntry.cpp): the
// builtin base's __new__, then the instance dict and dict items.
//
//===----------------------------------------------------------------------===//
#include "PythonObjects.h"

#include <algorithm>
#include <map>

#include "DictKeys.h"

#include "Tracer/BytecodeTracer.h"

namespace dynafuse {
namespace capture {
namespace {

/// The builtin class instances of cls are laid out as (object, dict or
/// OrderedDict), or null when its MRO has another builtin class.
PyTypeObject *builtinBaseOf(PyTypeObject *cls) {
  PyObject *mro = cls->tp_mro;
  if (!mro || !PyTuple_Check(mro))
    return nullptr;
  PyTypeObject *base = nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto *type = reinterpret_cast<PyTypeObject *>(PyTuple_GET_ITEM(mro, i));
    if ((type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type == &PyBaseObject_Type)
      continue;
    if (type != &PyDict_Type &&
        reinterpret_cast<PyObject *>(type) != orderedDictType())
      return nullptr;
    if (!base)
      base = type;
  }
  return base ? base : &PyBaseObject_Type;
}

PyObject *entryOf(PyTypeObject *type, const char *name) {
  PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
  return lookupInClass(reinterpret_cast<PyObject *>(type), nullptr, key.get());
}

PyTypeObject *classOf(const VarPtr &object) {
  return reinterpret_cast<PyTypeObject *>(object->function->object.get());
}

bool isProperty(PyObject *descriptor) {
  return descriptor && PyObject_TypeCheck(descriptor, &PyProperty_Type);
}

/// Builtin methods of the base class a new object's code may call
/// (through super() or because the class does not override them).
bool isModelledSlot(const std::string &name, bool dictBase) {
  static const char *objectSlots[] = {"__setattr__", "__init__",
                                      "__getattribute__", "__delattr__"};
  static const char *dictSlots[] = {
      "__setitem__", "__getitem__", "__contains__", "__len__",    "keys",
      "values",      "items",       "get",          "__delitem__"};
  for (const char *slot : objectSlots)
    if (name == slot)
      return true;
  if (dictBase)
    for (const char *slot : dictSlots)
      if (name == slot)
        return true;
  return false;
}

bool emptyDictAttribute(PyObject *object, const char *name) {
  PyRef dict = PyRef::steal(PyObject_GetAttrString(object, name));
  bool empty = dict && PyDict_Check(dict.get()) && PyDict_Size(dict.get()) == 0;
  PyErr_Clear();
  return empty;
}

} // namespace

VarPtr PythonObjects::statelessLayer(const VarPtr &classVar,
                                     const std::vector<VarPtr> &args,
                                     const Keywords &keywords) {
  PyObject *cls = classVar->object.get();
  PyObject *module = moduleClass();
  if (!cls || !module || !PyType_Check(cls) ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(cls),
                        reinterpret_cast<PyTypeObject *>(module)))
    return nullptr;
  // torch's own layers: their constructors store their arguments.
  PyRef owner = PyRef::steal(PyObject_GetAttrString(cls, "__module__"));
  PyErr_Clear();
  if (!owner || !PyUnicode_Check(owner.get()) ||
      std::string(PyUnicode_AsUTF8(owner.get()))
              .rfind("torch.nn.modules.", 0) != 0)
    return nullptr;
  return layerMadeAtCapture(classVar, args, keywords);
}

VarPtr PythonObjects::layerMadeAtCapture(const VarPtr &classVar,
                                         const std::vector<VarPtr> &args,
                                         const Keywords &keywords) {
  PyObject *cls = classVar->object.get();
  PyRef positional, named;
  if (!constantCallArguments(args, keywords, positional, named))
    return nullptr;
  // Made at capture, it must not draw from torch's generator (eager's
  // calls would draw anew each time; an nn.Linear draws its weights):
  // the generator's state is put back and such a layer refused.
  static PyObject *getSlot = nullptr, *setSlot = nullptr, *equalSlot = nullptr;
  PyObject *getState = lookupOnce(getSlot, "torch", "get_rng_state");
  PyObject *setState = lookupOnce(setSlot, "torch", "set_rng_state");
  PyObject *equal = lookupOnce(equalSlot, "torch", "equal");
  if (!getState || !setState || !equal)
    return nullptr;
  PyRef before = PyRef::steal(PyObject_CallNoArgs(getState));
  PyRef layer = PyRef::steal(PyObject_Call(cls, positional.get(), named.get()));
  PyRef after = PyRef::steal(PyObject_CallNoArgs(getState));
  PyRef same = before && after ? PyRef::steal(PyObject_CallFunctionObjArgs(
                                     equal, before.get(), after.get(), nullptr))
                               : PyRef();
  if (!same || same.get() != Py_True) {
    if (before)
      PyRef::steal(PyObject_CallOneArg(setState, before.get()));
    PyErr_Clear();
    return nullptr;
  }
  if (!layer) {
    PyErr_Clear(); // traced instead: eager raises the same there
    return nullptr;
  }
  if (!emptyDictAttribute(layer.get(), "_parameters") ||
      !emptyDictAttribute(layer.get(), "_buffers") ||
      !emptyDictAttribute(layer.get(), "_modules"))
    return nullptr;
  // No tensor state of its own either (one made afresh each call).
  PyObject **dict = _PyObject_GetDictPtr(layer.get());
  static PyObject *tensorSlot = nullptr;
  PyObject *tensorClass = lookupOnce(tensorSlot, "torch", "Tensor");
  PyObject *key, *value;
  Py_ssize_t position = 0;
  while (dict && *dict && tensorClass &&
         PyDict_Next(*dict, &position, &key, &value))
    if (PyObject_TypeCheck(value,
                           reinterpret_cast<PyTypeObject *>(tensorClass)))
      return nullptr;
  return tracer.fixedObject(
      layer, std::string(reinterpret_cast<PyTypeObject *>(cls)->tp_name) +
                 " made in forward");
}

PythonObjects::PythonObjects(BytecodeTracer &tracer)
    : ValueHandler(tracer, "an object made during capture") {}

VarPtr PythonObjects::allocate(const VarPtr &classVar) {
  PyObject *object = classVar->object.get();
  if (!object || !PyType_Check(object) || classVar->source < 0)
    return nullptr;
  auto *cls = reinterpret_cast<PyTypeObject *>(object);
  // A plain Python class: made by type.__call__, laid out as object or
  // dict, its instances with a __dict__, and an attribute lookup that is
  // the default one or a Python __getattribute__ over it.
  if (!(cls->tp_flags & Py_TPFLAGS_HEAPTYPE) ||
      Py_TYPE(object)->tp_call != PyType_Type.tp_call || isModule(object) ||
      cls->tp_dictoffset == 0)
    return nullptr;
  PyTypeObject *base = builtinBaseOf(cls);
  if (!base || cls->tp_new != base->tp_new)
    return nullptr;
  PyObject *getattribute = entryOf(cls, "__getattribute__");
  if (getattribute != entryOf(base, "__getattribute__") &&
      !(getattribute && PyFunction_Check(getattribute)))
    return nullptr;
  VarPtr made = makeVar(Var::Kind::NewObject);
  made->function = classVar;
  made->attributes = makeVar(Var::Kind::Dict);
  if (base != &PyBaseObject_Type)
    made->content = makeVar(Var::Kind::Dict);
  return made;
}

VarPtr PythonObjects::allocateBare(const VarPtr &classVar) {
  PyObject *object = classVar->object.get();
  if (!object || !PyType_Check(object) ||
      builtinBaseOf(reinterpret_cast<PyTypeObject *>(object)) !=
          &PyBaseObject_Type)
    return nullptr; // object.__new__ of a dict subclass raises
  return allocate(classVar);
}

VarPtr PythonObjects::construct(const VarPtr &classVar,
                                const std::vector<VarPtr> &args,
                                const Keywords &keywords) {
  VarPtr made = allocate(classVar);
  if (!made)
    return nullptr;
  auto *cls = classOf(made);
  PyTypeObject *base = builtinBaseOf(cls);
  PyObject *init = entryOf(cls, "__init__");
  bool pythonInit = init && PyFunction_Check(init);
  if (!pythonInit && init != entryOf(base, "__init__"))
    return nullptr;
  if (!pythonInit) {
    if (!args.empty() || (!keywords.empty() && !made->content) ||
        keywords.size() > 1)
      tracer.unsupported(std::string(cls->tp_name) +
                         "() with arguments its base's __init__ takes");
    for (const auto &[key, value] : keywords) {
      made->content->keys.push_back(stringKeyText(key));
      made->content->items.push_back(value);
    }
    return made;
  }
  std::vector<VarPtr> withSelf{made};
  withSelf.insert(withSelf.end(), args.begin(), args.end());
  PyRef name = PyRef::steal(PyUnicode_InternFromString("__init__"));
  size_t storesBefore = tracer.pendingStores.size();
  VarPtr returned =
      tracer.callAny(classEntry(classVar, name.get()), withSelf, keywords);
  if (returned->kind != Var::Kind::Constant ||
      returned->object.get() != Py_None)
    tracer.unsupported(std::string(cls->tp_name) +
                       ".__init__ returned a value");
  PyObject *module = moduleClass();
  if (module &&
      PyType_IsSubtype(cls, reinterpret_cast<PyTypeObject *>(module))) {
    // A module made in forward (transformers' ACT2FN["silu"] makes its
    // activation per call): its __init__, traced, changed nothing but the
    // new module, so one made at capture with the same constant arguments
    // serves every run, when it holds no parameters, buffers or tensors
    // (what a fresh one would draw anew).
    if (tracer.pendingStores.size() == storesBefore)
      if (VarPtr layer = layerMadeAtCapture(classVar, args, keywords))
        return layer;
    tracer.unsupported(std::string(cls->tp_name) +
                       ": a module made during capture with state or "
                       "arguments capture cannot fix");
  }
  return made;
}

VarPtr PythonObjects::classEntry(const VarPtr &classVar, PyObject *name,
                                 PyObject *after) {
  PyObject *entry = lookupInClass(classVar->object.get(), after, name);
  if (!entry)
    return nullptr;
  Source source;
  source.kind = Source::Kind::ClassEntry;
  source.parent = tracer.sourceOfObject(classVar);
  source.name = PyRef::borrow(name);
  if (after)
    source.fixed = PyRef::borrow(after);
  return tracer.classify(entry,
                         tracer.guardBuilder.addSource(std::move(source)));
}

VarPtr PythonObjects::pythonMethodOf(const VarPtr &object, const char *name) {
  PyObject *entry = entryOf(classOf(object), name);
  if (!entry || !PyFunction_Check(entry))
    return nullptr;
  PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
  VarPtr method = makeVar(Var::Kind::BoundMethod);
  method->self = object;
  method->function = classEntry(object->function, key.get());
  return method;
}

VarPtr PythonObjects::binaryOperator(int kind, const VarPtr &lhs,
                                     const VarPtr &rhs) {
  bool left = lhs->kind == Var::Kind::NewObject,
       right = rhs->kind == Var::Kind::NewObject;
  if (!left && !right)
    return nullptr;
  bool inPlace = kind >= NB_INPLACE_ADD;
  static const std::map<int, std::string> names = {
      {NB_ADD, "add"},
      {NB_SUBTRACT, "sub"},
      {NB_MULTIPLY, "mul"},
      {NB_TRUE_DIVIDE, "truediv"},
      {NB_FLOOR_DIVIDE, "floordiv"},
      {NB_MATRIX_MULTIPLY, "matmul"},
      {NB_POWER, "pow"},
      {NB_REMAINDER, "mod"},
      {NB_AND, "and"},
      {NB_OR, "or"},
      {NB_XOR, "xor"},
      {NB_LSHIFT, "lshift"},
      {NB_RSHIFT, "rshift"}};
  auto found = names.find(plainBinaryOperator(kind));
  if (found == names.end())
    return nullptr;
  const std::string &name = found->second;
  bool anyMethod = false;
  auto tried = [&](const VarPtr &self, const std::string &method,
                   const VarPtr &other) -> VarPtr {
    VarPtr bound = pythonMethodOf(self, method.c_str());
    if (!bound)
      return nullptr;
    anyMethod = true;
    VarPtr result = tracer.callAny(bound, {other}, {});
    return result->object.get() == Py_NotImplemented ? nullptr : result;
  };
  if (left && inPlace)
    if (VarPtr result = tried(lhs, "__i" + name + "__", rhs))
      return result;
  if (left)
    if (VarPtr result = tried(lhs, "__" + name + "__", rhs))
      return result;
  if (right)
    if (VarPtr result = tried(rhs, "__r" + name + "__", lhs))
      return result;
  if (!anyMethod) // no Python operator: the builtin base's, if any
    return nullptr;
  tracer.unsupported("operator __" + name + "__ of " +
                     (left ? classOf(lhs) : classOf(rhs))->tp_name +
                     " with these operands (Python raises TypeError)");
}

VarPtr PythonObjects::negative(const VarPtr &object) {
  if (object->kind != Var::Kind::NewObject)
    return nullptr;
  VarPtr bound = pythonMethodOf(object, "__neg__");
  return bound ? tracer.callAny(bound, {}, {}) : nullptr;
}

VarPtr PythonObjects::slotMethod(const VarPtr &object,
                                 const std::string &name) {
  if (!isModelledSlot(name, object->content != nullptr))
    tracer.unsupported("builtin method '" + name + "' of a " +
                       classOf(object)->tp_name + " made during capture");
  VarPtr method = makeVar(Var::Kind::BoundMethod);
  method->self = object;
  method->function = makeVar(Var::Kind::Object);
  method->function->method = "object." + name;
  return method;
}

VarPtr PythonObjects::readProperty(const VarPtr &property, const VarPtr &self,
                                   const std::string &attribute) {
  PyObject *descriptor = property->object.get();
  PyRef getter = PyRef::steal(PyObject_GetAttrString(descriptor, "fget"));
  if (!getter || !PyFunction_Check(getter.get())) {
    PyErr_Clear();
    tracer.unsupported("attribute '" + attribute +
                       "' is a property whose getter is not a Python function");
  }
  PyRef fget = PyRef::steal(PyUnicode_InternFromString("fget"));
  VarPtr function = tracer.classify(
      getter.get(),
      tracer.guardBuilder.namedSource(
          Source::Kind::Attr, tracer.sourceOfObject(property), fget.get()));
  return tracer.callAny(function, {self}, {});
}

void PythonObjects::missingAttribute(const VarPtr &object,
                                     const std::string &attribute) {
  // What Python raises: a handler in traced code (hasattr's included)
  // sees it; elsewhere it ends the graph, and eager raises it.
  throw RaisedInCapture("attribute '" + attribute + "' missing on a " +
                            classOf(object)->tp_name + " made during capture",
                        tracer.here(tracer.current.currentLine),
                        PyExc_AttributeError);
}

VarPtr PythonObjects::attribute(const VarPtr &object, PyObject *name) {
  // A class's own __getattribute__ decides every read (transformers'
  // configs map names through attribute_map); super().__getattribute__
  // there reaches object's, defaultAttribute.
  if (VarPtr getattribute = pythonMethodOf(object, "__getattribute__"))
    return tracer.callAny(getattribute, {tracer.constant(name)}, {});
  return defaultAttribute(object, name);
}

VarPtr PythonObjects::defaultAttribute(const VarPtr &object, PyObject *name) {
  std::string attribute = PyUnicode_AsUTF8(name);
  if (attribute == "__class__")
    return object->function;
  if (attribute == "__dict__")
    return object->attributes;
  PyObject *entry =
      lookupInClass(object->function->object.get(), nullptr, name);
  if (entry && Py_TYPE(entry)->tp_descr_set) { // a data descriptor wins
    if (!isProperty(entry))
      tracer.unsupported("attribute '" + attribute + "' of a " +
                         classOf(object)->tp_name + " goes through a " +
                         Py_TYPE(entry)->tp_name);
    return readProperty(classEntry(object->function, name), object, attribute);
  }
  if (VarPtr value = tracer.dictEntry(object->attributes, attribute))
    return value;
  if (entry) {
    if (PyFunction_Check(entry)) {
      VarPtr method = makeVar(Var::Kind::BoundMethod);
      method->self = object;
      method->function = classEntry(object->function, name);
      return method;
    }
    if (PyObject_TypeCheck(entry, &PyStaticMethod_Type) ||
        PyObject_TypeCheck(entry, &PyClassMethod_Type)) {
      VarPtr wrapper = classEntry(object->function, name);
      PyRef function = PyRef::steal(PyObject_GetAttrString(entry, "__func__"));
      PyRef func = PyRef::steal(PyUnicode_InternFromString("__func__"));
      VarPtr inner = tracer.classify(
          function.get(),
          tracer.guardBuilder.namedSource(
              Source::Kind::Attr, tracer.sourceOfObject(wrapper), func.get()));
      if (PyObject_TypeCheck(entry, &PyStaticMethod_Type))
        return inner;
      VarPtr method = makeVar(Var::Kind::BoundMethod);
      method->self = object->function;
      method->function = inner;
      return method;
    }
    if (Py_TYPE(entry)->tp_descr_get) {
      // Builtin methods of the base (dict.keys, object.__setattr__).
      if (Py_TYPE(entry) == &PyMethodDescr_Type ||
          Py_TYPE(entry) == &PyWrapperDescr_Type)
        return slotMethod(object, attribute);
      tracer.unsupported("attribute '" + attribute + "' of a " +
                         classOf(object)->tp_name + " goes through a " +
                         Py_TYPE(entry)->tp_name);
    }
    return classEntry(object->function, name); // a class attribute
  }
  if (VarPtr getattr = pythonMethodOf(object, "__getattr__"))
    return tracer.callAny(getattr, {tracer.constant(name)}, {});
  missingAttribute(object, attribute);
}

bool PythonObjects::has(const VarPtr &object, PyObject *name) {
  if (pythonMethodOf(object, "__getattribute__")) {
    // hasattr is getattr that catches AttributeError.
    try {
      attribute(object, name);
      return true;
    } catch (const RaisedInCapture &raised) {
      if (!PyType_IsSubtype(
              reinterpret_cast<PyTypeObject *>(raised.exceptionType),
              reinterpret_cast<PyTypeObject *>(PyExc_AttributeError)))
        throw;
      return false;
    }
  }
  if (tracer.dictEntry(object->attributes, PyUnicode_AsUTF8(name)))
    return true;
  if (lookupInClass(object->function->object.get(), nullptr, name))
    return true;
  if (entryOf(classOf(object), "__getattr__"))
    tracer.unsupported("hasattr on a " + std::string(classOf(object)->tp_name) +
                       " with __getattr__");
  return false;
}

void PythonObjects::setAttribute(const VarPtr &object, PyObject *name,
                                 const VarPtr &value, bool direct) {
  std::string attribute = PyUnicode_AsUTF8(name);
  if (!direct) {
    if (VarPtr setattr = pythonMethodOf(object, "__setattr__")) {
      tracer.callAny(setattr, {tracer.constant(name), value}, {});
      return;
    }
  }
  PyObject *entry =
      lookupInClass(object->function->object.get(), nullptr, name);
  if (entry && Py_TYPE(entry)->tp_descr_set) {
    if (!isProperty(entry))
      tracer.unsupported("assignment to attribute '" + attribute +
                         "' through a " + Py_TYPE(entry)->tp_name);
    PyRef setter = PyRef::steal(PyObject_GetAttrString(entry, "fset"));
    if (!setter || !PyFunction_Check(setter.get())) {
      PyErr_Clear();
      tracer.unsupported("assignment to property '" + attribute +
                         "' without a Python setter");
    }
    VarPtr property = classEntry(object->function, name);
    PyRef fset = PyRef::steal(PyUnicode_InternFromString("fset"));
    VarPtr function = tracer.classify(
        setter.get(),
        tracer.guardBuilder.namedSource(
            Source::Kind::Attr, tracer.sourceOfObject(property), fset.get()));
    tracer.callAny(function, {object, value}, {});
    return;
  }
  tracer.setDictEntry(object->attributes, attribute, value);
}

void PythonObjects::deleteAttribute(const VarPtr &object, PyObject *name,
                                    bool direct) {
  std::string attribute = PyUnicode_AsUTF8(name);
  if (!direct)
    if (VarPtr delattr = pythonMethodOf(object, "__delattr__")) {
      tracer.callAny(delattr, {tracer.constant(name)}, {});
      return;
    }
  PyObject *entry =
      lookupInClass(object->function->object.get(), nullptr, name);
  if (entry && Py_TYPE(entry)->tp_descr_set)
    tracer.unsupported("deleting attribute '" + attribute + "' through a " +
                       Py_TYPE(entry)->tp_name);
  const VarPtr &dict = object->attributes;
  auto found = std::find(dict->keys.begin(), dict->keys.end(), attribute);
  if (found != dict->keys.end()) {
    tracer.willMutate(dict);
    dict->items.erase(dict->items.begin() + (found - dict->keys.begin()));
    dict->keys.erase(found);
    return;
  }
  missingAttribute(object, attribute);
}

VarPtr PythonObjects::callSlot(const std::string &slot,
                               const std::vector<VarPtr> &args,
                               const Keywords &keywords) {
  if (args.empty() || args[0]->kind != Var::Kind::NewObject)
    tracer.unsupported(slot +
                       " on a value that is not an object made during capture");
  const VarPtr &self = args[0];
  std::string name = slot.substr(std::string("object.").size());
  auto stringKey = [&](size_t at) {
    if (args.size() <= at || args[at]->kind != Var::Kind::Constant ||
        !PyUnicode_CheckExact(args[at]->object.get()))
      tracer.unsupported(name + " with a key that is not a constant string");
    return std::string(PyUnicode_AsUTF8(args[at]->object.get()));
  };
  if (name == "__init__") {
    if (args.size() != 1 || !keywords.empty())
      tracer.unsupported("a base class __init__ with arguments");
    return tracer.constant(Py_None);
  }
  if (!keywords.empty())
    tracer.unsupported(name + " with keyword arguments");
  if (name == "__setattr__" && args.size() == 3) {
    PyRef key = PyRef::steal(PyUnicode_FromString(stringKey(1).c_str()));
    setAttribute(self, key.get(), args[2], /*direct=*/true);
    return tracer.constant(Py_None);
  }
  if (name == "__delattr__" && args.size() == 2) {
    PyRef key = PyRef::steal(PyUnicode_FromString(stringKey(1).c_str()));
    deleteAttribute(self, key.get(), /*direct=*/true);
    return tracer.constant(Py_None);
  }
  if (name == "__getattribute__" && args.size() == 2) {
    PyRef key = PyRef::steal(PyUnicode_FromString(stringKey(1).c_str()));
    return defaultAttribute(self, key.get());
  }
  const VarPtr &content = self->content;
  if (!content)
    tracer.unsupported("dict method " + name +
                       " of an object that is not a dict");
  auto entryKey = [&] { return tracer.dictKeyOf(args[1], name); };
  auto find = [&](const std::string &key) {
    return tracer.dictEntry(content, key);
  };
  if (name == "__setitem__" && args.size() == 3) {
    tracer.setDictEntry(content, entryKey(), args[2]);
    return tracer.constant(Py_None);
  }
  if (name == "__delitem__" && args.size() == 2) {
    if (!find(entryKey()))
      tracer.unsupported(name + " of a missing key (KeyError)");
    tracer.popDictItem(content, args[1], nullptr);
    return tracer.constant(Py_None);
  }
  if (name == "__getitem__" && args.size() == 2) {
    if (VarPtr found = find(entryKey()))
      return found;
    tracer.unsupported(name + " of a missing key (KeyError)");
  }
  if (name == "get" && (args.size() == 2 || args.size() == 3)) {
    VarPtr found = find(entryKey());
    return found              ? found
           : args.size() == 3 ? args[2]
                              : tracer.constant(Py_None);
  }
  if (name == "__contains__" && args.size() == 2)
    return tracer.constant(find(entryKey()) ? Py_True : Py_False);
  if (name == "__len__" && args.size() == 1)
    return tracer.integerConstant(int64_t(content->keys.size()));
  if ((name == "keys" || name == "values" || name == "items") &&
      args.size() == 1)
    return tracer.dictMethod(name, content);
  tracer.unsupported("dict method " + name + " with these arguments");
}

VarPtr PythonObjects::subscript(const VarPtr &object, const VarPtr &key) {
  if (VarPtr getitem = pythonMethodOf(object, "__getitem__"))
    return tracer.callAny(getitem, {key}, {});
  return callSlot("object.__getitem__", {object, key}, {});
}

void PythonObjects::storeSubscript(const VarPtr &object, const VarPtr &key,
                                   const VarPtr &value) {
  if (VarPtr setitem = pythonMethodOf(object, "__setitem__")) {
    tracer.callAny(setitem, {key, value}, {});
    return;
  }
  callSlot("object.__setitem__", {object, key, value}, {});
}

VarPtr PythonObjects::length(const VarPtr &object) {
  if (VarPtr len = pythonMethodOf(object, "__len__"))
    return tracer.callAny(len, {}, {});
  return callSlot("object.__len__", {object}, {});
}

bool PythonObjects::truth(const VarPtr &object) {
  if (entryOf(classOf(object), "__bool__") ||
      (entryOf(classOf(object), "__len__") && !object->content) ||
      pythonMethodOf(object, "__len__"))
    tracer.unsupported(std::string("truth of a ") + classOf(object)->tp_name +
                       " that defines __bool__ or __len__");
  return !object->content || !object->content->keys.empty();
}

std::vector<VarPtr> PythonObjects::items(const VarPtr &object) {
  return iterate(object)->items; // through its iteration protocol
}

VarPtr PythonObjects::iterate(const VarPtr &object) {
  VarPtr iterator = makeVar(Var::Kind::Iterator);
  if (object->content && !pythonMethodOf(object, "__iter__")) {
    iterator->items = tracer.itemsOf(object->content); // a dict's keys
    return iterator;
  }
  if (!object->content && pythonMethodOf(object, "__getitem__")) {
    // No __iter__, or collections.abc.Sequence's (which subscripts too).
    static PyObject *sequenceSlot = nullptr;
    PyObject *sequence =
        lookupOnce(sequenceSlot, "collections.abc", "Sequence");
    PyRef name = PyRef::steal(PyUnicode_InternFromString("__iter__"));
    PyObject *iter =
        lookupInClass(object->function->object.get(), nullptr, name.get());
    PyObject *sequenceIter =
        sequence ? lookupInClass(sequence, nullptr, name.get()) : nullptr;
    if (!iter || iter == sequenceIter)
      return iterateBySubscript(object, iterator);
  }
  refuse("iteration over");
}

VarPtr PythonObjects::contains(const VarPtr &object, const VarPtr &item) {
  VarPtr contains = pythonMethodOf(object, "__contains__");
  return contains ? tracer.callAny(contains, {item}, {})
                  : callSlot("object.__contains__", {object, item}, {});
}

VarPtr PythonObjects::type(const VarPtr &object) { return object->function; }

VarPtr PythonObjects::isInstance(const VarPtr &object, PyObject *classes) {
  return classIsInstance(object->function->object.get(), classes);
}

int PythonObjects::callable(const VarPtr &object) {
  PyRef name = PyRef::steal(PyUnicode_FromString("__call__"));
  return lookupInClass(object->function->object.get(), nullptr, name.get()) ? 1
                                                                            : 0;
}

VarPtr PythonObjects::iterateBySubscript(const VarPtr &object,
                                         VarPtr iterator) {
  VarPtr getitem = pythonMethodOf(object, "__getitem__");
  for (int64_t index = 0; index <= 4096; ++index) {
    size_t journalBefore = tracer.journal.size();
    size_t storesBefore = tracer.pendingStores.size();
    try {
      iterator->items.push_back(
          tracer.callAny(getitem, {tracer.integerConstant(index)}, {}));
    } catch (const RaisedInCapture &raised) {
      // The IndexError that ends the loop, raised before __getitem__
      // changed anything.
      if (raised.exceptionType != PyExc_IndexError ||
          tracer.journal.size() != journalBefore ||
          tracer.pendingStores.size() != storesBefore)
        throw;
      return iterator;
    }
  }
  tracer.unsupported("a __getitem__ loop too long to unroll");
}

OutputSpec PythonObjects::liveState(const VarPtr &var,
                                    const ItemSpec &itemSpec) {
  return output(var, itemSpec);
}

OutputSpec PythonObjects::output(const VarPtr &var, const ItemSpec &itemSpec) {
  OutputSpec spec;
  if (tracer.seenInThisOutput(var, spec))
    return spec;
  // A class standing for a value only graphs hold (ComplexPair, a
  // complex tensor as its real pairs) never leaves one.
  PyObject *graphOnly = entryOf(classOf(var), "__dynafuse_graph_only__");
  if (graphOnly && PyUnicode_Check(graphOnly))
    tracer.unsupported(std::string(PyUnicode_AsUTF8(graphOnly)) +
                       " leaving the graph (it lives in graphs only)");
  spec.kind = OutputSpec::Kind::NewObject;
  spec.constant = var->function->object;
  spec.keys = var->attributes->keys;
  spec.attributeCount = spec.keys.size();
  for (const VarPtr &item : var->attributes->items)
    spec.items.push_back(itemSpec(item));
  if (var->content) {
    spec.keys.insert(spec.keys.end(), var->content->keys.begin(),
                     var->content->keys.end());
    for (const VarPtr &item : var->content->items)
      spec.items.push_back(itemSpec(item));
  }
  return spec;
}

} // namespace capture
} // namespace dynafuse

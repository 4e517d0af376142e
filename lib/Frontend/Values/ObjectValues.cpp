//===- ObjectValues.cpp - Objects read from sources -----------------------===//
//
// Modules, functions, classes and other objects the code reads from its
// locals, globals and attributes are guarded by identity, so what Python
// says of them now holds on every call the guards admit. Module containers
// index and iterate through their guarded _modules; other objects through
// their own __getitem__, __len__ and __contains__, inlined. A dict capture
// keeps whole answers a string key with that entry, guarded, and len() with
// its guarded length.
//
//===----------------------------------------------------------------------===//
#include "ValueHandlers.h"

#include "DictKeys.h"

#include "Tracer/BytecodeTracer.h"

namespace dynafuse {
namespace capture {
namespace {

PyObject *autogradFunctionClass() {
  static PyObject *slot = nullptr;
  return lookupOnce(slot, "torch.autograd", "Function");
}

/// functools.cached_property: computed at an instance's first read, then
/// kept in the instance dict, where it shadows the descriptor.
bool isCachedProperty(PyObject *descriptor) {
  static PyObject *slot = nullptr;
  PyObject *cls = lookupOnce(slot, "functools", "cached_property");
  return cls && PyType_Check(cls) &&
         PyObject_TypeCheck(descriptor, reinterpret_cast<PyTypeObject *>(cls));
}

/// A constant a dict read from a source is looked up by, with a guard on
/// that entry: a string, an int or a bool (layer indices, handle ids).
bool dictKey(const VarPtr &key) {
  PyObject *object = key->object.get();
  return key->kind == Var::Kind::Constant &&
         (PyUnicode_CheckExact(object) || PyLong_CheckExact(object) ||
          PyBool_Check(object));
}

/// The Python object a var stands for when capture knows it whole: a
/// constant, a guarded or derived object, or a tuple of those; null else.
PyRef staticObject(const VarPtr &var) {
  if (var->kind == Var::Kind::Constant ||
      (var->kind == Var::Kind::Object && var->object &&
       (var->method.empty() || var->method == "derived")))
    return var->object;
  if (var->kind != Var::Kind::Tuple || var->isList || var->isSet ||
      !var->keys.empty())
    return PyRef();
  PyRef tuple = PyRef::steal(PyTuple_New(Py_ssize_t(var->items.size())));
  for (size_t i = 0; tuple && i < var->items.size(); ++i) {
    PyRef item = staticObject(var->items[i]);
    if (!item)
      return PyRef();
    PyTuple_SET_ITEM(tuple.get(), Py_ssize_t(i), item.release());
  }
  return tuple;
}

/// A typing construct (List, Tuple, Optional, a generic alias such as
/// list[int], a class with __class_getitem__, which PEP 560 keeps for
/// typing): subscripting one only builds an annotation, immutable data.
bool isTypingForm(PyObject *object) {
  if (Py_IS_TYPE(object, &Py_GenericAliasType))
    return true;
  if (PyType_Check(object) && Py_IS_TYPE(object, &PyType_Type) &&
      PyObject_HasAttrString(object, "__class_getitem__"))
    return true;
  PyRef module = PyRef::steal(PyObject_GetAttrString(
      reinterpret_cast<PyObject *>(Py_TYPE(object)), "__module__"));
  if (!module) {
    PyErr_Clear();
    return false;
  }
  return PyUnicode_Check(module.get()) &&
         (PyUnicode_CompareWithASCIIString(module.get(), "typing") == 0 ||
          PyUnicode_CompareWithASCIIString(module.get(),
                                           "typing_extensions") == 0);
}

} // namespace

ObjectValues::ObjectValues(BytecodeTracer &tracer)
    : ValueHandler(tracer, "an object") {}

VarPtr ObjectValues::attribute(const VarPtr &base, PyObject *name) {
  std::string attribute = PyUnicode_AsUTF8(name);
  PyObject *functionClass = autogradFunctionClass();
  if (attribute == "apply" && base->object &&
      PyType_Check(base->object.get()) && functionClass &&
      PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(base->object.get()),
                       reinterpret_cast<PyTypeObject *>(functionClass))) {
    // Function.apply, a builtin method made afresh by each read: the class
    // (guarded already) and what apply is, not the method object.
    VarPtr apply = makeVar(Var::Kind::Object);
    apply->method = "autograd.Function.apply";
    apply->self = base;
    return apply;
  }
  if (base->method == "super")
    return tracer.superAttr(base, name);
  if (base->method == "derived") {
    // Immutable data computed at capture from guarded objects (a
    // signature): its attributes are data too.
    PyRef value = PyRef::steal(PyObject_GetAttr(base->object.get(), name));
    if (!value) {
      PyErr_Clear();
      tracer.unsupported("attribute '" + attribute +
                         "' of a derived value raised");
    }
    return derivedVar(value.get());
  }
  PyObject *object = base->object.get();
  if (VarPtr stored = tracer.storedAttribute(object, attribute))
    return stored;
  if (attribute == "__dict__")
    for (const BytecodeTracer::PendingStore &store : tracer.pendingStores)
      if (!store.item && store.owner == object)
        tracer.unsupported(
            "__dict__ of an object with attribute stores pending");
  if (isEnvironment(object) && attribute == "get") {
    VarPtr get = makeVar(Var::Kind::Object);
    get->method = "environ.get";
    return get;
  }
  if (object && PyDict_CheckExact(object) && attribute == "get" &&
      base->source >= 0) {
    // A dict capture keeps as an object (keys other than strings, or
    // large): get reads the one entry asked for, guarded, instead of
    // the bound method (a new object on every read: its identity never
    // holds twice).
    VarPtr get = makeVar(Var::Kind::Object);
    get->method = "dict.get of a source";
    get->self = base;
    return get;
  }
  std::string typeName = object ? Py_TYPE(object)->tp_name : "";
  if (typeName == "torch.dtype" || typeName == "torch.device" ||
      typeName == "torch.finfo" || typeName == "torch.iinfo") {
    // torch.dtype / torch.device: immutable, their attributes are data.
    PyRef value = PyRef::steal(PyObject_GetAttr(object, name));
    if (!value || !isConstantObject(value.get())) {
      PyErr_Clear();
      tracer.unsupported("attribute '" + attribute + "' of a " +
                         Py_TYPE(object)->tp_name);
    }
    return tracer.constant(value.get());
  }
  if (VarPtr method = tracer.boundMethod(base, name))
    return method;
  if (!PyModule_Check(object)) {
    PyObject *descriptor = _PyType_Lookup(Py_TYPE(object), name);
    // C-level slots (getset and member descriptors: __name__, __class__,
    // __dict__, __slots__ members) read data without running Python code.
    // A property runs its getter: inlined, so what it reads is guarded
    // and what it would change breaks.
    if (descriptor && PyObject_TypeCheck(descriptor, &PyProperty_Type) &&
        base->source >= 0) {
      return tracer.objects.readProperty(
          tracer.classify(descriptor,
                          tracer.guardBuilder.namedSource(
                              Source::Kind::TypeAttr, base->source, name)),
          base, attribute);
    }
    // A staticmethod is its function, read through the type (guarded); a
    // classmethod its function bound to the type (a bound method: its
    // function and class are what is guarded).
    bool classMethod =
        descriptor && PyObject_TypeCheck(descriptor, &PyClassMethod_Type);
    if (classMethod && base->source >= 0) {
      PyRef method = PyRef::steal(PyObject_GetAttr(
          reinterpret_cast<PyObject *>(Py_TYPE(object)), name));
      if (method && PyMethod_Check(method.get()))
        return tracer.classify(method.get(),
                               tracer.guardBuilder.namedSource(
                                   Source::Kind::TypeAttr, base->source, name));
      PyErr_Clear();
    }
    if (descriptor && PyObject_TypeCheck(descriptor, &PyStaticMethod_Type) &&
        base->source >= 0) {
      PyRef function = PyRef::steal(PyObject_GetAttr(
          reinterpret_cast<PyObject *>(Py_TYPE(object)), name));
      if (function && PyFunction_Check(function.get()))
        return tracer.classify(function.get(),
                               tracer.guardBuilder.namedSource(
                                   Source::Kind::TypeAttr, base->source, name));
      PyErr_Clear();
    }
    // A non-data descriptor (functools.cached_property once computed) is
    // shadowed by the instance's own entry: Python reads the entry.
    PyObject **instanceDict = descriptor && !Py_TYPE(descriptor)->tp_descr_set
                                  ? _PyObject_GetDictPtr(object)
                                  : nullptr;
    bool shadowed = instanceDict && *instanceDict &&
                    PyDict_GetItemWithError(*instanceDict, name);
    PyErr_Clear();
    auto storedInto = [&] {
      return std::any_of(
          tracer.pendingStores.begin(), tracer.pendingStores.end(),
          [&](const auto &store) { return store.owner == object; });
    };
    if (instanceDict && !shadowed && isCachedProperty(descriptor) &&
        !storedInto()) {
      // The first read computes and keeps the value, as eager's first read
      // of the call would: capture makes that read (no store into the
      // instance is pending that its getter would see).
      PyRef computed = PyRef::steal(PyObject_GetAttr(object, name));
      if (!computed) {
        PyErr_Clear();
        tracer.unsupported("cached property '" + attribute + "' raised");
      }
      shadowed = true;
    }
    if (descriptor && !shadowed && Py_TYPE(descriptor)->tp_descr_get &&
        !PyFunction_Check(descriptor) && !PyCFunction_Check(descriptor) &&
        Py_TYPE(descriptor) != &PyMethodDescr_Type &&
        Py_TYPE(descriptor) != &PyGetSetDescr_Type &&
        Py_TYPE(descriptor) != &PyMemberDescr_Type &&
        // a namedtuple's field (reads its item)
        std::string(Py_TYPE(descriptor)->tp_name) !=
            "_collections._tuplegetter")
      tracer.unsupported("attribute '" + attribute +
                         "' goes through a descriptor "
                         "(property) that may have side effects");
  }
  PyRef value = PyRef::steal(PyObject_GetAttr(object, name));
  if (!value) {
    PyErr_Clear();
    tracer.unsupported("attribute '" + attribute + "' raised");
  }
  int parent = tracer.sourceOfObject(base);
  return tracer.classify(value.get(), tracer.guardBuilder.namedSource(
                                          Source::Kind::Attr, parent, name));
}

VarPtr ObjectValues::derivedVar(PyObject *value) {
  if (isConstantObject(value))
    return tracer.constant(value);
  VarPtr derived = makeVar(Var::Kind::Object);
  derived->object = PyRef::borrow(value);
  derived->method = "derived";
  return derived;
}

std::vector<VarPtr> ObjectValues::items(const VarPtr &value) {
  if (value->method != "derived")
    return ValueHandler::items(value);
  PyRef list = PyRef::steal(PySequence_List(value->object.get()));
  if (!list) {
    PyErr_Clear();
    tracer.unsupported("iterating over a derived value raised");
  }
  std::vector<VarPtr> result;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.get()); ++i)
    result.push_back(derivedVar(PyList_GET_ITEM(list.get(), i)));
  return result;
}

VarPtr ObjectValues::callDerived(const VarPtr &value,
                                 const std::vector<VarPtr> &args,
                                 const Keywords &keywords) {
  // Only builtin methods: their self is the derived data they were read
  // from, and reading it changes nothing (keys, items, values, get, copy).
  if (value->method != "derived" || !PyCFunction_Check(value->object.get()))
    return nullptr;
  PyRef positional, named;
  if (!constantCallArguments(args, keywords, positional, named))
    tracer.unsupported("a method of a derived value called with values not "
                       "known at capture");
  PyRef result =
      PyRef::steal(PyObject_Call(value->object.get(), positional.get(),
                                 keywords.empty() ? nullptr : named.get()));
  if (!result) {
    PyErr_Clear();
    tracer.unsupported("a method of a derived value raised");
  }
  return derivedVar(result.get());
}

VarPtr ObjectValues::iterate(const VarPtr &value) {
  if (value->method == "derived") {
    VarPtr iterator = makeVar(Var::Kind::Iterator);
    iterator->items = items(value);
    return iterator;
  }
  if (!isModule(value->object.get()))
    refuse("iteration over");
  return tracer.iterateModules(value, makeVar(Var::Kind::Iterator));
}

VarPtr ObjectValues::length(const VarPtr &value) {
  if (value->method == "derived") {
    Py_ssize_t length = PyObject_Length(value->object.get());
    if (length < 0) {
      PyErr_Clear();
      tracer.unsupported("len of a derived value raised");
    }
    return tracer.integerConstant(int64_t(length));
  }
  if (value->object && value->method.empty()) {
    PyRef name = PyRef::steal(PyUnicode_InternFromString("__len__"));
    if (VarPtr method = tracer.boundMethod(value, name.get()))
      return tracer.callAny(method, {}, {});
  }
  if (!PyDict_Check(value->object.get()))
    return nullptr;
  // A dict read from a source (a module's hook OrderedDict): its length,
  // guarded.
  Guard length;
  length.kind = Guard::Kind::DictLength;
  length.source = tracer.sourceOfObject(value);
  length.length = size_t(PyDict_Size(value->object.get()));
  tracer.guardBuilder.addGuard(std::move(length));
  return tracer.integerConstant(int64_t(length.length));
}

VarPtr ObjectValues::subscript(const VarPtr &value, const VarPtr &index) {
  if (isModule(value->object.get()))
    return tracer.moduleItem(value, index);
  if (value->object && value->method.empty()) {
    PyObject *object = value->object.get();
    // A dict read from a source that capture keeps whole (large, or with
    // keys other than strings): the one entry, guarded.
    if (PyDict_CheckExact(object) && lookupKey(index) && value->source >= 0) {
      PyObject *entry = PyDict_GetItemWithError(object, index->object.get());
      if (!entry) {
        PyErr_Clear();
        tracer.unsupported("key missing from a dict (KeyError)");
      }
      return tracer.classify(entry, tracer.guardBuilder.namedSource(
                                        Source::Kind::DictItem, value->source,
                                        index->object.get()));
    }
    if (isTypingForm(object))
      if (PyRef key = staticObject(index)) {
        // An annotation built at run time (torch.jit.annotate(List[Tensor],
        // [])): evaluated at capture, as the typing module's checks of its
        // arguments are nothing the graph computes.
        PyRef form = PyRef::steal(PyObject_GetItem(object, key.get()));
        if (!form) {
          PyErr_Clear();
          tracer.unsupported("subscript of a typing construct raised");
        }
        VarPtr derived = makeVar(Var::Kind::Object);
        derived->object = form;
        derived->method = "derived";
        return derived;
      }
    if (VarPtr method = ownMethod(value, "__getitem__"))
      return tracer.callAny(method, {index}, {});
  }
  return itemAt(value, index);
}

bool ObjectValues::truth(const VarPtr &value) {
  if (!value->object)
    tracer.unsupported("branch on the truth value of a value the interpreter "
                       "cannot judge");
  PyTypeObject *type = Py_TYPE(value->object.get());
  bool customTruth = (type->tp_as_number && type->tp_as_number->nb_bool) ||
                     (type->tp_as_mapping && type->tp_as_mapping->mp_length) ||
                     (type->tp_as_sequence && type->tp_as_sequence->sq_length);
  if (customTruth)
    tracer.unsupported("branch on the truth value of an object");
  return true; // Plain objects (modules, functions) are truthy.
}

bool ObjectValues::lookupKey(const VarPtr &key) {
  // A constant, or a class or object whose identity capture pins (a
  // registry keyed by types: huggingface_hub's validators by typing origin,
  // pytree's SUPPORTED_NODES), hashed as it hashes now.
  return dictKey(key) ||
         (key->kind == Var::Kind::Constant && key->object.get() == Py_None) ||
         (key->kind == Var::Kind::Object && key->object &&
          key->method.empty() && tracer.knownSourceOf(key) >= 0);
}

VarPtr ObjectValues::contains(const VarPtr &container, const VarPtr &item) {
  PyObject *object = container->object.get();
  if (object && container->method.empty() &&
      (PyDict_CheckExact(object) || PyAnySet_CheckExact(object)) &&
      tracer.knownSourceOf(container) >= 0 && lookupKey(item)) {
    // `key in registry` on a dict or set capture keeps whole: the answer
    // guarded (a config's set of per-layer attribute names).
    int present = PyDict_CheckExact(object)
                      ? PyDict_Contains(object, item->object.get())
                      : PySet_Contains(object, item->object.get());
    if (present < 0) {
      PyErr_Clear();
      tracer.unsupported("`in` on a dict or set: hashing the key raised");
    }
    tracer.guardBuilder.guardObject(
        present ? Guard::Kind::HasKey : Guard::Kind::NoKey,
        tracer.sourceOfObject(container), item->object.get());
    return tracer.constant(present ? Py_True : Py_False);
  }
  if (object && container->method.empty())
    if (VarPtr method = ownMethod(container, "__contains__"))
      return tracer.callAny(method, {item}, {});
  return containsByEquality(items(container), item);
}

VarPtr ObjectValues::type(const VarPtr &value) {
  if (!value->object || !value->method.empty() || value->source < 0)
    return nullptr;
  PyObject *type = reinterpret_cast<PyObject *>(Py_TYPE(value->object.get()));
  tracer.guardBuilder.guardObject(Guard::Kind::TypeIs, value->source, type);
  return classVar(type);
}

VarPtr ObjectValues::isInstance(const VarPtr &value, PyObject *classes) {
  return value->object ? objectIsInstance(value->object.get(), classes)
                       : nullptr;
}

VarPtr ObjectValues::call(const VarPtr &value, const std::vector<VarPtr> &args,
                          const Keywords &keywords) {
  if (VarPtr result = applyWithoutGradient(value, args, keywords))
    return result;
  if (VarPtr result = callDerived(value, args, keywords))
    return result;
  if (value->method == "dict.get of a source" ||
      (value->method == "dict.__getitem__ of a source" && args.size() == 1))
    return entryOfSourceDict(value->self, args, keywords);
  // An lru_cache-wrapped function (availability checks, config lookups).
  // With constant arguments it is called now, as eager calls it: the
  // cache answers every later call alike, so a constant result is one.
  // Otherwise the function it wraps is traced (caching a pure function
  // changes no result).
  static PyObject *cacheSlot = nullptr;
  PyObject *cacheType =
      lookupOnce(cacheSlot, "functools", "_lru_cache_wrapper");
  if (value->object && value->source >= 0 && cacheType &&
      Py_TYPE(value->object.get()) ==
          reinterpret_cast<PyTypeObject *>(cacheType)) {
    bool constantArguments = true;
    for (const VarPtr &arg : args)
      constantArguments &= arg->kind == Var::Kind::Constant;
    for (const auto &[name, arg] : keywords)
      constantArguments &= arg->kind == Var::Kind::Constant;
    if (constantArguments) {
      PyRef positional = PyRef::steal(PyTuple_New(Py_ssize_t(args.size())));
      for (size_t i = 0; i < args.size(); ++i)
        PyTuple_SET_ITEM(positional.get(), Py_ssize_t(i),
                         Py_NewRef(args[i]->object.get()));
      PyRef named = PyRef::steal(PyDict_New());
      for (const auto &[name, arg] : keywords)
        PyDict_SetItemString(named.get(), name.c_str(), arg->object.get());
      PyRef result = PyRef::steal(
          PyObject_Call(value->object.get(), positional.get(), named.get()));
      if (result && isConstantObject(result.get()))
        return tracer.constant(result.get());
      PyErr_Clear(); // traced instead: a raise happens again there
    }
    PyRef name = PyRef::steal(PyUnicode_InternFromString("__wrapped__"));
    PyRef wrapped =
        PyRef::steal(PyObject_GetAttr(value->object.get(), name.get()));
    if (!wrapped) {
      PyErr_Clear();
      return nullptr;
    }
    return tracer.callAny(
        tracer.classify(wrapped.get(),
                        tracer.guardBuilder.namedSource(
                            Source::Kind::Attr, value->source, name.get())),
        args, keywords);
  }
  static PyObject *slot = nullptr;
  PyObject *partialType = lookupOnce(slot, "functools", "partial");
  if (!value->object || value->source < 0 || !partialType ||
      Py_TYPE(value->object.get()) !=
          reinterpret_cast<PyTypeObject *>(partialType))
    return nullptr;
  auto part = [&](const char *name) {
    PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
    PyRef read = PyRef::steal(PyObject_GetAttr(value->object.get(), key.get()));
    if (!read) {
      PyErr_Clear();
      tracer.unsupported(std::string("functools.partial without ") + name);
    }
    return tracer.classify(
        read.get(), tracer.guardBuilder.namedSource(Source::Kind::Attr,
                                                    value->source, key.get()));
  };
  VarPtr function = part("func");
  std::vector<VarPtr> allArgs = tracer.itemsOf(part("args"));
  allArgs.insert(allArgs.end(), args.begin(), args.end());
  VarPtr stored = part("keywords");
  if (stored->kind != Var::Kind::Dict)
    tracer.unsupported("functools.partial whose keywords capture keeps whole");
  // {**partial.keywords, **keywords}, in that order
  std::optional<Keywords> allKeywords = keywordsOfDict(*stored);
  if (!allKeywords)
    tracer.unsupported("functools.partial keywords that are not strings");
  for (const auto &[name, item] : keywords)
    (*allKeywords)[name] = item;
  return tracer.callAny(function, allArgs, *allKeywords);
}

VarPtr ObjectValues::applyWithoutGradient(const VarPtr &value,
                                          const std::vector<VarPtr> &args,
                                          const Keywords &keywords) {
  if (value->method != "autograd.Function.apply")
    return nullptr;
  const VarPtr &function = value->self; // the Function subclass
  auto *cls = reinterpret_cast<PyTypeObject *>(function->object.get());
  PyObject *functionClass = autogradFunctionClass();
  std::vector<VarPtr> inputs(args.begin(), args.end());
  if (tracer.gradMode)
    for (const VarPtr &input : inputs)
      if (input->kind == Var::Kind::Tensor &&
          tracer.inputs.requiresGrad(tracer.latestValue(input->tensor)))
        tracer.unsupported(std::string(cls->tp_name) +
                           ".apply recording a gradient (autograd.Function "
                           "in training)");
  // forward(ctx, *args), or forward(*args) with a setup_context of its
  // own (which only prepares backward: not run).
  PyRef setupName = PyRef::steal(PyUnicode_InternFromString("setup_context"));
  PyObject *setup =
      lookupInClass(function->object.get(), nullptr, setupName.get());
  PyObject *baseSetup = lookupInClass(functionClass, nullptr, setupName.get());
  bool takesContext = setup == baseSetup;
  PyRef forwardName = PyRef::steal(PyUnicode_InternFromString("forward"));
  VarPtr forward = tracer.loadAttr(function, forwardName.get());
  if (takesContext) {
    static PyObject *contextSlot = nullptr;
    PyObject *contextClass =
        lookupOnce(contextSlot, "dynafuse.functional", "FunctionContext");
    if (!contextClass)
      tracer.unsupported("dynafuse.functional.FunctionContext is missing");
    VarPtr context = tracer.objects.construct(
        tracer.fixedObject(PyRef::borrow(contextClass),
                           "dynafuse.functional.FunctionContext"),
        {}, {});
    if (!context)
      tracer.unsupported("making an autograd.Function context");
    inputs.insert(inputs.begin(), context);
  }
  return tracer.callAny(forward, inputs, keywords);
}

VarPtr ObjectValues::entryOfSourceDict(const VarPtr &dict,
                                       const std::vector<VarPtr> &args,
                                       const Keywords &keywords) {
  if (!keywords.empty() || args.empty() || args.size() > 2 ||
      !lookupKey(args[0]))
    tracer.unsupported("dict.get of a dict read from a source, with a key "
                       "that is not a constant or an object capture pins");
  PyObject *key = args[0]->object.get();
  PyObject *entry = PyDict_GetItemWithError(dict->object.get(), key);
  if (!entry) {
    if (PyErr_Occurred()) {
      PyErr_Clear();
      tracer.unsupported("dict.get: hashing the key raised");
    }
    tracer.guardBuilder.guardObject(Guard::Kind::NoKey,
                                    tracer.sourceOfObject(dict), key);
    return args.size() == 2 ? args[1] : tracer.constant(Py_None);
  }
  return tracer.classify(
      entry, tracer.guardBuilder.namedSource(Source::Kind::DictItem,
                                             tracer.sourceOfObject(dict), key));
}

int ObjectValues::callable(const VarPtr &value) {
  return value->object ? PyCallable_Check(value->object.get()) : -1;
}

OutputSpec ObjectValues::output(const VarPtr &value, const ItemSpec &) {
  // An object guarded by type only is whichever this run's source holds.
  if (int source = guardedByTypeAt(value); source >= 0)
    return sourceSpec(source);
  return constantSpec(value);
}

int ObjectValues::guardedByTypeAt(const VarPtr &value) const {
  if (!value->object || !value->method.empty())
    return -1;
  return tracer.objectSources.typeGuardedSource(value->object.get());
}

OutputSpec ObjectValues::liveState(const VarPtr &value, const ItemSpec &) {
  OutputSpec spec;
  if (value->method == "__exit__" && value->setsGradMode >= 0 &&
      value->source < 0) { // entered during capture: enter a fresh one
    spec.kind = OutputSpec::Kind::EnteredContext;
    spec.constant = value->object;
    spec.index = value->setsGradMode;
    return spec;
  }
  if (!value->object && (value->method.rfind("list.", 0) == 0 ||
                         value->method.rfind("dict.", 0) == 0 ||
                         value->method.rfind("tuple.", 0) == 0)) {
    // The function half of a container method on the stack: the type's
    // own (unbound) method, called with the container as self.
    PyObject *type =
        reinterpret_cast<PyObject *>(value->method[0] == 'l'   ? &PyList_Type
                                     : value->method[0] == 't' ? &PyTuple_Type
                                                               : &PyDict_Type);
    size_t dot = value->method.find('.');
    spec.kind = OutputSpec::Kind::Constant;
    spec.constant = PyRef::steal(
        PyObject_GetAttrString(type, value->method.substr(dot + 1).c_str()));
    if (!spec.constant) {
      PyErr_Clear();
      throw CannotResume{"an unknown container method " + value->method};
    }
    return spec;
  }
  if ((!value->method.empty() && value->source < 0) || !value->object)
    throw CannotResume{
        "a value made during capture (" +
        (value->method.empty() ? std::string("object") : value->method) + ")"};
  if (value->source >= 0) {
    spec.kind = OutputSpec::Kind::Source;
    spec.index = value->source;
    return spec;
  }
  if (int source = guardedByTypeAt(value); source >= 0)
    return sourceSpec(source);
  // Made during capture from constants and guarded facts: the same object
  // on every call the guards admit.
  spec.kind = OutputSpec::Kind::Constant;
  spec.constant = value->object;
  return spec;
}

} // namespace capture
} // namespace dynafuse

//===- TracerBuiltins.cpp - Python builtins and grad-mode contexts --------===//
//
// Builtins the tracer runs at capture time (pure ones on constants,
// containers, isinstance, getattr/hasattr) and torch's grad-mode context
// managers.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include "Values/DictKeys.h"

#include <functional>

namespace dynafuse {
namespace capture {

bool BytecodeTracer::isBuiltin(PyObject *callable, const char *name) const {
  PyObject *builtins = frame->builtins;
  return PyDict_Check(builtins) &&
         PyDict_GetItemString(builtins, name) == callable;
}


VarPtr BytecodeTracer::foldTorchDevice(PyObject *callable,
                                       const std::vector<VarPtr> &args,
                                       const Keywords &keywords) {
  if (!PyType_Check(callable) ||
      std::string(reinterpret_cast<PyTypeObject *>(callable)->tp_name) !=
          "torch.device")
    return nullptr;
  PyRef positional = PyRef::steal(PyTuple_New(Py_ssize_t(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i]->kind != Var::Kind::Constant)
      unsupported("torch.device() of a value not known at capture");
    PyTuple_SET_ITEM(positional.get(), i, args[i]->object.get());
    Py_INCREF(args[i]->object.get());
  }
  PyRef named = PyRef::steal(PyDict_New());
  for (const auto &[key, value] : keywords) {
    if (value->kind != Var::Kind::Constant)
      unsupported("torch.device() of a value not known at capture");
    PyDict_SetItemString(named.get(), key.c_str(), value->object.get());
  }
  PyRef device = PyRef::steal(
      PyObject_Call(callable, positional.get(), named.get()));
  if (!device) {
    PyErr_Clear();
    unsupported("torch.device() raises for these arguments");
  }
  VarPtr var = makeVar(Var::Kind::Object);
  var->object = device;
  return var;
}

VarPtr
BytecodeTracer::foldBuiltin(PyObject *callable, const std::vector<VarPtr> &args,
                            const Keywords &keywords) {
  if (VarPtr device = foldTorchDevice(callable, args, keywords))
    return device;
  // slice(stop), slice(start, stop[, step]): as BUILD_SLICE makes them.
  if (isBuiltin(callable, "slice") && keywords.empty() && !args.empty() &&
      args.size() <= 3)
    return args.size() == 1
               ? makeSlice(constant(Py_None), args[0], nullptr)
               : makeSlice(args[0], args[1],
                           args.size() == 3 ? args[2] : nullptr);
  static const char *pure[] = {"float", "int",   "bool", "abs", "min",
                               "max",   "round", "len",  "pow", "range"};
  bool isPure = isMathFunction(callable);
  for (const char *name : pure)
    isPure |= isBuiltin(callable, name);
  // A method of a string, number or tuple (str.startswith, str.format).
  bool constantMethod = PyCFunction_Check(callable) &&
                        PyCFunction_GET_SELF(callable) &&
                        isConstantObject(PyCFunction_GET_SELF(callable));
  if (!isPure && !constantMethod)
    return nullptr;
  if (!keywords.empty() && !constantMethod)
    return nullptr;
  if (VarPtr size = sizeBuiltin(callable, args))
    return size;
  // Constants, and lists or tuples of constants ("-".join(parts)): pure
  // functions take them too (math.prod, max over a list).
  PyRef tuple, named;
  if (!constantCallArguments(args, keywords, tuple, named))
    return nullptr;
  PyRef folded = PyRef::steal(PyObject_Call(
      callable, tuple.get(), keywords.empty() ? nullptr : named.get()));
  if (folded && PyList_CheckExact(folded.get())) { // str.split
    VarPtr list = makeVar(Var::Kind::Tuple);
    list->isList = true;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(folded.get()); ++i) {
      PyObject *item = PyList_GET_ITEM(folded.get(), i);
      if (!isConstantObject(item))
        unsupported("a constant's method returned a list of objects");
      list->items.push_back(constant(item));
    }
    return list;
  }
  if (folded && !isConstantObject(folded.get()))
    unsupported("a constant's method returned an object");
  return foldPython(folded.release());
}

/// sorted(items) of values known at capture: a list of the same vars, in
/// Python's (stable) order.
VarPtr BytecodeTracer::sortedItems(const std::vector<VarPtr> &items) {
  PyRef keyed = PyRef::steal(PyList_New(0));
  for (size_t i = 0; i < items.size(); ++i) {
    if (!comparableAtCapture(items[i]))
      unsupported("sorted() of values not known at capture");
    PyRef position = PyRef::steal(PyLong_FromSize_t(i));
    PyRef pair =
        PyRef::steal(PyTuple_Pack(2, items[i]->object.get(), position.get()));
    PyList_Append(keyed.get(), pair.get());
  }
  if (PyList_Sort(keyed.get()) < 0) {
    PyErr_Clear();
    unsupported("sorted() comparison raised");
  }
  VarPtr list = makeVar(Var::Kind::Tuple);
  list->isList = true;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keyed.get()); ++i) {
    PyObject *position = PyTuple_GET_ITEM(PyList_GET_ITEM(keyed.get(), i), 1);
    list->items.push_back(items[PyLong_AsSize_t(position)]);
  }
  return list;
}

VarPtr BytecodeTracer::containerBuiltin(
    PyObject *callable, const std::vector<VarPtr> &args,
    const Keywords &keywords) {
  auto is = [&](const char *name) { return isBuiltin(callable, name); };
  PyObject *ordered = orderedDictType();
  if (ordered && callable == ordered && args.empty() && keywords.empty()) {
    // OrderedDict(): a dict var that keeps its class (insertion order is
    // every dict's); one leaving the frame is refused (DictValues).
    VarPtr made = makeVar(Var::Kind::Dict);
    made->object = PyRef::borrow(ordered);
    return made;
  }
  if (PyCFunction_Check(callable) &&
      PyCFunction_GET_SELF(callable) ==
          reinterpret_cast<PyObject *>(&PyDict_Type) &&
      std::string(
          reinterpret_cast<PyCFunctionObject *>(callable)->m_ml->ml_name) ==
          "fromkeys" &&
      !args.empty() && args.size() <= 2 && keywords.empty()) {
    // dict.fromkeys(keys[, value]): one entry per key, each the same value.
    VarPtr made = makeVar(Var::Kind::Dict);
    VarPtr value = args.size() == 2 ? args[1] : constant(Py_None);
    for (const VarPtr &key : itemsOf(args[0]))
      setDictEntry(made, dictKeyOf(key, "dict.fromkeys"), value);
    return made;
  }
  if (is("set") && args.size() <= 1 && keywords.empty()) {
    // set(), set(items): a set var (members compared as Python's set
    // compares them: constants by value, tensors and objects by identity).
    VarPtr made = makeVar(Var::Kind::Tuple);
    made->isSet = true;
    if (!args.empty())
      for (const VarPtr &item : itemsOf(args[0]))
        addToSet(made, item);
    return made;
  }
  if (is("dict") && args.size() <= 1) {
    // dict(), dict(pairs), dict(other_dict), dict(name=value): a new dict
    // var with constant keys.
    VarPtr made = makeVar(Var::Kind::Dict);
    auto add = [&](const VarPtr &key, const VarPtr &value) {
      setDictEntry(made, dictKeyOf(key, "dict()"), value);
    };
    if (!args.empty() && args[0]->kind == Var::Kind::Dict) {
      made->keys = args[0]->keys;
      made->items = args[0]->items;
    } else if (!args.empty()) {
      for (const VarPtr &pair : itemsOf(args[0])) {
        std::vector<VarPtr> both = itemsOf(pair);
        if (both.size() != 2)
          unsupported("dict() of items that are not pairs");
        add(both[0], both[1]);
      }
    }
    for (const auto &[key, value] : keywords) // in the call's order
      setDictEntry(made, stringKeyText(key), value);
    return made;
  }
  // Only enumerate's start is a keyword understood here.
  VarPtr start = is("enumerate") && args.size() == 2 ? args[1] : nullptr;
  for (const auto &[key, value] : keywords) {
    if (key != "start" || !is("enumerate") || start)
      return nullptr;
    start = value;
  }
  int64_t first = 0;
  if (start) {
    if (start->kind != Var::Kind::Constant ||
        !PyLong_CheckExact(start->object.get()))
      return nullptr;
    first = PyLong_AsLongLong(start->object.get());
  }
  if (is("len"))
    return args.size() == 1 ? values.of(args[0]).length(args[0]) : nullptr;
  if (is("bool") && args.size() == 1) // constants folded before
    return constant(truthOf(args[0], false) ? Py_True : Py_False);
  if (is("iter") && args.size() == 1)
    return iterate(args[0]);
  if (is("next") && (args.size() == 1 || args.size() == 2) &&
      args[0]->kind == Var::Kind::Iterator) {
    // next(it[, default]) of an unrolled iterator: its next item, as
    // FOR_ITER takes it.
    VarPtr iterator = args[0];
    if (iterator->position < iterator->items.size()) {
      willMutate(iterator);
      return iterator->items[iterator->position++];
    }
    if (args.size() == 2)
      return args[1];
    unsupported("next() of an exhausted iterator (StopIteration)");
  }
  bool container =
      !args.empty() &&
      (args[0]->kind == Var::Kind::Tuple ||
       (args[0]->kind == Var::Kind::NewObject &&
        (is("tuple") || is("list") || is("enumerate") || is("zip") ||
         is("all") || is("any") || is("sum"))) ||
       args[0]->kind == Var::Kind::Iterator ||
       args[0]->kind == Var::Kind::Dict ||
       (args[0]->kind == Var::Kind::Object &&
        args[0]->method == "derived") || // data read at capture
       (args[0]->kind == Var::Kind::Tensor &&
        (is("tuple") || is("list") || is("enumerate") || is("zip"))) ||
       (args[0]->kind == Var::Kind::Constant &&
        (PyTuple_Check(args[0]->object.get()) || // torch.Size
         PyRange_Check(args[0]->object.get()))));
  bool modules = !args.empty() && args[0]->kind == Var::Kind::Object &&
                 args[0]->object && isModule(args[0]->object.get()) &&
                 (is("enumerate") || is("zip") || is("list") || is("tuple") ||
                  is("reversed"));
  // reversed() takes sequences (and dicts), never an iterator; a tensor's
  // is a flip (Tensor.__reversed__), not its rows.
  if (is("reversed") && container &&
      (args.size() != 1 || args[0]->kind == Var::Kind::Iterator ||
       (args[0]->kind == Var::Kind::Object && args[0]->method == "derived")))
    return nullptr;
  if (!container && !modules)
    return nullptr;
  // nn.Sequential / ModuleList / ModuleDict: their guarded children.
  std::vector<VarPtr> items =
      modules ? iterate(args[0])->items : itemsOf(args[0]);
  // The eager consumers take `taken` items of an iterator argument: it is
  // left past them (enumerate and zip are lazy in Python: left as is).
  auto consume = [&](size_t taken) {
    const VarPtr &iterator = args[0];
    if (iterator->kind != Var::Kind::Iterator)
      return;
    willMutate(iterator);
    iterator->position += std::min(taken, items.size());
  };
  bool eager = is("tuple") || is("list") || is("sorted") || is("sum");
  if (eager)
    consume(items.size());
  if ((is("tuple") || is("list")) && args.size() == 1) {
    VarPtr result = makeVar(Var::Kind::Tuple);
    result->items = items;
    result->isList = is("list");
    return result;
  }
  if (is("sorted") && args.size() == 1)
    return sortedItems(items);
  if ((is("all") || is("any")) && args.size() == 1) {
    bool all = is("all");
    for (size_t i = 0; i < items.size(); ++i)
      if (truthOf(items[i], false) != all) {
        consume(i + 1); // up to the item that decided
        return constant(all ? Py_False : Py_True);
      }
    consume(items.size());
    return constant(all ? Py_True : Py_False);
  }
  if (is("sum") && args.size() <= 2) {
    VarPtr total = args.size() == 2 ? args[1] : integerConstant(0);
    for (const VarPtr &item : items)
      total = binaryOp(NB_ADD, total, item);
    return total;
  }
  if (is("reversed")) {
    VarPtr iterator = makeVar(Var::Kind::Iterator);
    iterator->items.assign(items.rbegin(), items.rend());
    return iterator;
  }
  if (is("enumerate") && args.size() <= 2) {
    VarPtr iterator = makeVar(Var::Kind::Iterator);
    for (size_t i = 0; i < items.size(); ++i) {
      VarPtr pair = makeVar(Var::Kind::Tuple);
      pair->items = {integerConstant(first + int64_t(i)), items[i]};
      iterator->items.push_back(pair);
    }
    return iterator;
  }
  if (is("zip")) {
    std::vector<std::vector<VarPtr>> columns;
    size_t length = items.size();
    for (const VarPtr &arg : args) {
      bool module = arg->kind == Var::Kind::Object && arg->object &&
                    isModule(arg->object.get());
      columns.push_back(module ? iterate(arg)->items : itemsOf(arg));
      length = std::min(length, columns.back().size());
    }
    VarPtr iterator = makeVar(Var::Kind::Iterator);
    for (size_t i = 0; i < length; ++i) {
      VarPtr row = makeVar(Var::Kind::Tuple);
      for (const auto &column : columns)
        row->items.push_back(column[i]);
      iterator->items.push_back(row);
    }
    return iterator;
  }
  return nullptr;
}

VarPtr BytecodeTracer::isInstance(PyObject *callable,
                                  const std::vector<VarPtr> &args) {
  PyObject *builtins = frame->builtins;
  if (!PyDict_Check(builtins) || args.size() != 2)
    return nullptr;
  bool subclass = PyDict_GetItemString(builtins, "issubclass") == callable;
  if (!subclass && PyDict_GetItemString(builtins, "isinstance") != callable)
    return nullptr;
  // The class, or a tuple of classes built in the code (isinstance(x, (A,
  // B))): known objects either way.
  PyRef classes;
  if (args[1]->kind == Var::Kind::Object ||
      args[1]->kind == Var::Kind::Constant) {
    classes = args[1]->object;
  } else if (args[1]->kind == Var::Kind::Tuple && args[1]->keys.empty()) {
    classes = PyRef::steal(PyTuple_New(Py_ssize_t(args[1]->items.size())));
    for (size_t i = 0; i < args[1]->items.size(); ++i) {
      const VarPtr &item = args[1]->items[i];
      if ((item->kind != Var::Kind::Object &&
           item->kind != Var::Kind::Constant) ||
          !item->object)
        return nullptr;
      PyTuple_SET_ITEM(classes.get(), Py_ssize_t(i),
                       Py_NewRef(item->object.get()));
    }
  }
  if (!classes)
    return nullptr;
  if (subclass) {
    // issubclass of a class capture pins (a guarded class, type() of a
    // value): decided at capture.
    const VarPtr &cls = args[0];
    if (cls->kind != Var::Kind::Object || !cls->object ||
        !cls->method.empty() || !PyType_Check(cls->object.get()))
      return nullptr;
    int answer = PyObject_IsSubclass(cls->object.get(), classes.get());
    if (answer < 0) {
      PyErr_Clear();
      unsupported("issubclass raised");
    }
    return constant(answer ? Py_True : Py_False);
  }
  return values.of(args[0]).isInstance(args[0], classes.get());
}

VarPtr BytecodeTracer::typeOf(const VarPtr &var) {
  return values.of(var).type(var);
}

VarPtr BytecodeTracer::attributeBuiltin(PyObject *callable,
                                        const std::vector<VarPtr> &args) {
  auto is = [&](const char *name) { return isBuiltin(callable, name); };
  if (is("setattr") && args.size() == 3 &&
      args[1]->kind == Var::Kind::Constant &&
      PyUnicode_CheckExact(args[1]->object.get())) {
    // setattr(obj, "name", value): obj.name = value.
    storeAttribute(args[0], args[1]->object.get(), args[2]);
    return constant(Py_None);
  }
  if (is("delattr") && args.size() == 2 &&
      args[0]->kind == Var::Kind::NewObject &&
      args[1]->kind == Var::Kind::Constant &&
      PyUnicode_CheckExact(args[1]->object.get())) {
    objects.deleteAttribute(args[0], args[1]->object.get(), /*direct=*/false);
    return constant(Py_None);
  }
  bool get = is("getattr"), has = is("hasattr");
  if ((!get && !has) || args.size() < 2 || args.size() > (get ? 3u : 2u) ||
      args[1]->kind != Var::Kind::Constant ||
      !PyUnicode_Check(args[1]->object.get()))
    return nullptr;
  PyObject *name = args[1]->object.get();
  const VarPtr &base = args[0];
  if (base->kind == Var::Kind::NewObject) {
    bool has = objects.has(base, name);
    if (!get)
      return constant(has ? Py_True : Py_False);
    if (has)
      return loadAttr(base, name);
    if (args.size() == 3)
      return args[2];
    unsupported(std::string("getattr of a missing attribute '") +
                PyUnicode_AsUTF8(name) + "'");
  }
  static PyObject *tensorSlot = nullptr;
  PyObject *tensorClass = lookupOnce(tensorSlot, "torch", "Tensor");
  // A tensor has what torch.Tensor has (its instances carry no attributes
  // of their own in the code capture runs).
  bool present = (base->kind == Var::Kind::Tensor && tensorClass &&
                  PyObject_HasAttr(tensorClass, name)) ||
                 (base->object && PyObject_HasAttr(base->object.get(), name)) ||
                 (base->object &&
                  storedAttribute(base->object.get(), PyUnicode_AsUTF8(name)));
  if (base->kind == Var::Kind::Object && !present)
    guardMissingAttribute(base, name);
  if (has)
    return constant(present ? Py_True : Py_False);
  if (present)
    return loadAttr(base, name);
  if (args.size() == 3)
    return args[2];
  unsupported(std::string("getattr of a missing attribute '") +
              PyUnicode_AsUTF8(name) + "'");
}

void BytecodeTracer::guardMissingAttribute(const VarPtr &object,
                                           PyObject *name) {
  guardBuilder.guardObject(Guard::Kind::NoAttribute, sourceOfObject(object),
                           name);
}

VarPtr
BytecodeTracer::gradModeContext(PyObject *callable,
                                const std::vector<VarPtr> &args,
                                const Keywords &keywords) {
  static PyObject *slot = nullptr;
  PyObject *torch = lookupOnce(slot, "torch", nullptr);
  if (!torch || !PyType_Check(callable))
    return nullptr;
  int mode = -1;
  for (const char *name : {"no_grad", "enable_grad", "inference_mode"}) {
    PyRef type = PyRef::steal(PyObject_GetAttrString(torch, name));
    if (!type)
      PyErr_Clear();
    else if (type.get() == callable)
      mode = std::string(name) == "enable_grad";
  }
  if (mode < 0)
    return autocastCasts.context(callable, args, keywords);
  bool inference = !args.empty() || !keywords.empty();
  if (inference) {
    // inference_mode(False) keeps grad mode as it is: not modelled.
    const VarPtr &flag = args.empty() ? keywords.begin()->second : args[0];
    if (args.size() + keywords.size() != 1 ||
        flag->kind != Var::Kind::Constant || flag->object.get() != Py_True)
      unsupported("grad-mode context with arguments other than mode=True");
  }
  VarPtr context = makeVar(Var::Kind::Object);
  context->object = PyRef::borrow(callable);
  context->setsGradMode = mode;
  return context;
}

VarPtr BytecodeTracer::gradModeExit(PyObject *object, int source) {
  if (!PyMethod_Check(object))
    return nullptr;
  PyObject *self = PyMethod_GET_SELF(object);
  static PyObject *slot = nullptr;
  PyObject *torch = lookupOnce(slot, "torch", nullptr);
  int mode = -1;
  PyObject *cls = nullptr;
  for (const char *name : {"no_grad", "enable_grad"}) {
    PyRef type = PyRef::steal(torch ? PyObject_GetAttrString(torch, name)
                                    : nullptr);
    if (type && reinterpret_cast<PyObject *>(Py_TYPE(self)) == type.get()) {
      mode = std::string(name) == "enable_grad";
      cls = type.get();
    }
  }
  PyErr_Clear();
  if (mode < 0)
    return nullptr;
  PyRef exit = PyRef::steal(PyObject_GetAttrString(cls, "__exit__"));
  PyRef prev = PyRef::steal(PyObject_GetAttrString(self, "prev"));
  if (!exit || PyMethod_GET_FUNCTION(object) != exit.get() || !prev ||
      !PyBool_Check(prev.get())) {
    PyErr_Clear();
    return nullptr;
  }
  guardBuilder.guardObject(Guard::Kind::TypeIs, source,
                           reinterpret_cast<PyObject *>(&PyMethod_Type));
  PyRef selfName = PyRef::steal(PyUnicode_InternFromString("__self__"));
  PyRef prevName = PyRef::steal(PyUnicode_InternFromString("prev"));
  int selfSource =
      guardBuilder.namedSource(Source::Kind::Attr, source, selfName.get());
  guardBuilder.guardObject(Guard::Kind::TypeIs, selfSource, cls);
  guardBuilder.guardObject(
      Guard::Kind::Equals,
      guardBuilder.namedSource(Source::Kind::Attr, selfSource, prevName.get()),
      prev.get());
  VarPtr var = makeVar(Var::Kind::Object);
  var->object = PyRef::borrow(cls);
  var->method = "__exit__";
  var->setsGradMode = mode;
  var->restoresGradMode = prev.get() == Py_True;
  return var;
}

void BytecodeTracer::enterWith(const VarPtr &context) {
  if (autocastCasts.enter(context))
    return;
  if (context->kind != Var::Kind::Object || context->setsGradMode < 0) {
    // A context manager whose __enter__ and __exit__ are Python functions
    // (contextlib.nullcontext, which transformers' maybe_autocast returns;
    // a library's own): entered by tracing __enter__, left by tracing the
    // __exit__ the block's end calls, as BEFORE_WITH looks them up. A
    // break inside the block runs the frame eagerly (TracerResume.cpp).
    PyObject *cls = nullptr;
    if (context->kind == Var::Kind::NewObject && context->function)
      cls = context->function->object.get();
    else if (context->kind == Var::Kind::Object && context->method.empty() &&
             context->object)
      cls = reinterpret_cast<PyObject *>(Py_TYPE(context->object.get()));
    auto definedInPython = [&](const char *name) {
      PyRef function = PyRef::steal(PyObject_GetAttrString(cls, name));
      PyErr_Clear();
      return function && PyFunction_Check(function.get());
    };
    if (!cls || !PyType_Check(cls) || !definedInPython("__enter__") ||
        !definedInPython("__exit__"))
      unsupported("with block over a context manager other than no_grad, "
                  "enable_grad, inference_mode, autocast or one defined in "
                  "Python");
    PyRef enterName = PyRef::steal(PyUnicode_InternFromString("__enter__"));
    PyRef exitName = PyRef::steal(PyUnicode_InternFromString("__exit__"));
    VarPtr enter = loadAttr(context, enterName.get());
    VarPtr exit = loadAttr(context, exitName.get());
    VarPtr entered = callAny(enter, {}, {});
    push(exit);
    push(entered);
    return;
  }
  VarPtr exit = makeVar(Var::Kind::Object);
  exit->object = context->object;
  exit->method = "__exit__";
  exit->setsGradMode = context->setsGradMode;
  gradModeStack.push_back(gradMode);
  gradMode = context->setsGradMode == 1;
  push(exit);
  push(constant(Py_None));
}

} // namespace capture
} // namespace dynafuse

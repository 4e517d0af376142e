//===- TracerSources.cpp - Where values come from: locals, globals, attrs -===//
//
// Reading locals, globals, closure cells and attributes, each through a
// source of the GuardBuilder, with the guards that protect what was read.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include "Values/DictKeys.h"

namespace dynafuse {
namespace capture {

VarPtr BytecodeTracer::classify(PyObject *object, int source) {
  VarPtr var = classifyObject(object, source);
  var->source = source;
  return var;
}

VarPtr BytecodeTracer::classifyObject(PyObject *object, int source) {
  if (isAnyTensor(object))
    return tensorInput(object, source);
  if (isConstantObject(object)) {
    if (PyLong_CheckExact(object))
      if (std::optional<SymExpr> size = symbolic.symbolicInt(
              object, source, objectSources.holdsCallData(source)))
        return sizeVar(*size);
    guardBuilder.guardObject(Guard::Kind::Equals, source, object);
    VarPtr var = makeVar(Var::Kind::Constant);
    var->object = PyRef::borrow(object);
    return var;
  }
  if (PyTuple_CheckExact(object) || PyList_CheckExact(object))
    return tupleOfSource(object, source);
  if (PySet_CheckExact(object) && PySet_GET_SIZE(object) <= 64)
    if (VarPtr set = setOfSource(object, source))
      return set;
  if (VarPtr exit = gradModeExit(object, source))
    return exit;
  if (VarPtr exit = autocastCasts.exitFromSource(object, source))
    return exit;
  if (PyMethod_Check(object) && !opTable().function(object)) {
    // A Python bound method (Function.apply read off its class, a method
    // stored on an instance): its function and its self, each read through
    // a guarded attribute source. The method object itself is made afresh
    // by each attribute read, so its identity is nothing to guard.
    auto part = [&](const char *name) {
      PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
      return classify(
          name[2] == 'f' ? PyMethod_GET_FUNCTION(object)
                         : PyMethod_GET_SELF(object),
          guardBuilder.namedSource(Source::Kind::Attr, source, key.get()));
    };
    VarPtr method = makeVar(Var::Kind::BoundMethod);
    method->function = part("__func__");
    method->self = part("__self__");
    return method;
  }
  if (PyDict_CheckExact(object) && PyDict_Size(object) <= 64)
    if (VarPtr dict = dictOfSource(object, source))
      return dict;
  // Modules are guarded by type: everything capture reads from them goes
  // through attribute sources with guards of their own, so many instances of
  // one block share one compiled entry.
  if (isModule(object))
    guardBuilder.guardObject(Guard::Kind::TypeIs, source,
                             reinterpret_cast<PyObject *>(Py_TYPE(object)));
  else if (isTorchValueObject(object) || isBoundBuiltinMethod(object))
    // A torch.device is made afresh by every `.device` read and every
    // cache a library builds, a builtin method bound to its type or
    // instance (`dict.fromkeys`) by every attribute read: their identity
    // never holds twice, their value (what they are bound to) does.
    guardBuilder.guardObject(Guard::Kind::Equals, source, object);
  else
    objectSources.guard(object, source); // by type or identity
  VarPtr var = makeVar(Var::Kind::Object);
  var->object = PyRef::borrow(object);
  return var;
}

VarPtr BytecodeTracer::tupleOfSource(PyObject *sequence, int source) {
  PyRef items = PyRef::steal(PySequence_Tuple(sequence));
  Guard guard;
  guard.kind = Guard::Kind::TupleLength;
  guard.source = source;
  guard.length = size_t(PyTuple_GET_SIZE(items.get()));
  guard.expected =
      PyRef::borrow(reinterpret_cast<PyObject *>(Py_TYPE(sequence)));
  guardBuilder.addGuard(std::move(guard));
  VarPtr var = makeVar(Var::Kind::Tuple);
  var->isList = PyList_CheckExact(sequence);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items.get()); ++i)
    var->items.push_back(classify(
        PyTuple_GET_ITEM(items.get(), i),
        guardBuilder.indexedSource(Source::Kind::Item, source, int(i))));
  return var;
}

VarPtr BytecodeTracer::setOfSource(PyObject *set, int source) {
  // A set of constants (a module's `unique_layer_types`): guarded by its
  // members in their iteration order (sameConstant of a set against a
  // list), so a loop over it runs in the order capture unrolled.
  PyRef members = PyRef::steal(PySequence_List(set));
  if (!members) {
    PyErr_Clear();
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(members.get()); ++i)
    if (!isConstantObject(PyList_GET_ITEM(members.get(), i)))
      return nullptr;
  guardBuilder.guardObject(Guard::Kind::Equals, source, members.get());
  VarPtr var = makeVar(Var::Kind::Tuple);
  var->isSet = true;
  var->source = source; // the caller's own set: not mutated in capture
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(members.get()); ++i)
    var->items.push_back(constant(PyList_GET_ITEM(members.get(), i)));
  return var;
}

VarPtr BytecodeTracer::dictOfSource(PyObject *dict, int source) {
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value))
    if (!dictKeyText(key))
      return nullptr;
  Guard length;
  length.kind = Guard::Kind::DictLength;
  length.source = source;
  length.length = size_t(PyDict_Size(dict));
  guardBuilder.addGuard(std::move(length));
  VarPtr var = makeVar(Var::Kind::Dict);
  pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    var->keys.push_back(*dictKeyText(key));
    var->items.push_back(classify(
        value, guardBuilder.namedSource(Source::Kind::DictItem, source, key)));
  }
  return var;
}

VarPtr BytecodeTracer::tensorInput(PyObject *object, int source) {
  if (!isPlainTensor(object))
    unsupported(std::string("tensor subclass ") + Py_TYPE(object)->tp_name);
  VarPtr var = makeVar(Var::Kind::Tensor);
  if (Value *known = inputs.ofSource(source)) {
    var->tensor = known;
    return var;
  }
  if (const std::pair<int, Value *> *seen = inputs.ofObject(object)) {
    // The same tensor reached through another source: one graph input, as
    // long as both sources keep holding one object.
    guardBuilder.guardRelation(Guard::Kind::SameObject, source, seen->first);
    var->tensor = seen->second;
    inputs.addSource(source, var->tensor);
    return var;
  }
  TensorMeta meta = describeTensor(object);
  if (!meta.dtype)
    unsupported("tensor of unsupported dtype " + meta.dtypeName);
  // CPU and CUDA tensors are captured; the device is part of the tensor
  // guard, and CompileFrame refuses a graph whose devices the call's
  // backend cannot run (CPU backends: cpu; "cuda": cuda:0).
  bool cuda = meta.device.rfind("cuda", 0) == 0;
  if (meta.device != "cpu" && !cuda)
    unsupported("tensor on device " + meta.device +
                " (backends run cpu and cuda tensors)");
  TensorType type;
  type.dtype = *meta.dtype;
  type.device = meta.device;
  Guard guard;
  guard.kind = Guard::Kind::Tensor;
  guard.source = source;
  guard.tensor = meta;
  guard.tensor.data = nullptr;
  std::vector<bool> dims = symbolic.symbolicDims(object, source, meta.sizes);
  if (std::find(dims.begin(), dims.end(), true) == dims.end() ||
      !symbolic.makeSymbolic(dims, meta, type, guard)) {
    for (int64_t size : meta.sizes)
      type.sizes.push_back(SymExpr(size));
    std::vector<SymExpr> strides;
    for (int64_t stride : meta.strides)
      strides.push_back(SymExpr(stride));
    if (!meta.sizes.empty() && strides != contiguousStrides(type.sizes))
      type.strides = strides;
  }
  guardBuilder.addGuard(std::move(guard));
  std::string name = "arg" + std::to_string(result.graph->inputs.size());
  var->tensor = result.graph->addInput(name, type);
  // Gradients flow from the frame's inputs only when it started in grad
  // mode (a frame run under no_grad computes nothing that requires grad).
  bool requiresGrad = meta.requiresGrad && result.state.gradMode;
  inputs.addInput(object, source, var->tensor, requiresGrad);
  result.inputSources.push_back(source);
  result.inputRequiresGrad.push_back(requiresGrad);
  return var;
}

VarPtr BytecodeTracer::constant(PyObject *object) {
  if (PyCode_Check(object)) {
    VarPtr code = makeVar(Var::Kind::Object);
    code->object = PyRef::borrow(object);
    return code;
  }
  if (PyFrozenSet_CheckExact(object)) {
    // `x in {1, 2}` loads a frozenset constant: a set var of constants.
    VarPtr set = makeVar(Var::Kind::Tuple);
    set->isSet = true;
    PyRef iterator = PyRef::steal(PyObject_GetIter(object));
    while (PyRef item =
               PyRef::steal(iterator ? PyIter_Next(iterator.get()) : nullptr))
      set->items.push_back(constant(item.get()));
    PyErr_Clear();
    return set;
  }
  if (!isConstantObject(object))
    unsupported(std::string("constant of type ") + Py_TYPE(object)->tp_name);
  VarPtr var = makeVar(Var::Kind::Constant);
  var->object = PyRef::borrow(object);
  return var;
}

VarPtr BytecodeTracer::loadLocal(int index) {
  if (current.locals.at(size_t(index))) {
    if (current.locals[size_t(index)]->kind == Var::Kind::Null)
      unsupported("read of a deleted local variable");
    return current.locals[size_t(index)];
  }
  if (current.functionSource >= 0 || inliner.inlining())
    unsupported("read of an unbound local variable");
  PyObject *object = frame->localsplus[index];
  if (!object)
    unsupported("read of an unbound local variable");
  if (index >= current.code->co_nlocalsplus - current.code->co_nfreevars)
    unsupported("closure cell read through LOAD_FAST");
  VarPtr var = classify(
      object, guardBuilder.indexedSource(Source::Kind::Local, -1, index));
  current.locals[size_t(index)] = var;
  return var;
}

VarPtr BytecodeTracer::takeLocal(int index) {
  VarPtr &slot = current.locals.at(size_t(index));
  VarPtr value = slot;
  if (!value && current.functionSource < 0 && !inliner.inlining() &&
      frame->localsplus[index])
    value = loadLocal(index);
  if (!value)
    value = makeVar(Var::Kind::Null);
  slot = makeVar(Var::Kind::Null);
  return value;
}

VarPtr BytecodeTracer::closureSlot(int index) {
  int firstFree = current.code->co_nlocalsplus - current.code->co_nfreevars;
  if (index < firstFree) {
    VarPtr local = current.locals.at(size_t(index));
    return local && local->kind == Var::Kind::Cell ? local : nullptr;
  }
  if (size_t(index - firstFree) < current.symbolicClosure.size())
    return current.symbolicClosure[size_t(index - firstFree)];
  // A free variable of a function read from a source (its real closure
  // cell), handed to a function made here (a comprehension over it): a
  // cell holding the value read through the guarded closure source, which
  // the made function may read but not assign (STORE_DEREF refuses it).
  if (!current.closure)
    return nullptr;
  VarPtr mirror = makeVar(Var::Kind::Cell);
  mirror->items.push_back(loadDeref(index));
  mirror->method = "mirror of a closure cell";
  return mirror;
}

VarPtr BytecodeTracer::loadGlobal(PyObject *name) {
  PyObject *object = PyDict_GetItemWithError(current.globals, name);
  if (!object && !PyErr_Occurred() && PyDict_Check(frame->builtins))
    object = PyDict_GetItemWithError(frame->builtins, name);
  if (!object) {
    PyErr_Clear();
    unsupported(std::string("undefined global '") + PyUnicode_AsUTF8(name) +
                "'");
  }
  // Code inlined from the frame itself (comprehensions) reads the frame's
  // globals: functionSource is -1 there.
  if (inliner.inlining() && current.functionSource >= 0)
    return classify(object,
                    guardBuilder.namedSource(Source::Kind::FunctionGlobal,
                                             current.functionSource, name));
  return classify(object,
                  guardBuilder.namedSource(Source::Kind::Global, -1, name));
}

/// The symbolic cell at localsplus index: a cell variable of this code or,
/// in code made during capture, one of its closure cells. Null otherwise.
VarPtr BytecodeTracer::cellAt(int index) {
  int firstFree = current.code->co_nlocalsplus - current.code->co_nfreevars;
  if (index < firstFree) {
    VarPtr cell = current.locals.at(size_t(index));
    if (!cell || cell->kind != Var::Kind::Cell)
      unsupported("a cell variable used before MAKE_CELL");
    return cell;
  }
  if (size_t(index - firstFree) < current.symbolicClosure.size())
    return current.symbolicClosure[size_t(index - firstFree)];
  return nullptr;
}

/// MAKE_CELL: the local becomes a cell holding its current value (an
/// argument's value is read from the frame first).
VarPtr BytecodeTracer::makeCell(int index) {
  VarPtr content = current.locals.at(size_t(index));
  PyCodeObject *code = current.code;
  bool argument = index < code->co_argcount + code->co_kwonlyargcount +
                              ((code->co_flags & CO_VARARGS) ? 1 : 0) +
                              ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
  if (!content && !inliner.inlining() && argument && frame->localsplus[index])
    content = loadLocal(index);
  VarPtr cell = makeVar(Var::Kind::Cell);
  if (content)
    cell->items.push_back(content);
  return cell;
}

VarPtr BytecodeTracer::loadDeref(int index) {
  if (VarPtr symbolic = cellAt(index)) {
    if (symbolic->items.empty())
      unsupported("read of an empty cell");
    return symbolic->items[0];
  }
  int firstFree = current.code->co_nlocalsplus - current.code->co_nfreevars;
  int cell = index - firstFree;
  if (!current.closure || cell >= PyTuple_GET_SIZE(current.closure))
    unsupported("closure variable without a closure");
  PyObject *object = PyCell_GET(PyTuple_GET_ITEM(current.closure, cell));
  if (!object)
    unsupported("read of an empty closure cell");
  if (inliner.inlining())
    return classify(object,
                    guardBuilder.indexedSource(Source::Kind::FunctionClosure,
                                               current.functionSource, cell));
  return classify(object,
                  guardBuilder.indexedSource(Source::Kind::Closure, -1, cell));
}

VarPtr BytecodeTracer::loadAttr(const VarPtr &base, PyObject *name) {
  return values.of(base).attribute(base, name);
}

VarPtr BytecodeTracer::environmentVariable(const VarPtr &name,
                                           const VarPtr &fallback) {
  // os.environ.get("NAME"): the value now, guarded (a change of the
  // variable recompiles).
  if (name->kind != Var::Kind::Constant || !PyUnicode_CheckExact(name->object.get()))
    unsupported("os.environ read with a name that is not a constant string");
  PyObject *value = nullptr;
  PyObject *mapping = osEnviron();
  PyRef found = PyRef::steal(
      mapping ? PyObject_CallMethod(mapping, "get", "O", name->object.get())
              : nullptr);
  if (!found) {
    PyErr_Clear();
    unsupported("reading os.environ raised");
  }
  value = found.get();
  int source = guardBuilder.namedSource(Source::Kind::Environ, -1,
                                        name->object.get());
  VarPtr read = classify(value, source);
  if (value == Py_None && fallback)
    return fallback;
  return read;
}

VarPtr BytecodeTracer::importModule(PyObject *name, const VarPtr &level,
                                    const VarPtr &fromList) {
  if (level->kind != Var::Kind::Constant ||
      fromList->kind != Var::Kind::Constant ||
      !PyLong_CheckExact(level->object.get()))
    unsupported("an import whose level is not known at capture");
  long depth = PyLong_AsLong(level->object.get());
  PyRef absolute = PyRef::borrow(name);
  if (depth > 0) {
    // Relative to the code's package, resolved as importlib resolves it.
    static PyObject *resolveSlot = nullptr, *packageSlot = nullptr;
    PyObject *resolve =
        lookupOnce(resolveSlot, "importlib._bootstrap", "_resolve_name");
    PyObject *packageOf =
        lookupOnce(packageSlot, "importlib._bootstrap", "_calc___package__");
    PyRef package =
        PyRef::steal(resolve && packageOf && current.globals
                         ? PyObject_CallOneArg(packageOf, current.globals)
                         : nullptr);
    absolute = PyRef::steal(
        package && PyUnicode_Check(package.get())
            ? PyObject_CallFunction(resolve, "OOl", name, package.get(), depth)
            : nullptr);
    if (!absolute || !PyUnicode_Check(absolute.get())) {
      PyErr_Clear();
      unsupported("a relative import that does not resolve to a module name");
    }
    name = absolute.get();
  }
  PyObject *modules = PyImport_GetModuleDict();
  PyObject *module = PyDict_GetItemWithError(modules, name);
  bool fromSubmodules = fromList->object.get() != Py_None &&
                        PyTuple_Check(fromList->object.get()) &&
                        PyTuple_GET_SIZE(fromList->object.get()) > 0;
  if (!module || fromSubmodules) {
    // The import the frame's run makes, made now (capture runs with the
    // hook off, and the import machinery runs unhooked anyway): the module
    // body runs once, as eagerly, and `from m import sub` imports the
    // submodules it names. Eager would raise what it raises.
    PyErr_Clear();
    PyRef imported = PyRef::steal(PyImport_ImportModuleLevelObject(
        name, current.globals, nullptr, fromList->object.get(), 0));
    if (!imported)
      unsupported(std::string("import of ") + PyUnicode_AsUTF8(name) +
                  " raised " + takePythonError());
    module = PyDict_GetItemWithError(modules, name);
    if (!module) {
      PyErr_Clear();
      unsupported(std::string("import of ") + PyUnicode_AsUTF8(name) +
                  " left no module in sys.modules");
    }
  }
  // `import a.b` binds the top package, `from a.b import c` the module.
  PyObject *bound = module;
  if (fromList->object.get() == Py_None) {
    std::string dotted = PyUnicode_AsUTF8(name);
    PyRef top = PyRef::steal(
        PyUnicode_FromString(dotted.substr(0, dotted.find('.')).c_str()));
    bound = PyDict_GetItemWithError(modules, top.get());
    if (!bound) {
      PyErr_Clear();
      unsupported("import of a package not imported yet");
    }
  }
  int modulesSource = fixedObject(PyRef::borrow(modules), "sys.modules")->source;
  int source =
      guardBuilder.namedSource(Source::Kind::DictItem, modulesSource, name);
  if (bound != module) {
    // The top package, read the way the interpreter binds it.
    PyRef topName = PyRef::steal(PyObject_GetAttrString(bound, "__name__"));
    if (!topName) {
      PyErr_Clear();
      unsupported("a package without a name");
    }
    source = guardBuilder.namedSource(Source::Kind::DictItem, modulesSource,
                                      topName.get());
  }
  return classify(bound, source);
}

int BytecodeTracer::knownSourceOf(const VarPtr &var) {
  if (var->source >= 0)
    return var->source;
  for (const Guard &guard : guardBuilder.guards())
    if (guard.kind == Guard::Kind::Identity &&
        guard.identity() == var->object.get())
      return guard.source;
  return -1;
}

int BytecodeTracer::sourceOfObject(const VarPtr &var) {
  int source = knownSourceOf(var);
  if (source < 0)
    unsupported("attribute of an object with no known source");
  return source;
}

void BytecodeTracer::guardObjectIdentity(const VarPtr &var) {
  int source = var->kind == Var::Kind::Object && var->object &&
                       isModule(var->object.get())
                   ? knownSourceOf(var)
                   : -1;
  if (source < 0)
    return;
  guardBuilder.guardObject(Guard::Kind::Identity, source, var->object.get());
}

bool BytecodeTracer::inputRequiresGrad(const Value *value) const {
  for (const auto &entry : inputs.bySource()) {
    if (entry.second != value)
      continue;
    for (const Guard &guard : guardBuilder.guards())
      if (guard.kind == Guard::Kind::Tensor && guard.source == entry.first)
        return guard.tensor.requiresGrad;
  }
  return false;
}

void BytecodeTracer::storeAttribute(const VarPtr &owner, PyObject *name,
                                    const VarPtr &value) {
  if (owner->kind == Var::Kind::NewObject) {
    objects.setAttribute(owner, name, value, /*direct=*/false);
    return;
  }
  // `self.buffer += 1` updates the buffer in place and stores the same
  // tensor back: the in-place update is written back, the store changes
  // nothing. Other attribute stores would change objects: refused.
  if (owner->kind == Var::Kind::Object && value->kind == Var::Kind::Tensor &&
      sourceOfObject(owner) >= 0) {
    int source = guardBuilder.namedSource(Source::Kind::Attr,
                                          sourceOfObject(owner), name);
    Value *known = inputs.ofSource(source);
    if (known && known == value->tensor)
      return;
  }
  if (storeIntoObject(owner, name, value))
    return;
  unsupported(std::string("assignment to attribute '") +
              PyUnicode_AsUTF8(name) + "'");
}

} // namespace capture
} // namespace dynafuse

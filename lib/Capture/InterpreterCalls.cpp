//===- InterpreterCalls.cpp ===//
// Calls: torch ops, builtins, inlined functions, methods and modules
#include "InterpreterState.h"

namespace dynafuse {
namespace interp {

void SymbolicInterpreter::callWithUnpacking(bool hasKeywords) {
  VarPtr keywordsVar = hasKeywords ? pop() : nullptr;
  VarPtr positional = pop();
  VarPtr callee = pop();
  VarPtr null = pop();
  if (null->kind != Var::Kind::Null)
    unsupported("CALL_FUNCTION_EX without its NULL");
  std::vector<VarPtr> args = itemsOf(positional);
  std::map<std::string, VarPtr> keywords;
  if (keywordsVar) {
    if (keywordsVar->kind != Var::Kind::Dict)
      unsupported("** unpacking of a value that is not a dict");
    for (size_t i = 0; i < keywordsVar->keys.size(); ++i)
      keywords[keywordsVar->keys[i]] = keywordsVar->items[i];
  }
  if (callee->kind == Var::Kind::BoundMethod) {
    args.insert(args.begin(), callee->self);
    callee = callee->function;
  }
  push(callAny(callee, args, keywords));
}

void SymbolicInterpreter::call(int argc) {
  std::vector<VarPtr> args(static_cast<size_t>(argc));
  for (int i = argc - 1; i >= 0; --i)
    args[size_t(i)] = pop();
  VarPtr second = pop();
  VarPtr first = pop();
  VarPtr callee = second;
  if (first->kind != Var::Kind::Null) {
    callee = first;
    args.insert(args.begin(), second);
  }
  size_t keywordCount = kwNames ? size_t(PyTuple_GET_SIZE(kwNames.get())) : 0;
  std::map<std::string, VarPtr> keywords;
  for (size_t k = 0; k < keywordCount; ++k)
    keywords[PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwNames.get(), k))] =
        args[args.size() - keywordCount + k];
  args.resize(args.size() - keywordCount);
  kwNames = PyRef();
  if (callee->kind == Var::Kind::BoundMethod) {
    args.insert(args.begin(), callee->self);
    callee = callee->function;
  }
  push(callAny(callee, args, keywords));
}

VarPtr
SymbolicInterpreter::callAny(const VarPtr &callee,
                             const std::vector<VarPtr> &args,
                             const std::map<std::string, VarPtr> &keywords) {
  if (callee->kind == Var::Kind::TensorMethod &&
      isMetadataMethod(callee->method))
    return tensorMetadata(callee->self, callee->method, args);
  if (callee->kind == Var::Kind::Function) {
    auto *body = reinterpret_cast<PyCodeObject *>(callee->object.get());
    if (!keywords.empty() || int(args.size()) != body->co_argcount ||
        body->co_kwonlyargcount ||
        (body->co_flags & (CO_VARARGS | CO_VARKEYWORDS)))
      unsupported(
          "call of a function made during capture with these arguments");
    return inlineCode(body, args, globals, nullptr, functionSource,
                      callee->items);
  }
  if (callee->kind == Var::Kind::Object &&
      callee->method.rfind("dict.", 0) == 0) {
    if (args.size() != 1 || !keywords.empty())
      unsupported(callee->method + " with arguments");
    return dictMethod(callee->method.substr(5), args[0]);
  }
  if (callee->kind == Var::Kind::Object) {
    PyObject *object = callee->object.get();
    if (isTorchAssert(object))
      return checkedAssert(args);
    if (object == reinterpret_cast<PyObject *>(&PySuper_Type))
      if (VarPtr base = superOfTensor(args))
        return base;
    std::string answer = opTable().stateQuery(object);
    if (answer == "false")
      return constant(Py_False);
    if (answer == "none")
      return constant(Py_None);
    if (answer == "zero")
      return integerConstant(0);
    if (answer == "grad_enabled")
      return constant(gradMode ? Py_True : Py_False);
    if (!args.empty() && keywords.empty())
      if (VarPtr walked = walkModules(object, args[0], args.size()))
        return walked;
    if (!opTable().function(object) && PyFunction_Check(object))
      return inlineFunction(callee, args, keywords);
    if (VarPtr result = containerBuiltin(object, args))
      return result;
    if (VarPtr result = isInstance(object, args))
      return result;
    if (VarPtr result = attributeBuiltin(object, args))
      return result;
    if (callee->method == "__exit__" && callee->setsGradMode >= 0) {
      gradMode = gradModeStack.back();
      gradModeStack.pop_back();
      return constant(Py_None);
    }
    if (VarPtr context = gradModeContext(object, args, keywords))
      return context;
    if (isModule(object))
      return inlineModule(callee, args, keywords);
  }
  return callTorch(callee, args, keywords);
}

VarPtr
SymbolicInterpreter::callTorch(const VarPtr &callee, std::vector<VarPtr> args,
                               const std::map<std::string, VarPtr> &keywords) {
  const OpBinding *binding = nullptr;
  std::string what;
  PyRef callable;
  if (callee->kind == Var::Kind::TensorMethod) {
    binding = opTable().method(callee->method);
    args.insert(args.begin(), callee->self);
    what = "Tensor." + callee->method;
    if (!binding)
      callable = PyRef::steal(
          tensorMethodObject(callee->method, callee->self->baseMethods));
    if (callable && PyFunction_Check(callable.get()))
      return inlineFunction(fixedObject(callable, what), args, keywords);
  } else if (callee->kind == Var::Kind::Object) {
    if (VarPtr folded = foldBuiltin(callee->object.get(), args, keywords))
      return folded;
    binding = opTable().function(callee->object.get());
    PyRef name = PyRef::steal(
        PyObject_GetAttrString(callee->object.get(), "__qualname__"));
    if (!name)
      PyErr_Clear();
    what = name && PyUnicode_Check(name.get()) ? PyUnicode_AsUTF8(name.get())
                                               : "a callable";
    callable = callee->object;
  } else {
    unsupported("call of a value that is not a function");
  }
  if (!binding && callable)
    return torchExtern(callable.get(), what, args, keywords);
  if (!binding)
    unsupported("call to " + what + " (not in the op table)");
  if (binding->alternatives.empty())
    return bindAndEmit(*binding, what, args, keywords);
  std::string reasons;
  for (const OpBinding &alternative : binding->alternatives) {
    try {
      return bindAndEmit(alternative, what, args, keywords);
    } catch (const Unsupported &error) {
      reasons += std::string(reasons.empty() ? "" : "; ") + error.bareMessage();
    }
  }
  unsupported("no overload of " + what + " fits (" + reasons + ")");
}

VarPtr SymbolicInterpreter::fixedObject(const PyRef &object,
                                        const std::string &name) {
  Source fixed;
  fixed.kind = Source::Kind::Fixed;
  fixed.fixed = object;
  fixed.name = PyRef::steal(PyUnicode_FromString(name.c_str()));
  VarPtr var = makeVar(Var::Kind::Object);
  var->object = object;
  var->source = addSource(std::move(fixed));
  return var;
}

bool SymbolicInterpreter::isTorchAssert(PyObject *object) {
  static PyObject *slot = nullptr;
  return object == lookupOnce(slot, "torch", "_assert");
}

VarPtr SymbolicInterpreter::checkedAssert(const std::vector<VarPtr> &args) {
  if (args.empty() || args[0]->kind != Var::Kind::Constant)
    unsupported("torch._assert on a value not known at capture");
  if (!truthOf(args[0], false))
    unsupported("torch._assert fails (the eager run raises it)");
  return constant(Py_None);
}

PyObject *SymbolicInterpreter::moduleClass() {
  static PyObject *slot = nullptr;
  return lookupOnce(slot, "torch.nn", "Module");
}

bool SymbolicInterpreter::isInstanceOf(PyObject *object, const char *name) {
  PyRef nn = PyRef::steal(PyImport_ImportModule("torch.nn"));
  PyRef cls =
      PyRef::steal(nn ? PyObject_GetAttrString(nn.get(), name) : nullptr);
  int result = cls ? PyObject_IsInstance(object, cls.get()) : 0;
  if (result < 0 || !cls)
    PyErr_Clear();
  return result == 1;
}

bool SymbolicInterpreter::isModule(PyObject *object) {
  PyObject *cls = moduleClass();
  return cls && !PyType_Check(object) &&
         PyObject_TypeCheck(object, reinterpret_cast<PyTypeObject *>(cls));
}

VarPtr SymbolicInterpreter::boundMethod(const VarPtr &base, PyObject *name) {
  PyObject *object = base->object.get();
  if (PyModule_Check(object) || PyType_Check(object))
    return nullptr;
  PyObject *function = _PyType_Lookup(Py_TYPE(object), name);
  if (!function || !PyFunction_Check(function))
    return nullptr;
  PyObject **dict = _PyObject_GetDictPtr(object);
  if (dict && *dict && PyDict_GetItemWithError(*dict, name))
    return nullptr;
  PyErr_Clear();
  VarPtr method = makeVar(Var::Kind::BoundMethod);
  method->self = base;
  method->function =
      classify(function,
               namedSource(Source::Kind::TypeAttr, sourceOfObject(base), name));
  return method;
}

void SymbolicInterpreter::requireNoHooks(const VarPtr &module) {
  static const char *perModule[] = {"_forward_hooks",
                                    "_forward_pre_hooks",
                                    "_backward_hooks",
                                    "_backward_pre_hooks",
                                    "_forward_hooks_with_kwargs",
                                    "_forward_pre_hooks_with_kwargs"};
  int source = sourceOfObject(module);
  for (const char *name : perModule) {
    PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
    PyRef dict =
        PyRef::steal(PyObject_GetAttr(module->object.get(), key.get()));
    if (!dict) {
      PyErr_Clear();
      continue;
    }
    guardEmpty(dict.get(), namedSource(Source::Kind::Attr, source, key.get()),
               name);
  }
  static const char *global[] = {
      "_global_forward_hooks", "_global_forward_pre_hooks",
      "_global_backward_hooks", "_global_backward_pre_hooks"};
  PyRef torchModule =
      PyRef::steal(PyImport_ImportModule("torch.nn.modules.module"));
  for (const char *name : global) {
    PyRef dict = PyRef::steal(
        torchModule ? PyObject_GetAttrString(torchModule.get(), name)
                    : nullptr);
    if (!dict) {
      PyErr_Clear();
      continue;
    }
    Source fixed;
    fixed.kind = Source::Kind::Fixed;
    fixed.fixed = dict;
    fixed.name = PyRef::steal(PyUnicode_InternFromString(name));
    guardEmpty(dict.get(), addSource(std::move(fixed)), name);
  }
}

void SymbolicInterpreter::guardEmpty(PyObject *dict, int source,
                                     const char *what) {
  if (!PyDict_Check(dict) || PyDict_Size(dict) != 0)
    unsupported(std::string("module call with ") + what + " registered");
  Guard guard;
  guard.kind = Guard::Kind::EmptyDict;
  guard.source = source;
  addGuard(std::move(guard));
}

VarPtr SymbolicInterpreter::inlineModule(
    const VarPtr &module, std::vector<VarPtr> args,
    const std::map<std::string, VarPtr> &keywords) {
  requireNoHooks(module);
  PyRef name = PyRef::steal(PyUnicode_InternFromString("forward"));
  VarPtr forward = boundMethod(module, name.get());
  if (!forward)
    unsupported(std::string("call of ") +
                Py_TYPE(module->object.get())->tp_name +
                " whose forward is not a Python function");
  args.insert(args.begin(), module);
  return callAny(forward->function, args, keywords);
}

VarPtr SymbolicInterpreter::inlineFunction(
    const VarPtr &function, const std::vector<VarPtr> &args,
    const std::map<std::string, VarPtr> &keywords) {
  PyObject *object = function->object.get();
  auto *callee = reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(object));
  const int skipped = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR;
  if (callee->co_flags & skipped)
    unsupported("call of a generator or coroutine function");
  if (inlineDepth >= kMaxInlineDepth)
    unsupported("calls nested deeper than " + std::to_string(kMaxInlineDepth));
  if (function->source < 0)
    unsupported("call of a function created during capture");
  std::vector<VarPtr> calleeLocals =
      bindArguments(object, callee, args, keywords);
  return inlineCode(callee, std::move(calleeLocals),
                    PyFunction_GET_GLOBALS(object),
                    PyFunction_GET_CLOSURE(object), function->source, {});
}

VarPtr SymbolicInterpreter::inlineCode(PyCodeObject *callee,
                                       std::vector<VarPtr> initialLocals,
                                       PyObject *calleeGlobals,
                                       PyObject *calleeClosure,
                                       int calleeSource,
                                       std::vector<VarPtr> cells) {
  if (inlineDepth >= kMaxInlineDepth)
    unsupported("calls nested deeper than " + std::to_string(kMaxInlineDepth));
  // Save this frame's interpretation state, run the callee, restore.
  PyCodeObject *savedCode = code;
  std::string savedFile = fileName;
  std::vector<Instruction> savedInstructions = std::move(instructions);
  std::map<int, int> savedOffsets = std::move(indexOfOffset);
  std::vector<VarPtr> savedStack = std::move(stack);
  std::vector<VarPtr> savedLocals = std::move(locals);
  std::vector<VarPtr> savedCells = std::move(symbolicClosure);
  std::vector<VarPtr> *savedYielded = yielded;
  PyRef savedKwNames = kwNames;
  int savedLine = currentLine;
  PyObject *savedGlobals = globals, *savedClosure = closure;
  int savedSource = functionSource;
  std::vector<VarPtr> collected;
  bool generator = callee->co_flags & CO_GENERATOR;
  code = callee;
  fileName = PyUnicode_AsUTF8(callee->co_filename);
  stack.clear();
  locals = std::move(initialLocals);
  locals.resize(size_t(callee->co_nlocalsplus));
  symbolicClosure = std::move(cells);
  yielded = generator ? &collected : nullptr;
  kwNames = PyRef();
  globals = calleeGlobals;
  closure = calleeClosure;
  functionSource = calleeSource;
  ++inlineDepth;
  VarPtr result = runBody();
  --inlineDepth;
  code = savedCode;
  fileName = savedFile;
  instructions = std::move(savedInstructions);
  indexOfOffset = std::move(savedOffsets);
  stack = std::move(savedStack);
  locals = std::move(savedLocals);
  symbolicClosure = std::move(savedCells);
  yielded = savedYielded;
  kwNames = savedKwNames;
  currentLine = savedLine;
  globals = savedGlobals;
  closure = savedClosure;
  functionSource = savedSource;
  if (!generator)
    return result;
  VarPtr iterator = makeVar(Var::Kind::Iterator);
  iterator->items = std::move(collected);
  return iterator;
}

/// MAKE_FUNCTION of a code constant (comprehensions, generator
/// expressions, lambdas without defaults), with its closure cells.
VarPtr SymbolicInterpreter::makeFunction(int flags) {
  VarPtr codeVar = pop();
  if (flags & ~8)
    unsupported("a function made with defaults or annotations");
  VarPtr function = makeVar(Var::Kind::Function);
  function->object = codeVar->object;
  if (flags & 8)
    function->items = itemsOf(pop());
  return function;
}

std::vector<VarPtr> SymbolicInterpreter::bindArguments(
    PyObject *function, PyCodeObject *callee, const std::vector<VarPtr> &args,
    const std::map<std::string, VarPtr> &keywords) {
  std::vector<VarPtr> slots(size_t(callee->co_nlocalsplus));
  int positional = callee->co_argcount, keywordOnly = callee->co_kwonlyargcount;
  bool varargs = callee->co_flags & CO_VARARGS;
  bool varkw = callee->co_flags & CO_VARKEYWORDS;
  VarPtr extra = makeVar(Var::Kind::Dict);
  PyRef names = PyRef::steal(PyCode_GetVarnames(callee));
  auto nameOf = [&](int i) {
    return std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(names.get(), i)));
  };
  if (!varargs && int(args.size()) > positional)
    unsupported("call with too many positional arguments");
  for (int i = 0; i < positional && i < int(args.size()); ++i)
    slots[i] = args[i];
  if (varargs) {
    VarPtr rest = makeVar(Var::Kind::Tuple);
    for (size_t i = size_t(positional); i < args.size(); ++i)
      rest->items.push_back(args[i]);
    slots[positional + keywordOnly] = rest;
  }
  for (auto &keyword : keywords) {
    int slot = -1;
    for (int i = 0; i < positional + keywordOnly; ++i)
      if (nameOf(i) == keyword.first)
        slot = i;
    if (slot < 0 && varkw) {
      extra->keys.push_back(keyword.first);
      extra->items.push_back(keyword.second);
      continue;
    }
    if (slot < 0 || slots[slot])
      unsupported("call with an unexpected keyword '" + keyword.first + "'");
    slots[slot] = keyword.second;
  }
  if (varkw)
    slots[positional + keywordOnly + (varargs ? 1 : 0)] = extra;
  PyObject *defaults = PyFunction_GET_DEFAULTS(function);
  int defaultCount = defaults ? int(PyTuple_GET_SIZE(defaults)) : 0;
  for (int i = 0; i < positional; ++i) {
    if (slots[i])
      continue;
    int d = i - (positional - defaultCount);
    if (d < 0)
      unsupported("call without argument '" + nameOf(i) + "'");
    slots[i] = constant(PyTuple_GET_ITEM(defaults, d));
  }
  PyObject *kwDefaults = PyFunction_GET_KW_DEFAULTS(function);
  for (int i = positional; i < positional + keywordOnly; ++i) {
    if (slots[i])
      continue;
    PyObject *value = kwDefaults
                          ? PyDict_GetItemString(kwDefaults, nameOf(i).c_str())
                          : nullptr;
    if (!value)
      unsupported("call without argument '" + nameOf(i) + "'");
    slots[i] = constant(value);
  }
  return slots;
}

bool SymbolicInterpreter::isBuiltin(PyObject *callable,
                                    const char *name) const {
  PyObject *builtins = frame->builtins;
  return PyDict_Check(builtins) &&
         PyDict_GetItemString(builtins, name) == callable;
}

/// math.sqrt, math.log, ...: pure functions of numbers.
bool SymbolicInterpreter::isMathFunction(PyObject *callable) {
  static PyObject *slot = nullptr;
  PyObject *math = lookupOnce(slot, "math", nullptr);
  if (!math || !PyCFunction_Check(callable))
    return false;
  PyObject *self = PyCFunction_GET_SELF(callable);
  return self == math;
}

VarPtr SymbolicInterpreter::foldBuiltin(
    PyObject *callable, const std::vector<VarPtr> &args,
    const std::map<std::string, VarPtr> &keywords) {
  static const char *pure[] = {"float", "int",   "bool", "abs", "min",
                               "max",   "round", "len",  "pow", "range"};
  bool isPure = isMathFunction(callable);
  for (const char *name : pure)
    isPure |= isBuiltin(callable, name);
  if (!isPure || !keywords.empty())
    return nullptr;
  PyRef tuple = PyRef::steal(PyTuple_New(Py_ssize_t(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i]->kind != Var::Kind::Constant)
      return nullptr;
    PyTuple_SET_ITEM(tuple.get(), i, PyRef(args[i]->object).release());
  }
  return foldPython(PyObject_Call(callable, tuple.get(), nullptr));
}

VarPtr SymbolicInterpreter::containerBuiltin(PyObject *callable,
                                             const std::vector<VarPtr> &args) {
  auto is = [&](const char *name) { return isBuiltin(callable, name); };
  bool container = !args.empty() && (args[0]->kind == Var::Kind::Tuple ||
                                     args[0]->kind == Var::Kind::Iterator ||
                                     args[0]->kind == Var::Kind::Dict);
  if (is("len") && args.size() == 1 && container)
    return integerConstant(int64_t(itemsOf(args[0]).size()));
  if (is("len") && args.size() == 1 && args[0]->kind == Var::Kind::Object &&
      PyDict_Check(args[0]->object.get())) {
    // A dict read from a source (a module's hook OrderedDict): its length,
    // guarded.
    Guard length;
    length.kind = Guard::Kind::DictLength;
    length.source = sourceOfObject(args[0]);
    length.length = size_t(PyDict_Size(args[0]->object.get()));
    addGuard(std::move(length));
    return integerConstant(int64_t(length.length));
  }
  if (!container)
    return nullptr;
  std::vector<VarPtr> items = itemsOf(args[0]);
  if ((is("tuple") || is("list")) && args.size() == 1) {
    VarPtr result = makeVar(Var::Kind::Tuple);
    result->items = items;
    result->isList = is("list");
    return result;
  }
  if ((is("all") || is("any")) && args.size() == 1) {
    bool all = is("all");
    for (const VarPtr &item : items)
      if (truthOf(item, false) != all)
        return constant(all ? Py_False : Py_True);
    return constant(all ? Py_True : Py_False);
  }
  if (is("sum") && args.size() <= 2) {
    VarPtr total = args.size() == 2 ? args[1] : integerConstant(0);
    for (const VarPtr &item : items)
      total = binaryOp(NB_ADD, total, item);
    return total;
  }
  if (is("enumerate")) {
    VarPtr iterator = makeVar(Var::Kind::Iterator);
    for (size_t i = 0; i < items.size(); ++i) {
      VarPtr pair = makeVar(Var::Kind::Tuple);
      pair->items = {integerConstant(int64_t(i)), items[i]};
      iterator->items.push_back(pair);
    }
    return iterator;
  }
  if (is("zip")) {
    std::vector<std::vector<VarPtr>> columns;
    size_t length = items.size();
    for (const VarPtr &arg : args) {
      columns.push_back(itemsOf(arg));
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

/// isinstance(x, cls) where the answer is known at capture: constants and
/// guarded objects, and computed tensors (exactly torch.Tensor).
VarPtr SymbolicInterpreter::isInstance(PyObject *callable,
                                       const std::vector<VarPtr> &args) {
  PyObject *builtins = frame->builtins;
  bool knownClass = args.size() == 2 && (args[1]->kind == Var::Kind::Object ||
                                         args[1]->kind == Var::Kind::Constant);
  if (!PyDict_Check(builtins) ||
      PyDict_GetItemString(builtins, "isinstance") != callable || !knownClass)
    return nullptr;
  PyObject *cls = args[1]->object.get();
  PyRef tensorType;
  if (args[0]->kind == Var::Kind::Tensor) {
    if (!args[0]->tensor->producer)
      unsupported("isinstance of an input tensor (Tensor or Parameter)");
    PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
    tensorType = PyRef::steal(
        torch ? PyObject_GetAttrString(torch.get(), "Tensor") : nullptr);
    if (!tensorType) {
      PyErr_Clear();
      return nullptr;
    }
    int sub = PyObject_IsSubclass(tensorType.get(), cls);
    if (sub < 0) {
      PyErr_Clear();
      unsupported("isinstance raised");
    }
    return constant(sub ? Py_True : Py_False);
  }
  if (args[0]->kind != Var::Kind::Constant &&
      args[0]->kind != Var::Kind::Object)
    return nullptr;
  int result = PyObject_IsInstance(args[0]->object.get(), cls);
  if (result < 0) {
    PyErr_Clear();
    unsupported("isinstance raised");
  }
  return constant(result ? Py_True : Py_False);
}

VarPtr SymbolicInterpreter::attributeBuiltin(PyObject *callable,
                                             const std::vector<VarPtr> &args) {
  auto is = [&](const char *name) { return isBuiltin(callable, name); };
  bool get = is("getattr"), has = is("hasattr");
  if ((!get && !has) || args.size() < 2 || args.size() > (get ? 3u : 2u) ||
      args[1]->kind != Var::Kind::Constant ||
      !PyUnicode_Check(args[1]->object.get()))
    return nullptr;
  PyObject *name = args[1]->object.get();
  const VarPtr &base = args[0];
  bool present = base->kind == Var::Kind::Tensor ||
                 (base->object && PyObject_HasAttr(base->object.get(), name));
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

void SymbolicInterpreter::guardMissingAttribute(const VarPtr &object,
                                                PyObject *name) {
  Guard guard;
  guard.kind = Guard::Kind::NoAttribute;
  guard.source = sourceOfObject(object);
  guard.expected = PyRef::borrow(name);
  addGuard(std::move(guard));
}

VarPtr SymbolicInterpreter::gradModeContext(
    PyObject *callable, const std::vector<VarPtr> &args,
    const std::map<std::string, VarPtr> &keywords) {
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
    return nullptr;
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

void SymbolicInterpreter::enterWith(const VarPtr &context) {
  if (context->kind != Var::Kind::Object || context->setsGradMode < 0)
    unsupported("with block over a context manager other than no_grad, "
                "enable_grad or inference_mode");
  VarPtr exit = makeVar(Var::Kind::Object);
  exit->object = context->object;
  exit->method = "__exit__";
  exit->setsGradMode = context->setsGradMode;
  gradModeStack.push_back(gradMode);
  gradMode = context->setsGradMode == 1;
  push(exit);
  push(constant(Py_None));
}

void SymbolicInterpreter::requireNoAutograd(
    const std::vector<Operand> &operands) {
  if (!gradMode)
    return;
  for (const Operand &operand : operands)
    if (operand.isValue() && requiresGrad.count(operand.value))
      unsupported("an op on a tensor that requires grad while grad mode is "
                  "on (training is not supported yet; runs eagerly)");
}

} // namespace interp
} // namespace dynafuse

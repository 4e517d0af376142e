//===- TracerCalls.cpp - Calls: op-table ops, inlined functions, modules --===//
//
// Calls: torch callables bound through the op table (OpBinder), inlined
// user functions, methods and nn.Module calls (each traced in a fresh
// TracedCode), and the arguments they bind.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include <utility>

namespace dynafuse {
namespace capture {

void BytecodeTracer::callWithUnpacking(bool hasKeywords) {
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

void BytecodeTracer::call(int argc) {
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
  size_t keywordCount =
      current.kwNames ? size_t(PyTuple_GET_SIZE(current.kwNames.get())) : 0;
  std::map<std::string, VarPtr> keywords;
  for (size_t k = 0; k < keywordCount; ++k)
    keywords[PyUnicode_AsUTF8(PyTuple_GET_ITEM(current.kwNames.get(), k))] =
        args[args.size() - keywordCount + k];
  args.resize(args.size() - keywordCount);
  current.kwNames = PyRef();
  if (callee->kind == Var::Kind::BoundMethod) {
    args.insert(args.begin(), callee->self);
    callee = callee->function;
  }
  push(callAny(callee, args, keywords));
}

VarPtr BytecodeTracer::callAny(const VarPtr &callee,
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
    return inlineCode(body, args, current.globals, nullptr,
                      current.functionSource, callee->items);
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
BytecodeTracer::callTorch(const VarPtr &callee, std::vector<VarPtr> args,
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

VarPtr BytecodeTracer::fixedObject(const PyRef &object,
                                   const std::string &name) {
  Source fixed;
  fixed.kind = Source::Kind::Fixed;
  fixed.fixed = object;
  fixed.name = PyRef::steal(PyUnicode_FromString(name.c_str()));
  VarPtr var = makeVar(Var::Kind::Object);
  var->object = object;
  var->source = guardBuilder.addSource(std::move(fixed));
  return var;
}

bool BytecodeTracer::isTorchAssert(PyObject *object) {
  static PyObject *slot = nullptr;
  return object == lookupOnce(slot, "torch", "_assert");
}

VarPtr BytecodeTracer::checkedAssert(const std::vector<VarPtr> &args) {
  if (args.empty() || args[0]->kind != Var::Kind::Constant)
    unsupported("torch._assert on a value not known at capture");
  if (!truthOf(args[0], false))
    unsupported("torch._assert fails (the eager run raises it)");
  return constant(Py_None);
}

PyObject *BytecodeTracer::moduleClass() {
  static PyObject *slot = nullptr;
  return lookupOnce(slot, "torch.nn", "Module");
}

bool BytecodeTracer::isInstanceOf(PyObject *object, const char *name) {
  PyRef nn = PyRef::steal(PyImport_ImportModule("torch.nn"));
  PyRef cls =
      PyRef::steal(nn ? PyObject_GetAttrString(nn.get(), name) : nullptr);
  int result = cls ? PyObject_IsInstance(object, cls.get()) : 0;
  if (result < 0 || !cls)
    PyErr_Clear();
  return result == 1;
}

bool BytecodeTracer::isModule(PyObject *object) {
  PyObject *cls = moduleClass();
  return cls && !PyType_Check(object) &&
         PyObject_TypeCheck(object, reinterpret_cast<PyTypeObject *>(cls));
}

VarPtr BytecodeTracer::boundMethod(const VarPtr &base, PyObject *name) {
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
      classify(function, guardBuilder.namedSource(Source::Kind::TypeAttr,
                                                  sourceOfObject(base), name));
  return method;
}

void BytecodeTracer::requireNoHooks(const VarPtr &module) {
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
    guardEmpty(dict.get(),
               guardBuilder.namedSource(Source::Kind::Attr, source, key.get()),
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
    guardEmpty(dict.get(), guardBuilder.addSource(std::move(fixed)), name);
  }
}

void BytecodeTracer::guardEmpty(PyObject *dict, int source, const char *what) {
  if (!PyDict_Check(dict) || PyDict_Size(dict) != 0)
    unsupported(std::string("module call with ") + what + " registered");
  Guard guard;
  guard.kind = Guard::Kind::EmptyDict;
  guard.source = source;
  guardBuilder.addGuard(std::move(guard));
}

VarPtr
BytecodeTracer::inlineModule(const VarPtr &module, std::vector<VarPtr> args,
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

VarPtr
BytecodeTracer::inlineFunction(const VarPtr &function,
                               const std::vector<VarPtr> &args,
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

VarPtr BytecodeTracer::inlineCode(PyCodeObject *callee,
                                  std::vector<VarPtr> initialLocals,
                                  PyObject *calleeGlobals,
                                  PyObject *calleeClosure, int calleeSource,
                                  std::vector<VarPtr> cells) {
  if (inlineDepth >= kMaxInlineDepth)
    unsupported("calls nested deeper than " + std::to_string(kMaxInlineDepth));
  // Trace the callee in a fresh state; the caller's comes back after.
  std::vector<VarPtr> collected;
  bool generator = callee->co_flags & CO_GENERATOR;
  TracedCode calleeState;
  calleeState.code = callee;
  calleeState.fileName = PyUnicode_AsUTF8(callee->co_filename);
  calleeState.locals = std::move(initialLocals);
  calleeState.locals.resize(size_t(callee->co_nlocalsplus));
  calleeState.symbolicClosure = std::move(cells);
  calleeState.yielded = generator ? &collected : nullptr;
  calleeState.globals = calleeGlobals;
  calleeState.closure = calleeClosure;
  calleeState.functionSource = calleeSource;
  calleeState.currentLine = current.currentLine;
  TracedCode caller = std::exchange(current, std::move(calleeState));
  ++inlineDepth;
  VarPtr result = runBody();
  --inlineDepth;
  current = std::move(caller);
  if (!generator)
    return result;
  VarPtr iterator = makeVar(Var::Kind::Iterator);
  iterator->items = std::move(collected);
  return iterator;
}

/// MAKE_FUNCTION of a code constant (comprehensions, generator
/// expressions, lambdas without defaults), with its closure cells.
VarPtr BytecodeTracer::makeFunction(int flags) {
  VarPtr codeVar = pop();
  if (flags & ~8)
    unsupported("a function made with defaults or annotations");
  VarPtr function = makeVar(Var::Kind::Function);
  function->object = codeVar->object;
  if (flags & 8)
    function->items = itemsOf(pop());
  return function;
}

std::vector<VarPtr>
BytecodeTracer::bindArguments(PyObject *function, PyCodeObject *callee,
                              const std::vector<VarPtr> &args,
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

void BytecodeTracer::requireNoAutograd(const std::vector<Operand> &operands) {
  if (!gradMode)
    return;
  for (const Operand &operand : operands)
    if (operand.isValue() && inputs.requiresGrad(operand.value))
      unsupported("an op on a tensor that requires grad while grad mode is "
                  "on (training is not supported yet; runs eagerly)");
}

VarPtr
BytecodeTracer::bindAndEmit(const OpBinding &binding, const std::string &what,
                            const std::vector<VarPtr> &args,
                            const std::map<std::string, VarPtr> &keywords) {
  OpBinder::Binding bound = OpBinder(*this).bind(binding, what, args, keywords);
  if (binding.graphOp == "cast" && bound.operands[0].isValue() &&
      std::get<DType>(bound.attributes["dtype"]) ==
          bound.operands[0].value->type.dtype) {
    VarPtr same = makeVar(Var::Kind::Tensor);
    same->tensor = bound.operands[0].value;
    return same;
  }
  VarPtr result = emit(binding.graphOp, bound.operands, bound.attributes);
  if (!bound.inPlace)
    return result;
  if (!bound.self)
    unsupported(what + " in place without a tensor to update");
  return updateInPlace(bound.self, result);
}

} // namespace capture
} // namespace dynafuse

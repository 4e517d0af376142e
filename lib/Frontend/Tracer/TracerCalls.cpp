//===- TracerCalls.cpp - Calls: dispatch by callee and module helpers -----===//
//
// Calls: CALL and CALL_FUNCTION_EX dispatched by callee kind, and the module
// helpers (bound methods, isinstance of torch.nn classes). Torch callables
// the op table binds become nodes in TracerOpCalls.cpp. User functions, methods
// and nn.Module calls are inlined by the CallInliner (CallInliner.h).
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include "Values/DictKeys.h"

#include "dynafuse/Graph/Derivatives.h"

#include <utility>

namespace dynafuse {
namespace capture {

namespace {

/// 3.13 pushes NULL (or self) above the callable; 3.11 and 3.12 below.
constexpr bool kNullAboveCallable = PY_VERSION_HEX >= 0x030D0000;

/// CALL_INTRINSIC_1's arguments (Include/internal/pycore_intrinsics.h,
/// the same in 3.12 and 3.13).
constexpr int kIntrinsicUnaryPositive = 5;
constexpr int kIntrinsicListToTuple = 6;

/// object.__new__ (what `cls.__new__` reads for a class that keeps
/// object's).
bool isObjectNew(PyObject *callable) {
  return PyCFunction_Check(callable) &&
         PyCFunction_GET_SELF(callable) ==
             reinterpret_cast<PyObject *>(&PyBaseObject_Type) &&
         std::string(
             reinterpret_cast<PyCFunctionObject *>(callable)->m_ml->ml_name) ==
             "__new__";
}

} // namespace

void BytecodeTracer::pushWithNull(const VarPtr &callable) {
  VarPtr null = makeVar(Var::Kind::Null);
  push(kNullAboveCallable ? callable : null);
  push(kNullAboveCallable ? null : callable);
}

void BytecodeTracer::pushCallable(const VarPtr &callable) {
  if (callable->kind != Var::Kind::BoundMethod) {
    pushWithNull(callable);
    return;
  }
  push(callable->function);
  push(callable->self);
}

BytecodeTracer::CallTarget BytecodeTracer::popCallTarget() {
  VarPtr upper = pop();
  VarPtr lower = pop();
  bool upperNull = upper->kind == Var::Kind::Null;
  bool lowerNull = lower->kind == Var::Kind::Null;
  if (kNullAboveCallable)
    return {lower, upperNull ? nullptr : upper};
  if (lowerNull)
    return {upper, nullptr};
  return {lower, upper};
}

void BytecodeTracer::callWithUnpacking(bool hasKeywords) {
  VarPtr keywordsVar = hasKeywords ? pop() : nullptr;
  VarPtr positional = pop();
  CallTarget target = popCallTarget();
  if (target.self)
    unsupported("CALL_FUNCTION_EX without its NULL");
  VarPtr callee = target.callee;
  std::vector<VarPtr> args = itemsOf(positional);
  Keywords keywords;
  if (keywordsVar) {
    if (keywordsVar->kind != Var::Kind::Dict)
      unsupported("** unpacking of a value that is not a dict");
    std::optional<Keywords> unpacked = keywordsOfDict(*keywordsVar);
    if (!unpacked)
      unsupported("** unpacking of a dict with keys that are not strings "
                  "(TypeError)");
    keywords = std::move(*unpacked);
  }
  if (callee->kind == Var::Kind::BoundMethod) {
    args.insert(args.begin(), callee->self);
    callee = callee->function;
  }
  push(callAny(callee, args, keywords));
}

VarPtr BytecodeTracer::callIntrinsic(int which, const VarPtr &operand) {
  if (which == kIntrinsicUnaryPositive)
    return positive(operand);
  if (which == kIntrinsicListToTuple)
    return listToTuple(operand);
  unsupported("CALL_INTRINSIC_1 " + std::to_string(which));
}

void BytecodeTracer::call(int argc) {
  std::vector<VarPtr> args(static_cast<size_t>(argc));
  for (int i = argc - 1; i >= 0; --i)
    args[size_t(i)] = pop();
  CallTarget target = popCallTarget();
  VarPtr callee = target.callee;
  if (target.self)
    args.insert(args.begin(), target.self);
  size_t keywordCount =
      current.kwNames ? size_t(PyTuple_GET_SIZE(current.kwNames.get())) : 0;
  Keywords keywords;
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
                               const Keywords &keywords) {
  if (VarPtr cast = autocastCasts.castCall(callee, args, keywords))
    return cast;
  if (callee->kind == Var::Kind::Object && callee->object)
    if (VarPtr region = checkpoints.call(callee->object.get(), args, keywords))
      return region;
  if (VarPtr result = values.of(callee).call(callee, args, keywords))
    return result;
  if (callee->kind == Var::Kind::BoundMethod) {
    if (callee->function->kind == Var::Kind::Object &&
        callee->function->object &&
        isModuleCall(callee->function->object.get()) &&
        callee->self->kind == Var::Kind::Object && callee->self->object &&
        isModule(callee->self->object.get()))
      return inliner.inlineModule(callee->self, args, keywords);
    std::vector<VarPtr> withSelf{callee->self};
    withSelf.insert(withSelf.end(), args.begin(), args.end());
    return callAny(callee->function, withSelf, keywords);
  }
  if (callee->kind == Var::Kind::Object && !callee->object &&
      callee->method == "environ.get" && keywords.empty() &&
      (args.size() == 1 || args.size() == 2))
    return environmentVariable(args[0], args.size() == 2 ? args[1] : nullptr);
  if (callee->kind == Var::Kind::Object && !callee->object &&
      callee->method.rfind("object.", 0) == 0)
    return objects.callSlot(callee->method, args, keywords);
  if (callee->kind == Var::Kind::TensorMethod && callee->method == "to")
    return tensorTo(callee->self, args, keywords);
  if (callee->kind == Var::Kind::TensorMethod &&
      isMetadataMethod(callee->method))
    return tensorMetadata(callee->self, callee->method, args);
  if (callee->kind == Var::Kind::Function) {
    auto *body = reinterpret_cast<PyCodeObject *>(callee->object.get());
    if (body->co_kwonlyargcount ||
        (body->co_flags & (CO_VARARGS | CO_VARKEYWORDS)) ||
        int(args.size()) > body->co_argcount)
      unsupported(
          "call of a function made during capture with these arguments");
    // Positional, then keywords by name, then the defaults of the tail.
    std::vector<VarPtr> bound(size_t(body->co_argcount));
    for (size_t i = 0; i < args.size(); ++i)
      bound[i] = args[i];
    PyRef names = PyRef::steal(PyCode_GetVarnames(body));
    for (const auto &[name, value] : keywords) {
      bool placed = false;
      for (int i = 0; names && i < body->co_argcount; ++i)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(names.get(), i),
                                             name.c_str()) == 0 &&
            !bound[size_t(i)]) {
          bound[size_t(i)] = value;
          placed = true;
        }
      if (!placed)
        unsupported("call of a function made during capture with keyword '" +
                    name + "'");
    }
    std::vector<VarPtr> defaults =
        callee->self ? itemsOf(callee->self) : std::vector<VarPtr>{};
    size_t firstDefault = bound.size() - std::min(bound.size(), defaults.size());
    for (size_t i = 0; i < bound.size(); ++i) {
      if (bound[i])
        continue;
      if (i < firstDefault)
        unsupported("call of a function made during capture without an "
                    "argument it needs");
      bound[i] = defaults[defaults.size() - (bound.size() - i)];
    }
    return inliner.inlineCode(body, bound, current.globals, nullptr,
                              current.functionSource, callee->items);
  }
  if (callee->kind == Var::Kind::Object && callee->method == "set.add" &&
      args.size() == 2 && keywords.empty()) {
    addToSet(args[0], args[1]);
    return constant(Py_None);
  }
  if (callee->kind == Var::Kind::Object &&
      (callee->method.rfind("dict.", 0) == 0 ||
       callee->method.rfind("list.", 0) == 0 ||
       callee->method == "tuple.index")) {
    if (callee->method == "list.append" && args.size() == 2 &&
        keywords.empty()) {
      // A list made during capture is a value of the trace; the frame's
      // own lists are the caller's objects: not changed symbolically.
      if (args[0]->source >= 0)
        unsupported("list.append on a list the frame did not create");
      willMutate(args[0]);
      args[0]->items.push_back(args[1]);
      return constant(Py_None);
    }
    if (callee->method == "list.extend" && args.size() == 2 &&
        keywords.empty()) {
      if (args[0]->source >= 0)
        unsupported("list.extend on a list the frame did not create");
      std::vector<VarPtr> extra = itemsOf(args[1]);
      willMutate(args[0]);
      for (const VarPtr &item : extra)
        args[0]->items.push_back(item);
      return constant(Py_None);
    }
    if (callee->method == "dict.get" && (args.size() == 2 || args.size() == 3) &&
        keywords.empty()) {
      // d.get(key[, default]) on a dict var: its keys are constants.
      if (VarPtr value = dictEntry(args[0], dictKeyOf(args[1], "dict.get")))
        return value;
      return args.size() == 3 ? args[2] : constant(Py_None);
    }
    if ((callee->method == "list.index" || callee->method == "tuple.index") &&
        args.size() == 2 && keywords.empty()) {
      // Position of a constant among constants (classes, enum members).
      if (!comparableAtCapture(args[1]))
        unsupported("list.index of a value not known at capture");
      for (size_t i = 0; i < args[0]->items.size(); ++i) {
        const VarPtr &item = args[0]->items[i];
        if (!comparableAtCapture(item))
          unsupported("list.index over values not known at capture");
        int equal = PyObject_RichCompareBool(item->object.get(),
                                             args[1]->object.get(), Py_EQ);
        if (equal < 0) {
          PyErr_Clear();
          unsupported("list.index comparison raised");
        }
        if (equal)
          return integerConstant(int64_t(i));
      }
      unsupported("list.index of a missing value (ValueError)");
    }
    if (callee->method == "dict.update" && args.size() <= 2) {
      // d.update(other, **more): as `{**d, **other, **more}` stores them.
      if (args.size() == 2)
        mergeInto(args[0], args[1]);
      for (const auto &[key, value] : keywords) {
        PyRef name = PyRef::steal(PyUnicode_FromString(key.c_str()));
        setDictItem(args[0], constant(name.get()), value);
      }
      return constant(Py_None);
    }
    if (callee->method == "dict.pop" && (args.size() == 2 || args.size() == 3) &&
        keywords.empty())
      return popDictItem(args[0], args[1], args.size() == 3 ? args[2] : nullptr);
    if (args.size() != 1 || !keywords.empty())
      unsupported(callee->method + " with arguments");
    if (callee->method == "dict.copy" || callee->method == "list.copy") {
      // A shallow copy: a new container var holding the same values.
      VarPtr copy = makeVar(args[0]->kind);
      copy->items = args[0]->items;
      copy->keys = args[0]->keys;
      copy->isList = args[0]->isList;
      return copy;
    }
    return dictMethod(callee->method.substr(5), args[0]);
  }
  if (callee->kind == Var::Kind::Object) {
    PyObject *object = callee->object.get();
    if (isTorchAssert(object))
      return checkedAssert(args);
    if (object == reinterpret_cast<PyObject *>(&PySuper_Type))
      if (VarPtr base = superOfTensor(args))
        return base;
    if (object == reinterpret_cast<PyObject *>(&PySuper_Type))
      if (VarPtr proxy = superOfObject(args))
        return proxy;
    if (PyObject *form = opTable().polyfill(object))
      // The callable is guarded already; its Python form is the table's,
      // held by the entry (its globals are guarded through it).
      return callAny(fixedObject(PyRef::borrow(form), "polyfill"), args,
                     keywords);
    std::string answer = opTable().stateQuery(object);
    if (answer.rfind("autocast_", 0) == 0)
      return autocastCasts.query(answer, args);
    if (answer == "false")
      return constant(Py_False);
    if (answer == "true")
      return constant(Py_True);
    if (answer == "none")
      return constant(Py_None);
    if (answer == "zero")
      return integerConstant(0);
    if (answer == "grad_enabled")
      return constant(gradMode ? Py_True : Py_False);
    if (!args.empty() && keywords.empty())
      if (VarPtr walked = walkModules(object, args[0], args.size()))
        return walked;
    if (onlyLogsUsage(object))
      return constant(Py_None);
    if (VarPtr folded = foldTorchValue(object, args, keywords))
      return folded;
    if (VarPtr exception = makeException(object, args, keywords))
      return exception;
    if (isModuleInit(object) && !args.empty() &&
        args[0]->kind == Var::Kind::NewObject)
      // A module class's __init__ traced for its effects (a module made in
      // forward, PythonObjects::construct): nn.Module's own sets up only
      // the new module, which capture then makes for real.
      return constant(Py_None);
    if (!opTable().function(object) && PyFunction_Check(object))
      return inliner.inlineFunction(callee, args, keywords);
    if (VarPtr result = containerBuiltin(object, args, keywords))
      return result;
    if (VarPtr result = isInstance(object, args))
      return result;
    if (isBuiltin(object, "callable") && args.size() == 1 && keywords.empty()) {
      int answer = values.of(args[0]).callable(args[0]);
      if (answer >= 0)
        return constant(answer ? Py_True : Py_False);
    }
    if ((isBuiltin(object, "str") || isBuiltin(object, "repr")) &&
        args.size() == 1 && keywords.empty() &&
        args[0]->kind == Var::Kind::Object && args[0]->method == "exception" &&
        args[0]->object) {
      // The text of an exception capture made (a handler's message).
      PyRef text = PyRef::steal(isBuiltin(object, "str")
                                    ? PyObject_Str(args[0]->object.get())
                                    : PyObject_Repr(args[0]->object.get()));
      return foldPython(text.release());
    }
    if (isBuiltin(object, "type") && args.size() == 1 && keywords.empty())
      if (VarPtr result = typeOf(args[0]))
        return result;
    if (VarPtr result = attributeBuiltin(object, args))
      return result;
    if (autocastCasts.exit(callee))
      return constant(Py_None);
    if (callee->method == "__exit__" && callee->setsGradMode >= 0) {
      if (gradModeStack.empty()) { // entered before the frame resumed
        if (callee->restoresGradMode < 0)
          unsupported("leaving a with block entered before the frame");
        gradMode = callee->restoresGradMode == 1;
        result.exitCalls.push_back(callee->source);
        return constant(Py_None);
      }
      gradMode = gradModeStack.back();
      gradModeStack.pop_back();
      return constant(Py_None);
    }
    if (VarPtr context = gradModeContext(object, args, keywords))
      return context;
    if (VarPtr layer = objects.statelessLayer(callee, args, keywords))
      return layer;
    if (VarPtr made = objects.construct(callee, args, keywords))
      return made;
    if (isObjectNew(object) && args.size() == 1 && keywords.empty())
      if (VarPtr made = objects.allocateBare(args[0]))
        return made;
    if (VarPtr made = values.sequenceHandler().constructNamedTuple(callee, args,
                                                                   keywords))
      return made;
    if (isModule(object))
      return inliner.inlineModule(callee, args, keywords);
    if (!PyType_Check(object) && callee->method.empty() &&
        !isTorchClassInstance(object)) {
      // An instance of a class with a Python __call__ (an attention
      // processor, an activation object): that method, bound to it. Not
      // torch's own callables (operator overloads), which calls bind as
      // ops or externs.
      PyRef name = PyRef::steal(PyUnicode_InternFromString("__call__"));
      if (VarPtr method = boundMethod(callee, name.get()))
        return callAny(method, args, keywords);
    }
  }
  return callTorch(callee, args, keywords);
}


VarPtr
BytecodeTracer::callTorch(const VarPtr &callee, std::vector<VarPtr> args,
                          const Keywords &keywords) {
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
      return inliner.inlineFunction(fixedObject(callable, what), args,
                                    keywords);
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


VarPtr BytecodeTracer::checkedAssert(const std::vector<VarPtr> &args) {
  if (args.empty() || args[0]->kind != Var::Kind::Constant)
    unsupported("torch._assert on a value not known at capture");
  if (!truthOf(args[0], false))
    unsupported("torch._assert fails (the eager run raises it)");
  return constant(Py_None);
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
  // A per-instance override (obj.name = ...) would win over the type's
  // function: guard that the instance still has none.
  int source = knownSourceOf(base);
  if (source >= 0)
    guardBuilder.guardObject(Guard::Kind::NoInstanceAttribute, source, name);
  VarPtr method = makeVar(Var::Kind::BoundMethod);
  method->self = base;
  method->function =
      classify(function, guardBuilder.namedSource(Source::Kind::TypeAttr,
                                                  sourceOfObject(base), name));
  return method;
}

/// MAKE_FUNCTION of a code constant (comprehensions, generator
/// expressions, lambdas without defaults), with its closure cells.
void BytecodeTracer::setFunctionAttribute(const VarPtr &function, int flag,
                                          const VarPtr &attribute) {
  if (function->kind != Var::Kind::Function)
    unsupported("a function attribute on a value that is not a function");
  if (flag == 8)
    function->items = itemsOf(attribute);
  else if (flag == 1)
    function->self = attribute; // positional defaults (a tuple)
  else if (flag != 4)         // annotations do not change a call
    unsupported("a function made with keyword-only defaults");
}

VarPtr BytecodeTracer::makeFunction(int flags) {
  VarPtr codeVar = pop();
  if (flags & 2)
    unsupported("a function made with keyword-only defaults");
  VarPtr function = makeVar(Var::Kind::Function);
  function->object = codeVar->object;
  if (flags & 8)
    function->items = itemsOf(pop());
  if (flags & 4)
    pop(); // annotations do not change a call
  if (flags & 1)
    function->self = pop(); // positional defaults (a tuple)
  return function;
}

} // namespace capture
} // namespace dynafuse

//===- CallInliner.cpp - Inlining calls of Python functions and modules ---===//
//
// Module calls (forward pre-hooks, forward, forward hooks; backward and
// global hooks guarded empty), Python function calls
// (arguments bound like CPython binds them) and code run in place of a call
// in a fresh TracedCode, through the tracer's bytecode loop.
//
//===----------------------------------------------------------------------===//
#include "CallInliner.h"

#include "BytecodeTracer.h"

#include "Values/DictKeys.h"

#include <utility>

namespace dynafuse {
namespace capture {

void CallInliner::requireNoHooks(const VarPtr &module) {
  static const char *perModule[] = {"_backward_hooks", "_backward_pre_hooks"};
  int source = tracer.sourceOfObject(module);
  for (const char *name : perModule) {
    PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
    PyRef dict =
        PyRef::steal(PyObject_GetAttr(module->object.get(), key.get()));
    if (!dict) {
      PyErr_Clear();
      continue;
    }
    guardEmpty(dict.get(),
               tracer.guardBuilder.namedSource(Source::Kind::Attr, source,
                                               key.get()),
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
    guardEmpty(dict.get(), tracer.guardBuilder.addSource(std::move(fixed)),
               name);
  }
}

void CallInliner::guardEmpty(PyObject *dict, int source, const char *what) {
  if (!PyDict_Check(dict) || PyDict_Size(dict) != 0)
    tracer.unsupported(std::string("module call with ") + what + " registered");
  Guard guard;
  guard.kind = Guard::Kind::EmptyDict;
  guard.source = source;
  tracer.guardBuilder.addGuard(std::move(guard));
}

std::vector<CallInliner::ForwardHook>
CallInliner::forwardHooks(const VarPtr &module, const char *hooks,
                          const char *withKeywords) {
  PyObject *object = module->object.get();
  PyRef hooksName = PyRef::steal(PyUnicode_InternFromString(hooks));
  PyRef dict = PyRef::steal(PyObject_GetAttr(object, hooksName.get()));
  if (!dict) { // a module made before torch kept these dicts
    PyErr_Clear();
    return {};
  }
  int source = tracer.sourceOfObject(module);
  int dictSource = tracer.guardBuilder.namedSource(Source::Kind::Attr, source,
                                                   hooksName.get());
  if (!PyDict_Check(dict.get()))
    tracer.unsupported(std::string("module call whose ") + hooks +
                       " is not a dict");
  auto guardLength = [&](PyObject *guarded, int guardedSource) {
    Guard length;
    length.kind = Guard::Kind::DictLength;
    length.source = guardedSource;
    length.length = size_t(PyDict_Size(guarded));
    tracer.guardBuilder.addGuard(std::move(length));
  };
  guardLength(dict.get(), dictSource);
  if (PyDict_Size(dict.get()) == 0)
    return {};
  PyRef keywordsName = PyRef::steal(PyUnicode_InternFromString(withKeywords));
  PyRef keywordsDict =
      PyRef::steal(PyObject_GetAttr(object, keywordsName.get()));
  int keywordsSource = -1;
  if (keywordsDict && PyDict_Check(keywordsDict.get())) {
    keywordsSource = tracer.guardBuilder.namedSource(Source::Kind::Attr, source,
                                                     keywordsName.get());
    guardLength(keywordsDict.get(), keywordsSource);
  } else {
    PyErr_Clear();
    keywordsDict = PyRef();
  }
  // The dict's own order (an OrderedDict: prepended hooks come first).
  std::vector<ForwardHook> found;
  PyRef iterator = PyRef::steal(PyObject_GetIter(dict.get()));
  while (PyRef key =
             iterator ? PyRef::steal(PyIter_Next(iterator.get())) : PyRef()) {
    PyObject *hook = PyDict_GetItemWithError(dict.get(), key.get());
    if (!hook)
      break;
    ForwardHook entry;
    entry.hook = tracer.classify(
        hook, tracer.guardBuilder.namedSource(Source::Kind::DictItem,
                                              dictSource, key.get()));
    PyObject *flag =
        keywordsDict ? PyDict_GetItemWithError(keywordsDict.get(), key.get())
                     : nullptr;
    if (flag) { // guarded: the entry stays there, with that value
      tracer.classify(
          flag, tracer.guardBuilder.namedSource(Source::Kind::DictItem,
                                                keywordsSource, key.get()));
      entry.withKeywords = PyObject_IsTrue(flag) == 1;
    }
    found.push_back(entry);
  }
  if (PyErr_Occurred()) {
    PyErr_Clear();
    tracer.unsupported(std::string("reading ") + hooks + " raised");
  }
  return found;
}

VarPtr
CallInliner::inlineModule(const VarPtr &module, std::vector<VarPtr> args,
                          const Keywords &keywords) {
  requireNoHooks(module);
  std::vector<ForwardHook> preHooks = forwardHooks(
      module, "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs");
  std::vector<ForwardHook> hooks =
      forwardHooks(module, "_forward_hooks", "_forward_hooks_with_kwargs");
  if (preHooks.empty() && hooks.empty())
    return callForward(module, std::move(args), keywords);
  // As Module._call_impl runs them: each pre-hook may replace the
  // arguments, each forward hook the result (None keeps them).
  auto isNone = [](const VarPtr &var) {
    return var->kind == Var::Kind::Constant && var->object.get() == Py_None;
  };
  auto tupleOf = [](const std::vector<VarPtr> &items) {
    VarPtr tuple = makeVar(Var::Kind::Tuple);
    tuple->items = items;
    return tuple;
  };
  Keywords callKeywords = keywords;
  for (const ForwardHook &pre : preHooks) {
    if (pre.withKeywords) {
      VarPtr result = tracer.callAny(
          pre.hook, {module, tupleOf(args), dictOfKeywords(callKeywords)}, {});
      if (isNone(result))
        continue;
      std::vector<VarPtr> pair = tracer.itemsOf(result);
      if (result->kind != Var::Kind::Tuple || result->isList ||
          pair.size() != 2 || pair[1]->kind != Var::Kind::Dict)
        tracer.unsupported("a forward pre-hook with kwargs returning other "
                           "than (args, kwargs) (RuntimeError)");
      std::optional<Keywords> replaced = keywordsOfDict(*pair[1]);
      if (!replaced)
        tracer.unsupported("a forward pre-hook's kwargs with keys that are "
                           "not strings (TypeError)");
      args = tracer.itemsOf(pair[0]);
      callKeywords = std::move(*replaced);
      continue;
    }
    VarPtr result = tracer.callAny(pre.hook, {module, tupleOf(args)}, {});
    if (isNone(result))
      continue;
    bool tuple = result->kind == Var::Kind::Tuple && !result->isList &&
                 !result->isSet && result->keys.empty();
    args = tuple ? result->items : std::vector<VarPtr>{result};
  }
  VarPtr result = callForward(module, args, callKeywords);
  for (const ForwardHook &post : hooks) {
    VarPtr replaced =
        post.withKeywords
            ? tracer.callAny(
                  post.hook,
                  {module, tupleOf(args), dictOfKeywords(callKeywords), result},
                  {})
            : tracer.callAny(post.hook, {module, tupleOf(args), result}, {});
    if (!isNone(replaced))
      result = replaced;
  }
  return result;
}

VarPtr CallInliner::callForward(const VarPtr &module, std::vector<VarPtr> args,
                                const Keywords &keywords) {
  PyRef name = PyRef::steal(PyUnicode_InternFromString("forward"));
  VarPtr forward = tracer.boundMethod(module, name.get());
  if (!forward) {
    // forward set on the instance (self.forward = self.forward_split_cat
    // in __init__): whatever the attribute holds, called as Python would.
    PyObject *dict =
        module->object ? PyObject_GenericGetDict(module->object.get(), nullptr)
                       : nullptr;
    bool own = dict && PyDict_GetItemWithError(dict, name.get());
    Py_XDECREF(dict);
    PyErr_Clear();
    if (!own)
      tracer.unsupported(std::string("call of ") +
                         Py_TYPE(module->object.get())->tp_name +
                         " whose forward is not a Python function");
    return tracer.callAny(tracer.loadAttr(module, name.get()), args, keywords);
  }
  args.insert(args.begin(), module);
  return tracer.callAny(forward->function, args, keywords);
}

VarPtr
CallInliner::inlineFunction(const VarPtr &function,
                            const std::vector<VarPtr> &args,
                            const Keywords &keywords) {
  PyObject *object = function->object.get();
  auto *callee = reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(object));
  // A generator function runs to its end at the call, its yields
  // collected (as a generator expression's are): the consumer iterates
  // over what it would have produced. Coroutines are not unrolled.
  const int skipped = CO_COROUTINE | CO_ASYNC_GENERATOR;
  if (callee->co_flags & skipped)
    tracer.unsupported("call of a coroutine function");
  if (depth >= kMaxInlineDepth)
    tracer.unsupported("calls nested deeper than " +
                       std::to_string(kMaxInlineDepth));
  if (function->source < 0)
    tracer.unsupported("call of a function created during capture");
  std::vector<VarPtr> calleeLocals =
      bindArguments(function, callee, args, keywords);
  return inlineCode(callee, std::move(calleeLocals),
                    PyFunction_GET_GLOBALS(object),
                    PyFunction_GET_CLOSURE(object), function->source, {});
}

VarPtr CallInliner::inlineCode(PyCodeObject *callee,
                               std::vector<VarPtr> initialLocals,
                               PyObject *calleeGlobals,
                               PyObject *calleeClosure, int calleeSource,
                               std::vector<VarPtr> cells) {
  if (depth >= kMaxInlineDepth)
    tracer.unsupported("calls nested deeper than " +
                       std::to_string(kMaxInlineDepth));
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
  calleeState.currentLine = tracer.current.currentLine;
  TracedCode caller = std::exchange(tracer.current, std::move(calleeState));
  ++depth;
  VarPtr result;
  try {
    result = tracer.runBody();
  } catch (...) {
    // A break inside the callee breaks the caller at its call: the
    // caller's state comes back either way.
    --depth;
    tracer.current = std::move(caller);
    throw;
  }
  --depth;
  tracer.current = std::move(caller);
  if (!generator)
    return result;
  VarPtr iterator = makeVar(Var::Kind::Iterator);
  iterator->items = std::move(collected);
  // What `yield from` the generator evaluates to: its return value.
  iterator->self = result;
  return iterator;
}

std::vector<VarPtr> CallInliner::bindArguments(const VarPtr &functionVar,
                                               PyCodeObject *callee,
                                               const std::vector<VarPtr> &args,
                                               const Keywords &keywords) {
  PyObject *function = functionVar->object.get();
  // A default that is not a constant (a function, a class, a list shared
  // by every call) is read through the function's __defaults__ or
  // __kwdefaults__, guarded as any source.
  auto defaultValue = [&](PyObject *value, const char *holder, int index,
                          PyObject *name) {
    if (isConstantObject(value))
      return tracer.constant(value);
    PyRef key = PyRef::steal(PyUnicode_InternFromString(holder));
    int defaults = tracer.guardBuilder.namedSource(
        Source::Kind::Attr, functionVar->source, key.get());
    return tracer.classify(
        value, name ? tracer.guardBuilder.namedSource(Source::Kind::DictItem,
                                                      defaults, name)
                    : tracer.guardBuilder.indexedSource(Source::Kind::Item,
                                                        defaults, index));
  };
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
    tracer.unsupported("call with too many positional arguments");
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
      extra->keys.push_back(stringKeyText(keyword.first));
      extra->items.push_back(keyword.second);
      continue;
    }
    if (slot < 0 || slots[slot])
      tracer.unsupported("call with an unexpected keyword '" + keyword.first +
                         "'");
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
      tracer.unsupported("call without argument '" + nameOf(i) + "'");
    slots[i] =
        defaultValue(PyTuple_GET_ITEM(defaults, d), "__defaults__", d, nullptr);
  }
  PyObject *kwDefaults = PyFunction_GET_KW_DEFAULTS(function);
  for (int i = positional; i < positional + keywordOnly; ++i) {
    if (slots[i])
      continue;
    PyObject *value = kwDefaults
                          ? PyDict_GetItemString(kwDefaults, nameOf(i).c_str())
                          : nullptr;
    if (!value)
      tracer.unsupported("call without argument '" + nameOf(i) + "'");
    PyRef name = PyRef::steal(PyUnicode_FromString(nameOf(i).c_str()));
    slots[i] = defaultValue(value, "__kwdefaults__", 0, name.get());
  }
  return slots;
}

} // namespace capture
} // namespace dynafuse

//===- AutocastCasts.cpp - torch.autocast as casts in the graph -----------===//
//
// The policy is ATen's (autocast_mode.cpp), for CPU tensors: an argument is
// eligible when it is a floating tensor other than float64; lower precision
// ops cast eligible arguments to autocast's type, fp32 ops to float32, and
// promote ops (cat, stack, index_copy) to float32 when one of them is,
// else to the lower type. Arguments of other types and of other devices
// pass unchanged. CUDA tensors under CUDA autocast refuse (CUDA's lists
// differ and are not modelled yet).
//
//===----------------------------------------------------------------------===//
#include "AutocastCasts.h"

#include "BytecodeTracer.h"
#include "ObjectKinds.h"

namespace dynafuse {
namespace capture {
namespace {

/// Autocast casts floating tensors other than float64.
bool isEligible(DType dtype) {
  return isFloating(dtype) && dtype != DType::F64;
}

/// F.pad's policy: fp32 in the modes whose aten ops autocast lists
/// (reflect pads of 1 and 2 dims, replicate pads of 1 to 3), else none.
AutocastPolicy padPolicy(const std::vector<VarPtr> &args,
                         const Keywords &keywords) {
  VarPtr mode = args.size() > 2 ? args[2] : nullptr;
  if (keywords.count("mode"))
    mode = keywords.at("mode");
  VarPtr pad = args.size() > 1 ? args[1] : nullptr;
  if (keywords.count("pad"))
    pad = keywords.at("pad");
  if (!mode || mode->kind != Var::Kind::Constant ||
      !PyUnicode_Check(mode->object.get()))
    return AutocastPolicy::None;
  std::string name = PyUnicode_AsUTF8(mode->object.get());
  const std::vector<std::string> &modes = opTable().autocastPadModes();
  if (std::find(modes.begin(), modes.end(), name) == modes.end())
    return AutocastPolicy::None;
  size_t padded = pad && pad->kind == Var::Kind::Tuple ? pad->items.size() / 2
                  : pad && pad->kind == Var::Kind::Constant &&
                          PyTuple_Check(pad->object.get())
                      ? size_t(PyTuple_GET_SIZE(pad->object.get())) / 2
                      : 0;
  if (name == "reflect" && padded > 2)
    return AutocastPolicy::None; // reflection_pad3d has no autocast kernel
  return AutocastPolicy::Float32;
}

} // namespace

DType AutocastCasts::promotedType(const std::vector<VarPtr> &args,
                                  const Keywords &keywords) {
  DType widest = state.cpuType;
  auto visit = [&](const VarPtr &value, auto &self) -> void {
    if (value->kind == Var::Kind::Tuple) {
      for (const VarPtr &item : value->items)
        self(item, self);
      return;
    }
    if (value->kind != Var::Kind::Tensor ||
        value->tensor->type.device != "cpu" ||
        !isEligible(value->tensor->type.dtype))
      return;
    DType dtype = value->tensor->type.dtype;
    if (dtype == DType::F32)
      widest = DType::F32;
    else if (dtype != state.cpuType)
      tracer.unsupported(std::string("autocast promotes ") + dtypeName(dtype) +
                         " beside " + dtypeName(state.cpuType) +
                         " (eager raises)");
  };
  for (const VarPtr &arg : args)
    visit(arg, visit);
  for (const auto &[name, value] : keywords)
    visit(value, visit);
  return widest;
}

VarPtr AutocastCasts::castArgument(const VarPtr &value, DType target,
                                   bool &changed) {
  if (value->kind == Var::Kind::Tuple && value->keys.empty()) {
    bool itemsChanged = false;
    std::vector<VarPtr> items;
    for (const VarPtr &item : value->items)
      items.push_back(castArgument(item, target, itemsChanged));
    if (!itemsChanged)
      return value;
    changed = true;
    VarPtr cast = makeVar(Var::Kind::Tuple);
    cast->items = std::move(items);
    cast->isList = value->isList;
    return cast;
  }
  if (value->kind != Var::Kind::Tensor)
    return value;
  const TensorType &type = value->tensor->type;
  if (type.device != "cpu") {
    if (state.cuda)
      tracer.unsupported("autocast on CUDA tensors (its cast policy is not "
                         "modelled yet)");
    return value;
  }
  if (!state.cpu || !isEligible(type.dtype) || type.dtype == target)
    return value;
  changed = true;
  return tracer.emit(Op::Cast, {tracer.operandOf(value, "autocast")},
                     {{"dtype", target}});
}

namespace {
void collectTensors(PyObject *value, std::vector<PyObject *> &tensors) {
  if (isAnyTensor(value)) {
    tensors.push_back(value);
  } else if (PyTuple_Check(value) || PyList_Check(value)) {
    PyRef items = PyRef::steal(PySequence_Fast(value, "result"));
    for (Py_ssize_t i = 0; items && i < PySequence_Fast_GET_SIZE(items.get());
         ++i)
      collectTensors(PySequence_Fast_GET_ITEM(items.get(), i), tensors);
  }
}
} // namespace

std::vector<DType>
AutocastCasts::checkExtern(TorchCall &call,
                           const std::vector<TensorType> &operandTypes,
                           const std::vector<PyObject *> &metaResults) {
  if (!state.cpu ||
      opTable().autocastPolicy(call.callable.get()) != AutocastPolicy::None)
    return {};
  bool eligible = false;
  for (const TensorType &type : operandTypes) {
    if (type.device != "cpu")
      return {};
    eligible |= isEligible(type.dtype);
  }
  if (!eligible)
    return {};
  std::vector<PyRef> zeros;
  std::vector<PyObject *> zeroArgs;
  for (const TensorType &type : operandTypes) {
    zeros.push_back(PyRef::steal(newZeroTensor(type)));
    if (!zeros.back()) {
      PyErr_Clear();
      tracer.unsupported("call to " + call.target +
                         " under autocast (its "
                         "probe's operands could not be made)");
    }
    zeroArgs.push_back(zeros.back().get());
  }
  PyRef probed;
  {
    AutocastApplied on(state);
    probed = PyRef::steal(call.invoke(zeroArgs));
  }
  if (!probed) {
    std::string error = takePythonError();
    tracer.unsupported("call to " + call.target +
                       " under autocast (running "
                       "it on zeros to see what autocast does inside raised: " +
                       error + ")");
  }
  std::vector<PyObject *> tensors;
  collectTensors(probed.get(), tensors);
  if (tensors.size() != metaResults.size())
    tracer.unsupported("call to " + call.target +
                       " under autocast gives "
                       "other results than on meta tensors");
  std::vector<DType> types;
  bool same = true;
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::optional<DType> dtype = describeTensor(tensors[i]).dtype;
    if (!dtype)
      tracer.unsupported("call to " + call.target +
                         " under autocast gives "
                         "a tensor of an unsupported dtype");
    types.push_back(*dtype);
    same = same && dtype == describeTensor(metaResults[i]).dtype;
  }
  if (same)
    return {};
  call.autocast = state;
  return types;
}

VarPtr AutocastCasts::castCall(const VarPtr &callee,
                               const std::vector<VarPtr> &args,
                               const Keywords &keywords) {
  if (!state.any())
    return nullptr;
  AutocastPolicy policy = AutocastPolicy::None;
  if (callee->kind == Var::Kind::TensorMethod) {
    policy = opTable().autocastMethodPolicy(callee->method);
  } else if (callee->kind == Var::Kind::Object && callee->object) {
    PyObject *object = callee->object.get();
    policy = object == opTable().autocastPad()
                 ? padPolicy(args, keywords)
                 : opTable().autocastPolicy(object);
  }
  if (policy == AutocastPolicy::None)
    return nullptr;
  DType target = state.cpuType;
  if (policy == AutocastPolicy::Float32) {
    target = DType::F32;
  } else if (policy == AutocastPolicy::Promote) {
    std::vector<VarPtr> all = args;
    if (callee->kind == Var::Kind::TensorMethod)
      all.insert(all.begin(), callee->self);
    target = promotedType(all, keywords);
  }
  bool changed = false;
  std::vector<VarPtr> castArgs;
  for (const VarPtr &arg : args)
    castArgs.push_back(castArgument(arg, target, changed));
  Keywords castKeywords;
  for (const auto &[name, value] : keywords)
    castKeywords[name] = castArgument(value, target, changed);
  VarPtr castCallee = callee;
  if (callee->kind == Var::Kind::TensorMethod) {
    VarPtr self = castArgument(callee->self, target, changed);
    if (self != callee->self) {
      castCallee = std::make_shared<Var>(*callee);
      castCallee->self = self;
    }
  }
  if (!changed)
    return nullptr;
  return tracer.callAny(castCallee, castArgs, castKeywords);
}

VarPtr AutocastCasts::query(const std::string &answer,
                            const std::vector<VarPtr> &args) {
  // The device a query names: after the colon, else its argument (CUDA
  // without one, as torch.is_autocast_enabled() means).
  size_t colon = answer.find(':');
  std::string device = colon != std::string::npos ? answer.substr(colon + 1)
                       : args.empty()             ? "cuda"
                                                  : "";
  if (device.empty()) {
    if (args[0]->kind != Var::Kind::Constant ||
        !PyUnicode_Check(args[0]->object.get()))
      tracer.unsupported("an autocast query of a device not known at capture");
    device = PyUnicode_AsUTF8(args[0]->object.get());
  }
  if (device != "cpu" && device != "cuda")
    tracer.unsupported("an autocast query of device '" + device + "'");
  bool cpu = device == "cpu";
  if (answer.rfind("autocast_enabled", 0) == 0)
    return tracer.constant((cpu ? state.cpu : state.cuda) ? Py_True : Py_False);
  return tracer.unguardedObject(
      dtypeObject(cpu ? state.cpuType : state.cudaType));
}

VarPtr AutocastCasts::context(PyObject *callable,
                              const std::vector<VarPtr> &args,
                              const Keywords &keywords) {
  static PyObject *autocastSlot = nullptr, *cpuSlot = nullptr,
                  *cudaSlot = nullptr;
  PyObject *autocast =
      lookupOnce(autocastSlot, "torch.amp.autocast_mode", "autocast");
  if (!autocast || !PyType_Check(callable) || !PyType_Check(autocast) ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(callable),
                        reinterpret_cast<PyTypeObject *>(autocast)))
    return nullptr;
  auto argument = [&](size_t position, const char *name) -> VarPtr {
    auto keyword = keywords.find(name);
    if (keyword != keywords.end())
      return keyword->second;
    return position < args.size() ? args[position] : nullptr;
  };
  // torch.autocast(device_type, dtype, enabled, cache_enabled); the
  // per-device classes take (enabled, dtype, cache_enabled).
  std::string device;
  bool takesDevice = callable == autocast;
  if (takesDevice) {
    VarPtr name = argument(0, "device_type");
    if (!name || name->kind != Var::Kind::Constant ||
        !PyUnicode_Check(name->object.get()))
      tracer.unsupported("torch.autocast without a constant device_type "
                         "string");
    device = PyUnicode_AsUTF8(name->object.get());
  } else if (callable == lookupOnce(cpuSlot, "torch.cpu.amp", "autocast")) {
    device = "cpu";
  } else if (callable == lookupOnce(cudaSlot, "torch.cuda.amp", "autocast")) {
    device = "cuda";
  } else {
    tracer.unsupported("a subclass of torch.autocast");
  }
  if (device != "cpu" && device != "cuda")
    tracer.unsupported("torch.autocast on device '" + device + "'");
  VarPtr enabled = argument(takesDevice ? 2 : 0, "enabled");
  VarPtr dtype = argument(1, "dtype");
  bool on = true;
  if (enabled) {
    if (enabled->kind != Var::Kind::Constant ||
        !PyBool_Check(enabled->object.get()))
      tracer.unsupported("torch.autocast whose enabled is not a constant "
                         "bool");
    on = enabled->object.get() == Py_True;
  }
  AutocastState made = state;
  DType &type = device == "cpu" ? made.cpuType : made.cudaType;
  if (dtype &&
      !(dtype->kind == Var::Kind::Constant && dtype->object.get() == Py_None)) {
    std::optional<DType> named = dtype->kind == Var::Kind::Object
                                     ? dtypeFromObject(dtype->object.get())
                                     : std::nullopt;
    if (!named)
      tracer.unsupported("torch.autocast with a dtype not known at capture");
    type = *named;
  } else if (!takesDevice) {
    type = device == "cpu" ? DType::BF16 : DType::F16; // their defaults
  }
  if (on && type != DType::BF16 && type != DType::F16)
    tracer.unsupported(std::string("torch.autocast to ") + dtypeName(type) +
                       " (eager disables autocast with a warning)");
  (device == "cpu" ? made.cpu : made.cuda) = on;
  // Its object makes the context again with no arguments (a graph break
  // inside the block resumes inside a fresh one, entered).
  static PyObject *partialSlot = nullptr;
  PyObject *partial = lookupOnce(partialSlot, "functools", "partial");
  PyRef options = PyRef::steal(PyDict_New());
  PyRef typeObject = dtypeObject(type);
  if (!partial || !options || !typeObject ||
      (takesDevice &&
       PyDict_SetItemString(
           options.get(), "device_type",
           PyRef::steal(PyUnicode_FromString(device.c_str())).get()) < 0) ||
      PyDict_SetItemString(options.get(), "dtype", typeObject.get()) < 0 ||
      PyDict_SetItemString(options.get(), "enabled", on ? Py_True : Py_False) <
          0) {
    PyErr_Clear();
    tracer.unsupported("making a torch.autocast context failed");
  }
  PyRef noArguments = PyRef::steal(PyTuple_Pack(1, callable));
  PyRef factory = PyRef::steal(
      noArguments ? PyObject_Call(partial, noArguments.get(), options.get())
                  : nullptr);
  if (!factory) {
    PyErr_Clear();
    tracer.unsupported("making a torch.autocast context failed");
  }
  VarPtr context = makeVar(Var::Kind::Object);
  context->object = factory;
  context->setsAutocast = int(states.size());
  states.push_back(made);
  return context;
}

VarPtr AutocastCasts::exitFromSource(PyObject *object, int source) {
  static PyObject *autocastSlot = nullptr;
  PyObject *autocast =
      lookupOnce(autocastSlot, "torch.amp.autocast_mode", "autocast");
  if (!autocast || !PyMethod_Check(object))
    return nullptr;
  PyObject *self = PyMethod_GET_SELF(object);
  if (!PyObject_TypeCheck(self, reinterpret_cast<PyTypeObject *>(autocast)))
    return nullptr;
  PyRef exit = PyRef::steal(PyObject_GetAttrString(
      reinterpret_cast<PyObject *>(Py_TYPE(self)), "__exit__"));
  PyRef device = PyRef::steal(PyObject_GetAttrString(self, "device"));
  PyRef prev = PyRef::steal(PyObject_GetAttrString(self, "prev"));
  PyRef prevType = PyRef::steal(PyObject_GetAttrString(self, "prev_fastdtype"));
  PyErr_Clear();
  std::optional<DType> type =
      prevType ? dtypeFromObject(prevType.get()) : std::nullopt;
  if (!exit || PyMethod_GET_FUNCTION(object) != exit.get() || !device ||
      !PyUnicode_Check(device.get()) || !prev || !PyBool_Check(prev.get()) ||
      !type)
    return nullptr;
  std::string name = PyUnicode_AsUTF8(device.get());
  if (name != "cpu" && name != "cuda")
    return nullptr;
  // The exit restores what its __enter__ read: guarded.
  GuardBuilder &guards = tracer.guardBuilder;
  guards.guardObject(Guard::Kind::TypeIs, source,
                     reinterpret_cast<PyObject *>(&PyMethod_Type));
  auto attribute = [&](int base, const char *attributeName) {
    PyRef key = PyRef::steal(PyUnicode_InternFromString(attributeName));
    return guards.namedSource(Source::Kind::Attr, base, key.get());
  };
  int selfSource = attribute(source, "__self__");
  guards.guardObject(Guard::Kind::TypeIs, selfSource,
                     reinterpret_cast<PyObject *>(Py_TYPE(self)));
  guards.guardObject(Guard::Kind::Equals, attribute(selfSource, "device"),
                     device.get());
  guards.guardObject(Guard::Kind::Equals, attribute(selfSource, "prev"),
                     prev.get());
  guards.guardObject(Guard::Kind::Identity,
                     attribute(selfSource, "prev_fastdtype"), prevType.get());
  AutocastState restored = state;
  (name == "cpu" ? restored.cpu : restored.cuda) = prev.get() == Py_True;
  (name == "cpu" ? restored.cpuType : restored.cudaType) = *type;
  VarPtr var = makeVar(Var::Kind::Object);
  var->object = PyRef::borrow(object);
  var->method = "__exit__";
  var->source = source;
  var->setsAutocast = int(states.size());
  states.push_back(restored);
  return var;
}

bool AutocastCasts::enter(const VarPtr &context) {
  if (context->kind != Var::Kind::Object || context->setsAutocast < 0 ||
      !context->method.empty())
    return false;
  VarPtr exit = makeVar(Var::Kind::Object);
  exit->object = context->object;
  exit->method = "__exit__";
  exit->setsAutocast = context->setsAutocast;
  // To the resume machinery a context that keeps the grad mode.
  exit->setsGradMode = tracer.gradMode ? 1 : 0;
  stack.push_back(state);
  state = states.at(size_t(context->setsAutocast));
  tracer.push(exit);
  tracer.push(context); // __enter__ returns the context
  return true;
}

bool AutocastCasts::exit(const VarPtr &callee) {
  if (callee->method != "__exit__" || callee->setsAutocast < 0)
    return false;
  if (stack.empty()) {
    // Entered before the frame resumed: the exit from exitFromSource,
    // called again by each run.
    if (callee->source < 0)
      tracer.unsupported("leaving a torch.autocast block entered before the "
                         "frame");
    state = states.at(size_t(callee->setsAutocast));
    tracer.result.exitCalls.push_back(callee->source);
    return true;
  }
  state = stack.back();
  stack.pop_back();
  return true;
}

} // namespace capture
} // namespace dynafuse

//===- TracerTorchValues.cpp - Calls decided at capture -------------------===//
//
// Calls whose result capture knows from constants, guarded objects and
// tensor types: torch.finfo / torch.iinfo of a dtype (their attributes are
// data), torch.tensor of a constant scalar or an empty list (a `full` node),
// Tensor.to(...) to the tensor's own device (the tensor itself, or a cast),
// str() / repr() of constants and classes, inspect.signature of a guarded
// function (a "derived" object: immutable data read at capture), numpy
// ufuncs of Python numbers, and polyfills' queries on classes (functions
// marked `__dynafuse_capture_time_query__`: which copy.deepcopy protocol a
// class has), called at capture on constants and guarded classes.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

namespace dynafuse {
namespace capture {
namespace {

bool isTorchAttribute(PyObject *callable, const char *name) {
  static PyObject *slot = nullptr;
  PyObject *torch = lookupOnce(slot, "torch", nullptr);
  if (!torch)
    return false;
  PyRef attribute = PyRef::steal(PyObject_GetAttrString(torch, name));
  PyErr_Clear();
  return attribute && attribute.get() == callable;
}

std::string typeName(const VarPtr &var) {
  return var->object ? Py_TYPE(var->object.get())->tp_name : "";
}

/// A numpy ufunc (np.log, np.exp, np.sqrt): on Python numbers, a pure
/// function of them, folded at capture to the Python number its numpy
/// scalar equals (pegasus_x's sinusoidal positions scale by
/// -np.log(max_scale) / (d - 1)).
bool isNumpyUfunc(PyObject *callable) {
  return std::string(Py_TYPE(callable)->tp_name) == "numpy.ufunc";
}

bool allConstantNumbers(const std::vector<VarPtr> &args) {
  for (const VarPtr &arg : args) {
    PyObject *object = arg->object.get();
    if (arg->kind != Var::Kind::Constant || !object ||
        !(PyLong_Check(object) || PyFloat_Check(object)))
      return false;
  }
  return !args.empty();
}

bool isCaptureTimeQuery(PyObject *callable) {
  if (!PyFunction_Check(callable))
    return false;
  PyObject *attributes =
      reinterpret_cast<PyFunctionObject *>(callable)->func_dict;
  return attributes && PyDict_Check(attributes) &&
         PyDict_GetItemString(attributes, "__dynafuse_capture_time_query__");
}

/// The query's answer when every argument is a constant or a class whose
/// identity a guard pins (a class var: type() of a value, a class read
/// from a source); null otherwise (the query is then traced).
PyObject *answerQuery(PyObject *query, const std::vector<VarPtr> &args) {
  PyRef arguments = PyRef::steal(PyTuple_New(Py_ssize_t(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    const VarPtr &arg = args[i];
    bool known = arg->object &&
                 (arg->kind == Var::Kind::Constant ||
                  (arg->kind == Var::Kind::Object && arg->method.empty() &&
                   PyType_Check(arg->object.get())));
    if (!known)
      return nullptr;
    PyTuple_SET_ITEM(arguments.get(), Py_ssize_t(i),
                     Py_NewRef(arg->object.get()));
  }
  PyObject *answer = PyObject_Call(query, arguments.get(), nullptr);
  if (answer && (answer == Py_None || PyBool_Check(answer) ||
                 PyLong_CheckExact(answer) || PyUnicode_CheckExact(answer)))
    return answer;
  Py_XDECREF(answer);
  PyErr_Clear();
  return nullptr;
}

} // namespace

VarPtr BytecodeTracer::foldTorchValue(PyObject *callable,
                                      const std::vector<VarPtr> &args,
                                      const Keywords &keywords) {
  bool finfo = isTorchAttribute(callable, "finfo");
  if ((finfo || isTorchAttribute(callable, "iinfo")) && args.size() <= 1 &&
      keywords.empty()) {
    if (!args.empty() && (args[0]->kind != Var::Kind::Object ||
                          typeName(args[0]) != "torch.dtype"))
      return nullptr;
    PyRef info = PyRef::steal(
        args.empty() ? PyObject_CallNoArgs(callable)
                     : PyObject_CallOneArg(callable, args[0]->object.get()));
    if (!info) {
      PyErr_Clear();
      unsupported(std::string(finfo ? "torch.finfo" : "torch.iinfo") +
                  " raised");
    }
    return unguardedObject(info); // immutable: its attributes are data
  }
  PyRef positional, named;
  if (isNumpyUfunc(callable) && keywords.empty() && allConstantNumbers(args) &&
      constantCallArguments(args, keywords, positional, named)) {
    // The numpy scalar as the Python number it equals (what ops take).
    PyRef result =
        PyRef::steal(PyObject_Call(callable, positional.get(), nullptr));
    return foldPython(
        result ? PyObject_CallMethod(result.get(), "item", nullptr) : nullptr);
  }
  if (isCaptureTimeQuery(callable) && keywords.empty())
    if (PyObject *answer = answerQuery(callable, args))
      return foldPython(answer);
  static PyObject *signatureSlot = nullptr;
  PyObject *signature = lookupOnce(signatureSlot, "inspect", "signature");
  if (signature && callable == signature && args.size() == 1 &&
      keywords.empty()) {
    // The signature of a function whose identity is guarded (a method
    // bound to a module: its function is).
    const VarPtr &target = args[0];
    VarPtr function =
        target->kind == Var::Kind::BoundMethod ? target->function : target;
    if (function->kind != Var::Kind::Object || !function->object ||
        !function->method.empty() || knownSourceOf(function) < 0)
      return nullptr;
    PyRef subject = function->object;
    if (target->kind == Var::Kind::BoundMethod) {
      if (!target->self->object)
        return nullptr;
      subject = PyRef::steal(
          PyMethod_New(function->object.get(), target->self->object.get()));
    }
    PyRef result = PyRef::steal(PyObject_CallOneArg(signature, subject.get()));
    if (!result) {
      PyErr_Clear();
      unsupported("inspect.signature raised");
    }
    VarPtr derived = makeVar(Var::Kind::Object);
    derived->object = result;
    derived->method = "derived";
    return derived;
  }
  if ((isTorchAttribute(callable, "tensor") ||
       isTorchAttribute(callable, "as_tensor")) &&
      args.size() == 1 && args[0]->kind != Var::Kind::Tensor)
    return constantTensor(args[0], keywords);
  if ((isBuiltin(callable, "str") || isBuiltin(callable, "repr")) &&
      args.size() == 1 && keywords.empty()) {
    const VarPtr &value = args[0];
    bool known = value->kind == Var::Kind::Constant ||
                 (value->kind == Var::Kind::Object && value->object &&
                  value->method.empty() &&
                  (PyType_Check(value->object.get()) ||
                   typeName(value) == "torch.dtype" ||
                   typeName(value) == "torch.device"));
    if (!known)
      return nullptr;
    PyObject *object = value->object.get();
    return foldPython(isBuiltin(callable, "str") ? PyObject_Str(object)
                                                 : PyObject_Repr(object));
  }
  return nullptr;
}

VarPtr BytecodeTracer::constantTensor(
    const VarPtr &data, const Keywords &keywords) {
  // torch.tensor(3.0), torch.tensor([]): a scalar or an empty 1-d tensor,
  // typed as torch types them.
  std::optional<DType> dtype;
  std::string device = "cpu";
  for (const auto &[name, value] : keywords) {
    if (name == "dtype" && value->kind == Var::Kind::Object &&
        typeName(value) == "torch.dtype") {
      dtype = dtypeFromObject(value->object.get());
      if (!dtype)
        unsupported("torch.tensor of a dtype graphs do not have");
    } else if (name == "dtype" && value->kind == Var::Kind::Constant &&
             value->object.get() == Py_None)
      continue;
    else if (name == "device" && value->kind == Var::Kind::Object &&
             typeName(value) == "torch.device")
      device = deviceSpelling(value->object.get());
    else if (name == "device" && value->kind == Var::Kind::Constant &&
               value->object.get() == Py_None)
      continue;
    else
      unsupported("torch.tensor with keyword '" + name + "'");
  }
  if (data->kind != Var::Kind::Constant && data->kind != Var::Kind::Tuple)
    return nullptr;
  PyObject *object = data->object.get();
  std::vector<int64_t> shape;
  PyObject *value = nullptr;
  if (data->kind == Var::Kind::Tuple || PyTuple_Check(object)) {
    if (!itemsOf(data).empty())
      return tensorOfList(data, dtype, device);
    shape.push_back(0);
  } else if (PyBool_Check(object) || PyLong_CheckExact(object) ||
             PyFloat_CheckExact(object)) {
    value = object;
  } else {
    return nullptr;
  }
  if (!dtype) {
    if (value && PyBool_Check(value))
      dtype = DType::Bool;
    else if (value && PyLong_CheckExact(value))
      dtype = DType::I64;
    else
      dtype = DType::F32; // the default dtype (guarded as float32)
  }
  std::map<std::string, Attribute> attributes;
  attributes["shape"] = shape;
  attributes["value"] = value && PyFloat_CheckExact(value)
                            ? Attribute(PyFloat_AS_DOUBLE(value))
                        : value ? Attribute(int64_t(PyLong_AsLongLong(value)))
                                : Attribute(int64_t(0));
  attributes["dtype"] = *dtype;
  attributes["device"] = device;
  return emit(Op::Full, {}, attributes);
}

VarPtr BytecodeTracer::tensorOfList(const VarPtr &data,
                                    std::optional<DType> dtype,
                                    const std::string &device) {
  // torch.tensor([[h, w], ...]) of numbers and sizes: one `full` element
  // each, joined and shaped as the nesting is (rectangular, as eager
  // requires), typed as torch types them.
  std::vector<int64_t> shape;
  std::vector<VarPtr> leaves;
  constexpr size_t kMaxElements = 1024;
  std::function<void(const VarPtr &, size_t)> walk = [&](const VarPtr &item,
                                                         size_t depth) {
    bool sequence =
        item->kind == Var::Kind::Tuple || (item->kind == Var::Kind::Constant &&
                                           PyTuple_Check(item->object.get()));
    if (!sequence) {
      if (depth != shape.size())
        unsupported("torch.tensor of a ragged list (ValueError)");
      leaves.push_back(item);
      if (leaves.size() > kMaxElements)
        unsupported("torch.tensor of a list of over 1024 values");
      return;
    }
    std::vector<VarPtr> items = itemsOf(item);
    if (depth == shape.size() && leaves.empty())
      shape.push_back(int64_t(items.size()));
    else if (depth >= shape.size() || shape[depth] != int64_t(items.size()))
      unsupported("torch.tensor of a ragged list (ValueError)");
    for (const VarPtr &child : items)
      walk(child, depth + 1);
  };
  walk(data, 0);
  bool anyFloat = false, allBool = !leaves.empty();
  for (const VarPtr &leaf : leaves) {
    PyObject *object = leaf->object.get();
    bool number = leaf->kind == Var::Kind::SymInt ||
                  (leaf->kind == Var::Kind::Constant &&
                   (PyBool_Check(object) || PyLong_CheckExact(object) ||
                    PyFloat_CheckExact(object)));
    if (!number)
      unsupported("torch.tensor of a list holding other than numbers and "
                  "sizes");
    anyFloat |= leaf->kind == Var::Kind::Constant && PyFloat_CheckExact(object);
    allBool &= leaf->kind == Var::Kind::Constant && PyBool_Check(object);
  }
  if (!dtype)
    dtype = anyFloat ? DType::F32 : allBool ? DType::Bool : DType::I64;
  std::vector<Operand> pieces;
  for (const VarPtr &leaf : leaves) {
    PyObject *object = leaf->object.get();
    Attribute value = leaf->kind == Var::Kind::SymInt ? Attribute(leaf->size)
                      : PyFloat_CheckExact(object)
                          ? Attribute(PyFloat_AS_DOUBLE(object))
                          : Attribute(int64_t(PyLong_AsLongLong(object)));
    std::map<std::string, Attribute> attributes;
    attributes["shape"] = std::vector<int64_t>{1};
    attributes["value"] = value;
    attributes["dtype"] = *dtype;
    attributes["device"] = device;
    pieces.push_back(emit(Op::Full, {}, attributes)->tensor);
  }
  Value *flat = pieces.size() == 1
                    ? pieces[0].value
                    : emit(Op::Cat, pieces, {{"dim", int64_t(0)}})->tensor;
  return emit(Op::Reshape, {flat}, {{"shape", shape}});
}

namespace {

/// torch's is_channels_last_strides_2d / _3d (what suggest_memory_format
/// reads): the channel dim innermost, then the spatial dims, then the
/// batch, ambiguous cases counted as not. Nullopt for unknown strides.
std::optional<bool>
stridesLikeChannelsLast(const std::vector<SymExpr> &sizes,
                        const std::vector<SymExpr> &strides) {
  if (strides.size() != sizes.size() || !allConstant(sizes) ||
      !allConstant(strides))
    return std::nullopt;
  std::vector<size_t> order = sizes.size() == 4
                                  ? std::vector<size_t>{1, 3, 2, 0}
                                  : std::vector<size_t>{1, 4, 3, 2, 0};
  if (strides[1].constant() == 0)
    return false;
  int64_t least = 0;
  for (size_t d : order) {
    if (sizes[d].constant() == 0 || strides[d].constant() < least)
      return false;
    if (d == 0 && least == strides[1].constant())
      return false;
    least = strides[d].constant();
    if (sizes[d].constant() > 1)
      least *= sizes[d].constant();
  }
  return true;
}

} // namespace

VarPtr BytecodeTracer::tensorTo(const VarPtr &tensor,
                                const std::vector<VarPtr> &args,
                                const Keywords &keywords) {
  // x.to(device), x.to(dtype), x.to(device, dtype), x.to(other), with
  // dtype= / device= / non_blocking= / copy=False keywords.
  std::optional<DType> dtype;
  const TensorType &type = tensor->tensor->type;
  auto take = [&](const VarPtr &arg) {
    if (arg->kind == Var::Kind::Tensor) {
      dtype = arg->tensor->type.dtype;
      if (arg->tensor->type.device != type.device)
        unsupported("Tensor.to another tensor's device");
      return;
    }
    if (arg->kind == Var::Kind::Constant && arg->object.get() == Py_None)
      return;
    std::string name = typeName(arg);
    if (name == "torch.dtype") {
      dtype = dtypeFromObject(arg->object.get());
      if (!dtype)
        unsupported("Tensor.to a dtype graphs do not have (bool, int32, "
                    "int64, float16, bfloat16, float32 and float64 only)");
      return;
    }
    std::string device;
    if (name == "torch.device" || (arg->kind == Var::Kind::Constant &&
                                   PyUnicode_CheckExact(arg->object.get())))
      device = deviceSpelling(arg->object.get());
    if (device.empty() || device != type.device)
      unsupported("Tensor.to a device other than the tensor's");
  };
  for (const VarPtr &arg : args)
    take(arg);
  bool contiguousFormat = false;
  for (const auto &[name, value] : keywords) {
    if (name == "dtype" || name == "device") {
      take(value);
      continue;
    }
    if (name == "memory_format") {
      static PyObject *preserveSlot = nullptr, *contiguousSlot = nullptr;
      PyObject *format = value->object.get();
      // (torch.memory_format values are guarded by equality: constants.)
      if (format == lookupOnce(preserveSlot, "torch", "preserve_format"))
        continue;
      if (!format ||
          format != lookupOnce(contiguousSlot, "torch", "contiguous_format"))
        unsupported("Tensor.to with a memory_format other than "
                    "preserve_format and contiguous_format");
      contiguousFormat = true;
      continue;
    }
    bool isFalse =
        value->kind == Var::Kind::Constant && value->object.get() == Py_False;
    if ((name != "non_blocking" && name != "copy") || !isFalse)
      unsupported("Tensor.to with keyword '" + name + "'");
  }
  if (!dtype || *dtype == type.dtype) {
    // memory_format=contiguous_format copies only a tensor whose
    // suggest_memory_format is channels-last (4-d or 5-d): one whose
    // strides capture knows to be row-major, or of another rank, is
    // returned as it is, as eager returns it (transposed or not).
    if (contiguousFormat && (type.rank() == 4 || type.rank() == 5)) {
      Value *value = latestValue(tensor->tensor);
      // c10's channels-last test reads the strides of size-1 dims too,
      // which capture neither knows for computed values nor pins for
      // inputs: with one, which eager returns is unknown.
      bool sizeOneDim = false;
      for (size_t d = 1; d < type.rank(); ++d)
        sizeOneDim |= type.sizes[d] == SymExpr(1);
      std::optional<bool> channelsLast;
      std::vector<SymExpr> strides;
      if (sizeOneDim)
        channelsLast = std::nullopt;
      else if (eagerContiguous(value))
        channelsLast = false;
      else if (!value->producer)
        channelsLast = stridesLikeChannelsLast(type.sizes, value->type.strides);
      else if (eagerViewStrides(value, strides))
        channelsLast = stridesLikeChannelsLast(type.sizes, strides);
      if (!channelsLast) {
        // The same values either way; which one eager returns is known
        // only if something writes into either.
        VarPtr copy = emit(Op::Contiguous, {value});
        aliasOfUnknownKind(value, copy->tensor,
                           "Tensor.to(memory_format=torch.contiguous_format)"
                           " of a tensor whose strides capture does not know"
                           " (itself or a copy)");
        return copy;
      }
      if (*channelsLast) // eager copies it row-major
        return emit(Op::Contiguous, {value});
    }
    return tensor; // eager returns the tensor itself
  }
  // A new tensor: the cast's result, row-major where contiguous_format
  // asks (a cast alone follows a channels-last operand's layout).
  std::map<std::string, Attribute> attributes;
  attributes["dtype"] = *dtype;
  VarPtr cast = emit(Op::Cast, {operandOf(tensor, "to")}, attributes);
  return contiguousFormat ? emit(Op::Contiguous, {cast->tensor}) : cast;
}

} // namespace capture
} // namespace dynafuse

//===- OpBinder.cpp - Call arguments to graph operands and attributes -----===//
#include "OpBinder.h"

#include "BytecodeTracer.h"

namespace dynafuse {
namespace capture {

OpBinder::Binding OpBinder::bind(const OpBinding &binding,
                                 const std::string &what,
                                 const std::vector<VarPtr> &args,
                                 const Keywords &givenKeywords) {
  // PyTorch's NumPy spellings (torch.mean(x, axis=-1, keepdims=True)):
  // the parameter's own name where the binding has no such parameter.
  Keywords keywords = givenKeywords;
  for (auto [alias, name] :
       {std::pair<const char *, const char *>{"axis", "dim"},
        {"keepdims", "keepdim"}}) {
    auto given = keywords.find(alias);
    bool declared = false;
    for (const ParamSpec &param : binding.params)
      declared |= param.name == alias;
    if (given != keywords.end() && !declared && !keywords.count(name))
      given->first = name;
  }
  Binding bound;
  bound.op = binding.graphOp;
  size_t positional = 0;
  for (const ParamSpec &param : binding.params) {
    if (param.kind == ParamSpec::Kind::IntsVararg && !param.keywordOnly &&
        positional < args.size()) {
      std::vector<VarPtr> rest(args.begin() + positional, args.end());
      positional = args.size();
      bound.attributes[param.attribute] = intsOf(rest, what, param.name);
      continue;
    }
    VarPtr arg;
    if (!param.keywordOnly && positional < args.size())
      arg = args[positional++];
    else if (keywords.count(param.name))
      arg = keywords.at(param.name);
    if (!arg && !param.hasDefault)
      tracer.unsupported(what + " without argument '" + param.name + "'");
    bindParam(param, arg, what, bound);
  }
  if (positional < args.size())
    tracer.unsupported(what + " with too many positional arguments");
  for (auto &keyword : keywords) {
    bool known = false;
    for (const ParamSpec &param : binding.params)
      known |= param.name == keyword.first;
    if (!known)
      tracer.unsupported(what + " with keyword '" + keyword.first + "'");
  }
  for (auto &extra : binding.extraAttributes) {
    if (extra.first == "__inplace__") {
      bound.inPlace = true;
      continue;
    }
    if (extra.first == "__matrix_transpose__") {
      bound.matrixTranspose = true;
      continue;
    }
    if (extra.first == "__no_derivative__") {
      bound.noDerivative = true;
      continue;
    }
    if (extra.first == "__must_view__") {
      bound.mustView = true;
      continue;
    }
    if (extra.first == "__view_if_contiguous__") {
      bound.selfIfContiguous = true;
      continue;
    }
    if (extra.first == "__keeps_layout__") {
      bound.keepsLayout = true;
      continue;
    }
    bound.attributes[extra.first] = attributeOf(extra.second.get(), what);
  }
  if (bound.op == Op::Conv1d || bound.op == Op::Conv2d)
    spellOutPadding(bound, what);
  return bound;
}

void OpBinder::spellOutPadding(Binding &bound, const std::string &what) {
  auto found = bound.attributes.find("padding");
  if (found == bound.attributes.end() ||
      !std::holds_alternative<std::string>(found->second))
    return;
  std::string padding = std::get<std::string>(found->second);
  size_t spatial = bound.op == Op::Conv1d ? 1 : 2;
  if (padding == "valid") {
    found->second = std::vector<int64_t>(spatial, 0);
    return;
  }
  if (padding != "same")
    tracer.unsupported(what + " with padding '" + padding + "' (eager raises)");
  // "same": dilation * (kernel - 1) in total per dim, which a symmetric
  // padding covers when it is even (odd ones pad one side more: eager pads
  // the input first, not taken here).
  auto ints = [&](const char *name) {
    std::vector<int64_t> values(spatial, 1);
    auto attribute = bound.attributes.find(name);
    if (attribute == bound.attributes.end())
      return values;
    if (const auto *one = std::get_if<int64_t>(&attribute->second))
      return std::vector<int64_t>(spatial, *one);
    if (const auto *list =
            std::get_if<std::vector<int64_t>>(&attribute->second))
      if (list->size() == spatial)
        return *list;
    tracer.unsupported(what + " with padding='same' and a symbolic " + name);
  };
  std::vector<int64_t> stride = ints("stride"), dilation = ints("dilation");
  const TensorType &weight = bound.operands.at(1).value->type;
  std::vector<int64_t> pads;
  for (size_t k = 0; k < spatial; ++k) {
    const SymExpr &kernel = weight.sizes.at(weight.rank() - spatial + k);
    if (stride[k] != 1) // eager refuses too
      tracer.unsupported(what + " with padding='same' and a stride");
    if (!kernel.isConstant())
      tracer.unsupported(what + " with padding='same' and a symbolic kernel");
    int64_t total = dilation[k] * (kernel.constant() - 1);
    if (total % 2)
      tracer.unsupported(what + " with padding='same' over an even kernel "
                                "(asymmetric)");
    pads.push_back(total / 2);
  }
  found->second = pads;
}

bool OpBinder::isNoneVar(const VarPtr &var) {
  return var->kind == Var::Kind::Constant && var->object.get() == Py_None;
}

bool OpBinder::opAccepts(Op op, const std::string &attribute) {
  const OpInfo *info = lookupOp(op);
  return info && std::find(info->attributes.begin(), info->attributes.end(),
                           attribute) != info->attributes.end();
}

void OpBinder::bindParam(const ParamSpec &param, const VarPtr &arg,
                         const std::string &what, Binding &bound) {
  switch (param.kind) {
  case ParamSpec::Kind::Operand:
    bound.operands.push_back(
        arg ? tracer.operandOf(arg, what)
            : tracer.operandOf(tracer.constant(param.defaultValue.get()),
                               what));
    if (arg && !bound.self && arg->kind == Var::Kind::Tensor)
      bound.self = arg;
    return;
  case ParamSpec::Kind::TensorOperand:
    // torch.maximum(x, 2.0), torch.eq(1, x): eager has no overload taking
    // a Python number there and raises TypeError; the call runs eagerly.
    if (!arg || arg->kind != Var::Kind::Tensor)
      tracer.unsupported(what + ": '" + param.name +
                         "' must be a tensor, as eager requires");
    bound.operands.push_back(arg->tensor);
    if (!bound.self)
      bound.self = arg;
    return;
  case ParamSpec::Kind::InPlaceFlag: {
    if (!arg)
      return;
    PyObject *flag = concreteOf(arg, what, param.name);
    if (!PyBool_Check(flag))
      tracer.unsupported(what + " with a non-bool '" + param.name + "'");
    bound.inPlace = flag == Py_True;
    return;
  }
  case ParamSpec::Kind::Operands:
    if (!arg)
      tracer.unsupported(what + " without '" + param.name + "'");
    for (const VarPtr &item : tracer.itemsOf(arg))
      bound.operands.push_back(tracer.operandOf(item, what));
    return;
  case ParamSpec::Kind::OptionalOperand: {
    bool present = arg && !isNoneVar(arg);
    if (present)
      bound.operands.push_back(tracer.operandOf(arg, what));
    if (opAccepts(bound.op, "has_" + param.name))
      bound.attributes["has_" + param.name] = present;
    return;
  }
  case ParamSpec::Kind::Attr:
  case ParamSpec::Kind::IntsVararg:
    bindAttribute(param, arg, what, bound);
    return;
  case ParamSpec::Kind::Fixed:
    checkFixed(param, arg, what);
    return;
  case ParamSpec::Kind::Ignored:
    return;
  case ParamSpec::Kind::ShapeOf:
  case ParamSpec::Kind::DTypeOf:
    bindTypeOf(param, arg, what, bound);
    return;
  }
}

void OpBinder::bindTypeOf(const ParamSpec &param, const VarPtr &arg,
                          const std::string &what, Binding &bound) {
  if (!arg || arg->kind != Var::Kind::Tensor)
    tracer.unsupported(what + " with a non-tensor '" + param.name + "'");
  const TensorType &type = arg->tensor->type;
  if (param.kind == ParamSpec::Kind::ShapeOf) {
    bound.attributes[param.attribute] = canonicalAttribute(type.sizes);
    return;
  }
  if (bound.self && bound.self->tensor->type.device != type.device)
    tracer.unsupported(what + " to a tensor on another device (" +
                       type.device + ")");
  bound.attributes[param.attribute] = type.dtype;
}

void OpBinder::bindAttribute(const ParamSpec &param, const VarPtr &arg,
                             const std::string &what, Binding &bound) {
  if (!arg && param.defaultValue.get() == Py_None)
    return;
  if (arg && isNoneVar(arg))
    return;
  Attribute value = arg ? attributeOfVar(arg, what, param.name)
                        : attributeOf(param.defaultValue.get(), what);
  std::string name = param.attribute;
  if (name == "size_or_sizes")
    name = std::holds_alternative<int64_t>(value) ? "size" : "sizes";
  bound.attributes[name] = value;
}

void OpBinder::checkFixed(const ParamSpec &param, const VarPtr &arg,
                          const std::string &what) {
  if (!arg)
    return;
  PyObject *object = concreteOf(arg, what, param.name);
  int equal = PyObject_RichCompareBool(object, param.defaultValue.get(), Py_EQ);
  if (equal != 1 || Py_TYPE(object) != Py_TYPE(param.defaultValue.get())) {
    PyErr_Clear();
    tracer.unsupported(what + " with " + param.name +
                       " other than its default");
  }
}

Attribute OpBinder::intsOf(const std::vector<VarPtr> &args,
                           const std::string &what, const std::string &param) {
  std::vector<VarPtr> items = args;
  if (args.size() == 1 && args[0]->kind != Var::Kind::Constant &&
      args[0]->kind != Var::Kind::SymInt)
    items = tracer.itemsOf(args[0]);
  else if (args.size() == 1 && args[0]->kind == Var::Kind::Constant &&
           PyTuple_Check(args[0]->object.get()))
    items = tracer.itemsOf(args[0]);
  // Sizes may be symbolic (view(B, T, -1)): canonical as integers when
  // none is.
  std::vector<SymExpr> values;
  for (const VarPtr &item : items) {
    if (!isSizeLike(item))
      tracer.unsupported(what + " with a non-constant '" + param + "'");
    values.push_back(tracer.sizeOf(item, what));
  }
  return canonicalAttribute(values);
}

Attribute OpBinder::attributeOfVar(const VarPtr &arg, const std::string &what,
                                   const std::string &param) {
  if (arg->kind == Var::Kind::Tuple)
    return intsOf({arg}, what, param);
  if (arg->kind == Var::Kind::SymInt)
    return canonicalAttribute(tracer.sizeOf(arg, what));
  return attributeOf(concreteOf(arg, what, param), what);
}

PyObject *OpBinder::concreteOf(const VarPtr &arg, const std::string &what,
                               const std::string &param) {
  if (arg->kind != Var::Kind::Constant && arg->kind != Var::Kind::Object)
    tracer.unsupported(what + " with a non-constant '" + param + "'");
  return arg->object.get();
}

Attribute OpBinder::attributeOf(PyObject *object, const std::string &what) {
  if (std::optional<DType> type = dtypeFromObject(object))
    return *type;
  // Python's own types as torch's argument parser reads them in a dtype
  // (torch.zeros(n, dtype=int)): int64, float64, bool.
  if (object == reinterpret_cast<PyObject *>(&PyLong_Type))
    return DType::I64;
  if (object == reinterpret_cast<PyObject *>(&PyFloat_Type))
    return DType::F64;
  if (object == reinterpret_cast<PyObject *>(&PyBool_Type))
    return DType::Bool;
  if (PyBool_Check(object))
    return object == Py_True;
  if (PyLong_CheckExact(object))
    return int64_t(PyLong_AsLongLong(object));
  if (PyFloat_CheckExact(object))
    return PyFloat_AS_DOUBLE(object);
  if (PyUnicode_CheckExact(object))
    return std::string(PyUnicode_AsUTF8(object));
  if (std::string(Py_TYPE(object)->tp_name) == "torch.device")
    return deviceSpelling(object);
  if (PyTuple_Check(object) || PyList_Check(object)) {
    std::vector<int64_t> values;
    PyRef items = PyRef::steal(PySequence_Tuple(object));
    for (Py_ssize_t i = 0; items && i < PyTuple_GET_SIZE(items.get()); ++i) {
      PyObject *item = PyTuple_GET_ITEM(items.get(), i);
      if (!PyLong_CheckExact(item))
        tracer.unsupported(what + " with a sequence of non-integers");
      values.push_back(PyLong_AsLongLong(item));
    }
    return values;
  }
  tracer.unsupported(what + " with an argument of type " +
                     Py_TYPE(object)->tp_name);
}

} // namespace capture
} // namespace dynafuse

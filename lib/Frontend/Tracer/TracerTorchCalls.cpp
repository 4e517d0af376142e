//===- TracerTorchCalls.cpp - Torch callables kept as call_torch ----------===//
//
// Torch callables outside the op table, kept in the graph as call_torch
// steps (their result types found by a run on meta tensors).
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"
#include "dynafuse/Graph/Derivatives.h"
#include "dynafuse/Loop/InPlaceUpdates.h"

namespace dynafuse {
namespace capture {
namespace {

/// Objects that pass through a call unchanged and compare by value: dtypes,
/// devices, layouts, memory formats, slices, Ellipsis.
bool isPassThroughObject(PyObject *object) {
  return PySlice_Check(object) || object == Py_Ellipsis ||
         isTorchValueObject(object);
}

/// object.<attribute> when it is a string, else "".
std::string stringAttribute(PyObject *object, const char *attribute) {
  PyRef value = PyRef::steal(PyObject_GetAttrString(object, attribute));
  if (!value || !PyUnicode_Check(value.get())) {
    PyErr_Clear();
    return "";
  }
  return PyUnicode_AsUTF8(value.get());
}

std::string moduleOf(PyObject *object) {
  return stringAttribute(object, "__module__");
}

std::string nameOf(PyObject *object) {
  return stringAttribute(object, "__name__");
}

/// torch.ops.aten.cumsum (an OpOverloadPacket) or
/// torch.ops.aten.cumsum.default (an OpOverload).
bool isTorchOperator(PyObject *object) {
  std::string type = Py_TYPE(object)->tp_name;
  return (type == "OpOverload" || type == "OpOverloadPacket") &&
         moduleOf(reinterpret_cast<PyObject *>(Py_TYPE(object))) ==
             "torch._ops";
}

/// ATen functions and Tensor methods implemented in C (torch.*,
/// torch.nn.functional's builtins, torch.fft.*, ...), and ATen's
/// operators as torch.ops.aten exposes them.
bool isTorchBuiltin(PyObject *object) {
  if (isTorchOperator(object))
    return true;
  if (PyCFunction_Check(object))
    return moduleOf(object).rfind("torch", 0) == 0;
  std::string type = Py_TYPE(object)->tp_name;
  if (type != "method_descriptor" && type != "wrapper_descriptor" &&
      type != "getset_descriptor")
    return false;
  PyRef owner = PyRef::steal(PyObject_GetAttrString(object, "__objclass__"));
  if (!owner) {
    PyErr_Clear();
    return false;
  }
  return moduleOf(owner.get()).rfind("torch", 0) == 0;
}

bool isInPlaceName(const std::string &name) {
  return name.size() > 1 && name.back() == '_' && name.compare(0, 2, "__") != 0;
}

/// Whether a torch callable writes into its arguments: an in-place name
/// (add_), or an operator whose schema says so (add_.Tensor, add.out).
bool writesIntoArguments(PyObject *callable) {
  if (!isTorchOperator(callable))
    return isInPlaceName(nameOf(callable));
  PyRef schema = PyRef::steal(PyObject_GetAttrString(callable, "_schema"));
  if (schema) {
    PyRef mutable_ =
        PyRef::steal(PyObject_GetAttrString(schema.get(), "is_mutable"));
    if (mutable_)
      return PyObject_IsTrue(mutable_.get()) == 1;
  }
  PyErr_Clear();
  std::string name = stringAttribute(callable, "_qualified_op_name");
  return name.empty() || isInPlaceName(name.substr(name.rfind(':') + 1));
}

/// Whether in-place method `name` called with `args` (self first) and
/// `keywords` only overwrites elements with values that do not depend on
/// the ones it overwrites, so running it twice ends as running it once:
/// index_copy_, index_fill_, masked_fill_, masked_scatter_, and scatter_
/// and index_put_ without a reduction or accumulation.
bool overwritesOnly(const std::string &name, const std::vector<VarPtr> &args,
                    const Keywords &keywords) {
  static const std::set<std::string> overwriting = {
      "index_copy_", "index_fill_", "masked_fill_", "masked_scatter_"};
  if (overwriting.count(name))
    return true;
  if (name == "scatter_")
    return args.size() == 4 && keywords.empty();
  if (name == "index_put_")
    return args.size() == 3 && keywords.empty();
  return false;
}

} // namespace


VarPtr BytecodeTracer::superOfTensor(const std::vector<VarPtr> &args) {
  VarPtr self = current.locals.empty() ? nullptr : current.locals[0];
  if (!args.empty() || !self || self->kind != Var::Kind::Tensor ||
      current.code->co_argcount == 0)
    return nullptr;
  VarPtr base = std::make_shared<Var>(*self);
  base->baseMethods = true;
  return base;
}

CallArg BytecodeTracer::callArgOf(const VarPtr &var,
                                  std::vector<Operand> &operands,
                                  const std::string &what) {
  CallArg arg;
  switch (var->kind) {
  case Var::Kind::Tensor:
    arg.kind = CallArg::Kind::Operand;
    arg.operand = int(operands.size());
    operands.push_back(var->tensor);
    return arg;
  case Var::Kind::Constant:
    arg.constant = var->object;
    return arg;
  case Var::Kind::Tuple:
    arg.kind = var->isList ? CallArg::Kind::List : CallArg::Kind::Tuple;
    for (const VarPtr &item : var->items)
      arg.items.push_back(callArgOf(item, operands, what));
    return arg;
  case Var::Kind::Object:
    if (isPassThroughObject(var->object.get())) {
      arg.constant = var->object;
      return arg;
    }
    break;
  default:
    break;
  }
  unsupported("an argument of " + what +
              " is not a tensor, a constant or a sequence of them");
}

VarPtr BytecodeTracer::resultVar(PyObject *output,
                                 const std::vector<Value *> &results,
                                 size_t &next) {
  if (output == Py_None)
    return constant(Py_None);
  if (isAnyTensor(output)) {
    VarPtr var = makeVar(Var::Kind::Tensor);
    var->tensor = results.at(next++);
    return var;
  }
  VarPtr tuple = makeVar(Var::Kind::Tuple);
  tuple->isList = PyList_Check(output);
  // Named tuples and struct sequences (torch.return_types.topk): fields
  // stay readable.
  PyRef fields = PyRef::steal(PyObject_GetAttrString(
      reinterpret_cast<PyObject *>(Py_TYPE(output)), "__match_args__"));
  if (!fields)
    PyErr_Clear();
  else if (PyTuple_Check(fields.get()))
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.get()); ++i)
      tuple->keys.push_back(
          PyUnicode_AsUTF8(PyTuple_GET_ITEM(fields.get(), i)));
  PyRef items = PyRef::steal(PySequence_Fast(output, "a result sequence"));
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items.get()); ++i)
    tuple->items.push_back(
        resultVar(PySequence_Fast_GET_ITEM(items.get(), i), results, next));
  return tuple;
}

VarPtr BytecodeTracer::functionalInPlace(PyObject *callable,
                                         const std::string &what,
                                         const std::vector<VarPtr> &args,
                                         const Keywords &keywords) {
  std::string name = nameOf(callable);
  const VarPtr &self = args[0];
  if (name == "copy_") {
    // x.copy_(src): src broadcast to x's shape and cast to its dtype.
    if (args.size() != 2 || args[1]->kind != Var::Kind::Tensor ||
        (keywords.size() == 1 && !keywords.count("non_blocking")) ||
        keywords.size() > 1)
      unsupported("call to " + what + " other than x.copy_(tensor)");
    Value *target = latestValue(self->tensor);
    Value *read = latestValue(args[1]->tensor);
    if (read != target && aliases.inOneSet(read, target))
      unsupported(what + " from a tensor sharing memory with its target "
                         "(eager's result depends on its copy order)");
    const TensorType &type = target->type;
    VarPtr copied = emit(Op::Cast, {args[1]->tensor}, {{"dtype", type.dtype}});
    if (overwritesHistory(target)) {
      VarPtr overwritten = overwriteKeepingHistory(target, copied->tensor);
      if (overwritten->tensor->type.sizes != type.sizes)
        unsupported(what + " from a tensor that does not broadcast to its "
                           "target's shape");
      return updateInPlace(self, overwritten);
    }
    if (copied->tensor->type.sizes != type.sizes)
      copied = emit(Op::Expand, {copied->tensor}, {{"shape", type.sizes}});
    return updateInPlace(self, copied);
  }
  // x.op_(...): the out-of-place op, then an in-place update of x (its
  // result's shape and dtype checked there as eager checks them). Not
  // where the two differ in meaning (bernoulli_(p) fills x; bernoulli()
  // reads x) or the method changes more than values.
  static const std::set<std::string> different = {
      "bernoulli_", "resize_", "resize_as_", "set_", "requires_grad_",
      "share_memory_", "detach_", "map_", "apply_", "as_strided_",
      "squeeze_", "unsqueeze_", "transpose_", "t_", "swapdims_",
      "swapaxes_"};
  if (different.count(name))
    unsupported("call to " + what +
                " (not in the op table; it writes into its arguments)");
  PyObject *outOfPlace = tensorMethodObject(name.substr(0, name.size() - 1),
                                            self->baseMethods);
  if (!outOfPlace) {
    PyErr_Clear();
    unsupported("call to " + what +
                " (not in the op table; it writes into its arguments)");
  }
  PyRef owned = PyRef::steal(outOfPlace);
  VarPtr value = torchExtern(owned.get(), what.substr(0, what.size() - 1),
                             args, keywords);
  if (value->kind != Var::Kind::Tensor)
    unsupported("call to " + what + " whose out-of-place form does not "
                "return one tensor");
  // The runtime may call the in-place form itself where the update is a
  // write-back of an input nothing else reads (Loop/InPlaceUpdates.h).
  // Only forms that overwrite: a run that fails after the update reruns
  // the call eagerly on the updated tensor, which must end as eager's.
  Node *call = value->tensor->producer;
  if (overwritesOnly(name, args, keywords) && call &&
      call->op == Op::CallTorch && !result.torchCalls.empty() &&
      call->attributes.count("call") &&
      call->attributes.at("call") ==
          Attribute(int64_t(result.torchCalls.size() - 1))) {
    result.torchCalls.back().inPlaceCallable = PyRef::borrow(callable);
    call->attributes[kInPlaceFormAttribute] = what;
  }
  return updateInPlace(self, value);
}

VarPtr
BytecodeTracer::torchExtern(PyObject *callable, const std::string &what,
                            const std::vector<VarPtr> &args,
                            const Keywords &keywords) {
  if (VarPtr attention = trainingAttention(callable, args, keywords))
    return attention;
  // torch.is_floating_point(t), Tensor.numel(t), ...: the method's answer.
  if (isMetadataMethod(nameOf(callable)) && !args.empty() &&
      args[0]->kind == Var::Kind::Tensor && keywords.empty())
    return tensorMetadata(args[0], nameOf(callable),
                          std::vector<VarPtr>(args.begin() + 1, args.end()));
  if (!isTorchBuiltin(callable))
    unsupported("call to " + what + " (not in the op table)");
  if (!keywords.count("out") && !isTorchOperator(callable) &&
      isInPlaceName(nameOf(callable)) && !args.empty() &&
      args[0]->kind == Var::Kind::Tensor)
    return functionalInPlace(callable, what, args, keywords);
  if (writesIntoArguments(callable) || keywords.count("out"))
    unsupported("call to " + what +
                " (not in the op table; it writes into its arguments)");
  auto inplace = keywords.find("inplace");
  if (inplace != keywords.end() &&
      (inplace->second->kind != Var::Kind::Constant ||
       inplace->second->object.get() != Py_False))
    unsupported("call to " + what + " with inplace=True (not in the op table)");
  TorchCall call;
  call.callable = PyRef::borrow(callable);
  call.target = what;
  std::vector<Operand> operands;
  for (const VarPtr &arg : args)
    call.args.push_back(callArgOf(arg, operands, what));
  for (const auto &[name, value] : keywords)
    call.keywords.push_back({name, callArgOf(value, operands, what)});
  if (operands.empty())
    unsupported("call to " + what + " without tensor arguments");
  return emitTorchCall(std::move(call), std::move(operands));
}

VarPtr BytecodeTracer::emitTorchCall(TorchCall call,
                                     std::vector<Operand> operands) {
  const std::string what = call.target;
  // Result types come from calling it on meta tensors. With symbolic
  // operands it runs twice: at the hints, and with every symbol moved to
  // another value; a result size that moves must be one of the operands'
  // symbolic sizes (moving the same way), else the call refuses symbols.
  // What the callable needs equal is unknown: its operands' symbols of
  // equal hints become one (guarded), so the moved sizes stay consistent.
  // Sizes that are one expression of one symbol each (a cache's `s0 + 1`
  // beside another layer's `s1 + 1`) count too: their symbols become one.
  std::map<int64_t, SymExpr> symbolOfHint;
  std::vector<SymExpr> oneSymbolSizes;
  std::vector<ShapeGuard> unified;
  for (const Operand &operand : operands)
    for (const SymExpr &size : operand.value->type.sizes) {
      SymExpr symbol = symbolic.env.canonical(size);
      if (symbol.isConstant())
        continue;
      if (!symbol.isSymbol()) {
        oneSymbolSizes.push_back(symbol);
        continue;
      }
      auto first = symbolOfHint.emplace(symbolic.env.hintOf(symbol), symbol);
      if (!first.second && first.first->second != symbol)
        symbolic.env.unify(first.first->second, symbol, unified);
    }
  for (size_t i = 0; i < oneSymbolSizes.size(); ++i)
    for (size_t j = i + 1; j < oneSymbolSizes.size(); ++j) {
      SymExpr a = symbolic.env.canonical(oneSymbolSizes[i]);
      SymExpr b = symbolic.env.canonical(oneSymbolSizes[j]);
      std::set<std::string> inA, inB;
      a.collectSymbols(inA);
      b.collectSymbols(inB);
      if (a == b || inA.size() != 1 || inB.size() != 1 || inA == inB ||
          symbolic.env.hintOf(a) != symbolic.env.hintOf(b))
        continue;
      SymExpr symbolA = SymExpr::symbol(*inA.begin());
      SymExpr symbolB = SymExpr::symbol(*inB.begin());
      if (symbolic.env.hintOf(symbolA) == symbolic.env.hintOf(symbolB) &&
          b.substitute({{*inB.begin(), symbolA}}) == a)
        symbolic.env.unify(symbolA, symbolB, unified);
    }
  bool anyUnified = !unified.empty();
  symbolic.addGuards(std::move(unified));
  if (anyUnified)
    symbolic.applyUnified();
  std::map<std::string, int64_t> atHints = symbolic.env.symbolHints();
  std::vector<SymExpr> candidates;
  std::set<std::string> symbols;
  for (const Operand &operand : operands)
    for (const SymExpr &size : operand.value->type.sizes)
      if (!size.isConstant()) {
        candidates.push_back(symbolic.env.canonical(size));
        size.collectSymbols(symbols);
      }
  std::map<std::string, int64_t> moved = atHints;
  int64_t shift = 3;
  for (const std::string &symbol : symbols)
    moved[symbol] = atHints[symbol] + (shift += 2);
  auto concreteType = [&](const TensorType &type,
                          const std::map<std::string, int64_t> &bindings) {
    TensorType concrete = type;
    for (SymExpr &size : concrete.sizes)
      size = symbolic.env.canonical(size).evaluate(bindings);
    for (SymExpr &stride : concrete.strides)
      stride = symbolic.env.canonical(stride).evaluate(bindings);
    return concrete;
  };
  auto runOnMeta = [&](const std::map<std::string, int64_t> &bindings,
                       bool movedSizes, std::vector<PyObject *> &slots) {
    std::vector<PyRef> metas;
    std::vector<PyObject *> metaArgs;
    for (const Operand &operand : operands) {
      metas.push_back(PyRef::steal(
          newMetaTensor(concreteType(operand.value->type, bindings))));
      metaArgs.push_back(metas.back().get());
    }
    PyRef result = PyRef::steal(call.invoke(metaArgs));
    if (!result)
      unsupported("call to " + what +
                  " (not in the op table; no shape from meta tensors" +
                  (movedSizes ? " of moved symbolic sizes" : "") + ": " +
                  takePythonError() + ")");
    if (!flattenResult(result.get(), slots))
      unsupported("call to " + what +
                  " (not in the op table; returns something besides "
                  "tensors)");
    return result;
  };
  std::vector<PyObject *> slots, tensors, movedSlots, movedTensors;
  PyRef output = runOnMeta(atHints, false, slots);
  PyRef movedOutput;
  if (!symbols.empty())
    movedOutput = runOnMeta(moved, true, movedSlots);
  for (PyObject *slot : slots) {
    call.resultOfSlot.push_back(slot ? int(tensors.size()) : -1);
    if (slot)
      tensors.push_back(slot);
  }
  for (PyObject *slot : movedSlots)
    if (slot)
      movedTensors.push_back(slot);
  if (tensors.empty())
    unsupported("call to " + what +
                " (not in the op table; returns no tensor)");
  std::vector<TensorType> atHintTypes;
  for (const Operand &operand : operands)
    atHintTypes.push_back(concreteType(operand.value->type, atHints));
  std::vector<DType> autocastTypes =
      autocastCasts.checkExtern(call, atHintTypes, tensors);
  if (gradMode) {
    // Differentiated by torch's autograd at run time (torchCallRule):
    // only where that recomputation is sound.
    std::vector<size_t> requiringGrad;
    for (size_t i = 0; i < operands.size(); ++i)
      if (inputs.requiresGrad(latestValue(operands[i].value)) &&
          isDifferentiable(operands[i].value->type.dtype))
        requiringGrad.push_back(i);
    if (!requiringGrad.empty()) {
      std::string refusal =
          torchCallGradientRefusal(call, atHintTypes, requiringGrad);
      if (!refusal.empty())
        unsupported("call to " + what +
                    " on a tensor that requires grad: " + refusal);
    }
  }
  if (!symbols.empty() && movedTensors.size() != tensors.size())
    unsupported("call to " + what + " returns other tensors for other sizes");
  std::string types;
  bool returnsView = false;
  for (size_t t = 0; t < tensors.size(); ++t) {
    PyObject *tensor = tensors[t];
    TensorMeta meta = describeTensor(tensor);
    if (!meta.dtype)
      unsupported("call to " + what + " returns a tensor of dtype " +
                  meta.dtypeName);
    TensorType type;
    type.dtype = autocastTypes.empty() ? *meta.dtype : autocastTypes[t];
    type.device = operands[0].value->type.device;
    std::vector<int64_t> movedSizes;
    if (!symbols.empty())
      movedSizes = describeTensor(movedTensors[t]).sizes;
    if (!symbols.empty() && movedSizes.size() != meta.sizes.size())
      unsupported("call to " + what + " returns another rank for other sizes");
    for (size_t k = 0; k < meta.sizes.size(); ++k) {
      if (symbols.empty() || movedSizes[k] == meta.sizes[k]) {
        type.sizes.push_back(SymExpr(meta.sizes[k]));
        continue;
      }
      const SymExpr *match = nullptr;
      for (const SymExpr &candidate : candidates)
        if (!match && candidate.evaluate(atHints) == meta.sizes[k] &&
            candidate.evaluate(moved) == movedSizes[k])
          match = &candidate;
      if (!match)
        unsupported("call to " + what + " on symbolic sizes: result size " +
                    std::to_string(meta.sizes[k]) +
                    " is none of its operands' sizes");
      type.sizes.push_back(*match);
    }
    // Eager's layout when it is a dense permutation (channels-last,
    // transposed results); row-major otherwise. Symbolic: the same order,
    // strides the products of the symbolic sizes inside.
    std::vector<int64_t> strides = permutedDenseStrides(tensor);
    if (!strides.empty() && !symbols.empty()) {
      std::vector<size_t> order(strides.size());
      for (size_t k = 0; k < order.size(); ++k)
        order[k] = k;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return strides[a] > strides[b];
      });
      type.strides = stridesInOrder(type.sizes, order);
    } else {
      for (int64_t stride : strides)
        type.strides.push_back(SymExpr(stride));
    }
    types += (types.empty() ? "" : ", ") + type.str();
    returnsView = returnsView || tensorIsView(tensor);
  }
  std::map<std::string, Attribute> attributes = {
      {"target", what},
      {"call", int64_t(result.torchCalls.size())},
      {"signature", call.signature()},
      {"results", types}};
  result.torchCalls.push_back(std::move(call));
  VarPtr var = emit(Op::CallTorch, operands, std::move(attributes));
  std::vector<Value *> results;
  if (var->kind == Var::Kind::Tensor)
    results.push_back(var->tensor);
  for (const VarPtr &item : var->items)
    results.push_back(item->tensor);
  if (returnsView) {
    // The graph copies the views a torch call returns: in-place updates of
    // them or of their operands are refused.
    for (const Operand &operand : operands)
      for (Value *result : results)
        if (operand.isValue())
          aliasOfUnknownKind(operand.value, result,
                             "a torch call returned a view of it");
  }
  size_t next = 0;
  return resultVar(output.get(), results, next);
}

} // namespace capture
} // namespace dynafuse

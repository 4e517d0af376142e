//===- TracerAliases.cpp - Views, and in-place updates through them -------===//
//
// Eager's aliasing in a functional graph (TensorAliases.h): which ops make
// views, the newest value of a view after an update of its memory, and
// in-place updates of any tensor, scattered back through the views between
// it and its base.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Graph/ViewRules.h"
#include "dynafuse/Lowering/StridedView.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace dynafuse {
namespace capture {
namespace {

/// Ops whose result is always a view of their operand in eager.
bool alwaysViews(Op op) {
  static const std::set<Op> ops = {Op::Slice,     Op::Narrow,    Op::Select,
                                   Op::Permute,   Op::Transpose, Op::Squeeze,
                                   Op::Unsqueeze, Op::Detach,    Op::Split,
                                   Op::Chunk,     Op::Unbind,    Op::Expand};
  return ops.count(op) != 0;
}

/// Ops whose result is a view when their operand's strides allow it, and
/// a copy otherwise (eager's reshape and flatten).
bool viewsWhenStridesAllow(Op op) {
  return op == Op::Reshape || op == Op::Flatten;
}

/// Ops eager writes into a fresh row-major tensor whatever their operands'
/// layouts (transposed, strided, expanded, channels-last): reductions,
/// with or without keepdim, softmax and triangles.
bool writesRowMajor(const Node &node) {
  static const std::set<Op> ops = {Op::Mean,       Op::Var,  Op::Std,
                                   Op::Logsumexp,  Op::Norm, Op::Softmax,
                                   Op::LogSoftmax, Op::Tril, Op::Triu};
  const OpInfo *info = opInfoOf(node);
  return (info && info->kind == OpKind::Reduction) || ops.count(node.op);
}

/// Whether a reshape from `in` to `out` only splits dims and adds or drops
/// size-1 ones (or has no elements): a view whatever the strides, in eager
/// as in any layout (each split dim keeps its stride for its last piece).
bool reshapeOnlySplits(const TensorType &in, const TensorType &out) {
  if (in.numel() == SymExpr(0) || out.numel() == SymExpr(0))
    return true;
  size_t j = 0;
  for (const SymExpr &size : in.sizes) {
    if (size == SymExpr(1))
      continue;
    SymExpr product(1);
    while (j < out.rank() && product != size) {
      if (out.sizes[j] != SymExpr(1))
        product = product * out.sizes[j];
      ++j;
    }
    if (product != size)
      return false;
  }
  for (; j < out.rank(); ++j)
    if (out.sizes[j] != SymExpr(1))
      return false;
  return true;
}

/// A reshape of an input's latest value: whether eager views it (its
/// strides are the input's); nullopt for other values, or with symbolic
/// sizes.
std::optional<bool> reshapeViewsUpdatedInput(const InputTable &inputs,
                                             const Value *base,
                                             const TensorType &reshaped) {
  const Value *input = inputs.inputUpdatedTo(base);
  if (!input || input == base)
    return std::nullopt;
  // An input's latest value is the input tensor's memory (written back):
  // eager's strides are the input's. Symbolic sizes: a layout that is no
  // view in this call may be one in another.
  for (const SymExpr &size : input->type.sizes)
    if (!size.isConstant())
      return std::nullopt;
  for (const SymExpr &size : reshaped.sizes)
    if (!size.isConstant())
      return std::nullopt;
  StridedView whole{input->type.sizes,
                    input->type.strides.empty()
                        ? contiguousStrides(input->type.sizes)
                        : input->type.strides,
                    SymExpr(0)};
  return reshapedView(reshaped.sizes, whole).has_value();
}

/// Row-major strides, ignoring size-1 dims (torch's is_contiguous; empty
/// tensors are eagerContiguous's).
bool rowMajor(const TensorType &type) {
  if (type.strides.empty())
    return true;
  std::vector<SymExpr> dense = contiguousStrides(type.sizes);
  for (size_t k = 0; k < type.rank(); ++k)
    if (type.sizes[k] != SymExpr(1) && type.strides[k] != dense[k])
      return false;
  return true;
}

/// Whether strides order a tensor's dims outermost first, passing over
/// size-1 and broadcast (stride-0) dims: TensorIterator then keeps the dim
/// order and writes a fresh result row-major (a strided slice, an expanded
/// input), however sparse the operand.
bool rowMajorOrder(const TensorType &type) {
  if (type.strides.empty())
    return true;
  std::optional<int64_t> inner;
  for (size_t k = type.rank(); k-- > 0;) {
    if (type.sizes[k] == SymExpr(1) || type.strides[k] == SymExpr(0))
      continue;
    if (!type.strides[k].isConstant())
      return false;
    int64_t stride = type.strides[k].constant();
    if (inner && stride < *inner)
      return false;
    inner = stride;
  }
  return true;
}

/// What torch allows an in-place op to cast its result to: no floating to
/// integral, no non-bool to bool (torch.can_cast).
bool canCastInPlace(DType from, DType to) {
  if (isFloating(from) && !isFloating(to))
    return false;
  return !(from != DType::Bool && to == DType::Bool);
}

std::map<std::string, Attribute> sliceAttributes(int64_t dim,
                                                 const SymExpr &start,
                                                 const SymExpr &end) {
  auto integer = [](const SymExpr &value) -> Attribute {
    if (value.isConstant())
      return value.constant();
    return value;
  };
  return {{"dim", dim}, {"start", integer(start)}, {"end", integer(end)},
          {"step", int64_t(1)}};
}

} // namespace

Value *BytecodeTracer::latestValue(Value *value) {
  if (!value || !aliases.isStale(value))
    return value;
  if (Value *fresh = aliases.refreshed(value))
    return fresh;
  AliasMember member = *aliases.memberOf(value);
  Value *current = member.set->root;
  for (const ViewStep &step : member.chain)
    current = replayView(step, current);
  aliases.setRefreshed(value, current);
  return current;
}

Value *BytecodeTracer::replayView(const ViewStep &step, Value *base,
                                  bool asIs) {
  VarPtr view = asIs ? emitAsIs(step.node->op, {base}, step.node->attributes)
                     : emit(step.node->op, {base}, step.node->attributes);
  if (view->kind == Var::Kind::Tensor)
    return view->tensor;
  return view->items.at(step.result)->tensor;
}

void BytecodeTracer::trackViews(const Node &node) {
  if (node.operands.empty() || !node.operands[0].isValue())
    return;
  Value *base = node.operands[0].value;
  bool views = alwaysViews(node.op) ||
               (viewsWhenStridesAllow(node.op) &&
                reshapeOnlySplits(base->type, node.results[0]->type));
  if (!views && viewsWhenStridesAllow(node.op)) {
    views = eagerContiguous(base);
    if (!views) {
      std::optional<bool> known =
          reshapeViewsUpdatedInput(inputs, base, node.results[0]->type);
      if (known && !*known)
        return; // eager copies
      views = known.has_value();
    }
    if (!views) {
      for (Value *result : node.results)
        aliases.addUnknownAlias(base, result,
                                opName(node.op) +
                                    " of a tensor whose strides capture "
                                    "does not know (a view or a copy)");
      return;
    }
  }
  if (!views)
    return;
  for (size_t r = 0; r < node.results.size(); ++r)
    aliases.addView(base, node.results[r], ViewStep{&node, r});
}

void BytecodeTracer::aliasOfUnknownKind(Value *base, Value *result,
                                        const std::string &why) {
  aliases.addUnknownAlias(latestValue(base), result, why);
}

VarPtr BytecodeTracer::cloneKeepingLayout(const VarPtr &tensor) {
  Value *value = latestValue(tensor->tensor);
  // eager's clone (preserve_format) of a densely permuted tensor (a
  // transposed or channels-last input) keeps its strides: the copy is made
  // in memory order and permuted back, so it is the same permuted view of
  // a fresh buffer (reshapes of it copy, as eager's do).
  const TensorType &type = value->type;
  bool known = !value->producer && !type.strides.empty() && !rowMajor(type);
  for (size_t k = 0; known && k < type.rank(); ++k)
    known = type.strides[k].isConstant();
  std::vector<size_t> memoryOrder(type.rank());
  std::iota(memoryOrder.begin(), memoryOrder.end(), size_t(0));
  if (known)
    std::stable_sort(memoryOrder.begin(), memoryOrder.end(),
                     [&](size_t a, size_t b) {
                       return type.strides[a].constant() >
                              type.strides[b].constant();
                     });
  std::vector<SymExpr> dense = stridesInOrder(type.sizes, memoryOrder);
  for (size_t k = 0; known && k < type.rank(); ++k)
    known = type.sizes[k] == SymExpr(1) || type.strides[k] == dense[k];
  if (!known)
    return emit(Op::Contiguous, {value});
  std::vector<int64_t> order(memoryOrder.begin(), memoryOrder.end());
  std::vector<int64_t> back(order.size());
  for (size_t k = 0; k < order.size(); ++k)
    back[size_t(order[k])] = int64_t(k);
  VarPtr inMemoryOrder = emit(Op::Permute, {value}, {{"dims", order}});
  VarPtr copy = emit(Op::Contiguous, {inMemoryOrder->tensor});
  return emit(Op::Permute, {copy->tensor}, {{"dims", back}});
}

VarPtr BytecodeTracer::viewIfContiguous(const VarPtr &tensor) {
  Value *value = latestValue(tensor->tensor);
  if (eagerContiguous(value))
    return tensor; // eager returns the tensor itself
  VarPtr copy = emit(Op::Contiguous, {value});
  if (!value->producer || value->producer->op == Op::CallTorch)
    return copy; // eager's strides are known: not contiguous, a copy
  aliasOfUnknownKind(value, copy->tensor,
                     "contiguous() of a tensor whose strides capture does "
                     "not know (itself or a copy)");
  return copy;
}

bool BytecodeTracer::viewInRowMajorOrder(const Value *value) {
  TensorType strided = value->type;
  return eagerViewStrides(value, strided.strides) && rowMajorOrder(strided);
}

bool BytecodeTracer::eagerViewStrides(const Value *value,
                                      std::vector<SymExpr> &strides) {
  const Value *base = value;
  while (base->producer &&
         (alwaysViews(base->producer->op) ||
          viewsWhenStridesAllow(base->producer->op)) &&
         !base->producer->operands.empty() &&
         base->producer->operands[0].isValue())
    base = base->producer->operands[0].value;
  BufferView viewed;
  // A graph input is described by its own strides.
  if (base == value || (base->producer && !eagerContiguous(base)) ||
      !describeView(value, {base}, viewed) || viewed.base != base)
    return false;
  strides = viewed.view.strides;
  return true;
}

bool BytecodeTracer::eagerContiguous(const Value *value) {
  auto known = contiguousInEager.find(value);
  if (known != contiguousInEager.end())
    return known->second;
  // Provisionally not: a value's root may be computed from its older views
  // (an update scattered back), and the walk must not go round.
  contiguousInEager[value] = false;
  bool contiguous = false;
  const Node *node = value->producer;
  if (value->type.numel() == SymExpr(0)) {
    contiguous = true; // an empty tensor is contiguous (is_contiguous)
  } else if (const Value *input = inputs.inputUpdatedTo(value)) {
    // An input's latest value is the input tensor's memory (written back),
    // however the update computed it (scattered through a transpose).
    contiguous = rowMajor(input->type);
  } else if (!node) {
    contiguous = rowMajor(value->type);
  } else if (node->op == Op::CallTorch) {
    // Its result types are eager's own, strides included (a meta run).
    contiguous = rowMajor(value->type);
  } else if (node->op == Op::Contiguous || node->op == Op::Matmul ||
             node->op == Op::Linear || node->op == Op::Bmm ||
             node->op == Op::Mm || node->op == Op::IndexSelect ||
             node->op == Op::Embedding || node->op == Op::Repeat ||
             !node->operands.size() || writesRowMajor(*node)) {
    // x itself when contiguous, else a contiguous copy; products, row
    // gathers, repeats, factories, reductions and the ops below are
    // written row-major whatever their operands' layouts.
    contiguous = true;
  } else if (alwaysViews(node->op) || viewsWhenStridesAllow(node->op)) {
    // Views of contiguous data that stay contiguous: reshapes, dropping or
    // adding size-1 dims, and leading slices of the outermost dim.
    const Value *base = node->operands[0].value;
    Op op = node->op;
    bool outermost = node->intAttr("dim", 0) == 0 ||
                     (node->intAttr("dim", 0) == -1 && base->type.rank() == 1);
    bool keepsLayout =
        op == Op::Squeeze || op == Op::Unsqueeze || op == Op::Detach ||
        viewsWhenStridesAllow(op) ||
        ((op == Op::Select || op == Op::Narrow || op == Op::Split ||
          op == Op::Chunk || op == Op::Unbind) &&
         outermost) ||
        (op == Op::Slice && outermost && node->intAttr("step", 1) == 1);
    contiguous = keepsLayout && eagerContiguous(base);
    // Otherwise its strides from a contiguous root (a transpose of [1, n],
    // a slice keeping every element): row-major but for size-1 dims.
    const AliasMember *member = aliases.memberOf(value);
    BufferView viewed;
    // (Or from an input's own strides: a select of a transposed input can
    // be contiguous.)
    if (!contiguous && member && member->set->uncertain.empty() &&
        member->set->root != value &&
        (eagerContiguous(member->set->root) || !member->set->root->producer) &&
        describeView(value, {member->set->root}, viewed) &&
        viewed.base == member->set->root) {
      TensorType strided = value->type;
      strided.strides = viewed.view.strides;
      contiguous = rowMajor(strided);
    }
  } else {
    // Computed: eager lays results out like their operands (TensorIterator,
    // reductions) or fresh; contiguous when every tensor operand's strides
    // are in row-major order (a contiguous value, or views of one that keep
    // the order: broadcasts, slices, size-1 dims added or dropped):
    // TensorIterator orders dims by the operands' strides and passes over
    // stride-0 and size-1 ones.
    contiguous = true;
    for (const Operand &operand : node->operands) {
      if (!operand.isValue())
        continue;
      const Value *read = operand.value;
      contiguous =
          contiguous && (eagerContiguous(read) ||
                         (!read->producer && rowMajorOrder(read->type)) ||
                         viewInRowMajorOrder(read));
    }
    // Pointwise: TensorIterator takes the dim order from the first operand
    // of the result's full shape whose strides decide it; a contiguous one
    // decides every pair of dims, so the result is contiguous.
    const OpInfo *info = opInfoOf(*node);
    if (!contiguous && info && info->kind == OpKind::Pointwise)
      for (const Operand &operand : node->operands)
        if (operand.isValue() &&
            operand.value->type.sizes == value->type.sizes) {
          contiguous = eagerContiguous(operand.value);
          break;
        }
  }
  contiguousInEager[value] = contiguous;
  return contiguous;
}

void BytecodeTracer::refuseOverlappingOperands(const Value *target,
                                               const Value *updated) {
  const Node *producer = updated->producer;
  if (!producer)
    return;
  for (const Operand &operand : producer->operands) {
    if (!operand.isValue() || operand.value == target)
      continue;
    if (aliases.inOneSet(operand.value, target))
      unsupported("in-place update whose operand shares memory with the "
                  "tensor it writes (eager refuses partial overlaps)");
  }
}

VarPtr BytecodeTracer::updateInPlace(const VarPtr &target,
                                     const VarPtr &value,
                                     bool overlapChecked) {
  if (target->kind != Var::Kind::Tensor || value->kind != Var::Kind::Tensor)
    unsupported("in-place update of a non-tensor");
  Value *old = latestValue(target->tensor);
  Value *updated = latestValue(value->tensor);
  if (updated == old)
    return target;
  if (!overlapChecked)
    refuseOverlappingOperands(old, updated);
  if (!updated->producer || aliases.memberOf(updated))
    updated = emit(Op::Contiguous, {updated})->tensor; // a value of its own
  if (updated->type.sizes != old->type.sizes)
    unsupported("in-place update that changes the shape (" +
                old->type.str() + " to " + updated->type.str() + ")");
  if (updated->type.dtype != old->type.dtype) {
    if (!canCastInPlace(updated->type.dtype, old->type.dtype))
      unsupported(std::string("in-place update whose result type ") +
                  dtypeName(updated->type.dtype) + " cannot be cast to " +
                  dtypeName(old->type.dtype));
    updated = emit(Op::Cast, {updated}, {{"dtype", old->type.dtype}})->tensor;
  }
  std::shared_ptr<AliasSet> set = aliases.setOf(old);
  if (!set->uncertain.empty())
    unsupported("in-place update of a tensor that may share memory with "
                "another: " + set->uncertain);
  std::vector<ViewStep> chain = aliases.memberOf(old)->chain;
  for (const ViewStep &step : chain)
    if (step.node->op == Op::Expand &&
        step.node->operands[0].value->type.numel() !=
            step.node->results[step.result]->type.numel())
      unsupported("in-place update of an expanded tensor (more than one "
                  "element refers to one memory location)");
  Value *root = set->root;
  const Value *input = inputs.originalInput(root);
  if (input) {
    for (size_t k = 0; k < input->type.strides.size(); ++k)
      if (input->type.strides[k] == SymExpr(0) &&
          input->type.sizes[k] != SymExpr(1))
        unsupported("in-place update of an input whose elements overlap "
                    "(an expanded tensor)");
    if (inputRequiresGrad(input) && gradMode)
      unsupported("in-place update of a tensor that requires grad while "
                  "grad mode is on");
    if (inputs.requiresGrad(updated))
      unsupported("in-place update of an input with a value that requires "
                  "grad (the input would join the autograd graph)");
  }
  Value *newRoot = chain.empty() ? updated : scatterThroughChain(root, chain, updated);
  // A view of all of its base (x[-1:] of one row) scatters to the update
  // itself: the root gets a value of its own, the view stays a view.
  if (!chain.empty() && newRoot == updated)
    newRoot = emit(Op::Contiguous, {updated})->tensor;
  if (input) {
    willUpdateInputs();
    inputs.updateInput(input, newRoot);
  }
  aliasJournal.emplace_back(set, *set);
  aliases.bump(*set);
  set->root = newRoot;
  aliases.addMember(newRoot, set, {});
  if (!chain.empty())
    aliases.addMember(updated, set, chain);
  willMutate(target);
  target->tensor = updated;
  return target;
}

Value *BytecodeTracer::scatterThroughChain(Value *root,
                                           const std::vector<ViewStep> &chain,
                                           Value *updated) {
  std::vector<Value *> bases = {root};
  for (size_t i = 0; i + 1 < chain.size(); ++i)
    bases.push_back(replayView(chain[i], bases.back()));
  Value *current = updated;
  for (size_t i = chain.size(); i-- > 0;)
    current = scatterStep(bases[i], chain[i], current);
  return current;
}

Value *BytecodeTracer::sliceOf(Value *base, int64_t dim, const SymExpr &start,
                               const SymExpr &end) {
  return emit(Op::Slice, {base}, sliceAttributes(dim, start, end))->tensor;
}

Value *BytecodeTracer::spliceAlong(Value *base, int64_t dim,
                                   const SymExpr &start, const SymExpr &length,
                                   Value *piece) {
  const SymExpr &size = base->type.sizes[size_t(dim)];
  SymExpr end = start + length;
  std::vector<Operand> parts;
  if (start != SymExpr(0))
    parts.push_back(sliceOf(base, dim, 0, start));
  parts.push_back(piece);
  if (end != size)
    parts.push_back(sliceOf(base, dim, end, size));
  if (parts.size() == 1)
    return piece;
  return emit(Op::Cat, parts, {{"dim", dim}})->tensor;
}

Value *BytecodeTracer::scatterStep(Value *base, const ViewStep &step,
                                   Value *updated) {
  const Node &node = *step.node;
  Op op = node.op;
  const TensorType &type = base->type;
  if (op == Op::Detach)
    return updated;
  if (op == Op::Permute) {
    std::vector<int64_t> dims = intListAttr(node, "dims", {});
    std::vector<int64_t> inverse(dims.size());
    for (size_t k = 0; k < dims.size(); ++k)
      inverse[size_t(normalizeDim(node, dims[k], dims.size()))] = int64_t(k);
    return emit(Op::Permute, {updated}, {{"dims", inverse}})->tensor;
  }
  if (op == Op::Transpose)
    return emit(Op::Transpose, {updated}, node.attributes)->tensor;
  if (op == Op::Squeeze || op == Op::Unsqueeze || op == Op::Expand ||
      viewsWhenStridesAllow(op))
    return emit(Op::Reshape, {updated}, {{"shape", type.sizes}})->tensor;
  if (op == Op::Select || op == Op::Unbind) {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), type.rank());
    SymExpr index = op == Op::Select ? SymExpr(node.intAttr("index", 0))
                                     : SymExpr(int64_t(step.result));
    if (index.isConstant() && index.constant() < 0)
      index = index + type.sizes[size_t(dim)];
    Value *piece = emit(Op::Unsqueeze, {updated}, {{"dim", dim}})->tensor;
    return spliceAlong(base, dim, index, 1, piece);
  }
  if (op == Op::Split || op == Op::Chunk) {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), type.rank());
    const SymExpr &total = type.sizes[size_t(dim)];
    if (!total.isConstant())
      unsupported("in-place update of a piece of a split of a symbolic size");
    std::vector<int64_t> lengths = splitLengths(node, total.constant());
    int64_t start = std::accumulate(lengths.begin(),
                                    lengths.begin() + long(step.result),
                                    int64_t(0));
    return spliceAlong(base, dim, start, lengths.at(step.result), updated);
  }
  if (op == Op::Slice || op == Op::Narrow) {
    SliceBounds bounds = sliceBounds(node);
    if (bounds.step == 1)
      return spliceAlong(base, bounds.dim, bounds.start, bounds.length,
                         updated);
    return sliceScatter(base, updated, bounds);
  }
  unsupported("in-place update through a view made by '" + opName(op) + "'");
}

Value *BytecodeTracer::sliceScatter(Value *base, Value *updated,
                                    const SliceBounds &bounds) {
  if (!bounds.start.isConstant() || !bounds.length.isConstant())
    unsupported("in-place update through a strided slice with symbolic "
                "bounds");
  static PyObject *slot = nullptr;
  PyObject *scatter = lookupOnce(slot, "torch", "slice_scatter");
  if (!scatter)
    unsupported("in-place update through a strided slice (no "
                "torch.slice_scatter)");
  int64_t start = bounds.start.constant();
  int64_t end = start + bounds.length.constant() * bounds.step;
  TorchCall call;
  call.callable = PyRef::borrow(scatter);
  call.target = "torch.slice_scatter";
  std::vector<Operand> operands;
  std::vector<VarPtr> args;
  for (Value *tensor : {base, updated}) {
    VarPtr var = makeVar(Var::Kind::Tensor);
    var->tensor = tensor;
    args.push_back(var);
  }
  for (int64_t number : {bounds.dim, start, end, bounds.step}) {
    PyRef object = PyRef::steal(PyLong_FromLongLong(number));
    args.push_back(constant(object.get()));
  }
  for (const VarPtr &arg : args)
    call.args.push_back(callArgOf(arg, operands, "torch.slice_scatter"));
  return emitTorchCall(std::move(call), std::move(operands))->tensor;
}

Value *BytecodeTracer::viewOfUpdatedInput(Value *value) {
  auto made = viewsOfUpdatedInputs.find(value);
  if (made != viewsOfUpdatedInputs.end())
    return made->second;
  const AliasMember *member = aliases.memberOf(value);
  // An uncertain member's chain leaves out the step capture could not
  // classify (a reshape of symbolic sizes that may copy): replayed on the
  // input it would drop that step. Its computed value is right.
  if (!member || member->chain.empty() || member->uncertain)
    return value;
  const Value *input = inputs.originalInput(member->set->root);
  if (!input || input == member->set->root)
    return value;
  // The run writes the input's new value back into the input tensor, so
  // the chain replayed on the graph input is a view of the input object
  // holding the updated values, as eager's is.
  std::vector<ViewStep> chain = member->chain;
  Value *view = const_cast<Value *>(input);
  for (const ViewStep &step : chain)
    view = replayView(step, view, true);
  // Lowering returns strided views of an input as views of it; another
  // chain would be computed from the input's old values: return the copy
  // of the new ones then (the values right, the aliasing lost).
  BufferView viewed;
  if (!describeView(view, {}, viewed) || viewed.base != input)
    view = value;
  viewsOfUpdatedInputs[value] = view;
  return view;
}

void BytecodeTracer::linkOutputViews() {
  std::vector<Value *> &outputs = result.graph->outputs;
  // Outputs viewing one alias set, by set. Views of inputs (updated or
  // not) are lowering's: views of the input object.
  // A set is linked unless an output in it was reached through a
  // copy-or-view capture cannot tell apart (uncertain members nothing
  // returns do not matter: a dead flatten of an expanded output).
  std::map<const AliasSet *, std::vector<size_t>> bySet;
  std::set<const AliasSet *> unknown;
  size_t count = outputs.size();
  for (size_t j = 0; j < count; ++j) {
    const AliasMember *member = aliases.memberOf(outputs[j]);
    if (!member || aliases.isStale(outputs[j]) ||
        !member->set->root->producer ||
        inputs.originalInput(member->set->root))
      continue;
    if (member->uncertain)
      unknown.insert(member->set.get());
    bySet[member->set.get()].push_back(j);
  }
  for (const auto &[set, members] : bySet) {
    if (members.size() < 2 || unknown.count(set))
      continue; // one output alone: its storage relation is not observable
    int rootOutput = -1;
    for (size_t j : members) {
      const std::vector<ViewStep> &chain = aliases.memberOf(outputs[j])->chain;
      if (chain.empty())
        continue;
      // The base: the output whose chain is the longest proper prefix of
      // this one's (the root itself, made an output when none is one).
      int base = -1;
      size_t prefix = 0;
      for (size_t k : members) {
        const std::vector<ViewStep> &other =
            aliases.memberOf(outputs[k])->chain;
        bool isPrefix =
            k != j && other.size() < chain.size() &&
            (base < 0 || other.size() > prefix) &&
            std::equal(other.begin(), other.end(), chain.begin(),
                       [](const ViewStep &a, const ViewStep &b) {
                         return a.node == b.node && a.result == b.result;
                       });
        if (isPrefix) {
          base = int(k);
          prefix = other.size();
        }
      }
      if (base < 0) {
        if (rootOutput < 0) {
          outputs.push_back(set->root);
          rootOutput = int(outputs.size()) - 1;
        }
        base = rootOutput;
        prefix = 0;
      }
      OutputOfOutput link;
      link.base = base;
      for (size_t s = prefix; s < chain.size(); ++s) {
        const ViewStep &step = chain[s];
        link.steps.push_back({step.node->op, step.node->attributes,
                              step.node->results[step.result]->type.sizes,
                              step.result});
      }
      result.outputsViewingOutputs[int(j)] = std::move(link);
    }
  }
}

bool BytecodeTracer::provablyNoView(Value *tensor, const Value *reshaped,
                                    bool setWasCertain) {
  if (eagerContiguous(tensor))
    return false;
  if (std::optional<bool> views =
          reshapeViewsUpdatedInput(inputs, tensor, reshaped->type))
    return !*views;
  // Eager's strides are known from a graph input's, or from a contiguous
  // root through the view ops between (a split piece of a linear layer's
  // output views as heads; a transposed or expanded input does not).
  const Value *base = tensor->producer ? nullptr : tensor;
  if (const AliasMember *member = aliases.memberOf(tensor))
    if (setWasCertain &&
        (!member->set->root->producer || eagerContiguous(member->set->root)))
      base = member->set->root;
  BufferView viewed;
  if (!base || !describeView(tensor, {base}, viewed) || viewed.base != base)
    return false;
  // With symbolic sizes no view found may still be one in some call: the
  // break then runs the call eagerly, which decides.
  return !reshapedView(reshaped->type.sizes, viewed.view);
}

bool BytecodeTracer::isViewOrHasViews(Value *value) {
  const AliasMember *member = aliases.memberOf(latestValue(value));
  return member && member->set->hasViews;
}

} // namespace capture
} // namespace dynafuse

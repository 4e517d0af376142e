//===- TracerValues.cpp - Containers, indexing, iteration, metadata -------===//
#include "BytecodeTracer.h"

#include "Values/DictKeys.h"

#include "dynafuse/Lowering/StridedView.h"

namespace dynafuse {
namespace capture {

VarPtr BytecodeTracer::convertValue(const VarPtr &value, int conversion) {
  if (conversion == 0)
    return value;
  if (value->kind != Var::Kind::Constant)
    unsupported("f-string of a value that is not a constant");
  PyObject *object = value->object.get();
  switch (conversion) {
  case 1:
    return foldPython(PyObject_Str(object));
  case 2:
    return foldPython(PyObject_Repr(object));
  case 3:
    return foldPython(PyObject_ASCII(object));
  default:
    unsupported("f-string conversion " + std::to_string(conversion));
  }
}

VarPtr BytecodeTracer::formatValue(const VarPtr &value, const VarPtr &spec) {
  if (value->kind != Var::Kind::Constant ||
      (spec && spec->kind != Var::Kind::Constant))
    unsupported("f-string of a value that is not a constant");
  return foldPython(PyObject_Format(value->object.get(),
                                    spec ? spec->object.get() : nullptr));
}

VarPtr BytecodeTracer::listToTuple(const VarPtr &list) {
  VarPtr tuple = makeVar(Var::Kind::Tuple);
  tuple->items = itemsOf(list);
  return tuple;
}

VarPtr BytecodeTracer::buildString(int count) {
  std::vector<VarPtr> parts(static_cast<size_t>(count));
  for (int i = count - 1; i >= 0; --i)
    parts[size_t(i)] = pop();
  PyRef joined = PyRef::steal(PyUnicode_FromString(""));
  for (const VarPtr &part : parts) {
    if (part->kind != Var::Kind::Constant ||
        !PyUnicode_Check(part->object.get()))
      unsupported("string building from a non-constant");
    joined = PyRef::steal(PyUnicode_Concat(joined.get(), part->object.get()));
    if (!joined)
      return foldPython(nullptr);
  }
  return constant(joined.get());
}

VarPtr BytecodeTracer::buildMap(int count) {
  VarPtr dict = makeVar(Var::Kind::Dict);
  std::vector<std::pair<VarPtr, VarPtr>> pairs(static_cast<size_t>(count));
  for (int i = count - 1; i >= 0; --i) {
    pairs[size_t(i)].second = pop();
    pairs[size_t(i)].first = pop();
  }
  for (auto &pair : pairs)
    setDictItem(dict, pair.first, pair.second);
  return dict;
}

VarPtr BytecodeTracer::buildConstKeyMap(int count) {
  VarPtr keys = pop();
  std::vector<VarPtr> names = itemsOf(keys);
  VarPtr dict = makeVar(Var::Kind::Dict);
  std::vector<VarPtr> values(static_cast<size_t>(count));
  for (int i = count - 1; i >= 0; --i)
    values[size_t(i)] = pop();
  for (int i = 0; i < count; ++i)
    setDictItem(dict, names[size_t(i)], values[size_t(i)]);
  return dict;
}

void BytecodeTracer::setDictItem(const VarPtr &dict, const VarPtr &key,
                                 const VarPtr &value) {
  std::string name = dictKeyOf(key, "a dict");
  if (dict->source >= 0) {
    storeIntoSourceDict(dict, name, value);
    return;
  }
  setDictEntry(dict, name, value);
}

void BytecodeTracer::mergeInto(const VarPtr &dict, const VarPtr &other) {
  // `**output` of an instance of a dict subclass made during capture
  // (transformers' ModelOutput): its dict items, as CPython merges any
  // dict whose class keeps dict's iteration.
  VarPtr source = other;
  if (other->kind == Var::Kind::NewObject && other->content &&
      !objects.pythonMethodOf(other, "__iter__") &&
      !objects.pythonMethodOf(other, "keys"))
    source = other->content;
  if (dict->kind != Var::Kind::Dict || source->kind != Var::Kind::Dict)
    unsupported("** unpacking of a value that is not a dict");
  for (size_t i = 0; i < source->keys.size(); ++i) {
    PyRef key = dictKeyObject(source->keys[i]);
    setDictItem(dict, constant(key.get()), source->items[i]);
  }
}

VarPtr BytecodeTracer::buildTuple(int count) {
  VarPtr tuple = makeVar(Var::Kind::Tuple);
  tuple->items.resize(size_t(count));
  for (int i = count - 1; i >= 0; --i)
    tuple->items[size_t(i)] = pop();
  return tuple;
}

void BytecodeTracer::addToSet(const VarPtr &set, const VarPtr &item) {
  if (set->kind != Var::Kind::Tuple || !set->isSet || set->source >= 0)
    unsupported("set.add on a value that is not a set made by the frame");
  for (const VarPtr &present : set->items)
    if (sameSetMember(present, item))
      return;
  willMutate(set);
  set->items.push_back(item);
}

bool BytecodeTracer::sameSetMember(const VarPtr &a, const VarPtr &b) {
  if (comparableAtCapture(a) && comparableAtCapture(b)) {
    int equal =
        PyObject_RichCompareBool(a->object.get(), b->object.get(), Py_EQ);
    if (equal < 0) {
      PyErr_Clear();
      unsupported("comparing set items raised");
    }
    return equal;
  }
  // Tensors, modules and other objects hash by identity: a set (a memo of
  // parameters already seen) holds each object once.
  if (a == b)
    return true;
  if (a->kind == Var::Kind::Tensor && b->kind == Var::Kind::Tensor)
    return a->tensor == b->tensor;
  bool objects = a->kind == Var::Kind::Object && b->kind == Var::Kind::Object &&
                 a->object && b->object && a->method.empty() &&
                 b->method.empty();
  if (objects) {
    // Modules and plain objects from arguments are guarded by type: the
    // answer is guarded as a relation of their sources.
    bool same = a->object.get() == b->object.get();
    guardSameness(a, b, same);
    return same;
  }
  bool mixed = (a->kind == Var::Kind::Tensor || comparableAtCapture(a) ||
                a->kind == Var::Kind::Object) &&
               (b->kind == Var::Kind::Tensor || comparableAtCapture(b) ||
                b->kind == Var::Kind::Object);
  if (!mixed)
    unsupported("a set of values capture cannot compare");
  return false;
}

std::vector<VarPtr> BytecodeTracer::itemsOf(const VarPtr &var) {
  return values.of(var).items(var);
}

void BytecodeTracer::unpack(const VarPtr &var, int count) {
  std::vector<VarPtr> items = itemsOf(var);
  if (int(items.size()) != count)
    unsupported("unpacking a tuple of the wrong length");
  for (int i = count - 1; i >= 0; --i)
    push(items[size_t(i)]);
}

void BytecodeTracer::unpackStarred(const VarPtr &var, int before, int after) {
  std::vector<VarPtr> items = itemsOf(var);
  if (int(items.size()) < before + after)
    unsupported("not enough values to unpack");
  for (int i = 0; i < after; ++i)
    push(items[items.size() - 1 - size_t(i)]);
  VarPtr rest = makeVar(Var::Kind::Tuple);
  rest->isList = true;
  rest->items.assign(items.begin() + before, items.end() - after);
  push(rest);
  for (int i = before - 1; i >= 0; --i)
    push(items[size_t(i)]);
}

VarPtr BytecodeTracer::subscript(const VarPtr &container, const VarPtr &index) {
  return values.of(container).subscript(container, index);
}

VarPtr BytecodeTracer::buildSlice(int count) {
  VarPtr step = count == 3 ? pop() : nullptr;
  VarPtr stop = pop();
  VarPtr start = pop();
  return makeSlice(start, stop, step);
}

VarPtr BytecodeTracer::makeSlice(const VarPtr &start, const VarPtr &stop,
                                 const VarPtr &step) {
  if (isSymInt(start) || isSymInt(stop) || (step && isSymInt(step))) {
    VarPtr slice = makeVar(Var::Kind::SymSlice);
    slice->items = {start, stop, step ? step : constant(Py_None)};
    return slice;
  }
  for (const VarPtr &part : {start, stop, step})
    if (part && part->kind != Var::Kind::Constant)
      unsupported("slice with a non-constant bound");
  PyRef slice =
      PyRef::steal(PySlice_New(start->object.get(), stop->object.get(),
                               step ? step->object.get() : nullptr));
  if (!slice) {
    PyErr_Clear();
    unsupported("invalid slice");
  }
  VarPtr var = makeVar(Var::Kind::Constant);
  var->object = slice;
  return var;
}

VarPtr BytecodeTracer::indexTensor(VarPtr tensor, const VarPtr &index) {
  std::vector<VarPtr> items =
      index->kind == Var::Kind::Tuple || (index->kind == Var::Kind::Constant &&
                                          PyTuple_Check(index->object.get()))
          ? itemsOf(index)
          : std::vector<VarPtr>{index};
  for (const VarPtr &item : items)
    if (item->kind != Var::Kind::Constant &&
        item->kind != Var::Kind::SymSlice && !isSymInt(item))
      return advancedIndex(tensor, index);
  size_t consumed = 0;
  for (const VarPtr &item : items) {
    if (item->kind != Var::Kind::Constant) {
      ++consumed;
      continue;
    }
    PyObject *object = item->object.get();
    consumed += PyLong_CheckExact(object) || PySlice_Check(object);
  }
  int64_t rank = int64_t(tensor->tensor->type.rank());
  int64_t dim = 0;
  const VarPtr indexed = tensor;
  for (const VarPtr &item : items) {
    if (item->kind == Var::Kind::SymSlice) {
      tensor = sliceSymbolic(tensor, item->items[0], item->items[1],
                             item->items[2], dim++);
      continue;
    }
    if (isSymInt(item)) {
      tensor = selectSymbolic(tensor, item, dim);
      continue;
    }
    PyObject *object = item->object.get();
    if (object == Py_Ellipsis) {
      dim += rank - int64_t(consumed);
      continue;
    }
    if (object == Py_None) {
      tensor = emit(Op::Unsqueeze, {tensor->tensor}, {{"dim", dim++}});
      continue;
    }
    if (PyLong_CheckExact(object)) {
      tensor =
          emit(Op::Select, {tensor->tensor},
               {{"dim", dim}, {"index", int64_t(PyLong_AsLongLong(object))}});
      continue;
    }
    if (!PySlice_Check(object))
      unsupported(std::string("tensor index of type ") +
                  Py_TYPE(object)->tp_name);
    tensor = sliceTensor(tensor, object, dim++);
  }
  // x[:], x[...]: eager returns a new tensor viewing x, never x itself.
  if (tensor == indexed && rank == 0)
    tensor = emit(Op::Reshape, {tensor->tensor},
                  {{"shape", std::vector<int64_t>{}}});
  else if (tensor == indexed)
    tensor = emit(Op::Slice, {tensor->tensor},
                  {{"dim", int64_t(0)},
                   {"start", int64_t(0)},
                   {"end", std::numeric_limits<int64_t>::max()},
                   {"step", int64_t(1)}});
  return tensor;
}

VarPtr BytecodeTracer::sliceTensor(const VarPtr &tensor, PyObject *slice,
                                   int64_t dim) {
  auto *parts = reinterpret_cast<PySliceObject *>(slice);
  if (dim < int64_t(tensor->tensor->type.rank()) &&
      !tensor->tensor->type.sizes[size_t(dim)].isConstant())
    return sliceSymbolic(tensor, constant(parts->start), constant(parts->stop),
                         constant(parts->step), dim);
  auto bound = [&](PyObject *value, int64_t fallback) {
    if (value == Py_None)
      return fallback;
    if (!PyLong_CheckExact(value))
      unsupported("slice bound that is not an integer");
    return int64_t(PyLong_AsLongLong(value));
  };
  int64_t start = bound(parts->start, 0);
  int64_t stop = bound(parts->stop, std::numeric_limits<int64_t>::max());
  int64_t step = bound(parts->step, 1);
  if (start == 0 && stop == std::numeric_limits<int64_t>::max() && step == 1)
    return tensor;
  return emit(Op::Slice, {tensor->tensor},
              {{"dim", dim}, {"start", start}, {"end", stop}, {"step", step}});
}


VarPtr BytecodeTracer::sizesTuple(const TensorType &type) {
  if (!allConstant(type.sizes)) {
    // A tuple of ints and SymInts (not a torch.Size object: its items are
    // not all known).
    VarPtr sizes = makeVar(Var::Kind::Tuple);
    for (const SymExpr &size : type.sizes)
      sizes->items.push_back(sizeVar(size));
    return sizes;
  }
  PyRef tuple = PyRef::steal(PyTuple_New(Py_ssize_t(type.rank())));
  for (size_t k = 0; k < type.rank(); ++k) {
    if (!type.sizes[k].isConstant())
      unsupported("symbolic size");
    PyTuple_SET_ITEM(tuple.get(), k,
                     PyLong_FromLongLong(type.sizes[k].constant()));
  }
  // A torch.Size, as eager's x.shape and x.size() are.
  static PyObject *sizeType = nullptr;
  PyObject *size = lookupOnce(sizeType, "torch", "Size");
  PyRef shape = PyRef::steal(size ? PyObject_CallOneArg(size, tuple.get())
                                  : nullptr);
  if (!shape) {
    PyErr_Clear();
    return constant(tuple.get());
  }
  return constant(shape.get());
}

VarPtr BytecodeTracer::integerConstant(int64_t value) {
  PyRef number = PyRef::steal(PyLong_FromLongLong(value));
  return constant(number.get());
}

VarPtr BytecodeTracer::tensorAttribute(const VarPtr &base,
                                       const std::string &attribute) {
  const TensorType &type = base->tensor->type;
  if (attribute == "shape")
    return sizesTuple(type);
  if (attribute == "ndim")
    return integerConstant(int64_t(type.rank()));
  if (attribute == "is_cuda")
    return constant(type.device.rfind("cuda", 0) == 0 ? Py_True : Py_False);
  if (attribute == "is_cpu")
    return constant(type.device == "cpu" ? Py_True : Py_False);
  if (attribute == "requires_grad")
    return constant(inputRequiresGrad(base->tensor) ||
                            inputs.requiresGrad(base->tensor)
                        ? Py_True
                        : Py_False);
  if (attribute == "is_nested" || attribute == "is_sparse" ||
      attribute == "is_quantized" || attribute == "is_meta")
    return constant(Py_False);
  if (attribute == "dtype" || attribute == "device")
    return unguardedObject(attribute == "dtype" ? dtypeObject(type.dtype)
                                                : deviceObject(type.device));
  if (attribute == "layout") {
    // Captured tensors are dense (is_sparse is False above).
    static PyObject *slot = nullptr;
    PyObject *strided = lookupOnce(slot, "torch", "strided");
    if (!strided)
      unsupported("Tensor.layout without torch.strided");
    return unguardedObject(PyRef::borrow(strided));
  }
  if (attribute == "T" && type.rank() != 2) {
    // Every dim reversed (a view even of fewer than 2 dims: eager's .T is
    // not the tensor itself).
    if (type.rank() < 2)
      return emit(Op::Transpose, {base->tensor},
                  {{"dim0", int64_t(0)}, {"dim1", int64_t(0)}});
    std::vector<int64_t> reversed;
    for (size_t k = type.rank(); k-- > 0;)
      reversed.push_back(int64_t(k));
    return emit(Op::Permute, {base->tensor}, {{"dims", reversed}});
  }
  if (attribute == "T" || attribute == "mT") {
    if (type.rank() < 2)
      unsupported("Tensor.mT of fewer than 2 dims (eager raises)");
    return emit(Op::Transpose, {base->tensor},
                {{"dim0", int64_t(type.rank() - 2)},
                 {"dim1", int64_t(type.rank() - 1)}});
  }
  if (!opTable().method(attribute) && !isMetadataMethod(attribute)) {
    PyRef method =
        PyRef::steal(tensorMethodObject(attribute, base->baseMethods));
    if (!method || !PyCallable_Check(method.get()) ||
        PyType_Check(method.get()))
      unsupported("Tensor." + attribute);
  }
  VarPtr method = makeVar(Var::Kind::TensorMethod);
  method->method = attribute;
  method->self = base;
  return method;
}

VarPtr BytecodeTracer::unguardedObject(PyRef object) {
  if (!object) {
    PyErr_Clear();
    unsupported("tensor metadata object");
  }
  VarPtr var = makeVar(Var::Kind::Object);
  var->object = object;
  return var;
}



VarPtr BytecodeTracer::tensorMetadata(const VarPtr &tensor,
                                      const std::string &method,
                                      const std::vector<VarPtr> &args) {
  const TensorType &type = tensor->tensor->type;
  if (method == "dim" || method == "ndimension")
    return integerConstant(int64_t(type.rank()));
  if (method == "numel" || method == "nelement")
    return sizeVar(type.numel());
  if (method == "is_floating_point" || method == "is_complex" ||
      method == "is_signed") {
    if (!args.empty())
      unsupported("Tensor." + method + " with arguments");
    bool answer = method == "is_floating_point" ? isFloating(type.dtype)
                  : method == "is_signed"       ? type.dtype != DType::Bool
                                                : false;
    return constant(answer ? Py_True : Py_False);
  }
  if (args.empty())
    return sizesTuple(type);
  if (args[0]->kind != Var::Kind::Constant ||
      !PyLong_CheckExact(args[0]->object.get()))
    unsupported("Tensor.size with a non-constant dim");
  int64_t dim = PyLong_AsLongLong(args[0]->object.get());
  int64_t rank = int64_t(type.rank());
  if (dim < -rank || dim >= rank)
    unsupported("Tensor.size: dim out of range");
  return sizeVar(type.sizes[size_t(dim < 0 ? dim + rank : dim)]);
}

VarPtr BytecodeTracer::iterate(const VarPtr &iterable) {
  return values.of(iterable).iterate(iterable);
}

VarPtr BytecodeTracer::advancedIndex(const VarPtr &tensor,
                                     const VarPtr &index) {
  PyRef getitem = PyRef::steal(tensorMethodObject("__getitem__"));
  if (!getitem)
    unsupported("Tensor.__getitem__");
  return torchExtern(getitem.get(), "Tensor.__getitem__", {tensor, index}, {});
}

void BytecodeTracer::storeSubscript(const VarPtr &container,
                                    const VarPtr &index, const VarPtr &value) {
  values.of(container).storeSubscript(container, index, value);
}

bool BytecodeTracer::assignsFromDisjointMemory(const VarPtr &container,
                                               const VarPtr &index,
                                               const VarPtr &value) {
  VarPtr target;
  try {
    target = subscript(container, index); // a view the graph drops
  } catch (const Unsupported &) {
    return false;
  }
  if (target->kind != Var::Kind::Tensor)
    return false;
  const AliasMember *member = aliases.memberOf(latestValue(value->tensor));
  if (!member || !member->set->uncertain.empty())
    return false;
  // The footprints are offsets into the root as its graph type lays it
  // out: the memory's layout where the root is the memory's first value
  // (an input, by its own strides) or that value was contiguous in eager.
  const Value *root = member->set->root;
  const Value *buffer = member->set->buffer;
  if ((buffer->producer || root != buffer) && !eagerContiguous(buffer))
    return false;
  // Each side's elements in the root's memory: (size, stride) of its dims,
  // its offset and its first and last element.
  struct Footprint {
    std::vector<std::pair<int64_t, int64_t>> dims;
    int64_t offset = 0, first = 0, last = 0;
    bool empty = false;
  };
  auto footprint = [&](Value *view, Footprint &result) {
    // The member as view ops on the root (an updated member's value is the
    // update's result, not a view expression): its chain replayed.
    Value *latest = latestValue(view);
    const AliasMember *viewMember = aliases.memberOf(latest);
    if (!viewMember || viewMember->set != member->set || viewMember->uncertain)
      return false;
    latest = member->set->root;
    for (const ViewStep &step : viewMember->chain)
      latest = replayView(step, latest);
    BufferView described;
    if (!describeView(latest, {root}, described) || described.base != root ||
        !described.view.offset.isConstant())
      return false;
    result.offset = result.first = result.last =
        described.view.offset.constant();
    for (size_t k = 0; k < described.view.sizes.size(); ++k) {
      const SymExpr &size = described.view.sizes[k];
      const SymExpr &stride = described.view.strides[k];
      if (!size.isConstant() || !stride.isConstant())
        return false;
      result.empty |= size.constant() == 0;
      result.dims.push_back({size.constant(), stride.constant()});
      if (size.constant() == 1)
        continue;
      int64_t reach = (size.constant() - 1) * stride.constant();
      (reach < 0 ? result.first : result.last) += reach;
    }
    return true;
  };
  Footprint written, read;
  if (!footprint(target->tensor, written) || !footprint(value->tensor, read))
    return false;
  if (written.empty || read.empty)
    return true;
  // Every element copied onto itself, the same sizes and strides but for
  // leading size-1 dims the value broadcasts over (x[:] = x, x[None] = x):
  // eager's copy of a tensor onto itself.
  while (written.dims.size() > read.dims.size() &&
         written.dims.front().first == 1)
    written.dims.erase(written.dims.begin());
  if (written.dims == read.dims && written.offset == read.offset)
    return true;
  return written.last < read.first || read.last < written.first;
}

VarPtr BytecodeTracer::functionalSetItem(const VarPtr &container,
                                         const VarPtr &index,
                                         const VarPtr &value) {
  static PyObject *slot = nullptr;
  PyObject *setitem = lookupOnce(slot, "dynafuse.functional", "setitem");
  if (!setitem)
    unsupported("item assignment (dynafuse.functional is missing)");
  TorchCall call;
  call.callable = PyRef::borrow(setitem);
  call.target = "dynafuse.functional.setitem";
  std::vector<Operand> operands;
  for (const VarPtr &arg : {container, index, value})
    call.args.push_back(callArgOf(arg, operands, "item assignment"));
  return emitTorchCall(std::move(call), std::move(operands));
}

VarPtr BytecodeTracer::dictMethod(const std::string &method,
                                  const VarPtr &dict) {
  VarPtr list = makeVar(Var::Kind::Tuple);
  list->isList = true;
  for (size_t i = 0; i < dict->items.size(); ++i) {
    PyRef key = dictKeyObject(dict->keys[i]);
    if (method == "keys") {
      list->items.push_back(constant(key.get()));
    } else if (method == "values") {
      list->items.push_back(dict->items[i]);
    } else {
      VarPtr pair = makeVar(Var::Kind::Tuple);
      pair->items = {constant(key.get()), dict->items[i]};
      list->items.push_back(pair);
    }
  }
  return list;
}

} // namespace capture
} // namespace dynafuse

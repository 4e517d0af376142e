//===- TensorValues.cpp - Tensors as the bytecode uses them ---------------===//
//
// x[i] binds basic indexing to views (indexTensor) and gathers to a torch
// call; x[i] = v is a functional update every reference sees; bool(x) would
// depend on the data, so a branch on it is refused. A returned tensor is a
// graph output or the input itself; a live one at a break is too, unless it
// is a view or has views (the resume function would lose the aliasing).
//
//===----------------------------------------------------------------------===//
#include "ValueHandlers.h"

#include "Tracer/BytecodeTracer.h"

namespace dynafuse {
namespace capture {

TensorValues::TensorValues(BytecodeTracer &tracer)
    : ValueHandler(tracer, "a tensor") {}

VarPtr TensorValues::attribute(const VarPtr &value, PyObject *name) {
  return tracer.tensorAttribute(value, PyUnicode_AsUTF8(name));
}

std::vector<VarPtr> TensorValues::items(const VarPtr &value) {
  const TensorType &type = value->tensor->type;
  if (type.rank() == 0)
    tracer.unsupported("iteration over a 0-d tensor (TypeError)");
  if (!type.sizes[0].isConstant())
    tracer.unsupported("iteration over a tensor whose first dim is a "
                       "symbolic size");
  if (type.sizes[0].constant() > 4096)
    tracer.unsupported("iteration over a tensor too long to unroll");
  VarPtr pieces =
      tracer.emit(Op::Unbind, {tracer.operandOf(value, "iteration")},
                  {{"dim", int64_t(0)}});
  return tracer.itemsOf(pieces);
}

VarPtr TensorValues::iterate(const VarPtr &value) {
  VarPtr iterator = makeVar(Var::Kind::Iterator);
  iterator->items = items(value);
  return iterator;
}

VarPtr TensorValues::subscript(const VarPtr &value, const VarPtr &index) {
  return tracer.indexTensor(value, index);
}

void TensorValues::storeSubscript(const VarPtr &value, const VarPtr &index,
                                  const VarPtr &item) {
  if (item->kind == Var::Kind::Tensor) {
    // x[i] = (a view of) x: where the source overlaps what it writes,
    // eager refuses the overlap or copies in an order of its own; it runs
    // eagerly.
    Value *written = tracer.latestValue(value->tensor);
    Value *read = tracer.latestValue(item->tensor);
    bool shared = written == read || tracer.aliases.inOneSet(written, read);
    if (shared && !tracer.assignsFromDisjointMemory(value, index, item))
      tracer.unsupported("item assignment from a tensor sharing memory with "
                         "its target");
  }
  tracer.updateInPlace(value, tracer.functionalSetItem(value, index, item),
                       /*overlapChecked=*/true);
}

bool TensorValues::truth(const VarPtr &) {
  tracer.unsupported("data-dependent branch on a tensor value");
}

VarPtr TensorValues::type(const VarPtr &value) {
  // An input's own class (a Parameter, a subclass), guarded; a computed
  // tensor is exactly torch.Tensor.
  const Value *input = tracer.inputs.originalInput(value->tensor);
  PyObject *object = nullptr;
  int source = input ? tracer.inputs.sourceOf(input) : -1;
  for (const auto &[candidate, entry] : tracer.inputs.byObject())
    if (input && entry.first == source)
      object = candidate;
  if (input && !object)
    return nullptr;
  static PyObject *slot = nullptr;
  PyObject *type = object ? reinterpret_cast<PyObject *>(Py_TYPE(object))
                          : lookupOnce(slot, "torch", "Tensor");
  if (!type)
    return nullptr;
  if (object)
    tracer.guardBuilder.guardObject(Guard::Kind::TypeIs, source, type);
  return classVar(type);
}

VarPtr TensorValues::isInstance(const VarPtr &value, PyObject *classes) {
  PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
  PyRef tensorType = PyRef::steal(
      torch ? PyObject_GetAttrString(torch.get(), "Tensor") : nullptr);
  PyRef nn = PyRef::steal(PyImport_ImportModule("torch.nn"));
  PyRef parameterType = PyRef::steal(
      nn ? PyObject_GetAttrString(nn.get(), "Parameter") : nullptr);
  if (!tensorType || !parameterType) {
    PyErr_Clear();
    return nullptr;
  }
  int sub = PyObject_IsSubclass(tensorType.get(), classes);
  int parameterSub = PyObject_IsSubclass(parameterType.get(), classes);
  if (sub < 0 || parameterSub < 0) {
    PyErr_Clear();
    tracer.unsupported("isinstance raised");
  }
  const Value *input = tracer.inputs.originalInput(value->tensor);
  if (sub != parameterSub && input) {
    // An input is a Tensor or a Parameter (its guard admits both): the
    // answer depends on which, so its type is guarded.
    int source = tracer.inputs.sourceOf(input);
    PyObject *object = nullptr;
    for (const auto &[candidate, entry] : tracer.inputs.byObject())
      if (entry.first == source)
        object = candidate;
    if (!object || source < 0)
      tracer.unsupported("isinstance of an input tensor (Tensor or Parameter)");
    tracer.guardBuilder.guardObject(
        Guard::Kind::TypeIs, source,
        reinterpret_cast<PyObject *>(Py_TYPE(object)));
    sub = PyObject_IsInstance(object, classes);
  }
  return tracer.constant(sub > 0 ? Py_True : Py_False);
}

int TensorValues::callable(const VarPtr &) { return 0; }

OutputSpec TensorValues::output(const VarPtr &value, const ItemSpec &) {
  return tracer.tensorOutput(value->tensor);
}

OutputSpec TensorValues::liveState(const VarPtr &value, const ItemSpec &) {
  // A computed view (or a value with views) would come back as a tensor of
  // its own: the aliasing eager relies on would be lost.
  if (tracer.isViewOrHasViews(value->tensor) &&
      !tracer.inputs.originalInput(tracer.latestValue(value->tensor)))
    throw CannotResume{"a live tensor is a view or has views"};
  return tracer.tensorOutput(value->tensor);
}

} // namespace capture
} // namespace dynafuse

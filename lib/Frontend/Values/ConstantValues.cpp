//===- ConstantValues.cpp - Python constants on the trace -----------------===//
//
// Numbers, strings, None, ranges, slices, tuples of constants and
// torch.Size are known at capture: their operations run in Python now and
// give constants again (a torch.Size slices to a torch.Size). A range
// iterates unrolled (up to 4096 items). Returned, a constant is the same
// object on every call the guards admit.
//
//===----------------------------------------------------------------------===//
#include "ValueHandlers.h"

#include "Tracer/BytecodeTracer.h"

namespace dynafuse {
namespace capture {

ConstantValues::ConstantValues(BytecodeTracer &tracer)
    : ValueHandler(tracer, "a constant that is not a tuple") {}

VarPtr ConstantValues::attribute(const VarPtr &value, PyObject *name) {
  // Immutable values (strings, numbers, tuples): their attributes are data,
  // their methods pure (folded when called on constants).
  if (!value->object)
    return ValueHandler::attribute(value, name);
  PyRef read = PyRef::steal(PyObject_GetAttr(value->object.get(), name));
  if (!read)
    PyErr_Clear();
  else if (isConstantObject(read.get()))
    return tracer.constant(read.get());
  else if (PyCFunction_Check(read.get()) &&
           PyCFunction_GET_SELF(read.get()) == value->object.get()) {
    VarPtr method = makeVar(Var::Kind::Object);
    method->object = read;
    return method;
  }
  tracer.unsupported(std::string("attribute '") + PyUnicode_AsUTF8(name) +
                     "' of a " + Py_TYPE(value->object.get())->tp_name +
                     " constant");
}

std::vector<VarPtr> ConstantValues::items(const VarPtr &value) {
  PyObject *tuple = value->object.get();
  if (PyRange_Check(tuple)) // zip(pieces, range(n)), list(range(n))
    return iterate(value)->items;
  if (!PyTuple_Check(tuple))
    refuse("unpacking or indexing");
  std::vector<VarPtr> all;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i)
    all.push_back(tracer.constant(PyTuple_GET_ITEM(tuple, i)));
  return all;
}

VarPtr ConstantValues::iterate(const VarPtr &value) {
  VarPtr iterator = makeVar(Var::Kind::Iterator);
  if (PyRange_Check(value->object.get())) {
    PyRef all = PyRef::steal(PySequence_Tuple(value->object.get()));
    if (!all || PyTuple_GET_SIZE(all.get()) > 4096) {
      PyErr_Clear();
      tracer.unsupported("range too long to unroll");
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(all.get()); ++i)
      iterator->items.push_back(
          tracer.constant(PyTuple_GET_ITEM(all.get(), i)));
    return iterator;
  }
  if (!PyTuple_Check(value->object.get()))
    refuse("iteration over");
  iterator->items = items(value);
  return iterator;
}

VarPtr ConstantValues::length(const VarPtr &value) {
  if (!PyTuple_Check(value->object.get()))
    return nullptr; // folded as a pure builtin
  return tracer.integerConstant(PyTuple_GET_SIZE(value->object.get()));
}

VarPtr ConstantValues::subscript(const VarPtr &value, const VarPtr &index) {
  if (index->kind == Var::Kind::Constant && PySlice_Check(index->object.get()))
    return tracer.foldPython(
        PyObject_GetItem(value->object.get(), index->object.get()));
  return itemAt(value, index);
}

bool ConstantValues::truth(const VarPtr &value) {
  int truth = PyObject_IsTrue(value->object.get());
  if (truth < 0) {
    PyErr_Clear();
    tracer.unsupported("truth value raised");
  }
  return truth != 0;
}

VarPtr ConstantValues::contains(const VarPtr &container, const VarPtr &item) {
  if (item->kind != Var::Kind::Constant)
    return containsByEquality(items(container), item);
  // "dynamic" in rope_type: substrings, tuples of constants.
  int found = PySequence_Contains(container->object.get(), item->object.get());
  if (found < 0) {
    PyErr_Clear();
    tracer.unsupported("'in' on constants raised");
  }
  return tracer.constant(found == 1 ? Py_True : Py_False);
}

VarPtr ConstantValues::type(const VarPtr &value) {
  return value->object ? classVar(reinterpret_cast<PyObject *>(
                             Py_TYPE(value->object.get())))
                       : nullptr;
}

VarPtr ConstantValues::isInstance(const VarPtr &value, PyObject *classes) {
  return value->object ? objectIsInstance(value->object.get(), classes)
                       : nullptr;
}

int ConstantValues::callable(const VarPtr &value) {
  return value->object ? PyCallable_Check(value->object.get()) : -1;
}

OutputSpec ConstantValues::output(const VarPtr &value, const ItemSpec &) {
  return constantSpec(value);
}

OutputSpec ConstantValues::liveState(const VarPtr &value, const ItemSpec &) {
  OutputSpec spec;
  spec.kind = OutputSpec::Kind::Constant;
  spec.constant = value->object;
  return spec;
}

} // namespace capture
} // namespace dynafuse

//===- ValueHandler.cpp - The operations' defaults, and the kind table ----===//
//
// What a kind does not override, it cannot do: the defaults refuse, naming
// the kind, except where a generic answer holds for every kind (subscripts
// and `in` through the kind's items, no judgement on callable() or len()).
// ValueHandlers maps each Var::Kind to its handler once, so a kind without
// one is a construction error rather than a switch's missing case.
//
//===----------------------------------------------------------------------===//
#include "ValueHandlers.h"

#include "Tracer/BytecodeTracer.h"

namespace dynafuse {
namespace capture {

ValueHandler::ValueHandler(BytecodeTracer &tracer, std::string description)
    : tracer(tracer), description(std::move(description)) {}

ValueHandler::~ValueHandler() = default;

void ValueHandler::refuse(const std::string &operation) const {
  tracer.unsupported(operation + " " + description);
}

VarPtr ValueHandler::attribute(const VarPtr &, PyObject *name) {
  refuse(std::string("attribute '") + PyUnicode_AsUTF8(name) + "' of");
}

void ValueHandler::refuseBecause(const std::string &why) const {
  tracer.unsupported(why);
}

std::vector<VarPtr> ValueHandler::items(const VarPtr &) {
  refuse("unpacking or indexing");
}

VarPtr ValueHandler::iterate(const VarPtr &) { refuse("iteration over"); }

VarPtr ValueHandler::length(const VarPtr &) { return nullptr; }

VarPtr ValueHandler::subscript(const VarPtr &value, const VarPtr &index) {
  return itemAt(value, index);
}

void ValueHandler::storeSubscript(const VarPtr &, const VarPtr &,
                                  const VarPtr &) {
  refuse("item assignment into");
}

bool ValueHandler::truth(const VarPtr &) {
  refuse("branch on the truth value of");
}

VarPtr ValueHandler::contains(const VarPtr &container, const VarPtr &item) {
  return containsByEquality(items(container), item);
}

VarPtr ValueHandler::type(const VarPtr &) { return nullptr; }

VarPtr ValueHandler::isInstance(const VarPtr &, PyObject *) { return nullptr; }

VarPtr ValueHandler::call(const VarPtr &, const std::vector<VarPtr> &,
                          const Keywords &) {
  return nullptr;
}

int ValueHandler::callable(const VarPtr &) { return -1; }

OutputSpec ValueHandler::output(const VarPtr &, const ItemSpec &) {
  refuse("returning");
}

OutputSpec ValueHandler::liveState(const VarPtr &, const ItemSpec &) {
  throw CannotResume{description + " is live"};
}

VarPtr ValueHandler::itemAt(const VarPtr &value, const VarPtr &index) {
  tracer.specializeSize(index); // ws[n]: the item is the one at n's value
  bool constantIndex = index->kind == Var::Kind::Constant;
  if (constantIndex && PySlice_Check(index->object.get())) {
    // seq[a:b:c] with constant bounds: a sequence of the same kind.
    std::vector<VarPtr> all = items(value);
    Py_ssize_t start, stop, step, length;
    if (PySlice_GetIndicesEx(index->object.get(), Py_ssize_t(all.size()),
                             &start, &stop, &step, &length) < 0) {
      PyErr_Clear();
      tracer.unsupported("invalid slice of a sequence");
    }
    VarPtr result = makeVar(Var::Kind::Tuple);
    result->isList = value->isList;
    for (Py_ssize_t i = 0, at = start; i < length; ++i, at += step)
      result->items.push_back(all[size_t(at)]);
    return result;
  }
  if (!constantIndex || !PyLong_CheckExact(index->object.get()))
    tracer.unsupported("subscript other than a constant integer index");
  std::vector<VarPtr> all = items(value);
  long position = PyLong_AsLong(index->object.get());
  if (position < 0)
    position += long(all.size());
  if (position < 0 || position >= long(all.size()))
    tracer.unsupported("tuple index out of range");
  return all[size_t(position)];
}

VarPtr ValueHandler::containsByEquality(const std::vector<VarPtr> &candidates,
                                        const VarPtr &item) {
  if (!comparableAtCapture(item))
    tracer.unsupported("'in' with a value not known at capture");
  bool found = false;
  for (const VarPtr &candidate : candidates) {
    if (!comparableAtCapture(candidate))
      tracer.unsupported("'in' over values not known at capture");
    int equal = PyObject_RichCompareBool(item->object.get(),
                                         candidate->object.get(), Py_EQ);
    if (equal < 0) {
      PyErr_Clear();
      tracer.unsupported("'in' comparison raised");
    }
    found |= equal == 1;
  }
  return tracer.constant(found ? Py_True : Py_False);
}

OutputSpec ValueHandler::sourceSpec(int source) {
  OutputSpec spec;
  spec.kind = OutputSpec::Kind::Source;
  spec.index = source;
  return spec;
}

VarPtr ValueHandler::classIsInstance(PyObject *cls, PyObject *classes) {
  int sub = PyObject_IsSubclass(cls, classes);
  if (sub < 0) {
    PyErr_Clear();
    tracer.unsupported("isinstance raised");
  }
  return tracer.constant(sub ? Py_True : Py_False);
}

OutputSpec ValueHandler::constantSpec(const VarPtr &value) const {
  tracer.guardObjectIdentity(value); // a returned module is this instance
  OutputSpec spec;
  spec.kind = OutputSpec::Kind::Constant;
  spec.constant = value->object;
  return spec;
}

VarPtr ValueHandler::classVar(PyObject *type) {
  // Fixed for this entry (the guards pin it): attributes of it are read
  // through it.
  return tracer.fixedObject(PyRef::borrow(type),
                            reinterpret_cast<PyTypeObject *>(type)->tp_name);
}

namespace {
/// The class whose instance layout a type's instances have (CPython's
/// solid base): no class inherits from two whose solid bases are
/// unrelated. Python classes count as adding nothing (their __dict__ and
/// __weakref__; __slots__ would make theirs solid): fewer exclusions.
PyTypeObject *solidBase(PyTypeObject *type) {
  PyTypeObject *base =
      type->tp_base ? solidBase(type->tp_base) : &PyBaseObject_Type;
  if (type == &PyBaseObject_Type || (type->tp_flags & Py_TPFLAGS_HEAPTYPE))
    return base == type ? type : base;
  bool extra = type->tp_itemsize != base->tp_itemsize ||
               type->tp_basicsize > base->tp_basicsize;
  return extra ? type : base;
}
} // namespace

VarPtr ValueHandler::builtinIsInstance(PyTypeObject *base, PyObject *cls) {
  std::vector<PyObject *> classes;
  if (PyTuple_Check(cls))
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cls); ++i)
      classes.push_back(PyTuple_GET_ITEM(cls, i));
  else
    classes.push_back(cls);
  PyTypeObject *layouts[] = {&PyDict_Type,    &PyList_Type, &PyTuple_Type,
                             &PyUnicode_Type, &PyLong_Type, &PyFloat_Type,
                             &PySet_Type,     &PyBytes_Type};
  static PyObject *slot = nullptr;
  PyObject *tensorBase = lookupOnce(slot, "torch._C", "TensorBase");
  bool allFalse = true;
  for (PyObject *candidate : classes) {
    if (!PyType_Check(candidate))
      return nullptr;
    // issubclass honours ABCs (collections.abc.Sequence), and what holds
    // for the base holds for any subclass of it.
    int sub =
        PyObject_IsSubclass(reinterpret_cast<PyObject *>(base), candidate);
    if (sub < 0) {
      PyErr_Clear();
      tracer.unsupported("isinstance raised");
    }
    if (sub)
      return tracer.constant(Py_True);
    // False only where no subclass of the base can be one: a class with
    // another builtin layout, or a tensor class.
    auto *type = reinterpret_cast<PyTypeObject *>(candidate);
    bool excluded =
        tensorBase && PyType_Check(tensorBase) &&
        PyType_IsSubtype(type, reinterpret_cast<PyTypeObject *>(tensorBase));
    for (PyTypeObject *layout : layouts)
      if (layout != base && PyType_IsSubtype(type, layout))
        excluded = true;
    // A C class of a layout unrelated to the base's (numpy.ndarray for a
    // tuple): no subclass of the base is one.
    PyTypeObject *solid = solidBase(type), *baseSolid = solidBase(base);
    if (!PyType_IsSubtype(solid, baseSolid) &&
        !PyType_IsSubtype(baseSolid, solid))
      excluded = true;
    allFalse = allFalse && excluded;
  }
  return allFalse ? tracer.constant(Py_False) : nullptr;
}

VarPtr ValueHandler::objectIsInstance(PyObject *object, PyObject *classes) {
  int result = PyObject_IsInstance(object, classes);
  if (result < 0) {
    PyErr_Clear();
    tracer.unsupported("isinstance raised");
  }
  return tracer.constant(result ? Py_True : Py_False);
}

VarPtr ValueHandler::containerMethod(const VarPtr &container,
                                     const std::string &method) {
  VarPtr bound = makeVar(Var::Kind::BoundMethod);
  bound->self = container;
  bound->function = makeVar(Var::Kind::Object);
  bound->function->method = method;
  return bound;
}

VarPtr ValueHandler::ownMethod(const VarPtr &object, const char *name) {
  PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
  return tracer.boundMethod(object, key.get());
}

ValueHandlers::ValueHandlers(BytecodeTracer &tracer, PythonObjects &objects)
    : tensors(tracer), constants(tracer), objects(tracer), sequences(tracer),
      iterators(tracer), dicts(tracer), sizes(tracer), functions(tracer),
      tensorMethods(tracer), boundMethods(tracer), nulls(tracer),
      cells(tracer, "a closure cell"),
      symbolicSlices(tracer, "a slice with a symbolic bound") {
  auto set = [&](Var::Kind kind, ValueHandler &handler) {
    byKind[size_t(kind)] = &handler;
  };
  set(Var::Kind::Null, nulls);
  set(Var::Kind::Tensor, tensors);
  set(Var::Kind::Constant, constants);
  set(Var::Kind::Object, this->objects);
  set(Var::Kind::Tuple, sequences);
  set(Var::Kind::TensorMethod, tensorMethods);
  set(Var::Kind::BoundMethod, boundMethods);
  set(Var::Kind::Iterator, iterators);
  set(Var::Kind::Dict, dicts);
  set(Var::Kind::Cell, cells);
  set(Var::Kind::Function, functions);
  set(Var::Kind::NewObject, objects);
  set(Var::Kind::SymInt, sizes);
  set(Var::Kind::SymSlice, symbolicSlices);
  for (ValueHandler *handler : byKind)
    if (!handler)
      throw std::logic_error("a Var kind without a value handler");
}

} // namespace capture
} // namespace dynafuse

//===- SequenceValues.cpp - Tuples, lists, sets and iterators -------------===//
//
// A Tuple var holds its items as vars: a tuple, a list (isList), a set of
// constants (isSet) or a named tuple (keys: its fields; object: its class).
// Indexing, slicing, unpacking and iteration read the items at capture;
// lst[i] = v on a list made by the frame replaces one. Returned, a list the
// frame was given is that list itself (stores into it are repeated by each
// run); one made during capture is rebuilt once per output and referred to
// by id after, so two references stay one object.
// Iterators (enumerate, zip, generators) hold the items not yet consumed;
// they unpack and iterate but do not index, as in Python.
//
//===----------------------------------------------------------------------===//
#include "ValueHandlers.h"

#include "Tracer/BytecodeTracer.h"

namespace dynafuse {
namespace capture {

SequenceValues::SequenceValues(BytecodeTracer &tracer)
    : ValueHandler(tracer, "a tuple or list") {}

VarPtr SequenceValues::attribute(const VarPtr &value, PyObject *name) {
  std::string attribute = PyUnicode_AsUTF8(name);
  for (size_t i = 0; i < value->keys.size() && i < value->items.size(); ++i)
    if (value->keys[i] == attribute) // a named tuple's field
      return value->items[i];
  if (!value->keys.empty() && value->object) {
    // A class attribute that is data (_fields, a field's default).
    PyRef data = PyRef::steal(PyObject_GetAttr(value->object.get(), name));
    if (data && isConstantObject(data.get()))
      return tracer.constant(data.get());
    PyErr_Clear();
  }
  if (value->isSet) {
    if (attribute == "add")
      return containerMethod(value, "set.add");
    refuse("set." + attribute + " of");
  }
  bool listMethod =
      value->isList &&
      (attribute == "copy" || attribute == "append" || attribute == "extend");
  if (value->keys.empty() && (listMethod || attribute == "index"))
    return containerMethod(value,
                           (value->isList ? "list." : "tuple.") + attribute);
  return ValueHandler::attribute(value, name);
}

std::vector<VarPtr> SequenceValues::items(const VarPtr &value) {
  return value->items;
}

VarPtr SequenceValues::iterate(const VarPtr &value) {
  VarPtr iterator = makeVar(Var::Kind::Iterator);
  iterator->items = value->items;
  return iterator;
}

VarPtr SequenceValues::length(const VarPtr &value) {
  return tracer.integerConstant(int64_t(value->items.size()));
}

VarPtr SequenceValues::subscript(const VarPtr &value, const VarPtr &index) {
  return itemAt(value, index);
}

void SequenceValues::storeSubscript(const VarPtr &value, const VarPtr &index,
                                    const VarPtr &item) {
  if (!value->isList || !value->keys.empty() || value->source >= 0 ||
      index->kind != Var::Kind::Constant ||
      !PyLong_CheckExact(index->object.get()))
    tracer.unsupported("item assignment into a tuple, or into a list the "
                       "frame did not make, or at an index not known at "
                       "capture");
  // A list made during capture (lst[i] = v): a value of the trace.
  long position = PyLong_AsLong(index->object.get());
  long size = long(value->items.size());
  if (position < -size || position >= size)
    tracer.unsupported("list assignment index out of range");
  tracer.willMutate(value);
  value->items[size_t(position < 0 ? position + size : position)] = item;
}

bool SequenceValues::truth(const VarPtr &value) {
  return !value->items.empty();
}

namespace {
/// A tuple built during capture of ints and symbolic sizes may stand for a
/// torch.Size (a shape with symbolic sizes); one holding anything else,
/// a list or a set may not.
bool mayBeSize(const VarPtr &value) {
  if (value->isList || value->isSet || value->source >= 0)
    return false;
  return std::all_of(value->items.begin(), value->items.end(),
                     [](const VarPtr &item) {
                       return item->kind == Var::Kind::SymInt ||
                              (item->kind == Var::Kind::Constant &&
                               PyLong_Check(item->object.get()));
                     });
}
} // namespace

VarPtr SequenceValues::type(const VarPtr &value) {
  if (!value->keys.empty() && value->object) // a named tuple made here
    return classVar(value->object.get());
  if (value->isSet || !value->keys.empty())
    return nullptr;
  PyObject *type = reinterpret_cast<PyObject *>(value->isList ? &PyList_Type
                                                              : &PyTuple_Type);
  if (value->source >= 0) // the frame's own: exactly this type, guarded
    tracer.guardBuilder.guardObject(Guard::Kind::TypeIs, value->source, type);
  else if (mayBeSize(value))
    return nullptr;
  return classVar(type);
}

VarPtr SequenceValues::isInstance(const VarPtr &value, PyObject *classes) {
  if (!value->keys.empty() && value->object) // a named tuple made here
    return classIsInstance(value->object.get(), classes);
  if (!value->keys.empty())
    return nullptr;
  PyTypeObject *type = value->isSet    ? &PySet_Type
                       : value->isList ? &PyList_Type
                                       : &PyTuple_Type;
  if (mayBeSize(value))
    return builtinIsInstance(type, classes);
  // Exactly a list, tuple or set (the frame's own: its type guarded).
  if (value->source >= 0)
    tracer.guardBuilder.guardObject(Guard::Kind::TypeIs, value->source,
                                    reinterpret_cast<PyObject *>(type));
  int result = PyObject_IsSubclass(reinterpret_cast<PyObject *>(type), classes);
  if (result < 0) {
    PyErr_Clear();
    tracer.unsupported("isinstance raised");
  }
  return tracer.constant(result ? Py_True : Py_False);
}

VarPtr SequenceValues::contains(const VarPtr &container, const VarPtr &item) {
  if (!container->isSet)
    return ValueHandler::contains(container, item);
  for (const VarPtr &member : container->items)
    if (tracer.sameSetMember(member, item))
      return tracer.constant(Py_True);
  return tracer.constant(Py_False);
}

int SequenceValues::callable(const VarPtr &) { return 0; }

OutputSpec SequenceValues::output(const VarPtr &value,
                                  const ItemSpec &itemSpec) {
  if (value->source >= 0 && (value->isList || value->isSet))
    return sourceSpec(value->source); // the caller's own list or set
  if (value->isSet)
    tracer.unsupported("returning a set made during capture");
  return containerSpec(tracer, value, itemSpec);
}

OutputSpec SequenceValues::liveState(const VarPtr &value,
                                     const ItemSpec &itemSpec) {
  if (value->source >= 0) // the frame's own list or tuple, identity kept
    return sourceSpec(value->source);
  if (value->isSet)
    throw CannotResume{"a set made during capture is live"};
  return containerSpec(tracer, value, itemSpec);
}

namespace {

/// The class in cls's MRO that collections.namedtuple made (bases: tuple
/// only, `_fields` in its own dict), or null.
PyObject *namedTupleBase(PyTypeObject *cls) {
  PyObject *mro = cls->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    auto *type = reinterpret_cast<PyTypeObject *>(PyTuple_GET_ITEM(mro, i));
    PyObject *fields = PyDict_GetItemString(type->tp_dict, "_fields");
    if (fields && PyTuple_CheckExact(fields) &&
        type->tp_base == &PyTuple_Type && PyTuple_GET_SIZE(type->tp_bases) == 1)
      return reinterpret_cast<PyObject *>(type);
  }
  return nullptr;
}

} // namespace

VarPtr SequenceValues::constructNamedTuple(const VarPtr &classVar,
                                           const std::vector<VarPtr> &args,
                                           const Keywords &keywords) {
  PyObject *object = classVar->object.get();
  if (!object || !PyType_Check(object) || classVar->source < 0)
    return nullptr;
  auto *cls = reinterpret_cast<PyTypeObject *>(object);
  PyObject *base =
      cls->tp_flags & Py_TPFLAGS_TUPLE_SUBCLASS ? namedTupleBase(cls) : nullptr;
  if (!base || Py_TYPE(object)->tp_call != PyType_Type.tp_call)
    return nullptr;
  // The generated __new__ (a subclass may not override it) and no __init__
  // of its own: the instance is exactly its fields.
  PyRef newName = PyRef::steal(PyUnicode_InternFromString("__new__"));
  PyRef initName = PyRef::steal(PyUnicode_InternFromString("__init__"));
  PyObject *baseDict = reinterpret_cast<PyTypeObject *>(base)->tp_dict;
  if (lookupInClass(object, nullptr, newName.get()) !=
          PyDict_GetItem(baseDict, newName.get()) ||
      lookupInClass(object, nullptr, initName.get()) !=
          lookupInClass(reinterpret_cast<PyObject *>(&PyBaseObject_Type),
                        nullptr, initName.get()))
    return nullptr;
  PyObject *fields = PyDict_GetItemString(baseDict, "_fields");
  PyObject *defaults = PyDict_GetItemString(baseDict, "_field_defaults");
  Py_ssize_t count = PyTuple_GET_SIZE(fields);
  if (Py_ssize_t(args.size()) > count)
    tracer.unsupported(std::string(cls->tp_name) + "() with too many "
                                                   "arguments (TypeError)");
  VarPtr made = makeVar(Var::Kind::Tuple);
  made->object = PyRef::borrow(object);
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject *field = PyTuple_GET_ITEM(fields, i);
    std::string name = PyUnicode_AsUTF8(field);
    VarPtr value = size_t(i) < args.size() ? args[size_t(i)] : nullptr;
    auto keyword = keywords.find(name);
    if (keyword != keywords.end()) {
      if (value)
        tracer.unsupported(std::string(cls->tp_name) + "() got field '" + name +
                           "' twice (TypeError)");
      value = keyword->second;
    }
    PyObject *fallback = defaults && PyDict_Check(defaults)
                             ? PyDict_GetItem(defaults, field)
                             : nullptr;
    if (!value && fallback && !isConstantObject(fallback))
      tracer.unsupported(std::string(cls->tp_name) + "'s default for '" + name +
                         "' is not a constant");
    if (!value && fallback)
      value = tracer.constant(fallback);
    if (!value)
      tracer.unsupported(std::string(cls->tp_name) + "() missing field '" +
                         name + "' (TypeError)");
    made->keys.push_back(name);
    made->items.push_back(value);
  }
  for (const auto &[name, value] : keywords)
    if (std::find(made->keys.begin(), made->keys.end(), name) ==
        made->keys.end())
      tracer.unsupported(std::string(cls->tp_name) +
                         "() got an unexpected "
                         "field '" +
                         name + "' (TypeError)");
  return made;
}

OutputSpec SequenceValues::containerSpec(BytecodeTracer &tracer,
                                         const VarPtr &container,
                                         const ItemSpec &itemSpec) {
  const Var &var = *container;
  bool dict = var.kind == Var::Kind::Dict;
  OutputSpec spec;
  if (var.source < 0 && (dict || var.isList) &&
      tracer.seenInThisOutput(container, spec))
    return spec;
  spec.kind = dict         ? OutputSpec::Kind::Dict
              : var.isList ? OutputSpec::Kind::List
                           : OutputSpec::Kind::Tuple;
  if (dict)
    spec.keys = var.keys;
  else if (!var.isList && var.object) {
    // A named tuple: rebuilt through its class's _make, decided here once
    // (a struct sequence has none and is called with the tuple).
    spec.constant =
        PyRef::steal(PyObject_GetAttrString(var.object.get(), "_make"));
    if (!spec.constant) {
      PyErr_Clear();
      spec.constant = var.object;
    }
  }
  for (const VarPtr &item : var.items)
    spec.items.push_back(itemSpec(item));
  return spec;
}

IteratorValues::IteratorValues(BytecodeTracer &tracer)
    : ValueHandler(tracer, "an iterator") {}

std::vector<VarPtr> IteratorValues::items(const VarPtr &value) {
  return std::vector<VarPtr>(value->items.begin() + long(value->position),
                             value->items.end());
}

VarPtr IteratorValues::iterate(const VarPtr &value) { return value; }

VarPtr IteratorValues::subscript(const VarPtr &, const VarPtr &) {
  refuse("subscript of"); // TypeError in Python
}

bool IteratorValues::truth(const VarPtr &) { return true; }

int IteratorValues::callable(const VarPtr &) { return 0; }

OutputSpec IteratorValues::liveState(const VarPtr &, const ItemSpec &) {
  throw CannotResume{"an iterator is live (a break inside a loop)"};
}

} // namespace capture
} // namespace dynafuse

//===- TracerModules.cpp - nn.Module containers read through guards -------===//
//
// Iteration over and indexing of nn.Sequential, nn.ModuleList,
// nn.ModuleDict, ParameterList/ParameterDict, and module tree walks, all
// read through guarded _modules dicts.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

namespace dynafuse {
namespace capture {

VarPtr BytecodeTracer::iterateModules(const VarPtr &container,
                                      VarPtr iterator) {
  const char *type = Py_TYPE(container->object.get())->tp_name;
  bool dict = isInstanceOf(container->object.get(), "ModuleDict");
  if (!dict && !isInstanceOf(container->object.get(), "Sequential") &&
      !isInstanceOf(container->object.get(), "ModuleList"))
    unsupported(std::string("iteration over a ") + type);
  VarPtr children = modulesOf(container);
  for (size_t i = 0; i < children->items.size(); ++i) {
    // A ModuleDict iterates over its keys, the others over their modules.
    PyRef key = PyRef::steal(PyUnicode_FromString(children->keys[i].c_str()));
    iterator->items.push_back(dict ? constant(key.get()) : children->items[i]);
  }
  return iterator;
}

VarPtr BytecodeTracer::walkModules(PyObject *method, const VarPtr &self,
                                   size_t argCount) {
  static const char *names[] = {"modules", "named_modules", "children",
                                "named_children"};
  int which = -1;
  for (int i = 0; i < 4; ++i) {
    PyRef candidate =
        PyRef::steal(PyObject_GetAttrString(moduleClass(), names[i]));
    if (!candidate)
      PyErr_Clear();
    else if (candidate.get() == method)
      which = i;
  }
  if (which < 0 || argCount != 1 || self->kind != Var::Kind::Object ||
      !isModule(self->object.get()))
    return nullptr;
  bool named = which % 2 == 1, recurse = which < 2;
  VarPtr iterator = makeVar(Var::Kind::Iterator);
  std::vector<std::pair<PyObject *, int>> visited;
  if (recurse) {
    visited.emplace_back(self->object.get(), sourceOfObject(self));
    iterator->items.push_back(named ? pairVar("", self) : self);
  }
  collectSubmodules(self, "", named, recurse, visited, iterator->items);
  // The walk visits each module once: the modules it visited must stay
  // distinct objects (a shared one is guarded as shared where it was met).
  if (visited.size() > 1) {
    Guard distinct;
    distinct.kind = Guard::Kind::Distinct;
    distinct.source = visited[0].second;
    for (size_t i = 1; i < visited.size(); ++i)
      distinct.group.push_back(visited[i].second);
    guardBuilder.addGuard(std::move(distinct));
  }
  return iterator;
}

VarPtr BytecodeTracer::pairVar(const std::string &name, const VarPtr &module) {
  VarPtr pair = makeVar(Var::Kind::Tuple);
  PyRef text = PyRef::steal(PyUnicode_FromString(name.c_str()));
  pair->items = {constant(text.get()), module};
  return pair;
}

VarPtr BytecodeTracer::modulesOf(const VarPtr &module) {
  PyRef key = PyRef::steal(PyUnicode_InternFromString("_modules"));
  PyRef dict = PyRef::steal(PyObject_GetAttr(module->object.get(), key.get()));
  if (!dict || !PyDict_CheckExact(dict.get())) {
    PyErr_Clear();
    unsupported("module without a _modules dict");
  }
  VarPtr children = dictOfSource(
      dict.get(), guardBuilder.namedSource(Source::Kind::Attr,
                                           sourceOfObject(module), key.get()));
  if (!children)
    unsupported("module whose _modules has keys that are not strings");
  return children;
}

void BytecodeTracer::collectSubmodules(
    const VarPtr &module, const std::string &prefix, bool named, bool recurse,
    std::vector<std::pair<PyObject *, int>> &visited,
    std::vector<VarPtr> &out) {
  VarPtr children = modulesOf(module);
  for (size_t i = 0; i < children->items.size(); ++i) {
    const VarPtr &child = children->items[i];
    if (child->kind == Var::Kind::Constant) // None
      continue;
    if (child->kind != Var::Kind::Object || !isModule(child->object.get()))
      unsupported("a _modules entry that is not a module");
    auto first = std::find_if(
        visited.begin(), visited.end(),
        [&](const auto &seen) { return seen.first == child->object.get(); });
    if (first != visited.end()) {
      // A submodule shared by two parents is visited once: guard that the
      // two entries stay one object.
      guardBuilder.guardRelation(Guard::Kind::SameObject,
                                 sourceOfObject(child), first->second);
      continue;
    }
    visited.emplace_back(child->object.get(), sourceOfObject(child));
    std::string name = prefix + (prefix.empty() ? "" : ".") + children->keys[i];
    out.push_back(named ? pairVar(recurse ? name : children->keys[i], child)
                        : child);
    if (recurse)
      collectSubmodules(child, name, named, recurse, visited, out);
  }
}

VarPtr BytecodeTracer::moduleItem(const VarPtr &container,
                                  const VarPtr &index) {
  PyObject *object = container->object.get();
  if (isInstanceOf(object, "ParameterList") ||
      isInstanceOf(object, "ParameterDict"))
    return parameterItem(container, index);
  bool dict = isInstanceOf(object, "ModuleDict");
  if (!dict && !isInstanceOf(object, "ModuleList") &&
      !isInstanceOf(object, "Sequential"))
    unsupported(std::string("indexing a ") + Py_TYPE(object)->tp_name);
  if (index->kind != Var::Kind::Constant)
    unsupported("module container index not known at capture");
  VarPtr children = modulesOf(container);
  PyObject *wanted = index->object.get();
  if (dict && PyUnicode_Check(wanted)) {
    std::string name = PyUnicode_AsUTF8(wanted);
    for (size_t i = 0; i < children->keys.size(); ++i)
      if (children->keys[i] == name)
        return children->items[i];
    unsupported("ModuleDict has no key '" + name + "'");
  }
  if (!dict && PySlice_Check(wanted)) {
    // layers[:n]: eager makes a new ModuleList of those children; capture
    // iterates them as a sequence of the guarded children.
    VarPtr sequence = makeVar(Var::Kind::Tuple);
    sequence->items = children->items;
    return subscript(sequence, index);
  }
  if (dict || !PyLong_CheckExact(wanted))
    unsupported("module container index of the wrong type");
  long position = PyLong_AsLong(wanted);
  long count = long(children->items.size());
  if (position < 0)
    position += count;
  if (position < 0 || position >= count)
    unsupported("module container index out of range");
  return children->items[size_t(position)];
}

VarPtr BytecodeTracer::parameterItem(const VarPtr &container,
                                     const VarPtr &index) {
  // ParameterList holds its entries as attributes "0", "1", ...;
  // ParameterDict under their keys: read them as attributes (guarded).
  if (index->kind != Var::Kind::Constant)
    unsupported("parameter container index not known at capture");
  PyObject *wanted = index->object.get();
  PyRef name;
  if (PyUnicode_Check(wanted)) {
    name = PyRef::borrow(wanted);
  } else if (PyLong_CheckExact(wanted)) {
    Py_ssize_t length = PyObject_Length(container->object.get());
    long position = PyLong_AsLong(wanted);
    if (position < 0)
      position += long(length);
    if (length < 0 || position < 0 || position >= long(length)) {
      PyErr_Clear();
      unsupported("parameter container index out of range");
    }
    // The position depends on the length: guard _parameters' size.
    PyRef key = PyRef::steal(PyUnicode_InternFromString("_parameters"));
    PyRef parameters =
        PyRef::steal(PyObject_GetAttr(container->object.get(), key.get()));
    if (!parameters || !PyDict_Check(parameters.get())) {
      PyErr_Clear();
      unsupported("ParameterList without _parameters");
    }
    Guard size;
    size.kind = Guard::Kind::DictLength;
    size.source = guardBuilder.namedSource(
        Source::Kind::Attr, sourceOfObject(container), key.get());
    size.length = size_t(PyDict_Size(parameters.get()));
    guardBuilder.addGuard(std::move(size));
    name = PyRef::steal(PyUnicode_FromFormat("%ld", position));
  } else {
    unsupported("parameter container index of the wrong type");
  }
  return loadAttr(container, name.get());
}

} // namespace capture
} // namespace dynafuse

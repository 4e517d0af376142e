//===- ObjectSources.cpp - Python objects pinned by type or identity ------===//
#include "ObjectSources.h"

#include <vector>

namespace dynafuse {
namespace capture {

bool isPlainInstance(PyObject *object) {
  PyTypeObject *type = Py_TYPE(object);
  if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || PyType_Check(object) ||
      type->tp_getattro != PyObject_GenericGetAttr ||
      type->tp_setattro != PyObject_GenericSetAttr ||
      !_PyObject_GetDictPtr(object) || PyDict_Check(object) ||
      PyList_Check(object) || PyTuple_Check(object) || PyAnySet_Check(object) ||
      PyExceptionInstance_Check(object) || PyFunction_Check(object) ||
      PyMethod_Check(object) || PyModule_Check(object))
    return false;
  // Enum members are singletons compared by identity.
  static PyObject *enumSlot = nullptr;
  PyObject *enumType = lookupOnce(enumSlot, "enum", "Enum");
  if (!enumType)
    return false;
  int isEnum = PyObject_IsInstance(object, enumType);
  if (isEnum != 0) {
    PyErr_Clear();
    return false;
  }
  return true;
}

bool ObjectSources::fromArgument(int source, bool plainOwners) const {
  for (int at = source; at >= 0;) {
    const Source &step = guards.source(at);
    switch (step.kind) {
    case Source::Kind::Local:
      return true;
    case Source::Kind::Attr:
      if (plainOwners) {
        bool plainOwner = false;
        for (const auto &entry : seen)
          plainOwner |=
              entry.second.byType && entry.second.source == step.parent;
        if (!plainOwner)
          return false;
      }
      at = step.parent;
      break;
    case Source::Kind::Item:
    case Source::Kind::DictItem:
      at = step.parent;
      break;
    default:
      return false;
    }
  }
  return false;
}

void ObjectSources::guard(PyObject *object, int source) {
  auto found = seen.find(object);
  if (found != seen.end()) {
    // Identity pinned it already, or it is guarded by type at the first
    // source: the same object here.
    if (found->second.byType && found->second.source != source)
      guards.guardRelation(Guard::Kind::SameObject, source,
                           found->second.source);
    else if (!found->second.byType)
      guards.guardObject(Guard::Kind::Identity, source, object);
    return;
  }
  Seen entry{PyRef::borrow(object), source, false};
  entry.byType = fromArgument(source) && isPlainInstance(object);
  guards.guardObject(
      entry.byType ? Guard::Kind::TypeIs : Guard::Kind::Identity, source,
      entry.byType ? reinterpret_cast<PyObject *>(Py_TYPE(object)) : object);
  seen.emplace(object, std::move(entry));
}

bool ObjectSources::holdsCallData(int source) const {
  return fromArgument(source, /*plainOwners=*/true);
}

int ObjectSources::typeGuardedSource(PyObject *object) const {
  auto found = seen.find(object);
  return found != seen.end() && found->second.byType ? found->second.source
                                                     : -1;
}

void ObjectSources::pinStoreTarget(PyObject *owner, int ownerSource) {
  storeTargets.insert(owner);
  if (byType(owner))
    return;
  guards.guardObject(Guard::Kind::Identity, ownerSource, owner);
  seen.emplace(owner, Seen{PyRef::borrow(owner), ownerSource, false});
}

void ObjectSources::guardStoreTargets() {
  // One guard per type: every object of a type a store targets is distinct
  // from every other (a cache's layers, all stored into, cost one sort per
  // run rather than a guard per layer).
  std::map<PyTypeObject *, std::vector<const Seen *>> byTypeOfTarget;
  for (PyObject *target : storeTargets)
    byTypeOfTarget.emplace(Py_TYPE(target), std::vector<const Seen *>());
  for (const auto &[object, entry] : seen) {
    auto group = byTypeOfTarget.find(Py_TYPE(object));
    if (group != byTypeOfTarget.end())
      group->second.push_back(&entry);
  }
  for (const auto &[type, members] : byTypeOfTarget) {
    bool anyByType = false;
    for (const Seen *member : members)
      anyByType |= member->byType;
    if (members.size() < 2 || !anyByType)
      continue;
    Guard distinct;
    distinct.kind = Guard::Kind::Distinct;
    distinct.source = members[0]->source;
    for (size_t i = 1; i < members.size(); ++i)
      distinct.group.push_back(members[i]->source);
    guards.addGuard(std::move(distinct));
  }
}

} // namespace capture
} // namespace dynafuse

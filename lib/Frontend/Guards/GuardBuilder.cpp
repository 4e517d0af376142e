//===- GuardBuilder.cpp - Sources and guards of one capture ---------------===//
#include "GuardBuilder.h"

namespace dynafuse {
namespace capture {

int GuardBuilder::addSource(Source source) {
  std::string key =
      std::to_string(int(source.kind)) + ":" + std::to_string(source.parent) +
      ":" + std::to_string(source.index) + ":" +
      (source.name ? keyText(source.name.get(), false) : "") +
      // SuperAttr / ClassEntry: the class the lookup starts
      // after is part of what is read.
      ":" + std::to_string(reinterpret_cast<uintptr_t>(source.fixed.get()));
  auto found = sourceIds.find(key);
  if (found != sourceIds.end())
    return found->second;
  sources.push_back(std::move(source));
  int id = int(sources.size()) - 1;
  sourceIds[key] = id;
  return id;
}

void GuardBuilder::addGuard(Guard guard) {
  for (const Guard &existing : guardList)
    if (existing.kind == guard.kind && existing.source == guard.source &&
        existing.other == guard.other &&
        existing.expected.get() == guard.expected.get() &&
        existing.length == guard.length && existing.group == guard.group &&
        guard.kind != Guard::Kind::Tensor && guard.kind != Guard::Kind::Shape &&
        guard.kind != Guard::Kind::IntSymbol)
      return;
  guardList.push_back(std::move(guard));
}

void GuardBuilder::guardObject(Guard::Kind kind, int source,
                               PyObject *expected) {
  Guard guard;
  guard.kind = kind;
  guard.source = source;
  guard.expected = PyRef::borrow(expected);
  if (kind == Guard::Kind::Identity &&
      PyType_SUPPORTS_WEAKREFS(Py_TYPE(expected))) {
    // The entry must not keep alive what a caller makes for one call.
    PyRef ref = PyRef::steal(PyWeakref_NewRef(expected, nullptr));
    if (ref) {
      guard.expected = std::move(ref);
      guard.weak = true;
    } else {
      PyErr_Clear();
    }
  }
  addGuard(std::move(guard));
}

void GuardBuilder::guardRelation(Guard::Kind kind, int source, int other) {
  Guard guard;
  guard.kind = kind;
  guard.source = source;
  guard.other = other;
  addGuard(std::move(guard));
}

int GuardBuilder::namedSource(Source::Kind kind, int parent, PyObject *name) {
  Source source;
  source.kind = kind;
  source.parent = parent;
  source.name = PyRef::borrow(name);
  return addSource(std::move(source));
}

int GuardBuilder::indexedSource(Source::Kind kind, int parent, int index) {
  Source source;
  source.kind = kind;
  source.parent = parent;
  source.index = index;
  return addSource(std::move(source));
}

void GuardBuilder::moveInto(std::vector<Source> &sourcesOut,
                            std::vector<Guard> &guardsOut) {
  sourcesOut = std::move(sources);
  guardsOut = std::move(guardList);
  sources.clear();
  guardList.clear();
  sourceIds.clear();
}

} // namespace capture
} // namespace dynafuse

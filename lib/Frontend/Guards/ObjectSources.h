//===- ObjectSources.h - Objects pinned by type or identity -----*- C++ -*-===//
//
// How a capture guards the Python objects it reads from sources (other than
// tensors, constants, containers and modules, which have guards of their
// own). A plain instance (an object of a Python class with an instance dict
// and Python's attribute lookup) that reaches the frame through its
// arguments is guarded by its type, as torch.compile guards it: everything
// capture reads from it goes through attribute sources with guards of their
// own, so a cache or a config made afresh for every call (transformers'
// DynamicCache, new in each `generate`) meets the entry compiled for the one
// before. Other objects are pinned by identity. What identity gave for free
// becomes guards: an object met again through another source is guarded to
// be the same object there, and an object capture stores into is guarded to
// be distinct from every other object of its type the capture read (eager
// would see the store through both).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_OBJECTSOURCES_H
#define DYNAFUSE_CAPTURE_OBJECTSOURCES_H

#include "GuardBuilder.h"

#include <map>
#include <set>

namespace dynafuse {
namespace capture {

class ObjectSources {
public:
  explicit ObjectSources(GuardBuilder &guards) : guards(guards) {}
  /// Guards object, read from source, by type or identity.
  void guard(PyObject *object, int source);
  /// Whether object (read from a source) is guarded by its type only.
  bool byType(PyObject *object) const { return typeGuardedSource(object) >= 0; }
  /// The source an object guarded by type only was first read from (each
  /// run's object is the one there), or -1.
  int typeGuardedSource(PyObject *object) const;
  /// Capture will store into owner (read from ownerSource): pinned by
  /// identity unless guarded by type, then kept for guardStoreTargets.
  void pinStoreTarget(PyObject *owner, int ownerSource);
  /// At the end of a capture: the objects of each type a store targets are
  /// guarded pairwise distinct, where any of them is guarded by type only.
  void guardStoreTargets();
  /// Whether a value read from source belongs to the call rather than to
  /// the program: source is an argument, reached from one through items
  /// and attributes of plain instances guarded by type (not of modules, or
  /// of objects pinned by identity).
  bool holdsCallData(int source) const;

private:
  struct Seen {
    PyRef object;
    int source = -1;
    bool byType = false;
  };
  /// Whether source is one of the frame's arguments or reached from one
  /// through attributes (with plainOwners, only of plain instances guarded
  /// by type) and items.
  bool fromArgument(int source, bool plainOwners = false) const;
  GuardBuilder &guards;
  std::map<PyObject *, Seen> seen;
  std::set<PyObject *> storeTargets;
};

/// An instance of a Python class whose attributes live in its instance
/// dict and are read with Python's generic lookup: not a module, class,
/// function, container, enum member or exception.
bool isPlainInstance(PyObject *object);

} // namespace capture
} // namespace dynafuse

#endif

//===- PyRef.h - An owning reference to a Python object ---------*- C++ -*-===//
#ifndef DYNAFUSE_SUPPORT_PYREF_H
#define DYNAFUSE_SUPPORT_PYREF_H

#include <Python.h>

#include <utility>

namespace dynafuse {

/// Owns one strong reference (or none).
class PyRef {
public:
  PyRef() = default;
  static PyRef steal(PyObject *object) { return PyRef(object); }
  static PyRef borrow(PyObject *object) {
    Py_XINCREF(object);
    return PyRef(object);
  }
  PyRef(const PyRef &other) : object(other.object) { Py_XINCREF(object); }
  PyRef(PyRef &&other) noexcept
      : object(std::exchange(other.object, nullptr)) {}
  PyRef &operator=(PyRef other) {
    std::swap(object, other.object);
    return *this;
  }
  ~PyRef() { Py_XDECREF(object); }

  PyObject *get() const { return object; }
  PyObject *release() { return std::exchange(object, nullptr); }
  explicit operator bool() const { return object != nullptr; }

private:
  explicit PyRef(PyObject *object) : object(object) {}
  PyObject *object = nullptr;
};

/// module.name (or the module itself for a null name), looked up once into
/// `slot` and kept for the process. Not a C++ static initializer: those
/// hold a lock while the import runs, an import can release the GIL, and a
/// thread holding the GIL while waiting for that lock deadlocks. The GIL
/// guards the slot instead (two threads may both look it up; either result
/// is the same object). Null, with no Python error, when missing.
inline PyObject *lookupOnce(PyObject *&slot, const char *module,
                            const char *name) {
  if (slot)
    return slot;
  PyObject *found = PyImport_ImportModule(module);
  if (found && name) {
    PyObject *attribute = PyObject_GetAttrString(found, name);
    Py_DECREF(found);
    found = attribute;
  }
  if (!found)
    PyErr_Clear();
  if (!slot)
    slot = found;
  else
    Py_XDECREF(found);
  return slot;
}

} // namespace dynafuse

#endif

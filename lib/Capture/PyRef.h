//===- PyRef.h - An owning reference to a Python object ---------*- C++ -*-===//
#ifndef DYNAFUSE_CAPTURE_PYREF_H
#define DYNAFUSE_CAPTURE_PYREF_H

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

} // namespace dynafuse

#endif

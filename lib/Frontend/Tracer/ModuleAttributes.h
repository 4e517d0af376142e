//===- ModuleAttributes.h - nn.Module attributes read in C ------*- C++ -*-===//
//
// Guards resolve thousands of attribute chains per call through a model's
// modules (googlenet: 3,573 guards); each `module.child` or
// `module.weight` misses the generic lookup, which formats and clears an
// AttributeError before calling nn.Module.__getattr__, a Python function.
// For modules whose class keeps torch's lookup, this reads the same
// places in the same order (a class attribute or descriptor defers to the
// full lookup; then the instance dict; then _parameters, _buffers,
// _modules) in C.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_MODULEATTRIBUTES_H
#define DYNAFUSE_CAPTURE_MODULEATTRIBUTES_H

#include "dynafuse/Support/PyRef.h"

#include <Python.h>

namespace dynafuse {

/// getattr(object, name) (a new reference; null with a Python error set
/// when there is none), taking the C path for nn.Module instances whose
/// class overrides neither __getattr__ nor __getattribute__.
PyRef getAttribute(PyObject *object, PyObject *name);

} // namespace dynafuse

#endif

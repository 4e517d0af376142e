//===- PythonObjects.h - Python class instances on the trace ---*- C++ -*-===//
//
// The tracer's handler for Python objects (as Dynamo's
// UserDefinedObjectVariable): NewObject vars made by calling a plain Python
// class during capture, their attributes, items, length, truth and output
// spec, and the class machinery (MRO entries, properties, the builtin slots
// of object and dict) that objects read from sources share. It works on the
// tracer it belongs to (values, guards, inlined calls).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_FRONTEND_PYTHONOBJECTS_H
#define DYNAFUSE_FRONTEND_PYTHONOBJECTS_H

#include "Entry/CapturedFrame.h"
#include "Var.h"

#include <Python.h>

#include <functional>
#include <string>
#include <vector>

namespace dynafuse {
namespace capture {

class BytecodeTracer;

class PythonObjects {
public:
  explicit PythonObjects(BytecodeTracer &tracer);

  /// cls(...) of a plain Python class (laid out as object, dict or
  /// OrderedDict, default __new__ and __getattribute__): a NewObject var,
  /// its __init__ inlined. Null for other classes.
  VarPtr construct(const VarPtr &classVar, const std::vector<VarPtr> &args,
                   const Keywords &keywords);
  /// The raw entry for name in the class's MRO (past `after`), read through
  /// a guarded ClassEntry source; null when there is none.
  VarPtr classEntry(const VarPtr &classVar, PyObject *name,
                    PyObject *after = nullptr);
  /// The class's own Python function `name`, bound to object; or null.
  VarPtr pythonMethodOf(const VarPtr &object, const char *name);
  /// A builtin method of the object's base (object.__setattr__,
  /// dict.__setitem__, ...), modelled on its state: called by callSlot.
  VarPtr slotMethod(const VarPtr &object, const std::string &name);
  VarPtr callSlot(const std::string &slot, const std::vector<VarPtr> &args,
                  const Keywords &keywords);
  /// A property's getter (a Python function) inlined on self.
  VarPtr readProperty(const VarPtr &property, const VarPtr &self,
                      const std::string &attribute);
  /// A NewObject var's attribute, whether it has one, and a store into it
  /// (direct: object.__setattr__, past a Python __setattr__ of the class).
  VarPtr attribute(const VarPtr &object, PyObject *name);
  bool has(const VarPtr &object, PyObject *name);
  void setAttribute(const VarPtr &object, PyObject *name, const VarPtr &value,
                    bool direct);
  /// object[key], object[key] = value, len(object), bool(object).
  VarPtr item(const VarPtr &object, const VarPtr &key);
  void setItem(const VarPtr &object, const VarPtr &key, const VarPtr &value);
  VarPtr length(const VarPtr &object);
  bool truth(const VarPtr &object);
  /// Iterating an object whose class has __getitem__ but no __iter__:
  /// __getitem__(0), (1), ... up to its IndexError.
  VarPtr iterateBySubscript(const VarPtr &object, VarPtr iterator);
  /// The object in an output: its class and state, each item's by
  /// itemSpec (spelled out once per output, then referred to by id).
  OutputSpec spec(const VarPtr &var,
                  const std::function<OutputSpec(const VarPtr &)> &itemSpec);

private:
  BytecodeTracer &tracer;
};

} // namespace capture
} // namespace dynafuse

#endif

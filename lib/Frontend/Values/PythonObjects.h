//===- PythonObjects.h - Python class instances on the trace ---*- C++ -*-===//
//
// The tracer's handler for Python objects (as Dynamo's
// UserDefinedObjectVariable): NewObject vars made by calling a plain Python
// class during capture (their ValueHandler: items, iteration, length,
// truth, `in`, output and live state), their attributes, and the class
// machinery (MRO entries, properties, the builtin slots
// of object and dict) that objects read from sources share. It works on the
// tracer it belongs to (values, guards, inlined calls).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_FRONTEND_PYTHONOBJECTS_H
#define DYNAFUSE_FRONTEND_PYTHONOBJECTS_H

#include "Entry/CapturedFrame.h"
#include "Tracer/Var.h"
#include "ValueHandler.h"

#include <Python.h>

#include <functional>
#include <string>
#include <vector>

namespace dynafuse {
namespace capture {

class BytecodeTracer;

class PythonObjects : public ValueHandler {
public:
  explicit PythonObjects(BytecodeTracer &tracer);

  /// cls(...) of a plain Python class (laid out as object, dict or
  /// OrderedDict, default __new__, the default __getattribute__ or a
  /// Python one): a NewObject var, its __init__ inlined. Null for other
  /// classes.
  VarPtr construct(const VarPtr &classVar, const std::vector<VarPtr> &args,
                   const Keywords &keywords);
  /// torch.nn's own layer made in forward from constants (nn.Softmax(dim=-1)
  /// (x), nn.ConstantPad1d(pads, 0)): built at capture and, when it holds
  /// no parameters, buffers or submodules, one fixed object that every run
  /// uses (a stateless layer computes the same as a fresh one). Null else.
  VarPtr statelessLayer(const VarPtr &classVar, const std::vector<VarPtr> &args,
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
  /// `lhs <op> rhs` (kind: a BINARY_OP code) with an operand made during
  /// capture, as Python dispatches it: the left's __iop__ for an in-place
  /// form, its __op__, then the right's __rop__, each inlined, the next
  /// tried when one is missing or returns NotImplemented. Null when neither
  /// operand is such an object with such a Python method.
  VarPtr binaryOperator(int kind, const VarPtr &lhs, const VarPtr &rhs);
  /// `-object` through the class's Python __neg__; null without one.
  VarPtr negative(const VarPtr &object);
  /// A property's getter (a Python function) inlined on self.
  VarPtr readProperty(const VarPtr &property, const VarPtr &self,
                      const std::string &attribute);
  /// object.__new__(cls) of such a class laid out as object: a NewObject
  /// var with an empty instance dict, no __init__ run (copy's
  /// reconstruction). Null for other classes.
  VarPtr allocateBare(const VarPtr &classVar);
  /// A NewObject var's attribute (through the class's Python
  /// __getattribute__ when it has one; defaultAttribute is object's), whether
  /// it has one, and a store into it (direct: object.__setattr__, past a
  /// Python __setattr__ of the class). A missing attribute raises
  /// AttributeError in the trace (RaisedInCapture).
  VarPtr attribute(const VarPtr &object, PyObject *name) override;
  VarPtr defaultAttribute(const VarPtr &object, PyObject *name);
  /// `del object.name` (direct: object.__delattr__, past a Python
  /// __delattr__ of the class); a missing one raises AttributeError.
  void deleteAttribute(const VarPtr &object, PyObject *name, bool direct);
  bool has(const VarPtr &object, PyObject *name);
  void setAttribute(const VarPtr &object, PyObject *name, const VarPtr &value,
                    bool direct);
  /// The value protocol, through the class's own dunder methods inlined
  /// (__getitem__, __setitem__, __len__, __iter__, __contains__, __call__)
  /// or the builtin base's slots; iterating a class with __getitem__ but
  /// no __iter__ calls __getitem__(0), (1), ... up to its IndexError.
  std::vector<VarPtr> items(const VarPtr &object) override;
  VarPtr iterate(const VarPtr &object) override;
  VarPtr length(const VarPtr &object) override;
  VarPtr subscript(const VarPtr &object, const VarPtr &key) override;
  void storeSubscript(const VarPtr &object, const VarPtr &key,
                      const VarPtr &value) override;
  bool truth(const VarPtr &object) override;
  VarPtr contains(const VarPtr &object, const VarPtr &item) override;
  int callable(const VarPtr &object) override;
  /// Its class (pinned by the guard on the class it was made from).
  VarPtr type(const VarPtr &object) override;
  VarPtr isInstance(const VarPtr &object, PyObject *classes) override;
  /// The object's class and state, each item's by itemSpec (spelled out
  /// once per output, then referred to by id); live at a break alike.
  OutputSpec output(const VarPtr &object, const ItemSpec &itemSpec) override;
  OutputSpec liveState(const VarPtr &object, const ItemSpec &itemSpec) override;

private:
  /// cls(*args) of a module class, made at capture from constant arguments
  /// as a fixed object, when it has no parameters, buffers, submodules or
  /// tensor attributes; null otherwise.
  VarPtr layerMadeAtCapture(const VarPtr &classVar,
                            const std::vector<VarPtr> &args,
                            const Keywords &keywords);
  /// The NewObject var of a plain Python class (construct's checks), its
  /// instance dict empty; or null.
  VarPtr allocate(const VarPtr &classVar);
  /// Raises AttributeError in the trace for a NewObject's missing
  /// attribute (RaisedInCapture).
  [[noreturn]] void missingAttribute(const VarPtr &object,
                                     const std::string &attribute);
  VarPtr iterateBySubscript(const VarPtr &object, VarPtr iterator);
};

} // namespace capture
} // namespace dynafuse

#endif

//===- ValueHandler.h - What the bytecode asks of any value ----*- C++ -*-===//
//
// The bytecode applies the same operations to values of every kind: read
// their attributes, unpack and iterate them, len(), subscript and item
// stores, truth, `in`, type(), isinstance(), callable(), returning them,
// and handing them live to a resume function.
// Each kind of Var answers these in its handler (as the classes of Dynamo's
// variables/ answer them), and the tracer finds the handler by the value's
// kind (ValueHandlers::of) instead of switching on the kind at every
// operation. What a kind cannot do, its handler refuses, naming the kind.
// The handlers are declared in ValueHandlers.h and defined one file each.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_FRONTEND_VALUEHANDLER_H
#define DYNAFUSE_FRONTEND_VALUEHANDLER_H

#include "Entry/CapturedFrame.h"
#include "Tracer/Var.h"

#include <functional>
#include <string>
#include <vector>

namespace dynafuse {
namespace capture {

class BytecodeTracer;

/// How an output or a live state spells one item of a container.
using ItemSpec = std::function<OutputSpec(const VarPtr &)>;

/// Why a live value cannot be handed on to a resume function; caught where
/// the break is taken (TracerResume.cpp), which then refuses the break.
struct CannotResume {
  std::string why;
};

class ValueHandler {
public:
  /// description names the kind in refusals ("a closure cell").
  ValueHandler(BytecodeTracer &tracer, std::string description);
  virtual ~ValueHandler();

  /// value.name (LOAD_ATTR, and the method half of LOAD_METHOD).
  virtual VarPtr attribute(const VarPtr &value, PyObject *name);
  /// The items `a, b = value` and `*value` unpack into.
  virtual std::vector<VarPtr> items(const VarPtr &value);
  /// iter(value): an Iterator var, unrolled at capture.
  virtual VarPtr iterate(const VarPtr &value);
  /// len(value); null where the kind leaves len to the generic builtin
  /// paths (constants fold, tensors bind).
  virtual VarPtr length(const VarPtr &value);
  /// value[index], and value[index] = item.
  virtual VarPtr subscript(const VarPtr &value, const VarPtr &index);
  virtual void storeSubscript(const VarPtr &value, const VarPtr &index,
                              const VarPtr &item);
  /// bool(value) where a branch needs it.
  virtual bool truth(const VarPtr &value);
  /// `item in container`: a constant bool var, or what __contains__ gave.
  virtual VarPtr contains(const VarPtr &container, const VarPtr &item);
  /// type(value): a var of its class (guarded where it could vary), or
  /// null where not known here.
  virtual VarPtr type(const VarPtr &value);
  /// isinstance(value, classes): a constant bool var, or null where not
  /// judged here.
  virtual VarPtr isInstance(const VarPtr &value, PyObject *classes);
  /// value(*args, **keywords) where the kind itself knows how (a
  /// functools.partial); null leaves the call to the generic call paths
  /// (op table, builtins, inlining).
  virtual VarPtr call(const VarPtr &value, const std::vector<VarPtr> &args,
                      const Keywords &keywords);
  /// callable(value): 1 or 0, or -1 where not judged here.
  virtual int callable(const VarPtr &value);
  /// The value in the frame's return value.
  virtual OutputSpec output(const VarPtr &value, const ItemSpec &itemSpec);
  /// The value live on the stack or in a local at a graph break, as the
  /// resume function receives it; throws CannotResume where it cannot be.
  virtual OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec);

protected:
  [[noreturn]] void refuse(const std::string &operation) const;
  /// The tracer's refusal with `why` as it stands (for handlers that are
  /// not the tracer's friends).
  [[noreturn]] void refuseBecause(const std::string &why) const;
  /// value[index] of a sequence: a slice of its items, or the item at a
  /// constant integer index.
  VarPtr itemAt(const VarPtr &value, const VarPtr &index);
  /// `item in` a sequence of values known at capture, by equality.
  VarPtr containsByEquality(const std::vector<VarPtr> &candidates,
                            const VarPtr &item);
  OutputSpec constantSpec(const VarPtr &value) const;
  /// The object at `source` itself (a list or dict the caller passed in:
  /// stores into it are repeated by the run, and identity is kept).
  static OutputSpec sourceSpec(int source);
  /// isinstance of an instance of the class `cls` known at capture.
  VarPtr classIsInstance(PyObject *cls, PyObject *classes);
  /// A class known for this entry, as a var (attributes read through it).
  VarPtr classVar(PyObject *type);
  /// isinstance of a value whose concrete type may be any subclass of base
  /// (a list var may stand for any list): answered only where it holds for
  /// every subclass: true when base is a subclass of classes, false when
  /// each class derives from a builtin whose layout no subclass of base can
  /// share (or is a tensor class); otherwise null.
  VarPtr builtinIsInstance(PyTypeObject *base, PyObject *classes);
  /// isinstance(object, classes) of an object fixed for this entry.
  VarPtr objectIsInstance(PyObject *object, PyObject *classes);
  /// list.append, dict.items, ...: a builtin method of a container var,
  /// bound to it (called by name: TracerCalls.cpp).
  VarPtr containerMethod(const VarPtr &container, const std::string &method);
  /// object.name bound, for a method of the object's class; or null.
  VarPtr ownMethod(const VarPtr &object, const char *name);

  BytecodeTracer &tracer;
  std::string description;
};

} // namespace capture
} // namespace dynafuse

#endif

//===- ValueHandlers.h - The handler of each kind of value -----*- C++ -*-===//
//
// One ValueHandler per kind of Var, each defined in its own file:
//   Tensor                      TensorValues.cpp
//   Constant                    ConstantValues.cpp
//   Object                      ObjectValues.cpp (guarded objects, modules)
//   Tuple (tuples, lists, sets) SequenceValues.cpp
//   Iterator                    SequenceValues.cpp
//   Dict                        DictValues.cpp
//   NewObject                   PythonObjects.cpp
//   SymInt                      SizeValues.cpp
//   Function, TensorMethod,
//   BoundMethod                 CallableValues.cpp
//   Null, Cell, SymSlice        the base handler (ValueHandler.cpp)
// ValueHandlers owns them and maps a kind to its handler.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_FRONTEND_VALUEHANDLERS_H
#define DYNAFUSE_FRONTEND_VALUEHANDLERS_H

#include "ValueHandler.h"

#include <array>
#include <memory>

namespace dynafuse {
namespace capture {

class PythonObjects;

class TensorValues : public ValueHandler {
public:
  explicit TensorValues(BytecodeTracer &tracer);
  /// Unpacking and iteration go over the first dim (unbind(0)), whose size
  /// must be static.
  std::vector<VarPtr> items(const VarPtr &value) override;
  VarPtr iterate(const VarPtr &value) override;
  VarPtr type(const VarPtr &value) override;
  VarPtr isInstance(const VarPtr &value, PyObject *classes) override;
  VarPtr attribute(const VarPtr &value, PyObject *name) override;
  VarPtr subscript(const VarPtr &value, const VarPtr &index) override;
  void storeSubscript(const VarPtr &value, const VarPtr &index,
                      const VarPtr &item) override;
  bool truth(const VarPtr &value) override;
  int callable(const VarPtr &value) override;
  OutputSpec output(const VarPtr &value, const ItemSpec &itemSpec) override;
  OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec) override;
};

/// Python constants: numbers, strings, None, ranges, tuples of constants
/// and torch.Size.
class ConstantValues : public ValueHandler {
public:
  explicit ConstantValues(BytecodeTracer &tracer);
  VarPtr type(const VarPtr &value) override;
  VarPtr isInstance(const VarPtr &value, PyObject *classes) override;
  VarPtr attribute(const VarPtr &value, PyObject *name) override;
  std::vector<VarPtr> items(const VarPtr &value) override;
  VarPtr iterate(const VarPtr &value) override;
  VarPtr length(const VarPtr &value) override;
  VarPtr subscript(const VarPtr &value, const VarPtr &index) override;
  bool truth(const VarPtr &value) override;
  VarPtr contains(const VarPtr &container, const VarPtr &item) override;
  int callable(const VarPtr &value) override;
  OutputSpec output(const VarPtr &value, const ItemSpec &itemSpec) override;
  OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec) override;
};

/// Objects read from sources (guarded by identity: modules, functions,
/// classes, dicts kept whole) and values derived from them.
class ObjectValues : public ValueHandler {
public:
  explicit ObjectValues(BytecodeTracer &tracer);
  /// A functools.partial: its function called with its arguments first
  /// and its keywords under the call's (each read through a guarded
  /// attribute source). torch.autograd.Function.apply for a call that
  /// records no gradient: the class's forward inlined with a
  /// dynafuse.functional.FunctionContext as ctx.
  VarPtr call(const VarPtr &value, const std::vector<VarPtr> &args,
              const Keywords &keywords) override;
  /// The items of derived data (a signature's parameters, their keys).
  std::vector<VarPtr> items(const VarPtr &value) override;

private:
  /// A derived value as a var: a constant, or derived data itself.
  VarPtr derivedVar(PyObject *value);
  /// A builtin method of derived data (sig.parameters.keys()) called with
  /// constants: called now, its result derived data too.
  VarPtr callDerived(const VarPtr &value, const std::vector<VarPtr> &args,
                     const Keywords &keywords);
  VarPtr applyWithoutGradient(const VarPtr &value,
                              const std::vector<VarPtr> &args,
                              const Keywords &keywords);
  /// A key a dict read from a source is looked up by: a constant or an
  /// object whose identity capture pins.
  bool lookupKey(const VarPtr &key);
  /// dict.get(key) of a dict read from a source and kept whole (a large
  /// registry, through super().get): the entry, read through a guarded
  /// DictItem source; an absent key's default, guarded absent.
  VarPtr entryOfSourceDict(const VarPtr &dict, const std::vector<VarPtr> &args,
                           const Keywords &keywords);
  /// The source of an object guarded by its type only (ObjectSources.h),
  /// or -1.
  int guardedByTypeAt(const VarPtr &value) const;

public:
  VarPtr type(const VarPtr &value) override;
  VarPtr isInstance(const VarPtr &value, PyObject *classes) override;
  VarPtr attribute(const VarPtr &value, PyObject *name) override;
  VarPtr iterate(const VarPtr &value) override;
  VarPtr length(const VarPtr &value) override;
  VarPtr subscript(const VarPtr &value, const VarPtr &index) override;
  bool truth(const VarPtr &value) override;
  VarPtr contains(const VarPtr &container, const VarPtr &item) override;
  int callable(const VarPtr &value) override;
  OutputSpec output(const VarPtr &value, const ItemSpec &itemSpec) override;
  OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec) override;
};

/// Tuples, lists (isList), sets of constants (isSet) and named tuples.
class SequenceValues : public ValueHandler {
public:
  explicit SequenceValues(BytecodeTracer &tracer);
  VarPtr type(const VarPtr &value) override;
  VarPtr isInstance(const VarPtr &value, PyObject *classes) override;
  VarPtr attribute(const VarPtr &value, PyObject *name) override;
  std::vector<VarPtr> items(const VarPtr &value) override;
  VarPtr iterate(const VarPtr &value) override;
  VarPtr length(const VarPtr &value) override;
  VarPtr subscript(const VarPtr &value, const VarPtr &index) override;
  void storeSubscript(const VarPtr &value, const VarPtr &index,
                      const VarPtr &item) override;
  bool truth(const VarPtr &value) override;
  VarPtr contains(const VarPtr &container, const VarPtr &item) override;
  int callable(const VarPtr &value) override;
  OutputSpec output(const VarPtr &value, const ItemSpec &itemSpec) override;
  OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec) override;
  /// cls(...) of a collections.namedtuple (or typing.NamedTuple) class
  /// guarded by identity, whose __new__ and __init__ are the generated
  /// ones: a named tuple var of the bound fields. Null for other classes.
  VarPtr constructNamedTuple(const VarPtr &classVar,
                             const std::vector<VarPtr> &args,
                             const Keywords &keywords);
  /// A tuple, list or dict var spelled out item by item (a list or dict
  /// made during capture once per output, then by its id).
  static OutputSpec containerSpec(BytecodeTracer &tracer,
                                  const VarPtr &container,
                                  const ItemSpec &itemSpec);
};

/// Iterators (enumerate, zip, generators, module walks): the items not yet
/// consumed.
class IteratorValues : public ValueHandler {
public:
  explicit IteratorValues(BytecodeTracer &tracer);
  std::vector<VarPtr> items(const VarPtr &value) override;
  VarPtr iterate(const VarPtr &value) override;
  VarPtr subscript(const VarPtr &value, const VarPtr &index) override;
  bool truth(const VarPtr &value) override;
  int callable(const VarPtr &value) override;
  OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec) override;
};

/// Dicts with constant string keys (made during capture, or the frame's
/// own **kwargs).
class DictValues : public ValueHandler {
public:
  explicit DictValues(BytecodeTracer &tracer);
  VarPtr type(const VarPtr &value) override;
  VarPtr isInstance(const VarPtr &value, PyObject *classes) override;
  VarPtr attribute(const VarPtr &value, PyObject *name) override;
  std::vector<VarPtr> items(const VarPtr &value) override;
  VarPtr iterate(const VarPtr &value) override;
  VarPtr length(const VarPtr &value) override;
  VarPtr subscript(const VarPtr &value, const VarPtr &index) override;
  void storeSubscript(const VarPtr &value, const VarPtr &index,
                      const VarPtr &item) override;
  bool truth(const VarPtr &value) override;
  int callable(const VarPtr &value) override;
  OutputSpec output(const VarPtr &value, const ItemSpec &itemSpec) override;
  OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec) override;
};

/// Python ints that are symbolic sizes.
class SizeValues : public ValueHandler {
public:
  explicit SizeValues(BytecodeTracer &tracer);
  bool truth(const VarPtr &value) override;
  VarPtr type(const VarPtr &value) override;
  VarPtr isInstance(const VarPtr &value, PyObject *classes) override;
  OutputSpec output(const VarPtr &value, const ItemSpec &itemSpec) override;
  OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec) override;
};

/// Functions made during capture (truthy, callable; never handed live to
/// a resume function: they would need their closure cells).
class CallableValues : public ValueHandler {
public:
  explicit CallableValues(BytecodeTracer &tracer,
                          std::string description = "a function made during "
                                                    "capture");
  bool truth(const VarPtr &value) override;
  int callable(const VarPtr &value) override;
};

/// A tensor's method (x.add): returned or live as the attribute of its
/// tensor.
class TensorMethodValues : public CallableValues {
public:
  explicit TensorMethodValues(BytecodeTracer &tracer);
  OutputSpec output(const VarPtr &value, const ItemSpec &itemSpec) override;
  OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec) override;
};

/// A function bound to a traced self (obj.method, dict.items): live as the
/// function and its self, or as the attribute of self for builtin methods.
class BoundMethodValues : public CallableValues {
public:
  explicit BoundMethodValues(BytecodeTracer &tracer);
  /// Returned as it is handed on live (a method a run rebinds).
  OutputSpec output(const VarPtr &value, const ItemSpec &itemSpec) override;
  OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec) override;
};

/// The NULL a call pushes below its callable.
class NullValues : public ValueHandler {
public:
  explicit NullValues(BytecodeTracer &tracer);
  OutputSpec liveState(const VarPtr &value, const ItemSpec &itemSpec) override;
};

/// Every kind's handler, found by kind.
class ValueHandlers {
public:
  ValueHandlers(BytecodeTracer &tracer, PythonObjects &objects);
  ValueHandler &of(const Var &value) const {
    return *byKind[size_t(value.kind)];
  }
  ValueHandler &of(const VarPtr &value) const { return of(*value); }
  SequenceValues &sequenceHandler() { return sequences; }

private:
  TensorValues tensors;
  ConstantValues constants;
  ObjectValues objects;
  SequenceValues sequences;
  IteratorValues iterators;
  DictValues dicts;
  SizeValues sizes;
  CallableValues functions;
  TensorMethodValues tensorMethods;
  BoundMethodValues boundMethods;
  NullValues nulls;
  ValueHandler cells;
  ValueHandler symbolicSlices;
  static constexpr size_t kKindCount = size_t(Var::Kind::SymSlice) + 1;
  std::array<ValueHandler *, kKindCount> byKind{};
};

} // namespace capture
} // namespace dynafuse

#endif

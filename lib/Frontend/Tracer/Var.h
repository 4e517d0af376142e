//===- Var.h - The tracer's symbolic values ---------------------*- C++ -*-===//
//
// What sits on the tracer's symbolic stack and in its symbolic locals: a
// graph value (Tensor), a constant or concrete object read from a source,
// a symbolic size (SymInt) or a slice with one, or a container, method,
// iterator, cell, function or instance of a Python class made during
// capture.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_VAR_H
#define DYNAFUSE_CAPTURE_VAR_H

#include "dynafuse/Support/PyRef.h"
#include "dynafuse/Graph/Graph.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <cstring>
#include <string>
#include <vector>

namespace dynafuse {
namespace capture {

/// A value on the symbolic stack or in a symbolic local.
struct Var;
using VarPtr = std::shared_ptr<Var>;
struct Var {
  /// BoundMethod: `function` (an Object var) bound to `self`; Iterator:
  /// `items` consumed from `position`.
  enum class Kind {
    Null,
    Tensor,
    Constant,
    Object,
    Tuple,
    TensorMethod,
    BoundMethod,
    Iterator,
    Dict,
    Cell,
    Function,
    NewObject,
    SymInt,
    SymSlice
  };
  Kind kind = Kind::Null;
  /// SymInt: a Python int that is a symbolic size (ShapeEnv.h), never a
  /// constant. SymSlice: a slice with a SymInt bound; items are start, stop
  /// and step (each a SymInt or a Constant int or None).
  SymExpr size;
  Value *tensor = nullptr;
  PyRef object;
  std::vector<VarPtr> items;
  size_t position = 0;
  std::string method;
  VarPtr self;
  VarPtr function;
  /// NewObject (an instance of a Python class made during capture): its
  /// class var is `function`; `attributes` is its instance dict (a Dict var,
  /// what obj.__dict__ is) and `content`, for instances of dict subclasses,
  /// the dict's own items (a Dict var).
  VarPtr attributes;
  VarPtr content;
  /// Where a concrete object came from (-1: made during capture).
  int source = -1;
  /// A Tuple var built as a list (rebuilt as a list when returned), or as a
  /// set of constants (BUILD_SET: membership tests; never rebuilt).
  bool isList = false;
  bool isSet = false;
  /// Dict: string keys, parallel to items (a Tuple from a named tuple: its
  /// field names, and `object` its class, rebuilt when returned). Cell: items holds the content
  /// (empty: unbound). Function: object is the code, items its closure
  /// cells (a comprehension or generator expression made during capture).
  std::vector<std::string> keys;
  /// Object: a grad-mode context manager (no_grad, enable_grad,
  /// inference_mode) and the grad mode it sets; or, with `method`
  /// "__exit__", the exit of one that was entered.
  int setsGradMode = -1;
  /// An __exit__ of a with block entered before this frame resumed (a
  /// resume function's argument): the grad mode it restores.
  int restoresGradMode = -1;
  /// Object: a torch.autocast context made in capture, or with `method`
  /// "__exit__" its exit: the index of the state it sets (AutocastCasts).
  int setsAutocast = -1;
  /// Tensor (and its TensorMethod): methods resolve on torch._C.TensorBase,
  /// as after super() inside a torch.Tensor method.
  bool baseMethods = false;
};

inline VarPtr makeVar(Var::Kind kind) {
  auto var = std::make_shared<Var>();
  var->kind = kind;
  return var;
}

inline bool isConstantObject(PyObject *object) {
  if (object == Py_None || object == Py_Ellipsis || PyBool_Check(object) ||
      PyLong_CheckExact(object) || PyFloat_CheckExact(object) ||
      PyUnicode_CheckExact(object) || PyBytes_CheckExact(object) ||
      PyRange_Check(object))
    return true;
  // Tuples of constants, and torch.Size (a tuple of ints: tensor shapes).
  if (!PyTuple_CheckExact(object) &&
      !(PyTuple_Check(object) &&
        std::strcmp(Py_TYPE(object)->tp_name, "torch.Size") == 0))
    return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(object); ++i)
    if (!isConstantObject(PyTuple_GET_ITEM(object, i)))
      return false;
  return true;
}

/// Torch's small immutable value types, compared by value: dtypes,
/// devices (made afresh by every `.device` read), layouts and memory
/// formats.
inline bool isTorchValueObject(PyObject *object) {
  const char *type = Py_TYPE(object)->tp_name;
  return std::strcmp(type, "torch.dtype") == 0 ||
         std::strcmp(type, "torch.device") == 0 ||
         std::strcmp(type, "torch.layout") == 0 ||
         std::strcmp(type, "torch.memory_format") == 0;
}

/// A builtin method bound to an object other than a module (`dict.fromkeys`,
/// `some_list.append`): each attribute read makes a new one, equal to the
/// last (same function, same object bound).
inline bool isBoundBuiltinMethod(PyObject *object) {
  if (!PyCFunction_Check(object))
    return false;
  PyObject *self = PyCFunction_GET_SELF(object);
  return self && !PyModule_Check(self);
}

/// The keyword arguments of a call, in the order the call gave them
/// (Python keeps that order: a callee's **kwargs iterates in it, and
/// libraries forward kwargs through many layers). A map's interface over
/// a vector: a call has a handful of keywords.
class Keywords {
public:
  using Entry = std::pair<std::string, VarPtr>;
  using iterator = std::vector<Entry>::iterator;
  using const_iterator = std::vector<Entry>::const_iterator;

  iterator begin() { return entries.begin(); }
  iterator end() { return entries.end(); }
  const_iterator begin() const { return entries.begin(); }
  const_iterator end() const { return entries.end(); }
  bool empty() const { return entries.empty(); }
  size_t size() const { return entries.size(); }

  iterator find(const std::string &name) {
    return std::find_if(entries.begin(), entries.end(),
                        [&](const Entry &entry) { return entry.first == name; });
  }
  const_iterator find(const std::string &name) const {
    return std::find_if(entries.begin(), entries.end(),
                        [&](const Entry &entry) { return entry.first == name; });
  }
  size_t count(const std::string &name) const {
    return find(name) == end() ? 0 : 1;
  }
  const VarPtr &at(const std::string &name) const {
    const_iterator found = find(name);
    if (found == end())
      throw std::out_of_range("no keyword '" + name + "'");
    return found->second;
  }
  /// The value of name, appended (null) when the call had none.
  VarPtr &operator[](const std::string &name) {
    iterator found = find(name);
    if (found != end())
      return found->second;
    entries.emplace_back(name, nullptr);
    return entries.back().second;
  }
  size_t erase(const std::string &name) {
    iterator found = find(name);
    if (found == end())
      return 0;
    entries.erase(found);
    return 1;
  }

private:
  std::vector<Entry> entries;
};

} // namespace capture
} // namespace dynafuse

#endif

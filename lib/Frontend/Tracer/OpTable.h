//===- OpTable.h - Torch callables and their graph ops ----------*- C++ -*-===//
//
// The Python package hands over, as data, which torch callables and Tensor
// methods map to which graph op and how their parameters bind (operand,
// attribute, or fixed to its default). Lookup is by object identity for
// callables and by name for methods.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_OPTABLE_H
#define DYNAFUSE_CAPTURE_OPTABLE_H

#include "dynafuse/Graph/OpId.h"
#include "dynafuse/Support/PyRef.h"

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace dynafuse {

struct ParamSpec {
  enum class Kind {
    Operand,
    Operands,
    TensorOperand,
    OptionalOperand,
    Attr,
    IntsVararg,
    Fixed,
    Ignored,
    InPlaceFlag,
    ShapeOf,
    DTypeOf
  };
  std::string name;
  /// The node attribute the parameter becomes (its name unless renamed).
  std::string attribute;
  Kind kind = Kind::Operand;
  bool keywordOnly = false;
  bool hasDefault = false;
  PyRef defaultValue;
};

struct OpBinding {
  /// The graph op the call becomes, unless the entry is one of the two that
  /// are not graph ops: "overload" (the first of `alternatives` whose
  /// parameters bind wins) and "unflatten" (capture writes a reshape).
  Op graphOp = Op::Add;
  bool overload = false;
  bool unflatten = false;
  std::vector<OpBinding> alternatives;
  std::vector<ParamSpec> params;
  /// Attributes the binding adds (e.g. dtype for Tensor.float()), as Python
  /// objects converted at capture.
  std::vector<std::pair<std::string, PyRef>> extraAttributes;
};

/// How torch.autocast casts a call's floating arguments (other than
/// float64): to its lower precision type, to float32, or to the widest
/// type among them (python/dynafuse/ops/autocast.py).
enum class AutocastPolicy { None, LowerPrecision, Float32, Promote };

class OpTable {
public:
  /// Throws Error on a malformed table.
  void setFunctions(PyObject *dict);
  void setMethods(PyObject *dict);
  /// {callable: answer}: calls whose result capture knows without running
  /// them ("false", "none", "grad_enabled").
  void setStateQueries(PyObject *dict);
  const OpBinding *function(PyObject *callable) const;
  const OpBinding *method(const std::string &name) const;
  /// The answer for a state query, or "" when callable is not one.
  std::string stateQuery(PyObject *callable) const;
  /// {callable: Python function}: torch functions capture traces through
  /// a Python form of (python/dynafuse/polyfills.py) instead of an op.
  void setPolyfills(PyObject *dict);
  /// The Python form of callable, or null.
  PyObject *polyfill(PyObject *callable) const;

  /// {"functions": {callable: policy}, "methods": {name: policy}, "pad":
  /// F.pad, "pad_modes_fp32": (mode, ...)}.
  void setAutocastPolicy(PyObject *dict);
  AutocastPolicy autocastPolicy(PyObject *callable) const;
  AutocastPolicy autocastMethodPolicy(const std::string &name) const;
  /// F.pad, whose policy depends on its mode, and the modes run in f32.
  PyObject *autocastPad() const { return autocastPadCallable.get(); }
  const std::vector<std::string> &autocastPadModes() const {
    return padModesFloat32;
  }

private:
  std::unordered_map<PyObject *, AutocastPolicy> autocastFunctions;
  std::vector<PyRef> autocastKeys;
  std::map<std::string, AutocastPolicy> autocastMethods;
  PyRef autocastPadCallable;
  std::vector<std::string> padModesFloat32;
  std::unordered_map<PyObject *, OpBinding> functions;
  std::vector<PyRef> functionKeys;
  std::map<std::string, OpBinding> methods;
  std::unordered_map<PyObject *, std::string> stateQueries;
  std::vector<PyRef> stateKeys;
  /// Keyed by the callable (held by the pair's first).
  std::unordered_map<PyObject *, std::pair<PyRef, PyRef>> polyfills;
};

OpTable &opTable();

} // namespace dynafuse

#endif

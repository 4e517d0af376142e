//===- OpBinder.h - Call arguments to graph operands and attributes -*- C++
//-*-===//
//
// Op binding: how the arguments of one call of a torch callable bind to a
// graph op's operands and attributes, as the op table says (OpTable.h):
// positional and keyword arguments, defaults, fixed parameters, integer
// varargs, in-place flags. What does not bind is refused (Unsupported,
// through the tracer, which also provides operands for tensor arguments).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_OPBINDER_H
#define DYNAFUSE_CAPTURE_OPBINDER_H

#include "OpTable.h"
#include "Var.h"

#include <map>
#include <string>
#include <vector>

namespace dynafuse {
namespace capture {

class BytecodeTracer;

class OpBinder {
public:
  /// What the arguments of one call bind to.
  struct Binding {
    Op op = Op::Add;
    std::vector<Operand> operands;
    std::map<std::string, Attribute> attributes;
    /// The first tensor argument, and whether the call updates it in place.
    VarPtr self;
    bool inPlace = false;
    /// x.contiguous(): x itself when it is contiguous in eager.
    bool selfIfContiguous = false;
    /// x.clone(): a copy in x's layout when x is densely permuted.
    bool keepsLayout = false;
    /// x.view(...): eager raises where x's strides allow no view.
    bool mustView = false;
    /// x.t(): a view of x below 2 dims, an error above.
    bool matrixTranspose = false;
    /// Eager has no derivative for the op (floor_divide): its backward
    /// raises, so capture must not differentiate it.
    bool noDerivative = false;
  };

  explicit OpBinder(BytecodeTracer &tracer) : tracer(tracer) {}

  Binding bind(const OpBinding &binding, const std::string &what,
               const std::vector<VarPtr> &args,
               const Keywords &keywords);

private:
  static bool isNoneVar(const VarPtr &var);

  bool opAccepts(Op op, const std::string &attribute);

  void bindParam(const ParamSpec &param, const VarPtr &arg,
                 const std::string &what, Binding &bound);

  void bindAttribute(const ParamSpec &param, const VarPtr &arg,
                     const std::string &what, Binding &bound);

  void checkFixed(const ParamSpec &param, const VarPtr &arg,
                  const std::string &what);

  /// "shape_of" / "dtype_of": the sizes or dtype of a tensor argument as
  /// the attribute (x.expand_as(y), x.type_as(y)).
  void bindTypeOf(const ParamSpec &param, const VarPtr &arg,
                  const std::string &what, Binding &bound);

  /// Integer list from vararg ints or one tuple/list of ints.
  Attribute intsOf(const std::vector<VarPtr> &args,
                              const std::string &what,
                              const std::string &param);

  Attribute attributeOfVar(const VarPtr &arg, const std::string &what,
                           const std::string &param);

  PyObject *concreteOf(const VarPtr &arg, const std::string &what,
                       const std::string &param);

  Attribute attributeOf(PyObject *object, const std::string &what);

  /// A convolution's padding="valid" or "same" as the numbers it stands
  /// for (from the weight's kernel size and the dilation); "same" where
  /// it pads both sides alike.
  void spellOutPadding(Binding &bound, const std::string &what);

  BytecodeTracer &tracer;
};

} // namespace capture
} // namespace dynafuse

#endif

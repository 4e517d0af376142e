//===- TracerSizes.cpp - Symbolic sizes as Python ints, and slices -------===//
//
// Python ints that are sizes (SymInt vars) and what the code does with
// them, and slices with symbolic bounds; the decisions they take are
// SymbolicShapes'.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include <optional>

namespace dynafuse {
namespace capture {

VarPtr BytecodeTracer::sizeVar(const SymExpr &size) {
  SymExpr canonical = symbolic.env.canonical(size);
  if (canonical.isConstant())
    return integerConstant(canonical.constant());
  VarPtr var = makeVar(Var::Kind::SymInt);
  var->size = canonical;
  return var;
}


SymExpr BytecodeTracer::sizeOf(const VarPtr &var, const std::string &what) {
  if (var->kind == Var::Kind::SymInt)
    return symbolic.env.canonical(var->size);
  if (var->kind == Var::Kind::Constant && PyLong_CheckExact(var->object.get())) {
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(var->object.get(), &overflow);
    if (!overflow)
      return SymExpr(int64_t(value));
  }
  unsupported(what + " needs an integer");
}

void BytecodeTracer::specializeSize(const VarPtr &var) {
  if (var->kind != Var::Kind::SymInt)
    return;
  int64_t value = symbolic.specialize(var->size);
  // In place: every holder of the var (locals, tuples) sees the constant,
  // which the guard makes it in every call the entry runs.
  var->kind = Var::Kind::Constant;
  var->object = PyRef::steal(PyLong_FromLongLong(value));
  var->size = SymExpr();
}

VarPtr BytecodeTracer::sizeArithmetic(int kind, const VarPtr &lhs,
                                      const VarPtr &rhs) {
  if (!isSymInt(lhs) && !isSymInt(rhs))
    return nullptr;
  if (lhs->kind == Var::Kind::Tensor || rhs->kind == Var::Kind::Tensor)
    return nullptr; // tensor arithmetic: the size is a 0-dim operand
  int plain = plainBinaryOperator(kind);
  bool sizeResult = plain == NB_ADD || plain == NB_SUBTRACT ||
                    plain == NB_MULTIPLY || plain == NB_FLOOR_DIVIDE ||
                    plain == NB_REMAINDER;
  if (!sizeResult || !isSizeLike(lhs) || !isSizeLike(rhs)) {
    // n / 2, n * 0.5, n ** 2: a float or a power of the size needs its
    // value. Specialized, the operation folds as constants do.
    specializeSize(lhs);
    specializeSize(rhs);
    return nullptr;
  }
  SymExpr a = sizeOf(lhs, "size arithmetic"),
          b = sizeOf(rhs, "size arithmetic");
  switch (plain) {
  case NB_ADD:
    return sizeVar(a + b);
  case NB_SUBTRACT:
    return sizeVar(a - b);
  case NB_MULTIPLY:
    return sizeVar(a * b);
  case NB_FLOOR_DIVIDE:
  case NB_REMAINDER:
    // Python's floor semantics are SymExpr's; a divisor that is not
    // positive at the hints is decided (and guarded) first.
    if (!symbolic.decide(Py_GT, b, 0))
      unsupported("// or % of a symbolic size by a divisor that is not "
                  "positive");
    return sizeVar(plain == NB_FLOOR_DIVIDE ? floorDiv(a, b) : mod(a, b));
  default:
    return nullptr; // not a size result (sizeResult above)
  }
}

VarPtr BytecodeTracer::sizeBuiltin(PyObject *callable,
                                    const std::vector<VarPtr> &args) {
  bool anySymbolic = false, sizes = !args.empty();
  for (const VarPtr &arg : args) {
    anySymbolic |= isSymInt(arg);
    sizes &= isSizeLike(arg);
  }
  if (!anySymbolic)
    return nullptr;
  if (sizes && isBuiltin(callable, "int") && args.size() == 1)
    return args[0];
  bool isMin = isBuiltin(callable, "min");
  if (sizes && (isMin || isBuiltin(callable, "max")) && args.size() >= 2) {
    // The extreme at the hints, each comparison guarded.
    SymExpr best = sizeOf(args[0], "min/max");
    for (size_t i = 1; i < args.size(); ++i) {
      SymExpr other = sizeOf(args[i], "min/max");
      if (symbolic.decide(isMin ? Py_LT : Py_GT, other, best))
        best = other;
    }
    return sizeVar(best);
  }
  // range(n), float(n), math.sqrt(n), min over floats: the values needed.
  for (const VarPtr &arg : args)
    specializeSize(arg);
  return nullptr;
}

VarPtr BytecodeTracer::selectSymbolic(const VarPtr &tensor, const VarPtr &index,
                                      int64_t dim) {
  const TensorType &type = tensor->tensor->type;
  if (dim >= int64_t(type.rank()))
    unsupported("too many indices for the tensor");
  SymExpr size = symbolic.env.canonical(type.sizes[size_t(dim)]);
  // Python's negative index, and eager's range check, each decided at the
  // hints and guarded; then the one-element slice with its dim dropped.
  SymExpr at = sizeOf(index, "a tensor index");
  if (symbolic.decide(Py_LT, at, 0))
    at = at + size;
  if (symbolic.decide(Py_LT, at, 0) || !symbolic.decide(Py_LT, at, size))
    unsupported("tensor index out of range");
  VarPtr picked = sliceSymbolic(tensor, sizeVar(at), sizeVar(at + 1),
                                constant(Py_None), dim);
  return emit(Op::Squeeze, {picked->tensor},
              {{"dims", std::vector<int64_t>{dim}}});
}

VarPtr BytecodeTracer::sliceSymbolic(const VarPtr &tensor, const VarPtr &start,
                                     const VarPtr &stop, const VarPtr &step,
                                     int64_t dim) {
  const TensorType &type = tensor->tensor->type;
  if (dim >= int64_t(type.rank()))
    unsupported("too many indices for the tensor");
  SymExpr size = symbolic.env.canonical(type.sizes[size_t(dim)]);
  auto isNone = [](const VarPtr &var) {
    return !var ||
           (var->kind == Var::Kind::Constant && var->object.get() == Py_None);
  };
  int64_t stride = 1;
  if (!isNone(step)) {
    if (step->kind != Var::Kind::Constant ||
        !PyLong_CheckExact(step->object.get()) ||
        PyLong_AsLongLong(step->object.get()) <= 0)
      unsupported("slice of a symbolic size with a step that is not a "
                  "positive constant");
    stride = PyLong_AsLongLong(step->object.get());
  }
  // Python's clamping, each comparison decided at the hints and guarded.
  auto bound = [&](const VarPtr &var, const SymExpr &fallback) {
    if (isNone(var))
      return fallback;
    SymExpr at = sizeOf(var, "a slice bound");
    if (symbolic.decide(Py_LT, at, 0)) {
      at = at + size;
      if (symbolic.decide(Py_LT, at, 0))
        at = 0;
    } else if (symbolic.decide(Py_GT, at, size)) {
      at = size;
    }
    return at;
  };
  SymExpr first = bound(start, 0);
  SymExpr last = bound(stop, size);
  if (symbolic.decide(Py_LT, last, first))
    last = first;
  if (first == SymExpr(0) && last == size && stride == 1)
    return tensor;
  std::map<std::string, Attribute> attributes;
  attributes["dim"] = dim;
  attributes["start"] = first;
  attributes["end"] = last;
  attributes["step"] = stride;
  return emit(Op::Slice, {tensor->tensor}, attributes);
}

} // namespace capture
} // namespace dynafuse

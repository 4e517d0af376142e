//===- PointwiseRules.cpp - Per-op lowering to scalar instructions --------===//
#include "dynafuse/Lowering/PointwiseRules.h"

#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Support/HalfFloat.h"

#include <cmath>
#include <map>

namespace dynafuse {

int ScalarBuilder::append(Instr instr) {
  return builder.append(std::move(instr));
}

int ScalarBuilder::constant(DType type, double value) {
  Instr instr;
  instr.op = ScalarOp::Const;
  instr.type = type;
  instr.floatValue = value;
  instr.intValue = int64_t(value);
  if (type == DType::Bool)
    instr.intValue = value != 0;
  return append(instr);
}

int ScalarBuilder::unary(ScalarOp op, int arg) {
  Instr instr;
  instr.op = op;
  instr.type = typeOf(arg);
  instr.args = {arg};
  return append(instr);
}

int ScalarBuilder::binary(ScalarOp op, int lhs, int rhs) {
  Instr instr;
  instr.op = op;
  instr.type = isComparison(op) ? DType::Bool : typeOf(lhs);
  instr.args = {lhs, rhs};
  return append(instr);
}

int ScalarBuilder::select(int condition, int onTrue, int onFalse) {
  Instr instr;
  instr.op = ScalarOp::Select;
  instr.type = typeOf(onTrue);
  instr.args = {condition, onTrue, onFalse};
  return append(instr);
}

int ScalarBuilder::cast(int arg, DType type) {
  if (typeOf(arg) == type)
    return arg;
  Instr instr;
  instr.op = ScalarOp::Cast;
  instr.type = type;
  instr.args = {arg};
  return append(instr);
}

namespace {

/// The dtype eager's kernel holds a Python-number operand in: the op's
/// common dtype (the promoted operands' for a comparison).
DType scalarStorageType(const Node &node) {
  const OpInfo *info = opInfoOf(node);
  if (info && info->rule == TypeRule::Compare)
    return promotedOperandType(node);
  return node.result()->type.dtype;
}

/// Whether eager rounds a Python-number operand to the common dtype before
/// computing: every op but add, sub, mul and true division, whose CPU
/// kernels read the number at full precision (original_scalar_value). For
/// f16/bf16 this decides comparisons and fmod: `x > 0.1` compares with
/// 0.0999756 in f16.
bool roundsScalarOperands(Op op) {
  return op != Op::Add && op != Op::Sub && op != Op::Mul && op != Op::Div &&
         op != Op::Pow;
}

double roundedTo(DType dtype, double value) {
  if (dtype == DType::F16)
    return dynafuse_f16_to_f32(dynafuse_f32_to_f16(float(value)));
  if (dtype == DType::BF16)
    return dynafuse_bf16_to_f32(dynafuse_f32_to_bf16(float(value)));
  if (dtype == DType::F32)
    return double(float(value));
  return value;
}

} // namespace

int PointwiseContext::raw(size_t i) const {
  if (elements[i] >= 0)
    return elements[i];
  double value = node.operands[i].scalar.asDouble();
  if (roundsScalarOperands(node.op) && isFloating(scalarStorageType(node)))
    value = roundedTo(scalarStorageType(node), value);
  return builder.constant(type, value);
}

int PointwiseContext::operand(size_t i) const {
  return builder.cast(raw(i), type);
}

namespace {

PointwiseRule binaryRule(ScalarOp op) {
  return [op](PointwiseContext &c) {
    return c.builder.binary(op, c.operand(0), c.operand(1));
  };
}

PointwiseRule unaryRule(ScalarOp op) {
  return
      [op](PointwiseContext &c) { return c.builder.unary(op, c.operand(0)); };
}

/// Booleans: add is logical or, mul logical and (as in PyTorch).
PointwiseRule arithmeticRule(ScalarOp op, ScalarOp onBool) {
  return [op, onBool](PointwiseContext &c) {
    return c.builder.binary(c.type == DType::Bool ? onBool : op, c.operand(0),
                            c.operand(1));
  };
}

int geluRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  int half = b.binary(ScalarOp::Mul, x, b.constant(c.type, 0.5));
  int inner;
  if (c.node.stringAttr("approximate", "none") == "tanh") {
    int cube = b.binary(ScalarOp::Mul, b.binary(ScalarOp::Mul, x, x), x);
    int poly =
        b.binary(ScalarOp::Add, x,
                 b.binary(ScalarOp::Mul, cube, b.constant(c.type, 0.044715)));
    inner = b.unary(ScalarOp::Tanh,
                    b.binary(ScalarOp::Mul, poly,
                             b.constant(c.type, std::sqrt(2.0 / M_PI))));
  } else {
    inner = b.unary(ScalarOp::Erf,
                    b.binary(ScalarOp::Mul, x, b.constant(c.type, M_SQRT1_2)));
  }
  int onePlus = b.binary(ScalarOp::Add, b.constant(c.type, 1.0), inner);
  return b.binary(ScalarOp::Mul, half, onePlus);
}

/// pow with a scalar exponent; the exponents PyTorch special-cases are
/// computed the way PyTorch computes them.
/// x ** e on integers, exactly as eager's powi: square and multiply with
/// wrapping products over every bit of a tensor exponent; a negative one
/// gives 1 for x = 1, +-1 for x = -1 and 0 otherwise.
int integerPowOfTensor(ScalarBuilder &b, DType type, int x, int e) {
  int bits = type == DType::I64 ? 63 : 31;
  int zero = b.constant(type, 0.0), one = b.constant(type, 1.0);
  int result = one, base = x;
  for (int k = 0; k < bits; ++k) {
    int mask = b.constant(type, double(int64_t(1) << k));
    int set = b.binary(ScalarOp::Ne, b.binary(ScalarOp::BitAnd, e, mask), zero);
    result = b.select(set, b.binary(ScalarOp::Mul, result, base), result);
    if (k + 1 < bits)
      base = b.binary(ScalarOp::Mul, base, base);
  }
  int minusOne = b.constant(type, -1.0);
  int odd = b.binary(ScalarOp::Ne, b.binary(ScalarOp::BitAnd, e, one), zero);
  int ofMinusOne = b.select(odd, minusOne, one);
  int negative = b.select(
      b.binary(ScalarOp::Eq, x, one), one,
      b.select(b.binary(ScalarOp::Eq, x, minusOne), ofMinusOne, zero));
  return b.select(b.binary(ScalarOp::Lt, e, zero), negative, result);
}

/// x ** e on integers for a constant e >= 0 (capture refuses a negative
/// one, as eager does): its bits' squares, multiplied with wrapping.
int integerPowOfConstant(ScalarBuilder &b, DType type, int x, int64_t e) {
  int result = b.constant(type, 1.0);
  for (int base = x; e > 0; e >>= 1) {
    if (e & 1)
      result = b.binary(ScalarOp::Mul, result, base);
    if (e > 1)
      base = b.binary(ScalarOp::Mul, base, base);
  }
  return result;
}

int powRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  bool integral = c.type == DType::I32 || c.type == DType::I64;
  if (c.node.operands[1].isValue()) {
    if (integral)
      return integerPowOfTensor(b, c.type, x, c.operand(1));
    return b.binary(ScalarOp::Pow, x, c.operand(1));
  }
  const Scalar &scalar = c.node.operands[1].scalar;
  if (integral && scalar.kind != Scalar::Kind::Float && scalar.intValue >= 0)
    return integerPowOfConstant(b, c.type, x, scalar.intValue);
  double exponent = scalar.asDouble();
  if (isFloating(c.type)) {
    if (exponent == 1.0)
      return x;
    if (exponent == 2.0)
      return b.binary(ScalarOp::Mul, x, x);
    if (exponent == 3.0)
      return b.binary(ScalarOp::Mul, b.binary(ScalarOp::Mul, x, x), x);
    if (exponent == 0.5)
      return b.unary(ScalarOp::Sqrt, x);
    if (exponent == -0.5)
      return b.unary(ScalarOp::Rsqrt, x);
    if (exponent == -1.0)
      return b.binary(ScalarOp::Div, b.constant(c.type, 1.0), x);
  }
  return b.binary(ScalarOp::Pow, x, b.constant(c.type, exponent));
}

/// a / b rounded toward zero: trunc of the quotient on floats, C's integer
/// division on integers (a zero divisor is reported by the backends).
int divTruncRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int quotient = b.binary(ScalarOp::Div, c.operand(0), c.operand(1));
  return isFloating(c.type) ? b.unary(ScalarOp::Trunc, quotient) : quotient;
}

/// a // b as eager's div_floor: on integers the truncated quotient less
/// one where the signs differ and the division is inexact; on floats
/// (a - fmod(a, b)) / b corrected the same way and rounded to the nearest
/// integer, a signed zero for a zero quotient and IEEE's a / b for b = 0.
int divFloorRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0), y = c.operand(1);
  int zero = b.constant(c.type, 0.0), one = b.constant(c.type, 1.0);
  if (!isFloating(c.type)) {
    int quotient = b.binary(ScalarOp::Div, x, y);
    int inexact = b.binary(ScalarOp::Ne, b.binary(ScalarOp::Fmod, x, y), zero);
    int signsDiffer = b.binary(ScalarOp::Ne, b.binary(ScalarOp::Lt, x, zero),
                               b.binary(ScalarOp::Lt, y, zero));
    return b.select(b.binary(ScalarOp::And, signsDiffer, inexact),
                    b.binary(ScalarOp::Sub, quotient, one), quotient);
  }
  int mod = b.binary(ScalarOp::Fmod, x, y);
  int div = b.binary(ScalarOp::Div, b.binary(ScalarOp::Sub, x, mod), y);
  int modNonzero = b.binary(ScalarOp::Ne, mod, zero);
  int signsDiffer = b.binary(ScalarOp::Ne, b.binary(ScalarOp::Lt, y, zero),
                             b.binary(ScalarOp::Lt, mod, zero));
  div = b.select(b.binary(ScalarOp::And, modNonzero, signsDiffer),
                 b.binary(ScalarOp::Sub, div, one), div);
  int floored = b.unary(ScalarOp::Floor, div);
  int roundUp = b.binary(ScalarOp::Gt, b.binary(ScalarOp::Sub, div, floored),
                         b.constant(c.type, 0.5));
  floored = b.select(roundUp, b.binary(ScalarOp::Add, floored, one), floored);
  int quotient = b.binary(ScalarOp::Div, x, y);
  // copysign(0, a / b): a zero times the quotient (finite where div is 0).
  int signedZero = b.binary(ScalarOp::Mul, zero, quotient);
  int result = b.select(b.binary(ScalarOp::Ne, div, zero), floored, signedZero);
  return b.select(b.binary(ScalarOp::Eq, y, zero), quotient, result);
}

int reluRule(PointwiseContext &c) {
  // The bound first: Max keeps its second operand on a tie, and eager's
  // relu (a clamp_min) keeps x there: relu(-0.0) is -0.0.
  return c.builder.binary(ScalarOp::Max, c.builder.constant(c.type, 0),
                          c.operand(0));
}

/// A cast of an f16/bf16 value to another dtype first rounds it to its own
/// type: kernels compute f16 and bf16 in f32, and eager's value of a half
/// op is rounded (7 ** 7 in bf16 is 823296, and so is its int64 cast).
int castRule(PointwiseContext &c) {
  int x = c.raw(0);
  const Operand &from = c.node.operands.at(0);
  DType source = from.isValue() ? from.value->type.dtype : DType::F64;
  if (source != c.node.result()->type.dtype &&
      (source == DType::F16 || source == DType::BF16))
    x = c.builder.unary(source == DType::F16 ? ScalarOp::RoundF16
                                             : ScalarOp::RoundBF16,
                        x);
  return c.builder.cast(x, c.type);
}

/// floor, ceil, round, trunc: the identity on integers.
PointwiseRule roundingRule(ScalarOp op) {
  return [op](PointwiseContext &c) {
    int x = c.operand(0);
    return isFloating(c.type) ? c.builder.unary(op, x) : x;
  };
}

/// (x > 0) - (x < 0): sign(NaN) is 0 and sign(-0.0) is +0.0, as in torch.
int signRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  if (c.type == DType::Bool)
    return x;
  int zero = b.constant(c.type, 0);
  int minusOne = b.constant(c.type, -1);
  int isNegative = b.binary(ScalarOp::Lt, x, zero);
  int negativeOrZero = b.select(isNegative, minusOne, zero);
  int one = b.constant(c.type, 1);
  int isPositive = b.binary(ScalarOp::Gt, x, zero);
  return b.select(isPositive, one, negativeOrZero);
}

/// min(max(x, lo), hi), NaN-propagating: a NaN input or bound gives NaN and
/// lo > hi gives hi, as in torch.clamp. The bounds come first: Max and Min
/// keep their second operand on a tie, and eager keeps x there (clamping
/// -0.0 to [0, 1] gives -0.0).
int clampBetween(ScalarBuilder &b, int x, int lo, int hi) {
  int result = x;
  if (lo >= 0)
    result = b.binary(ScalarOp::Max, lo, result);
  if (hi >= 0)
    result = b.binary(ScalarOp::Min, hi, result);
  return result;
}

/// clamp(x, min?, max?): an absent bound is marked by has_<name> = false.
int clampRule(PointwiseContext &c) {
  int minIndex = optionalOperandIndex(c.node, "min");
  int maxIndex = optionalOperandIndex(c.node, "max");
  int x = c.operand(0);
  int lo = minIndex < 0 ? -1 : c.operand(minIndex);
  int hi = maxIndex < 0 ? -1 : c.operand(maxIndex);
  return clampBetween(c.builder, x, lo, hi);
}

/// hardtanh and relu6: the bounds are attributes (truncated for integers).
int hardtanhRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  int lo = b.constant(c.type, floatAttr(c.node, "min_val", -1.0));
  int hi = b.constant(c.type, floatAttr(c.node, "max_val", 1.0));
  return clampBetween(b, x, lo, hi);
}

/// Operand i as a truth value (nonzero, NaN included).
int truthOf(PointwiseContext &c, size_t i) {
  return c.builder.cast(c.raw(i), DType::Bool);
}

PointwiseRule logicalRule(ScalarOp op) {
  return [op](PointwiseContext &c) {
    int lhs = truthOf(c, 0);
    int rhs = truthOf(c, 1);
    return c.builder.binary(op, lhs, rhs);
  };
}

int logicalNotRule(PointwiseContext &c) {
  return c.builder.unary(ScalarOp::Not, truthOf(c, 0));
}

int maskedFillRule(PointwiseContext &c) {
  int x = c.operand(0);
  int mask = truthOf(c, 1);
  int value = c.operand(2);
  return c.builder.select(mask, value, x);
}

int squareRule(PointwiseContext &c) {
  int x = c.operand(0);
  return c.builder.binary(ScalarOp::Mul, x, x);
}

int reciprocalRule(PointwiseContext &c) {
  int x = c.operand(0);
  return c.builder.binary(ScalarOp::Div, c.builder.constant(c.type, 1.0), x);
}

/// log2 and log10 as log(x) / log(base).
PointwiseRule logBaseRule(double base) {
  return [base](PointwiseContext &c) {
    ScalarBuilder &b = c.builder;
    int log = b.unary(ScalarOp::Log, c.operand(0));
    return b.binary(ScalarOp::Mul, log,
                    b.constant(c.type, 1.0 / std::log(base)));
  };
}

/// x > 0 ? x : x * negative_slope.
int leakyReluRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  int slope = b.constant(c.type, floatAttr(c.node, "negative_slope", 0.01));
  int isPositive = b.binary(ScalarOp::Gt, x, b.constant(c.type, 0));
  return b.select(isPositive, x, b.binary(ScalarOp::Mul, x, slope));
}

/// x <= 0 ? expm1(x) * alpha : x (NaN takes the second branch).
int eluRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  int alpha = b.constant(c.type, floatAttr(c.node, "alpha", 1.0));
  int isNotPositive = b.binary(ScalarOp::Le, x, b.constant(c.type, 0));
  int scaled = b.binary(ScalarOp::Mul, b.unary(ScalarOp::Expm1, x), alpha);
  return b.select(isNotPositive, scaled, x);
}

/// x / (1 + exp(-x)), as torch computes silu.
int siluRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  int expNeg = b.unary(ScalarOp::Exp, b.unary(ScalarOp::Neg, x));
  int denominator = b.binary(ScalarOp::Add, b.constant(c.type, 1.0), expNeg);
  return b.binary(ScalarOp::Div, x, denominator);
}

/// min(max(x + 3, 0), 6), the shared part of hardsigmoid and hardswish.
int relu6OfXPlus3(PointwiseContext &c, int x) {
  ScalarBuilder &b = c.builder;
  int shifted = b.binary(ScalarOp::Add, x, b.constant(c.type, 3.0));
  int zero = b.constant(c.type, 0.0);
  int six = b.constant(c.type, 6.0);
  return clampBetween(b, shifted, zero, six);
}

int hardsigmoidRule(PointwiseContext &c) {
  int clamped = relu6OfXPlus3(c, c.operand(0));
  return c.builder.binary(ScalarOp::Div, clamped,
                          c.builder.constant(c.type, 6.0));
}

/// x * min(max(x + 3, 0), 6) / 6: -inf gives NaN, as in torch.
int hardswishRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  int product = b.binary(ScalarOp::Mul, x, relu6OfXPlus3(c, x));
  return b.binary(ScalarOp::Div, product, b.constant(c.type, 6.0));
}

/// log1p(exp(x))
int softplusOf(ScalarBuilder &b, int x) {
  return b.unary(ScalarOp::Log1p, b.unary(ScalarOp::Exp, x));
}

/// x * tanh(log1p(exp(x)))
int mishRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  int tanh = b.unary(ScalarOp::Tanh, softplusOf(b, x));
  return b.binary(ScalarOp::Mul, x, tanh);
}

/// x * beta > threshold ? x : log1p(exp(x * beta)) / beta.
int softplusRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  int beta = b.constant(c.type, floatAttr(c.node, "beta", 1.0));
  int threshold = b.constant(c.type, floatAttr(c.node, "threshold", 20.0));
  int scaled = b.binary(ScalarOp::Mul, x, beta);
  int smooth = b.binary(ScalarOp::Div, softplusOf(b, scaled), beta);
  int isAbove = b.binary(ScalarOp::Gt, scaled, threshold);
  return b.select(isAbove, x, smooth);
}

int whereRule(PointwiseContext &c) {
  int condition = c.builder.cast(c.raw(0), DType::Bool);
  return c.builder.select(condition, c.operand(1), c.operand(2));
}

std::map<Op, PointwiseRule> buildRules() {
  std::map<Op, PointwiseRule> rules;
#include "dynafuse/Ops/PointwiseRules.inc"
  return rules;
}

} // namespace

const PointwiseRule *findPointwiseRule(Op op) {
  static const std::map<Op, PointwiseRule> rules = buildRules();
  auto found = rules.find(op);
  return found == rules.end() ? nullptr : &found->second;
}

DType operationType(const Node &node) {
  const OpInfo *info = opInfoOf(node);
  if (info && info->rule == TypeRule::Compare)
    return computeType(promotedOperandType(node));
  return computeType(node.result()->type.dtype);
}

} // namespace dynafuse

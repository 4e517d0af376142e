//===- VectorMath.cpp - Inline f32 transcendentals that vectorize ---------===//
//
// A call to expf or erff in an inner loop stops LLVM's loop vectorizer (the
// call is opaque, and libmvec is not loaded in a Python process). These are
// the f32 functions written as straight-line LLVM IR: range reduction with
// integer bit manipulation, polynomials through llvm.fmuladd, and selects
// for the special cases, so that the vectorizer widens them like any other
// arithmetic. Error bounds (measured against glibc's libm, see
// docs/performance.md) and special values:
//   exp, exp2, sigmoid  Cephes expf polynomial, <= 2 ulp; overflow gives
//                       +inf; exp flushes results below FLT_MIN to 0 (x <
//                       -87.34, see exp32), exp2 rounds them to subnormals;
//                       NaN stays NaN.
//   log                 Cephes logf, <= 2 ulp; log(0) = -inf, log(x<0) = NaN,
//                       log(inf) = inf, subnormal inputs handled.
//   tanh                Cephes polynomial below 0.625, 1 - 2/(e^2|x| + 1)
//                       above: <= 3 ulp, saturates to +-1.
//   erf                 no divides, no branches: 1 - e^-P(|x|), P a fitted
//                       degree-8 polynomial: abs error <= 8.6e-8, relative
//                       <= 3.1e-7; erf(+-inf) = +-1.
//   expm1, log1p        Taylor series below 0.5 / the log(1+x)*x/((1+x)-1)
//                       identity: <= 3 ulp.
//   pow, sin, cos       evaluated in double (log and exp by series, sin and
//                       cos after a three-part Cody-Waite reduction), then
//                       rounded to f32: within 1 ulp of libm's powf, and
//                       within 1e-7 absolute for sin/cos while |x| < 1e9
//                       (beyond, the reduction loses bits: results stay in
//                       [-1, 1] but are not accurate; there is no
//                       Payne-Hanek reduction); every IEEE special case of
//                       powf is reproduced.
// f64 math keeps calling libm (scalar loops).
//
//===----------------------------------------------------------------------===//
#include "LLVMCodegen.h"

#include "llvm/IR/Intrinsics.h"

#include <cmath>
#include <limits>

namespace dynafuse {
namespace llvmcg {
namespace {

using llvm::Value;

/// IR construction helpers over one floating type (float or double).
class MathBuilder {
public:
  MathBuilder(llvm::IRBuilder<> &b, llvm::Type *type) : b(b), type(type) {}

  llvm::IRBuilder<> &b;
  llvm::Type *type;

  bool isDouble() const { return type->isDoubleTy(); }
  llvm::Type *intType() const {
    return isDouble() ? b.getInt64Ty() : b.getInt32Ty();
  }
  Value *c(double value) { return llvm::ConstantFP::get(type, value); }
  Value *ci(int64_t value) { return llvm::ConstantInt::get(intType(), value); }
  Value *inf() { return llvm::ConstantFP::getInfinity(type); }
  Value *nan() { return llvm::ConstantFP::getQNaN(type); }
  Value *add(Value *x, Value *y) { return b.CreateFAdd(x, y); }
  Value *sub(Value *x, Value *y) { return b.CreateFSub(x, y); }
  Value *mul(Value *x, Value *y) { return b.CreateFMul(x, y); }
  Value *div(Value *x, Value *y) { return b.CreateFDiv(x, y); }
  Value *fma(Value *x, Value *y, Value *z) {
    return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {type}, {x, y, z});
  }
  Value *unary(llvm::Intrinsic::ID id, Value *x) {
    return b.CreateUnaryIntrinsic(id, x);
  }
  Value *abs(Value *x) { return unary(llvm::Intrinsic::fabs, x); }
  Value *isNaN(Value *x) { return b.CreateFCmpUNO(x, x); }
  Value *select(Value *condition, Value *x, Value *y) {
    return b.CreateSelect(condition, x, y);
  }
  /// x clamped to [lo, hi]; NaN must have been removed before.
  Value *clamp(Value *x, double lo, double hi) {
    x = select(b.CreateFCmpOLT(x, c(lo)), c(lo), x);
    return select(b.CreateFCmpOGT(x, c(hi)), c(hi), x);
  }
  /// Horner's scheme; coefficients from the highest degree down.
  Value *poly(Value *x, std::initializer_list<double> coefficients) {
    Value *result = nullptr;
    for (double coefficient : coefficients)
      result = result ? fma(result, x, c(coefficient)) : c(coefficient);
    return result;
  }
  Value *bits(Value *x) { return b.CreateBitCast(x, intType()); }
  Value *fromBits(Value *x) { return b.CreateBitCast(x, type); }
  /// 2^n for an integer n inside the normal exponent range.
  Value *pow2(Value *n) {
    int mantissa = isDouble() ? 52 : 23, bias = isDouble() ? 1023 : 127;
    return fromBits(b.CreateShl(b.CreateAdd(n, ci(bias)), ci(mantissa)));
  }
  /// y * 2^n in two steps, so that n may reach twice the exponent range and
  /// the result rounds once (to a subnormal, or overflows to inf).
  Value *scale(Value *y, Value *n) {
    Value *half = b.CreateAShr(n, ci(1));
    return mul(mul(y, pow2(half)), pow2(b.CreateSub(n, half)));
  }
};

//===--- f32 -------------------------------------------------------------===//

/// e^r for |r| <= ln2/2 (Cephes expf).
Value *expCore(MathBuilder &m, Value *r) {
  Value *p = m.poly(r, {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3,
                        4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1});
  return m.add(m.fma(p, m.mul(r, r), r), m.c(1.0));
}

/// Below this, e^x is subnormal in f32: exp32 returns 0 there (as with
/// flush-to-zero), because computing a subnormal or underflowing result
/// takes a microcode assist of ~100 cycles per lane on x86. A causal
/// softmax exponentiates -inf for half its elements and ran 10x slower.
constexpr double kExpSmallestNormal = -87.33654475;

Value *exp32(MathBuilder &m, Value *x) {
  Value *nan = m.isNaN(x);
  Value *tiny = m.b.CreateFCmpOLT(x, m.c(kExpSmallestNormal));
  Value *clamped = m.clamp(m.select(nan, m.c(0), x), kExpSmallestNormal, 89.0);
  Value *n = m.unary(llvm::Intrinsic::roundeven,
                     m.mul(clamped, m.c(1.44269504088896341)));
  // Cody-Waite: ln2 = 0.693359375 - 2.12194440e-4 (first part exact).
  Value *r = m.fma(n, m.c(-0.693359375), clamped);
  r = m.fma(n, m.c(2.12194440e-4), r);
  Value *y = expCore(m, r);
  Value *result = m.scale(y, m.b.CreateFPToSI(n, m.intType()));
  result = m.select(tiny, m.c(0), result);
  return m.select(nan, x, result);
}

Value *exp2_32(MathBuilder &m, Value *x) {
  Value *nan = m.isNaN(x);
  Value *clamped = m.clamp(m.select(nan, m.c(0), x), -160.0, 130.0);
  Value *n = m.unary(llvm::Intrinsic::roundeven, clamped);
  Value *r = m.mul(m.sub(clamped, n), m.c(0.693147180559945309));
  Value *result = m.scale(expCore(m, r), m.b.CreateFPToSI(n, m.intType()));
  return m.select(nan, x, result);
}

Value *log32(MathBuilder &m, Value *x) {
  llvm::IRBuilder<> &b = m.b;
  // Subnormals: scale into the normal range first.
  Value *tiny = b.CreateFCmpOLT(x, m.c(std::numeric_limits<float>::min()));
  Value *scaled = m.select(tiny, m.mul(x, m.c(8388608.0)), x); // 2^23
  Value *bits = m.bits(scaled);
  Value *exponent = b.CreateSub(
      b.CreateAnd(b.CreateLShr(bits, m.ci(23)), m.ci(0xff)), m.ci(126));
  exponent = b.CreateSub(exponent, b.CreateSelect(tiny, m.ci(23), m.ci(0)));
  // Mantissa in [0.5, 1).
  Value *mant = m.fromBits(
      b.CreateOr(b.CreateAnd(bits, m.ci(0x807fffff)), m.ci(0x3f000000)));
  Value *low = b.CreateFCmpOLT(mant, m.c(0.707106781186547524));
  Value *e = b.CreateSIToFP(
      b.CreateSub(exponent, b.CreateZExt(low, m.intType())), m.type);
  Value *f = m.sub(m.select(low, m.add(mant, mant), mant), m.c(1.0));
  Value *z = m.mul(f, f);
  Value *y = m.poly(f, {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1,
                        -1.2420140846E-1, 1.4249322787E-1, -1.6668057665E-1,
                        2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1});
  y = m.mul(m.mul(y, f), z);
  y = m.fma(e, m.c(-2.12194440e-4), y);
  y = m.fma(z, m.c(-0.5), y);
  Value *result = m.fma(e, m.c(0.693359375), m.add(f, y));
  result = m.select(b.CreateFCmpOEQ(x, m.inf()), m.inf(), result);
  result = m.select(b.CreateFCmpOLT(x, m.c(0)), m.nan(), result);
  result = m.select(b.CreateFCmpOEQ(x, m.c(0)), m.c(-INFINITY), result);
  return m.select(m.isNaN(x), x, result);
}

Value *tanh32(MathBuilder &m, Value *x) {
  Value *ax = m.abs(x);
  Value *z = m.mul(x, x);
  Value *p = m.poly(z, {-5.70498872745E-3, 2.06390887954E-2, -5.37397155531E-2,
                        1.33314422036E-1, -3.33332819422E-1});
  Value *small = m.fma(m.mul(p, z), x, x);
  Value *e = exp32(m, m.add(ax, ax));
  Value *large = m.sub(m.c(1.0), m.div(m.c(2.0), m.add(e, m.c(1.0))));
  large = m.b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, large, x);
  return m.select(m.b.CreateFCmpOLT(ax, m.c(0.625)), small, large);
}

Value *erf32(MathBuilder &m, Value *x) {
  // One branch-free formula, no divides: erf(|x|) = 1 - e^-P(|x|), P a
  // degree-8 fit of -log(erfc(x)) on [0, 4] (leading term 2/sqrt(pi) x
  // exact, so tiny x keep their relative accuracy). 1 - e^-P is evaluated
  // as (1 - 2^n) - 2^n (e^r - 1), which does not cancel when P is small.
  // P stays in [0, 18]: no overflow, no subnormal, no clamping of the exp.
  // f32 evaluation: abs error <= 8.6e-8, relative <= 3.1e-7.
  llvm::IRBuilder<> &b = m.b;
  Value *ax = m.abs(x);
  ax = m.select(b.CreateFCmpOGT(ax, m.c(4.0)), m.c(4.0), ax);
  Value *q = m.poly(ax, {3.467321045257056e-05, -0.0003356445056703363,
                         0.0011205916287221982, 0.0003900478976272124,
                         -0.01945210219132681, 0.1028571886744694,
                         0.6366117100634608, 1.1283791670955126});
  Value *minusP = b.CreateFNeg(m.mul(q, ax));
  Value *n = m.unary(llvm::Intrinsic::roundeven,
                     m.mul(minusP, m.c(1.44269504088896341)));
  Value *r = m.fma(n, m.c(-0.693359375), minusP);
  r = m.fma(n, m.c(2.12194440e-4), r);
  // e^r - 1 = r + r^2 q(r), q a degree-4 fit on [-ln2/2, ln2/2] (error
  // 3.1e-9, one term fewer than expf's: erf needs absolute accuracy only).
  Value *poly =
      m.poly(r, {0.0013950469839948151, 0.008368873715729492,
                 0.04166620614007093, 0.16666518970848745, 0.5000000095073687});
  Value *expMinusOne = m.fma(poly, m.mul(r, r), r);
  Value *scale = m.pow2(b.CreateFPToSI(n, m.intType()));
  Value *result = m.sub(m.sub(m.c(1.0), scale), m.mul(scale, expMinusOne));
  result = b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, result, x);
  return m.select(m.isNaN(x), x, result);
}

Value *expm1_32(MathBuilder &m, Value *x) {
  // x + x^2/2! + ... + x^9/9!: truncation below 6e-10 relative for |x|<0.5.
  Value *p = m.poly(x, {1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720,
                        1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5});
  Value *small = m.fma(m.mul(p, x), x, x);
  Value *large = m.sub(exp32(m, x), m.c(1.0));
  return m.select(m.b.CreateFCmpOLT(m.abs(x), m.c(0.5)), small, large);
}

Value *log1p32(MathBuilder &m, Value *x) {
  Value *u = m.add(x, m.c(1.0));
  Value *general = m.mul(log32(m, u), m.div(x, m.sub(u, m.c(1.0))));
  Value *result = m.select(m.b.CreateFCmpOEQ(u, m.c(1.0)), x, general);
  return m.select(m.b.CreateFCmpOEQ(x, m.inf()), x, result);
}

//===--- f64 helpers for pow, sin and cos of f32 values -------------------===//

/// log(x) for positive finite normal doubles, by the atanh series.
Value *log64(MathBuilder &d, Value *x) {
  llvm::IRBuilder<> &b = d.b;
  Value *bits = d.bits(x);
  Value *exponent = b.CreateSub(
      b.CreateAnd(b.CreateLShr(bits, d.ci(52)), d.ci(0x7ff)), d.ci(1022));
  Value *mant = d.fromBits(b.CreateOr(
      b.CreateAnd(bits, d.ci(0x800fffffffffffffLL)), d.ci(0x3fe0000000000000)));
  Value *low = b.CreateFCmpOLT(mant, d.c(0.707106781186547524));
  Value *e = b.CreateSIToFP(
      b.CreateSub(exponent, b.CreateZExt(low, d.intType())), d.type);
  mant = d.select(low, d.add(mant, mant), mant);
  Value *s = d.div(d.sub(mant, d.c(1.0)), d.add(mant, d.c(1.0)));
  Value *s2 = d.mul(s, s);
  Value *series =
      d.poly(s2, {1.0 / 23, 1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13,
                  1.0 / 11, 1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3, 1.0});
  return d.fma(e, d.c(0.693147180559945309), d.mul(d.add(s, s), series));
}

/// e^t for t in [-300, 300] (clamped), NaN-free input.
Value *exp64(MathBuilder &d, Value *t) {
  t = d.clamp(t, -300.0, 300.0);
  Value *n =
      d.unary(llvm::Intrinsic::roundeven, d.mul(t, d.c(1.4426950408889634)));
  Value *r = d.fma(n, d.c(-6.93147180369123816490e-01), t);
  r = d.fma(n, d.c(-1.90821492927058770002e-10), r);
  Value *p =
      d.poly(r, {1.0 / 6227020800, 1.0 / 479001600, 1.0 / 39916800,
                 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040,
                 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0});
  return d.mul(p, d.pow2(d.b.CreateFPToSI(n, d.intType())));
}

Value *pow32(llvm::IRBuilder<> &b, Value *a32, Value *b32) {
  MathBuilder d(b, b.getDoubleTy());
  Value *a = b.CreateFPExt(a32, d.type), *y = b.CreateFPExt(b32, d.type);
  Value *ax = d.abs(a);
  Value *safe = d.select(
      b.CreateAnd(b.CreateFCmpOGT(ax, d.c(0)), b.CreateFCmpOLT(ax, d.inf())),
      ax, d.c(1.0));
  Value *logA = log64(d, safe);
  logA = d.select(b.CreateFCmpOEQ(ax, d.c(0)), d.c(-INFINITY), logA);
  logA = d.select(b.CreateFCmpOEQ(ax, d.inf()), d.inf(), logA);
  logA = d.select(d.isNaN(ax), ax, logA);
  Value *t = d.mul(y, logA); // NaN for a NaN operand, or 0 * inf.
  Value *tNaN = d.isNaN(t);
  Value *result = d.select(tNaN, d.nan(), exp64(d, d.select(tNaN, d.c(0), t)));
  result = d.select(b.CreateFCmpOGT(t, d.c(300)), d.inf(), result);
  result = d.select(b.CreateFCmpOLT(t, d.c(-300)), d.c(0), result);
  // Negative bases: odd integer exponents flip the sign, other non-integer
  // ones give NaN (for finite bases).
  Value *isInteger = b.CreateFCmpOEQ(d.unary(llvm::Intrinsic::floor, y), y);
  Value *halfY = d.mul(y, d.c(0.5));
  Value *odd = b.CreateAnd(
      isInteger,
      b.CreateFCmpUNE(d.unary(llvm::Intrinsic::floor, halfY), halfY));
  Value *negative = b.CreateICmpSLT(d.bits(a), d.ci(0)); // sign bit
  result = d.select(b.CreateAnd(negative, odd), d.b.CreateFNeg(result), result);
  Value *finiteNegative = b.CreateAnd(b.CreateFCmpOLT(a, d.c(0)),
                                      b.CreateFCmpOGT(a, d.c(-INFINITY)));
  result = d.select(b.CreateAnd(finiteNegative, b.CreateNot(isInteger)),
                    d.nan(), result);
  // pow(+-1, +-inf) = 1, pow(1, y) = 1, pow(x, 0) = 1, even for NaN.
  Value *one = b.CreateOr(
      b.CreateAnd(b.CreateFCmpOEQ(ax, d.c(1.0)),
                  b.CreateFCmpOEQ(d.abs(y), d.inf())),
      b.CreateOr(b.CreateFCmpOEQ(a, d.c(1.0)), b.CreateFCmpOEQ(y, d.c(0))));
  result = d.select(one, d.c(1.0), result);
  return b.CreateFPTrunc(result, b.getFloatTy());
}

Value *sinCos32(llvm::IRBuilder<> &b, bool wantSin, Value *x32) {
  MathBuilder d(b, b.getDoubleTy());
  Value *x = b.CreateFPExt(x32, d.type);
  Value *finite = b.CreateFCmpOLT(d.abs(x), d.inf());
  x = d.select(finite, x, d.c(0));
  Value *n =
      d.unary(llvm::Intrinsic::roundeven, d.mul(x, d.c(0.636619772367581343)));
  // pi/2 in three parts (fdlibm's pio2_1, pio2_2, pio2_2t).
  Value *r = d.fma(n, d.c(-1.57079632673412561417e+00), x);
  r = d.fma(n, d.c(-6.07710050630396597660e-11), r);
  r = d.fma(n, d.c(-2.02226624879595063154e-21), r);
  Value *r2 = d.mul(r, r);
  Value *sinPoly =
      d.poly(r2, {-1.0 / 1307674368000, 1.0 / 6227020800, -1.0 / 39916800,
                  1.0 / 362880, -1.0 / 5040, 1.0 / 120, -1.0 / 6});
  Value *sinR = d.fma(d.mul(sinPoly, r2), r, r);
  Value *cosR = d.poly(r2, {1.0 / 20922789888000, -1.0 / 87178291200,
                            1.0 / 479001600, -1.0 / 3628800, 1.0 / 40320,
                            -1.0 / 720, 1.0 / 24, -0.5, 1.0});
  // Quadrant n mod 4, exact in double while |n| < 2^53.
  Value *quadrant = d.sub(
      n, d.mul(d.c(4.0), d.unary(llvm::Intrinsic::floor, d.mul(n, d.c(0.25)))));
  if (!wantSin)
    quadrant = d.add(quadrant, d.c(1.0)); // cos(x) = sin(x + pi/2)
  Value *odd = b.CreateOr(b.CreateFCmpOEQ(quadrant, d.c(1.0)),
                          b.CreateFCmpOEQ(quadrant, d.c(3.0)));
  Value *negate = b.CreateOr(b.CreateFCmpOEQ(quadrant, d.c(2.0)),
                             b.CreateFCmpOEQ(quadrant, d.c(3.0)));
  Value *result = d.select(odd, cosR, sinR);
  result = d.select(negate, b.CreateFNeg(result), result);
  // Past |x| ~ 1e9 the reduction loses accuracy; keep the result in range.
  result = d.clamp(result, -1.0, 1.0);
  result = d.select(finite, result, d.nan());
  Value *narrowed = b.CreateFPTrunc(result, b.getFloatTy());
  // NaN in, NaN out (keeping its payload, like libm).
  return b.CreateSelect(b.CreateFCmpUNO(x32, x32), x32, narrowed);
}

} // namespace

static Value *emitOddMath(llvm::IRBuilder<> &builder, MathBuilder &m, ScalarOp op,
                   Value *x);
static Value *emitOtherMath(llvm::IRBuilder<> &builder, MathBuilder &m, ScalarOp op,
                     llvm::ArrayRef<Value *> operands);

/// The polynomial's result, or x itself at +-0: odd functions (tanh, erf,
/// expm1, log1p, sin) keep the sign of a zero as libm does (1 / tanh(-0.0)
/// is -inf in eager).
static Value *keepSignedZero(llvm::IRBuilder<> &builder, Value *x, Value *result) {
  Value *zero = builder.CreateFCmpOEQ(x, llvm::ConstantFP::get(x->getType(), 0.0));
  return builder.CreateSelect(zero, x, result);
}

Value *emitInlineMath(llvm::IRBuilder<> &builder, ScalarOp op, DType type,
                      llvm::ArrayRef<Value *> operands) {
  if (type != DType::F32)
    return nullptr;
  MathBuilder m(builder, builder.getFloatTy());
  Value *x = operands[0];
  switch (op) {
  case ScalarOp::Tanh:
  case ScalarOp::Erf:
  case ScalarOp::Expm1:
  case ScalarOp::Log1p:
  case ScalarOp::Sin:
    return keepSignedZero(builder, x, emitOddMath(builder, m, op, x));
  default:
    return emitOtherMath(builder, m, op, operands);
  }
}

static Value *emitOddMath(llvm::IRBuilder<> &builder, MathBuilder &m, ScalarOp op,
                   Value *x) {
  switch (op) {
  case ScalarOp::Tanh:
    return tanh32(m, x);
  case ScalarOp::Erf:
    return erf32(m, x);
  case ScalarOp::Expm1:
    return expm1_32(m, x);
  case ScalarOp::Log1p:
    return log1p32(m, x);
  default:
    return sinCos32(builder, true, x);
  }
}

static Value *emitOtherMath(llvm::IRBuilder<> &builder, MathBuilder &m, ScalarOp op,
                     llvm::ArrayRef<Value *> operands) {
  Value *x = operands[0];
  switch (op) {
  case ScalarOp::Exp:
    return exp32(m, x);
  case ScalarOp::Exp2:
    return exp2_32(m, x);
  case ScalarOp::Log:
    return log32(m, x);
  case ScalarOp::Sigmoid:
    return m.div(m.c(1.0), m.add(m.c(1.0), exp32(m, builder.CreateFNeg(x))));
  case ScalarOp::Cos:
    return sinCos32(builder, false, x);
  case ScalarOp::Pow:
    return pow32(builder, operands[0], operands[1]);
  default:
    return nullptr;
  }
}

} // namespace llvmcg
} // namespace dynafuse

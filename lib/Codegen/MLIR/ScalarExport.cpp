//===- ScalarExport.cpp - Scalar instructions as arith and math ops -------===//
//
// Each loop-IR instruction becomes arith/math ops with the interpreter's
// meaning (ScalarSemantics.h), written out where MLIR's op differs:
// float-to-int casts go through i64 (NaN and out of range: INT64_MIN) then
// wrap; i64 to f32 goes through f64; integer division, fmod and remainder
// give 0 for a zero divisor (and i64 MIN / -1; i32 MIN / -1 wraps to MIN
// as in the interpreter's i64 arithmetic); remainder is
// Python's; `random` is the counter-based splitmix hash in i64 arithmetic.
// Float max/min are arith.maxf/minf, which propagate NaN in MLIR 16.
//
//===----------------------------------------------------------------------===//
#include "MLIRCodegen.h"

#include "dynafuse/Loop/ScalarSemantics.h"
#include "dynafuse/Support/Error.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace dynafuse {
namespace mlircg {

using mlir::Value;
namespace arith = mlir::arith;
namespace math = mlir::math;

Value KernelExporter::constantIndex(int64_t value) {
  return constant(builder.getIndexAttr(value));
}

Value KernelExporter::constantInt(int64_t value, mlir::Type type) {
  return constant(builder.getIntegerAttr(type, value));
}

Value KernelExporter::constantFloat(double value, mlir::Type type) {
  return constant(builder.getFloatAttr(type, value));
}

/// Constants live once each at the top of the function, where every region
/// sees them.
Value KernelExporter::constant(mlir::TypedAttr value) {
  auto found = constants.find(value);
  if (found != constants.end())
    return found->second;
  mlir::OpBuilder::InsertionGuard guard(builder);
  if (lastConstant)
    builder.setInsertionPointAfter(lastConstant);
  else
    builder.setInsertionPointToStart(entryBlock);
  auto op = builder.create<arith::ConstantOp>(loc, value);
  lastConstant = op;
  Value result = op;
  constants[value] = result;
  return result;
}

Value KernelExporter::emitIf(Value condition, mlir::Type resultType,
                             const std::function<Value()> &thenBranch,
                             const std::function<Value()> &elseBranch) {
  std::vector<mlir::Type> types;
  if (resultType)
    types.push_back(resultType);
  auto ifOp = builder.create<mlir::scf::IfOp>(loc, types, condition,
                                              /*withElseRegion=*/true);
  auto fill = [&](mlir::Block *block, const std::function<Value()> &branch) {
    mlir::OpBuilder::InsertionGuard guard(builder);
    // Without results the builder already placed an scf.yield.
    if (!block->empty() && block->back().hasTrait<mlir::OpTrait::IsTerminator>())
      builder.setInsertionPoint(&block->back());
    else
      builder.setInsertionPointToEnd(block);
    Value result = branch();
    if (resultType)
      builder.create<mlir::scf::YieldOp>(loc, result);
    else if (block->empty() ||
             !block->back().hasTrait<mlir::OpTrait::IsTerminator>())
      builder.create<mlir::scf::YieldOp>(loc);
  };
  fill(ifOp.thenBlock(), thenBranch);
  fill(ifOp.elseBlock(), elseBranch);
  return resultType ? ifOp.getResult(0) : Value();
}

void KernelExporter::emitInstruction(int index) {
  const Instr &instr = kernel.instrs[index];
  auto operand = [&](int k) {
    Value value = values[instr.args[k]];
    if (!value)
      failAt(std::string("'") + scalarOpName(instr.op) +
             "' uses a value not defined before it");
    return value;
  };
  auto operandType = [&](int k) { return kernel.instrs[instr.args[k]].type; };
  switch (instr.op) {
  case ScalarOp::Const:
    values[index] = emitConstant(instr);
    return;
  case ScalarOp::Load:
    values[index] = emitLoad(instr);
    return;
  case ScalarOp::Store:
    emitStore(instr);
    return;
  case ScalarOp::Index:
    values[index] = builder.create<arith::IndexCastOp>(
        loc, builder.getI64Type(), emitIndex(instr.index[0]));
    return;
  case ScalarOp::Reduced:
    return; // Defined by its reduce statement.
  case ScalarOp::Cast:
    values[index] = emitCast(operandType(0), instr.type, operand(0));
    return;
  case ScalarOp::Select:
    values[index] = builder.create<arith::SelectOp>(loc, operand(0), operand(1),
                                                    operand(2));
    return;
  case ScalarOp::Random:
    values[index] = emitRandom(instr.type, operand(0), operand(1));
    return;
  default:
    break;
  }
  DType type = operandType(0);
  if (scalarOpArity(instr.op) == 1)
    values[index] = emitUnary(instr.op, type, operand(0));
  else if (isFloating(type))
    values[index] = emitFloatBinary(instr.op, operand(0), operand(1));
  else
    values[index] = emitIntBinary(instr.op, type, operand(0), operand(1));
}

Value KernelExporter::emitConstant(const Instr &instr) {
  ScalarValue value = constantValue(instr);
  mlir::Type type = valueType(context, instr.type);
  if (isFloating(instr.type))
    return constantFloat(value.f, type);
  return constantInt(value.i, type);
}

Value KernelExporter::emitCast(DType from, DType to, Value value) {
  mlir::Type target = valueType(context, to);
  if (computeType(from) == computeType(to))
    return value;
  if (to == DType::Bool) {
    if (isFloating(from))
      return builder.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNE,
                                           value, constantFloat(0, value.getType()));
    return builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, value,
                                         constantInt(0, value.getType()));
  }
  if (isFloating(to)) {
    if (isFloating(from)) {
      if (target.getIntOrFloatBitWidth() > value.getType().getIntOrFloatBitWidth())
        return builder.create<arith::ExtFOp>(loc, target, value);
      return builder.create<arith::TruncFOp>(loc, target, value);
    }
    if (from == DType::Bool)
      return builder.create<arith::UIToFPOp>(loc, target, value);
    // Through f64, as the interpreter: i64 -> f32 rounds twice.
    if (from == DType::I64 && to == DType::F32)
      return builder.create<arith::TruncFOp>(
          loc, target,
          builder.create<arith::SIToFPOp>(loc, builder.getF64Type(), value));
    return builder.create<arith::SIToFPOp>(loc, target, value);
  }
  // To i32 or i64: floats truncate toward zero into i64, then wrap.
  if (isFloating(from))
    value = truncateToInt64(value);
  else if (from == DType::Bool)
    value = builder.create<arith::ExtUIOp>(loc, builder.getI64Type(), value);
  unsigned have = value.getType().getIntOrFloatBitWidth();
  unsigned want = target.getIntOrFloatBitWidth();
  if (have < want)
    return builder.create<arith::ExtSIOp>(loc, target, value);
  if (have > want)
    return builder.create<arith::TruncIOp>(loc, target, value);
  return value;
}

/// truncateToInt64 (ScalarSemantics.h): fptosi where in range, else
/// INT64_MIN.
Value KernelExporter::truncateToInt64(Value x) {
  mlir::Type type = x.getType();
  // One statement each: argument evaluation order would decide op order.
  Value atLeast = builder.create<arith::CmpFOp>(
      loc, arith::CmpFPredicate::OGE, x, constantFloat(-0x1p63, type));
  Value below = builder.create<arith::CmpFOp>(
      loc, arith::CmpFPredicate::OLT, x, constantFloat(0x1p63, type));
  Value inRange = builder.create<arith::AndIOp>(loc, atLeast, below);
  Value converted =
      builder.create<arith::FPToSIOp>(loc, builder.getI64Type(), x);
  return builder.create<arith::SelectOp>(
      loc, inRange, converted, constantInt(INT64_MIN, builder.getI64Type()));
}

Value KernelExporter::emitUnary(ScalarOp op, DType type, Value x) {
  mlir::Type t = x.getType();
  if (op == ScalarOp::Not || (op == ScalarOp::BitNot && type == DType::Bool))
    return builder.create<arith::XOrIOp>(loc, x, constantInt(1, t));
  if (op == ScalarOp::BitNot)
    return builder.create<arith::XOrIOp>(loc, x, constantInt(-1, t));
  if (!isFloating(type)) {
    Value negated = builder.create<arith::SubIOp>(loc, constantInt(0, t), x);
    if (op == ScalarOp::Neg)
      return negated;
    if (op == ScalarOp::Abs) {
      Value negative = builder.create<arith::CmpIOp>(
          loc, arith::CmpIPredicate::slt, x, constantInt(0, t));
      return builder.create<arith::SelectOp>(loc, negative, negated, x);
    }
    failAt(std::string("'") + scalarOpName(op) + "' needs a float operand");
  }
  switch (op) {
  case ScalarOp::Neg:
    return builder.create<arith::NegFOp>(loc, x);
  case ScalarOp::Abs:
    return builder.create<math::AbsFOp>(loc, x);
  case ScalarOp::Exp:
    return builder.create<math::ExpOp>(loc, x);
  case ScalarOp::Log:
    return builder.create<math::LogOp>(loc, x);
  case ScalarOp::Tanh:
    return builder.create<math::TanhOp>(loc, x);
  case ScalarOp::Sqrt:
    return builder.create<math::SqrtOp>(loc, x);
  case ScalarOp::Rsqrt:
    return builder.create<math::RsqrtOp>(loc, x);
  case ScalarOp::Erf:
    return builder.create<math::ErfOp>(loc, x);
  case ScalarOp::Exp2:
    return builder.create<math::Exp2Op>(loc, x);
  case ScalarOp::Log1p:
    return builder.create<math::Log1pOp>(loc, x);
  case ScalarOp::Expm1:
    return builder.create<math::ExpM1Op>(loc, x);
  case ScalarOp::Sin:
    return builder.create<math::SinOp>(loc, x);
  case ScalarOp::Cos:
    return builder.create<math::CosOp>(loc, x);
  case ScalarOp::Floor:
    return builder.create<math::FloorOp>(loc, x);
  case ScalarOp::Ceil:
    return builder.create<math::CeilOp>(loc, x);
  case ScalarOp::Round:
    return builder.create<math::RoundEvenOp>(loc, x);
  case ScalarOp::Trunc:
    return builder.create<math::TruncOp>(loc, x);
  case ScalarOp::RoundF16:
    return builder.create<arith::ExtFOp>(
        loc, t, builder.create<arith::TruncFOp>(loc, builder.getF16Type(), x));
  case ScalarOp::RoundBF16: {
    // The upper half of the rounded bits, as a bf16 store and load.
    Value upper = builder.create<arith::AndIOp>(
        loc, bf16RoundedBits(x), constantInt(-65536, builder.getI32Type()));
    return builder.create<arith::BitcastOp>(loc, t, upper);
  }
  case ScalarOp::Sigmoid: {
    // 1 / (1 + exp(-x))
    Value one = constantFloat(1, t);
    Value e = builder.create<math::ExpOp>(loc, builder.create<arith::NegFOp>(loc, x));
    return builder.create<arith::DivFOp>(
        loc, one, builder.create<arith::AddFOp>(loc, one, e));
  }
  default:
    failAt(std::string("'") + scalarOpName(op) + "' is not a unary float op");
  }
}

namespace {
arith::CmpFPredicate floatPredicate(ScalarOp op) {
  switch (op) {
  case ScalarOp::Eq:
    return arith::CmpFPredicate::OEQ;
  case ScalarOp::Ne:
    return arith::CmpFPredicate::UNE; // NaN != anything
  case ScalarOp::Lt:
    return arith::CmpFPredicate::OLT;
  case ScalarOp::Le:
    return arith::CmpFPredicate::OLE;
  case ScalarOp::Gt:
    return arith::CmpFPredicate::OGT;
  default:
    return arith::CmpFPredicate::OGE;
  }
}

arith::CmpIPredicate intPredicate(ScalarOp op, bool isUnsigned) {
  switch (op) {
  case ScalarOp::Eq:
    return arith::CmpIPredicate::eq;
  case ScalarOp::Ne:
    return arith::CmpIPredicate::ne;
  case ScalarOp::Lt:
    return isUnsigned ? arith::CmpIPredicate::ult : arith::CmpIPredicate::slt;
  case ScalarOp::Le:
    return isUnsigned ? arith::CmpIPredicate::ule : arith::CmpIPredicate::sle;
  case ScalarOp::Gt:
    return isUnsigned ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt;
  default:
    return isUnsigned ? arith::CmpIPredicate::uge : arith::CmpIPredicate::sge;
  }
}
} // namespace

Value KernelExporter::emitFloatBinary(ScalarOp op, Value a, Value b) {
  if (isComparison(op))
    return builder.create<arith::CmpFOp>(loc, floatPredicate(op), a, b);
  switch (op) {
  case ScalarOp::Add:
    return builder.create<arith::AddFOp>(loc, a, b);
  case ScalarOp::Sub:
    return builder.create<arith::SubFOp>(loc, a, b);
  case ScalarOp::Mul:
    return builder.create<arith::MulFOp>(loc, a, b);
  case ScalarOp::Div:
    return builder.create<arith::DivFOp>(loc, a, b);
  case ScalarOp::Max:
    return builder.create<arith::MaxFOp>(loc, a, b);
  case ScalarOp::Min:
    return builder.create<arith::MinFOp>(loc, a, b);
  case ScalarOp::Pow:
    return builder.create<math::PowFOp>(loc, a, b);
  case ScalarOp::Fmod:
    return builder.create<arith::RemFOp>(loc, a, b);
  case ScalarOp::Remainder: {
    // fmod, moved by one divisor when nonzero with the other sign than b.
    Value r = builder.create<arith::RemFOp>(loc, a, b);
    Value zero = constantFloat(0, a.getType());
    Value nonzero =
        builder.create<arith::CmpFOp>(loc, arith::CmpFPredicate::ONE, r, zero);
    Value rNegative =
        builder.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, r, zero);
    Value bNegative =
        builder.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, b, zero);
    Value differ = builder.create<arith::XOrIOp>(loc, rNegative, bNegative);
    Value fix = builder.create<arith::AndIOp>(loc, nonzero, differ);
    return builder.create<arith::SelectOp>(
        loc, fix, builder.create<arith::AddFOp>(loc, r, b), r);
  }
  default:
    failAt(std::string("'") + scalarOpName(op) + "' is not defined on floats");
  }
}

Value KernelExporter::emitIntBinary(ScalarOp op, DType type, Value a, Value b) {
  mlir::Type t = a.getType();
  bool isBool = type == DType::Bool;
  if (isComparison(op))
    return builder.create<arith::CmpIOp>(loc, intPredicate(op, isBool), a, b);
  auto truth = [&](Value v) -> Value {
    if (isBool)
      return v;
    return builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, v,
                                         constantInt(0, t));
  };
  auto asType = [&](Value flag) -> Value {
    return isBool ? flag : Value(builder.create<arith::ExtUIOp>(loc, t, flag));
  };
  switch (op) {
  case ScalarOp::And:
    return asType(builder.create<arith::AndIOp>(loc, truth(a), truth(b)));
  case ScalarOp::Or:
    return asType(builder.create<arith::OrIOp>(loc, truth(a), truth(b)));
  case ScalarOp::Xor:
    return asType(builder.create<arith::XOrIOp>(loc, truth(a), truth(b)));
  case ScalarOp::BitAnd:
    return builder.create<arith::AndIOp>(loc, a, b);
  case ScalarOp::BitOr:
    return builder.create<arith::OrIOp>(loc, a, b);
  case ScalarOp::BitXor:
    return builder.create<arith::XOrIOp>(loc, a, b);
  default:
    break;
  }
  if (isBool) {
    // Bool arithmetic is defined through i64 and made 0/1 again.
    auto widen = [&](Value v) -> Value {
      return builder.create<arith::ExtUIOp>(loc, builder.getI64Type(), v);
    };
    Value wide = emitIntBinary(op, DType::I64, widen(a), widen(b));
    return builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, wide,
                                         constantInt(0, builder.getI64Type()));
  }
  switch (op) {
  case ScalarOp::Add:
    return builder.create<arith::AddIOp>(loc, a, b);
  case ScalarOp::Sub:
    return builder.create<arith::SubIOp>(loc, a, b);
  case ScalarOp::Mul:
    return builder.create<arith::MulIOp>(loc, a, b);
  case ScalarOp::Max:
    return builder.create<arith::MaxSIOp>(loc, a, b);
  case ScalarOp::Min:
    return builder.create<arith::MinSIOp>(loc, a, b);
  case ScalarOp::Pow: {
    // As the interpreter: through f64 pow, truncated, wrapped to the type.
    mlir::Type f64 = builder.getF64Type();
    Value fa = builder.create<arith::SIToFPOp>(loc, f64, a);
    Value fb = builder.create<arith::SIToFPOp>(loc, f64, b);
    Value p = builder.create<math::PowFOp>(loc, fa, fb);
    Value wide = truncateToInt64(p);
    if (type == DType::I32)
      return builder.create<arith::TruncIOp>(loc, t, wide);
    return wide;
  }
  case ScalarOp::Div:
  case ScalarOp::Fmod:
  case ScalarOp::Remainder: {
    // A zero divisor, or MIN / -1, gives 0 instead of trapping.
    // The interpreter divides in i64 and wraps: i32 MIN / -1 is MIN again
    // (and its fmod and remainder 0); i64 MIN / -1 gives 0 like a zero
    // divisor. Either way MIN by -1 must not reach the divide, which traps.
    Value zero = constantInt(0, t);
    Value minusOne = constantInt(-1, t);
    int64_t minimum = type == DType::I32 ? INT32_MIN : INT64_MIN;
    Value byZero =
        builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, b, zero);
    Value overflow = builder.create<arith::AndIOp>(
        loc,
        builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, b,
                                      minusOne),
        builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, a,
                                      constantInt(minimum, t)));
    // A zero divisor is reported (eager raises ZeroDivisionError; the
    // runtime raises after the kernel and the frame reruns eagerly).
    emitIf(
        byZero, t,
        [&]() -> Value {
          mlir::Type i64 = builder.getI64Type();
          auto wide = [&](Value v) -> Value {
            return type == DType::I64
                       ? v
                       : Value(builder.create<arith::ExtSIOp>(loc, i64, v));
          };
          declareDivisionError();
          builder.create<mlir::func::CallOp>(loc, "dynafuse_division_error",
                                             mlir::TypeRange{},
                                             mlir::ValueRange{wide(a), wide(b)});
          return zero;
        },
        [&]() -> Value { return zero; });
    Value bad = builder.create<arith::OrIOp>(loc, byZero, overflow);
    // What a bad divisor gives: 0, except i32 MIN / -1, which is MIN.
    Value badResult = zero;
    if (op == ScalarOp::Div && type == DType::I32)
      badResult = builder.create<arith::SelectOp>(loc, overflow, a, zero);
    Value divisor =
        builder.create<arith::SelectOp>(loc, bad, constantInt(1, t), b);
    Value result;
    if (op == ScalarOp::Div)
      result = builder.create<arith::DivSIOp>(loc, a, divisor);
    else if (op == ScalarOp::Fmod)
      result = builder.create<arith::RemSIOp>(loc, a, divisor);
    else {
      // Python's: the truncated remainder moved by one divisor when it is
      // nonzero with the other sign. Not through arith.floordivsi, whose
      // expansion computes (1 - a) / b on both paths and traps for
      // a = MIN + 1, b = -1.
      Value r = builder.create<arith::RemSIOp>(loc, a, divisor);
      Value nonzero =
          builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, r, zero);
      Value signsDiffer = builder.create<arith::CmpIOp>(
          loc, arith::CmpIPredicate::slt,
          builder.create<arith::XOrIOp>(loc, r, divisor), zero);
      Value fix = builder.create<arith::AndIOp>(loc, nonzero, signsDiffer);
      result = builder.create<arith::SelectOp>(
          loc, fix, builder.create<arith::AddIOp>(loc, r, divisor), r);
    }
    return builder.create<arith::SelectOp>(loc, bad, badResult, result);
  }
  default:
    failAt(std::string("'") + scalarOpName(op) + "' is not defined on integers");
  }
}

Value KernelExporter::emitRandom(DType type, Value key, Value counter) {
  // splitmix64 finalizer of key ^ (counter * golden) + golden; the top 24
  // bits scaled by 2^-24 (ScalarSemantics.h, counterRandom).
  mlir::Type i64 = builder.getI64Type();
  auto constant = [&](uint64_t value) { return constantInt(int64_t(value), i64); };
  auto mixStep = [&](Value z, int shift, uint64_t multiplier) -> Value {
    Value shifted = builder.create<arith::ShRUIOp>(loc, z, constant(shift));
    return builder.create<arith::MulIOp>(
        loc, builder.create<arith::XOrIOp>(loc, z, shifted),
        constant(multiplier));
  };
  Value z = builder.create<arith::XOrIOp>(
      loc, key, builder.create<arith::MulIOp>(loc, counter,
                                              constant(kRandomGolden)));
  z = builder.create<arith::AddIOp>(loc, z, constant(kRandomGolden));
  z = mixStep(z, 30, kRandomMix1);
  z = mixStep(z, 27, kRandomMix2);
  z = builder.create<arith::XOrIOp>(
      loc, z, builder.create<arith::ShRUIOp>(loc, z, constant(31)));
  Value top = builder.create<arith::ShRUIOp>(loc, z, constant(40));
  mlir::Type result = valueType(context, type);
  Value asFloat = builder.create<arith::UIToFPOp>(loc, result, top);
  return builder.create<arith::MulFOp>(loc, asFloat,
                                       constantFloat(0x1p-24, result));
}

} // namespace mlircg
} // namespace dynafuse

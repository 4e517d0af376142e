//===- ScalarOps.cpp - One loop-IR scalar instruction to LLVM IR ----------===//
//
// The semantics match the reference interpreter (lib/Loop/LoopInterpreter.cpp)
// bit for bit wherever C++ defines them:
// - f32 computes in float, f64 in double; no fast-math flags at all.
// - max/min return NaN when either operand is NaN, else `a > b ? a : b`.
// - Integer arithmetic wraps; integer div truncates, gives 0 for a zero
//   divisor and never traps on MIN / -1.
// - bool is i1 and behaves like the interpreter's 0/1 integers narrowed back
//   to bool (add is or, mul is and, comparisons are unsigned).
// - Casts: float to int truncates through i64 then wraps; int to f32 rounds
//   through f64; anything to bool is `x != 0` (NaN is true).
// - f32 transcendental functions are inline polynomials (VectorMath.cpp,
//   within a few ulp of libm) so that loops vectorize; f64 ones call the
//   same libm functions the interpreter does (through the JIT's symbol
//   map); floor, ceil, trunc and round
//   (half to even) are LLVM intrinsics; float fmod is frem (C fmod).
// - Integer fmod truncates and remainder floors (Python); a zero divisor
//   gives 0 and neither traps on MIN and -1.
//
//===----------------------------------------------------------------------===//
#include "LLVMCodegen.h"

#include "dynafuse/Loop/ScalarSemantics.h"
#include "dynafuse/Support/Error.h"

#include "llvm/IR/Intrinsics.h"

namespace dynafuse {
namespace llvmcg {
namespace {

using llvm::IRBuilder;
using llvm::Value;

/// Calls the f32 or f64 flavour of a libm function (expf or exp, ...).
Value *callLibm(IRBuilder<> &builder, DType type, const std::string &name,
                llvm::ArrayRef<Value *> operands) {
  std::string symbol = type == DType::F32 ? name + "f" : name;
  return callRuntimeFunction(builder, symbol, operands);
}

Value *floatConstant(IRBuilder<> &builder, DType type, double value) {
  return llvm::ConstantFP::get(scalarType(builder.getContext(), type), value);
}

Value *emitFloatUnary(IRBuilder<> &builder, ScalarOp op, DType type, Value *x) {
  if (Value *inlined = emitInlineMath(builder, op, type, {x}))
    return inlined;
  switch (op) {
  case ScalarOp::Neg:
    return builder.CreateFNeg(x);
  case ScalarOp::Abs:
    return builder.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  case ScalarOp::Exp:
    return callLibm(builder, type, "exp", {x});
  case ScalarOp::Log:
    return callLibm(builder, type, "log", {x});
  case ScalarOp::Tanh:
    return callLibm(builder, type, "tanh", {x});
  case ScalarOp::Erf:
    return callLibm(builder, type, "erf", {x});
  case ScalarOp::Sqrt:
    return builder.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
  case ScalarOp::Rsqrt:
    return builder.CreateFDiv(
        floatConstant(builder, type, 1.0),
        builder.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
  case ScalarOp::Sigmoid: {
    Value *exp = callLibm(builder, type, "exp", {builder.CreateFNeg(x)});
    Value *one = floatConstant(builder, type, 1.0);
    return builder.CreateFDiv(one, builder.CreateFAdd(one, exp));
  }
  case ScalarOp::Exp2:
    return callLibm(builder, type, "exp2", {x});
  case ScalarOp::Log1p:
    return callLibm(builder, type, "log1p", {x});
  case ScalarOp::Expm1:
    return callLibm(builder, type, "expm1", {x});
  case ScalarOp::Sin:
    return callLibm(builder, type, "sin", {x});
  case ScalarOp::Cos:
    return callLibm(builder, type, "cos", {x});
  case ScalarOp::Floor:
    return builder.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x);
  case ScalarOp::Ceil:
    return builder.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x);
  case ScalarOp::Trunc:
    return builder.CreateUnaryIntrinsic(llvm::Intrinsic::trunc, x);
  case ScalarOp::Round: // Half to even, like nearbyint and torch.round.
    return builder.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, x);
  case ScalarOp::RoundF16: // Through the helpers loads and stores use.
    return callRuntimeFunction(
        builder, "dynafuse_f16_to_f32",
        {callRuntimeFunction(builder, "dynafuse_f32_to_f16", {x})});
  case ScalarOp::RoundBF16:
    return emitRoundToBF16(builder, x);
  default:
    break;
  }
  fail(std::string("LLVM backend: '") + scalarOpName(op) +
       "' is not a unary float op");
}

/// The f32's bits rounded to nearest even at bf16's 16 high bits (the low
/// 16 bits not cleared), or NaN's bits with the quiet bit set.
Value *bf16RoundedBits(IRBuilder<> &builder, Value *value) {
  Value *bits = builder.CreateBitCast(value, builder.getInt32Ty());
  Value *lsb =
      builder.CreateAnd(builder.CreateLShr(bits, 16), builder.getInt32(1));
  Value *rounded =
      builder.CreateAdd(bits, builder.CreateAdd(lsb, builder.getInt32(0x7fff)));
  Value *quiet = builder.CreateOr(bits, builder.getInt32(0x400000));
  Value *isNaN = builder.CreateFCmpUNO(value, value);
  return builder.CreateSelect(isNaN, quiet, rounded);
}

Value *emitIntUnary(IRBuilder<> &builder, ScalarOp op, DType type, Value *x) {
  switch (op) {
  case ScalarOp::Not:
  case ScalarOp::BitNot: // On bool (i1) this is logical not.
    return builder.CreateNot(x);
  case ScalarOp::Neg:
    // -x wraps; on bool it is x again.
    return type == DType::Bool ? x : builder.CreateNeg(x);
  case ScalarOp::Abs: {
    if (type == DType::Bool)
      return x;
    Value *negative =
        builder.CreateICmpSLT(x, llvm::ConstantInt::get(x->getType(), 0));
    return builder.CreateSelect(negative, builder.CreateNeg(x), x);
  }
  default:
    break;
  }
  fail(std::string("LLVM backend: '") + scalarOpName(op) +
       "' needs a floating operand");
}

/// NaN-propagating max (greater) or min: NaN if either is NaN, else
/// `a > b ? a : b` (`a < b ? a : b` for min), like the interpreter.
Value *emitFloatMaxMin(IRBuilder<> &builder, bool greater, Value *a, Value *b) {
  Value *pick =
      greater ? builder.CreateFCmpOGT(a, b) : builder.CreateFCmpOLT(a, b);
  Value *chosen = builder.CreateSelect(pick, a, b);
  Value *unordered = builder.CreateFCmpUNO(a, b);
  // a + b is NaN when either is.
  return builder.CreateSelect(unordered, builder.CreateFAdd(a, b), chosen);
}

/// Python's float %: r = fmod(a, b), plus b when r is nonzero and its sign
/// differs from b's.
Value *emitFloatRemainder(IRBuilder<> &builder, Value *a, Value *b) {
  Value *zero = llvm::ConstantFP::get(a->getType(), 0.0);
  // One operand per statement, so that the IR does not depend on the C++
  // compiler's argument evaluation order.
  Value *r = builder.CreateFRem(a, b);
  Value *rNegative = builder.CreateFCmpOLT(r, zero);
  Value *bNegative = builder.CreateFCmpOLT(b, zero);
  Value *signsDiffer = builder.CreateXor(rNegative, bNegative);
  Value *inexact = builder.CreateFCmpUNE(r, zero);
  Value *fix = builder.CreateAnd(inexact, signsDiffer);
  return builder.CreateSelect(fix, builder.CreateFAdd(r, b), r);
}

Value *emitFloatBinary(IRBuilder<> &builder, ScalarOp op, DType type, Value *a,
                       Value *b) {
  switch (op) {
  case ScalarOp::Add:
    return builder.CreateFAdd(a, b);
  case ScalarOp::Sub:
    return builder.CreateFSub(a, b);
  case ScalarOp::Mul:
    return builder.CreateFMul(a, b);
  case ScalarOp::Div:
    return builder.CreateFDiv(a, b);
  case ScalarOp::Max:
    return emitFloatMaxMin(builder, true, a, b);
  case ScalarOp::Min:
    return emitFloatMaxMin(builder, false, a, b);
  case ScalarOp::Pow:
    if (Value *inlined = emitInlineMath(builder, op, type, {a, b}))
      return inlined;
    return callLibm(builder, type, "pow", {a, b});
  case ScalarOp::Fmod:
    return builder.CreateFRem(a, b);
  case ScalarOp::Remainder:
    return emitFloatRemainder(builder, a, b);
  case ScalarOp::Eq:
    return builder.CreateFCmpOEQ(a, b);
  case ScalarOp::Ne:
    // True for NaN, like torch and C++ `!=`.
    return builder.CreateFCmpUNE(a, b);
  case ScalarOp::Lt:
    return builder.CreateFCmpOLT(a, b);
  case ScalarOp::Le:
    return builder.CreateFCmpOLE(a, b);
  case ScalarOp::Gt:
    return builder.CreateFCmpOGT(a, b);
  case ScalarOp::Ge:
    return builder.CreateFCmpOGE(a, b);
  default:
    break;
  }
  fail(std::string("LLVM backend: '") + scalarOpName(op) +
       "' is not defined on floats");
}

/// Reports a zero divisor (dynafuse_division_error) on a cold branch; the
/// runtime raises after the kernel and the frame reruns eagerly, where
/// eager raises ZeroDivisionError. Nonzero constant divisors need no check.
void reportZeroDivisor(IRBuilder<> &builder, Value *a, Value *b,
                       Value *byZero) {
  auto *constant = llvm::dyn_cast<llvm::ConstantInt>(b);
  if (constant && !constant->isZero())
    return;
  llvm::Function *function = builder.GetInsertBlock()->getParent();
  llvm::LLVMContext &context = builder.getContext();
  auto *report = llvm::BasicBlock::Create(context, "divzero", function);
  auto *done = llvm::BasicBlock::Create(context, "divzero.done", function);
  builder.CreateCondBr(byZero, report, done);
  builder.SetInsertPoint(report);
  callRuntimeFunction(builder, "dynafuse_division_error",
                      {builder.CreateSExt(a, builder.getInt64Ty()),
                       builder.CreateSExt(b, builder.getInt64Ty())});
  builder.CreateBr(done);
  builder.SetInsertPoint(done);
}

/// Truncating division that never traps: a zero divisor gives 0, and
/// MIN / -1 gives what the interpreter's 64-bit arithmetic wraps to (0 for
/// i64, MIN for i32).
Value *emitSafeIntDiv(IRBuilder<> &builder, DType type, Value *a, Value *b) {
  llvm::Type *intType = a->getType();
  Value *zero = llvm::ConstantInt::get(intType, 0);
  Value *one = llvm::ConstantInt::get(intType, 1);
  Value *minusOne = llvm::ConstantInt::getSigned(intType, -1);
  Value *min = llvm::ConstantInt::get(
      intType, llvm::APInt::getSignedMinValue(intType->getIntegerBitWidth()));
  Value *byZero = builder.CreateICmpEQ(b, zero);
  reportZeroDivisor(builder, a, b, byZero);
  Value *byMinusOne = builder.CreateICmpEQ(b, minusOne);
  Value *overflow = builder.CreateAnd(byMinusOne, builder.CreateICmpEQ(a, min));
  Value *unsafe = builder.CreateOr(byZero, overflow);
  Value *quotient = builder.CreateSDiv(a, builder.CreateSelect(unsafe, one, b));
  Value *overflowResult = type == DType::I64 ? zero : min;
  quotient = builder.CreateSelect(overflow, overflowResult, quotient);
  return builder.CreateSelect(byZero, zero, quotient);
}

/// Truncating (fmod) or flooring (remainder) integer modulo that never
/// traps: divisors 0 and -1 become 1, whose remainder is 0, which is what
/// the interpreter gives for a zero divisor, for MIN and -1, and for any
/// other a % -1.
Value *emitSafeIntMod(IRBuilder<> &builder, bool floor, Value *a, Value *b) {
  llvm::Type *intType = a->getType();
  Value *zero = llvm::ConstantInt::get(intType, 0);
  Value *one = llvm::ConstantInt::get(intType, 1);
  Value *byZero = builder.CreateICmpEQ(b, zero);
  reportZeroDivisor(builder, a, b, byZero);
  Value *byMinusOne =
      builder.CreateICmpEQ(b, llvm::ConstantInt::getSigned(intType, -1));
  Value *unsafe = builder.CreateOr(byZero, byMinusOne);
  Value *divisor = builder.CreateSelect(unsafe, one, b);
  Value *r = builder.CreateSRem(a, divisor);
  if (!floor)
    return r;
  Value *signsDiffer =
      builder.CreateICmpSLT(builder.CreateXor(r, divisor), zero);
  Value *inexact = builder.CreateICmpNE(r, zero);
  Value *fix = builder.CreateAnd(inexact, signsDiffer);
  return builder.CreateSelect(fix, builder.CreateAdd(r, divisor), r);
}

/// truncateToInt64 (ScalarSemantics.h): fptosi where x is in range, else
/// INT64_MIN (the select keeps fptosi's poison out of range unused).
Value *emitTruncateToInt64(IRBuilder<> &builder, Value *x) {
  llvm::Type *type = x->getType();
  Value *atLeast = builder.CreateFCmpOGE(x, llvm::ConstantFP::get(type, -0x1p63));
  Value *below = builder.CreateFCmpOLT(x, llvm::ConstantFP::get(type, 0x1p63));
  Value *inRange = builder.CreateAnd(atLeast, below);
  return builder.CreateSelect(inRange,
                              builder.CreateFPToSI(x, builder.getInt64Ty()),
                              builder.getInt64(INT64_MIN));
}

/// Integer pow computes through double pow and truncates back.
Value *emitIntPow(IRBuilder<> &builder, Value *a, Value *b) {
  llvm::Type *f64 = builder.getDoubleTy();
  Value *result =
      callLibm(builder, DType::F64, "pow",
               {builder.CreateSIToFP(a, f64), builder.CreateSIToFP(b, f64)});
  return builder.CreateTrunc(emitTruncateToInt64(builder, result),
                             a->getType());
}

Value *emitBoolBinary(IRBuilder<> &builder, ScalarOp op, Value *a, Value *b) {
  switch (op) {
  case ScalarOp::Add:
  case ScalarOp::Max:
  case ScalarOp::Or:
  case ScalarOp::BitOr:
    return builder.CreateOr(a, b);
  case ScalarOp::Mul:
  case ScalarOp::Div: // a / 1 is a, a / 0 is 0.
  case ScalarOp::Min:
  case ScalarOp::And:
  case ScalarOp::BitAnd:
    return builder.CreateAnd(a, b);
  case ScalarOp::Sub:
  case ScalarOp::Ne:
  case ScalarOp::BitXor:
  case ScalarOp::Xor:
    return builder.CreateXor(a, b);
  case ScalarOp::Fmod: // a % 1 and a % 0 are both 0.
  case ScalarOp::Remainder:
    return builder.getFalse();
  case ScalarOp::Pow: // 0 ** 0 is 1, 0 ** 1 is 0, 1 ** b is 1.
    return builder.CreateOr(a, builder.CreateNot(b));
  case ScalarOp::Eq:
    return builder.CreateICmpEQ(a, b);
  case ScalarOp::Lt:
    return builder.CreateICmpULT(a, b);
  case ScalarOp::Le:
    return builder.CreateICmpULE(a, b);
  case ScalarOp::Gt:
    return builder.CreateICmpUGT(a, b);
  case ScalarOp::Ge:
    return builder.CreateICmpUGE(a, b);
  default:
    break;
  }
  fail(std::string("LLVM backend: '") + scalarOpName(op) +
       "' is not defined on bool");
}

Value *emitIntBinary(IRBuilder<> &builder, ScalarOp op, DType type, Value *a,
                     Value *b) {
  if (type == DType::Bool)
    return emitBoolBinary(builder, op, a, b);
  switch (op) {
  case ScalarOp::Add:
    return builder.CreateAdd(a, b);
  case ScalarOp::Sub:
    return builder.CreateSub(a, b);
  case ScalarOp::Mul:
    return builder.CreateMul(a, b);
  case ScalarOp::Div:
    return emitSafeIntDiv(builder, type, a, b);
  case ScalarOp::Max:
    return builder.CreateSelect(builder.CreateICmpSGT(a, b), a, b);
  case ScalarOp::Min:
    return builder.CreateSelect(builder.CreateICmpSLT(a, b), a, b);
  case ScalarOp::Pow:
    return emitIntPow(builder, a, b);
  case ScalarOp::Fmod:
    return emitSafeIntMod(builder, /*floor=*/false, a, b);
  case ScalarOp::Remainder:
    return emitSafeIntMod(builder, /*floor=*/true, a, b);
  case ScalarOp::BitAnd:
    return builder.CreateAnd(a, b);
  case ScalarOp::BitOr:
    return builder.CreateOr(a, b);
  case ScalarOp::BitXor:
    return builder.CreateXor(a, b);
  case ScalarOp::Xor:
    return builder.CreateXor(builder.CreateIsNotNull(a),
                             builder.CreateIsNotNull(b));
  case ScalarOp::And:
    return builder.CreateAnd(builder.CreateIsNotNull(a),
                             builder.CreateIsNotNull(b));
  case ScalarOp::Or:
    return builder.CreateOr(builder.CreateIsNotNull(a),
                            builder.CreateIsNotNull(b));
  case ScalarOp::Eq:
    return builder.CreateICmpEQ(a, b);
  case ScalarOp::Ne:
    return builder.CreateICmpNE(a, b);
  case ScalarOp::Lt:
    return builder.CreateICmpSLT(a, b);
  case ScalarOp::Le:
    return builder.CreateICmpSLE(a, b);
  case ScalarOp::Gt:
    return builder.CreateICmpSGT(a, b);
  case ScalarOp::Ge:
    return builder.CreateICmpSGE(a, b);
  default:
    break;
  }
  fail(std::string("LLVM backend: '") + scalarOpName(op) +
       "' is not defined on integers");
}

Value *emitCast(IRBuilder<> &builder, DType from, DType to, Value *x) {
  llvm::Type *target = scalarType(builder.getContext(), to);
  if (from == to)
    return x;
  if (to == DType::Bool) {
    if (isFloating(from))
      return builder.CreateFCmpUNE(x, llvm::ConstantFP::get(x->getType(), 0));
    return builder.CreateIsNotNull(x);
  }
  if (isFloating(to)) {
    if (isFloating(from))
      return builder.CreateFPCast(x, target);
    if (from == DType::Bool)
      return builder.CreateUIToFP(x, target);
    // The interpreter converts through double: i64 -> f32 rounds twice.
    Value *wide = builder.CreateSIToFP(x, builder.getDoubleTy());
    return builder.CreateFPCast(wide, target);
  }
  if (isFloating(from)) {
    // Truncate toward zero to 64 bits, then wrap (as the interpreter does).
    Value *wide = emitTruncateToInt64(builder, x);
    return builder.CreateTrunc(wide, target);
  }
  if (from == DType::Bool)
    return builder.CreateZExt(x, target);
  return builder.CreateSExtOrTrunc(x, target);
}

} // namespace

Value *emitBF16ToF32(IRBuilder<> &builder, Value *bits) {
  Value *wide = builder.CreateZExt(bits, builder.getInt32Ty());
  return builder.CreateBitCast(builder.CreateShl(wide, 16),
                               builder.getFloatTy());
}

Value *emitF32ToBF16(IRBuilder<> &builder, Value *value) {
  return builder.CreateTrunc(
      builder.CreateLShr(bf16RoundedBits(builder, value), 16),
      builder.getInt16Ty());
}

Value *emitRoundToBF16(IRBuilder<> &builder, Value *value) {
  Value *high = builder.CreateAnd(bf16RoundedBits(builder, value),
                                  builder.getInt32(0xffff0000u));
  return builder.CreateBitCast(high, builder.getFloatTy());
}

llvm::Type *scalarType(llvm::LLVMContext &context, DType type) {
  switch (type) {
  case DType::Bool:
    return llvm::Type::getInt1Ty(context);
  case DType::I32:
    return llvm::Type::getInt32Ty(context);
  case DType::I64:
    return llvm::Type::getInt64Ty(context);
  case DType::F32:
    return llvm::Type::getFloatTy(context);
  case DType::F64:
    return llvm::Type::getDoubleTy(context);
  case DType::F16:
  case DType::BF16:
    break;
  }
  fail(std::string("LLVM backend: ") + dtypeName(type) +
       " is a storage type, not a scalar type");
}

Value *emitConstant(IRBuilder<> &builder, const Instr &instr) {
  llvm::Type *type = scalarType(builder.getContext(), instr.type);
  if (isFloating(instr.type))
    return llvm::ConstantFP::get(type, instr.floatValue);
  if (instr.type == DType::Bool)
    return builder.getInt1(instr.intValue != 0);
  if (instr.type == DType::I32) // Wraps, like the interpreter.
    return builder.getInt32(uint32_t(uint64_t(instr.intValue)));
  return llvm::ConstantInt::getSigned(type, instr.intValue);
}

/// counterRandom (ScalarSemantics.h) in IR: i64 wrapping arithmetic, then
/// the top 24 bits as a float in [0, 1).
Value *emitCounterRandom(IRBuilder<> &builder, DType type, Value *key,
                         Value *counter) {
  auto constant = [&](uint64_t value) { return builder.getInt64(value); };
  Value *z = builder.CreateXor(key, builder.CreateMul(counter, constant(kRandomGolden)));
  z = builder.CreateAdd(z, constant(kRandomGolden));
  z = builder.CreateMul(builder.CreateXor(z, builder.CreateLShr(z, 30)),
                        constant(kRandomMix1));
  z = builder.CreateMul(builder.CreateXor(z, builder.CreateLShr(z, 27)),
                        constant(kRandomMix2));
  z = builder.CreateXor(z, builder.CreateLShr(z, 31));
  llvm::Type *result = scalarType(builder.getContext(), type);
  Value *bits = builder.CreateUIToFP(builder.CreateLShr(z, 40), result);
  return builder.CreateFMul(bits, llvm::ConstantFP::get(result, 0x1p-24));
}

Value *emitScalarOp(IRBuilder<> &builder, const Instr &instr,
                    llvm::ArrayRef<DType> operandTypes,
                    llvm::ArrayRef<Value *> operands) {
  assert(operands.size() == operandTypes.size() && "one type per operand");
  if (instr.op == ScalarOp::Cast)
    return emitCast(builder, operandTypes[0], instr.type, operands[0]);
  if (instr.op == ScalarOp::Select)
    return builder.CreateSelect(operands[0], operands[1], operands[2]);
  if (instr.op == ScalarOp::Random)
    return emitCounterRandom(builder, instr.type, operands[0], operands[1]);
  DType type = operandTypes[0];
  if (operands.size() == 1)
    return isFloating(type)
               ? emitFloatUnary(builder, instr.op, type, operands[0])
               : emitIntUnary(builder, instr.op, type, operands[0]);
  if (operands.size() == 2)
    return isFloating(type) ? emitFloatBinary(builder, instr.op, type,
                                              operands[0], operands[1])
                            : emitIntBinary(builder, instr.op, type,
                                            operands[0], operands[1]);
  fail(std::string("LLVM backend: cannot emit '") + scalarOpName(instr.op) +
       "'");
}

} // namespace llvmcg
} // namespace dynafuse

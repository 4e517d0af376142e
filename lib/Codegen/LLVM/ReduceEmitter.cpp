//===- ReduceEmitter.cpp - Reduce statements to loops with accumulators ---===//
//
// `%r = reduce KIND (r0 in 0..n0, r1 in 0..n1) { body; yield %v }` becomes
// one guarded loop per reduction variable, outermost first, each carrying
// the accumulators (the value, and the position for argmax/argmin) through
// a phi in its header and out through a phi in its exit block, so an empty
// domain leaves the identity. The innermost body emits the statement's
// body and combines the yielded values into the accumulators, exactly as
// reduceCombine (lib/Loop/ScalarSemantics.cpp) does:
// - sum, prod, max, min are the scalar add, mul, max, min (max/min
//   NaN-propagating, with the accumulator as first operand); a float sum's
//   fadd carries `reassoc` (and no other fast-math flag) so that LLVM may
//   vectorize it, and an f32 sum accumulates in f64, rounded once at the
//   end (reduceFinish: sums that cancel keep their digits);
// - a float max/min carries a second accumulator, "a NaN was seen" (an `or`
//   of `fcmp uno`), and combines with `select(fcmp ogt acc, x), acc, x)`
//   flagged nnan nsz: the pattern LLVM 16's loop vectorizer recognizes as a
//   max reduction. Sound because the NaN case is tracked apart: a NaN
//   operand makes the select poison, but then the flag is set and the final
//   `select(flag, NaN, acc)` never picks it. Of +0 and -0 either may win;
// - any and all are `or` and `and`;
// - argmax/argmin replace the accumulators when the candidate is strictly
//   better or is the first NaN: `ord(best) && ugt(candidate, best)`.
//
//===----------------------------------------------------------------------===//
#include "KernelEmitter.h"

#include "dynafuse/Support/Error.h"

#include <cmath>
#include <cstdint>
#include <limits>

namespace dynafuse {
namespace llvmcg {
namespace {

using llvm::IRBuilder;
using llvm::Value;

/// The identity of a reduction kind on values of `type` (reduceIdentity).
Value *identityValue(IRBuilder<> &builder, ReduceKind kind, DType type) {
  llvm::Type *llvmType = scalarType(builder.getContext(), type);
  bool greatest = kind == ReduceKind::Min || kind == ReduceKind::ArgMin;
  switch (kind) {
  case ReduceKind::Sum:
  case ReduceKind::Any:
    return llvm::Constant::getNullValue(llvmType);
  case ReduceKind::Prod:
  case ReduceKind::All:
    if (isFloating(type))
      return llvm::ConstantFP::get(llvmType, 1.0);
    return llvm::ConstantInt::get(llvmType, 1);
  case ReduceKind::Max:
  case ReduceKind::ArgMax:
  case ReduceKind::Min:
  case ReduceKind::ArgMin:
    break;
  }
  if (isFloating(type))
    return llvm::ConstantFP::getInfinity(llvmType, /*Negative=*/!greatest);
  if (type == DType::Bool)
    return builder.getInt1(greatest);
  unsigned bits = llvmType->getIntegerBitWidth();
  return llvm::ConstantInt::get(
      llvmType, greatest ? llvm::APInt::getSignedMaxValue(bits)
                         : llvm::APInt::getSignedMinValue(bits));
}

Value *emitBinary(IRBuilder<> &builder, ScalarOp op, DType type, Value *a,
                  Value *b) {
  Instr instr;
  instr.op = op;
  instr.type = type;
  return emitScalarOp(builder, instr, {type, type}, {a, b});
}

/// Whether `candidate` replaces `best` in argmax (greater) or argmin.
Value *argBetter(IRBuilder<> &builder, bool greater, DType type,
                 Value *candidate, Value *best) {
  if (isFloating(type)) {
    // Unordered comparisons are true for a NaN candidate; a NaN best is
    // never replaced.
    Value *better = greater ? builder.CreateFCmpUGT(candidate, best)
                            : builder.CreateFCmpULT(candidate, best);
    return builder.CreateAnd(builder.CreateFCmpORD(best, best), better);
  }
  if (type == DType::Bool)
    return greater ? builder.CreateICmpUGT(candidate, best)
                   : builder.CreateICmpULT(candidate, best);
  return greater ? builder.CreateICmpSGT(candidate, best)
                 : builder.CreateICmpSLT(candidate, best);
}

/// The accumulators after combining one yielded value (and position).
std::vector<Value *> combine(IRBuilder<> &builder, ReduceKind kind, DType type,
                             llvm::ArrayRef<Value *> acc, Value *value,
                             Value *position) {
  switch (kind) {
  case ReduceKind::Sum: {
    if (!isFloating(type))
      return {emitBinary(builder, ScalarOp::Add, type, acc[0], value)};
    Value *sum = builder.CreateFAdd(acc[0], value, "sum");
    if (auto *instruction = llvm::dyn_cast<llvm::Instruction>(sum))
      instruction->setHasAllowReassoc(true);
    return {sum};
  }
  case ReduceKind::Prod:
    return {emitBinary(builder, ScalarOp::Mul, type, acc[0], value)};
  case ReduceKind::Max:
  case ReduceKind::Min: {
    bool greater = kind == ReduceKind::Max;
    if (!isFloating(type))
      return {emitBinary(builder, greater ? ScalarOp::Max : ScalarOp::Min, type,
                         acc[0], value)};
    Value *better = greater ? builder.CreateFCmpOGT(acc[0], value)
                            : builder.CreateFCmpOLT(acc[0], value);
    Value *chosen = builder.CreateSelect(better, acc[0], value);
    for (Value *flagged : {better, chosen})
      if (auto *instruction = llvm::dyn_cast<llvm::Instruction>(flagged)) {
        instruction->setHasNoNaNs(true);
        instruction->setHasNoSignedZeros(true);
      }
    Value *sawNaN =
        builder.CreateOr(acc[1], builder.CreateFCmpUNO(value, value));
    return {chosen, sawNaN};
  }
  case ReduceKind::Any:
    return {builder.CreateOr(acc[0], value)};
  case ReduceKind::All:
    return {builder.CreateAnd(acc[0], value)};
  case ReduceKind::ArgMax:
  case ReduceKind::ArgMin: {
    Value *better =
        argBetter(builder, kind == ReduceKind::ArgMax, type, value, acc[0]);
    return {builder.CreateSelect(better, value, acc[0]),
            builder.CreateSelect(better, position, acc[1])};
  }
  }
  fail("LLVM backend: unknown reduction kind");
}

} // namespace

DType KernelEmitter::accumulatorType(const Stmt &stmt) const {
  DType type = kernel.instrs[stmt.yields[0]].type;
  return stmt.reduceKind == ReduceKind::Sum && type == DType::F32 ? DType::F64
                                                                  : type;
}

void KernelEmitter::emitReduce(const Stmt &stmt) {
  if (stmt.yields.empty() || stmt.results.size() != stmt.yields.size() ||
      stmt.vars.size() != stmt.extents.size())
    fail("LLVM backend: kernel @" + kernel.name + ": malformed reduce " +
             reduceKindName(stmt.reduceKind),
         stmt.where);
  DType type = accumulatorType(stmt);
  std::vector<Value *> identity = {
      identityValue(builder, stmt.reduceKind, type)};
  if (stmt.yields.size() > 1)
    identity.push_back(llvm::Constant::getNullValue(
        scalarType(context, kernel.instrs[stmt.yields[1]].type)));
  bool tracksNaN = isFloating(type) && (stmt.reduceKind == ReduceKind::Max ||
                                        stmt.reduceKind == ReduceKind::Min);
  if (tracksNaN)
    identity.push_back(builder.getFalse());
  std::vector<Value *> result = emitReduceDims(stmt, 0, identity);
  if (tracksNaN)
    result[0] = builder.CreateSelect(
        result[1], llvm::ConstantFP::getQNaN(result[0]->getType()), result[0]);
  DType yielded = kernel.instrs[stmt.yields[0]].type;
  if (type != yielded)
    result[0] = builder.CreateFPTrunc(result[0], scalarType(context, yielded));
  for (size_t i = 0; i < stmt.results.size(); ++i)
    values[stmt.results[i]] = result[i];
}

std::vector<llvm::Value *>
KernelEmitter::emitReduceDims(const Stmt &stmt, size_t dim,
                              llvm::ArrayRef<Value *> accumulators) {
  if (dim == stmt.vars.size()) {
    emitBlock(stmt.body);
    std::vector<Value *> yielded;
    for (int yield : stmt.yields) {
      if (!values[yield])
        fail("LLVM backend: kernel @" + kernel.name +
                 ": yielded value is not defined in the reduction",
             stmt.where);
      yielded.push_back(values[yield]);
    }
    DType type = accumulatorType(stmt);
    if (type != kernel.instrs[stmt.yields[0]].type)
      yielded[0] = builder.CreateFPExt(yielded[0], scalarType(context, type));
    return combine(builder, stmt.reduceKind, type, accumulators, yielded[0],
                   yielded.size() > 1 ? yielded[1] : nullptr);
  }
  const std::string &var = stmt.vars[dim];
  Value *extent = emitSymExpr(stmt.extents[dim]);
  return emitCountedLoop("reduce." + var, var, extent, accumulators,
                         [&](llvm::ArrayRef<Value *> carried) {
                           return emitReduceDims(stmt, dim + 1, carried);
                         });
}

} // namespace llvmcg
} // namespace dynafuse

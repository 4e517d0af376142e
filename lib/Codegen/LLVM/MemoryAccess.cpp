//===- MemoryAccess.cpp - Index arithmetic, loads and stores --------------===//
//
// Loads and stores compute `base + sum(index_k * stride_k)` in elements.
// Index expressions are emitted where they are used and left to LICM, GVN
// and SCEV to hoist and strength-reduce; floor division and modulo follow
// Python's semantics. A symbol "%7" in an index is the integer value %7
// (indirect indexing); every dimension indexed that way is checked against
// its size at run time, and a masked load reads only where its mask is true:
//
//   br %mask, load.body, load.done          ; masked loads
// load.body:
//   br (idx <u size), load.inbounds, load.oob   ; per indirect dimension
// load.oob:
//   call dynafuse_index_error(idx, size); br load.done
// load.inbounds:
//   %v = load ...; br load.done
// load.done:
//   phi [0, masked off], [0, load.oob], [%v, load.inbounds]
//
// Stores skip the store instead. Without mask or indirect index the access
// is straight-line code.
//
//===----------------------------------------------------------------------===//
#include "KernelEmitter.h"

#include "dynafuse/Support/Error.h"

#include <set>

namespace dynafuse {
namespace llvmcg {
namespace {

/// The in-memory element type of a buffer: bool is one byte, f16 and bf16
/// are raw 16-bit patterns converted by the runtime helpers.
llvm::Type *storageType(llvm::LLVMContext &context, DType type) {
  switch (type) {
  case DType::Bool:
    return llvm::Type::getInt8Ty(context);
  case DType::F16:
  case DType::BF16:
    return llvm::Type::getInt16Ty(context);
  default:
    return scalarType(context, type);
  }
}

} // namespace

using llvm::Value;

//===--- Symbolic integers ------------------------------------------------===//

Value *KernelEmitter::emitSymExpr(const SymExpr &expr) {
  switch (expr.kind()) {
  case SymExpr::Kind::Constant:
    return builder.getInt64(expr.constant());
  case SymExpr::Kind::Symbol: {
    if (!expr.symbolName().empty() && expr.symbolName()[0] == '%')
      return indirectValue(expr.symbolName());
    auto found = symbols.find(expr.symbolName());
    if (found == symbols.end())
      fail("LLVM backend: kernel @" + kernel.name + " uses unbound symbol '" +
           expr.symbolName() + "'");
    return found->second;
  }
  case SymExpr::Kind::Add:
  case SymExpr::Kind::Mul: {
    bool add = expr.kind() == SymExpr::Kind::Add;
    Value *result = nullptr;
    for (const SymExpr &operand : expr.operands()) {
      Value *value = emitSymExpr(operand);
      if (!result)
        result = value;
      else if (add)
        result = builder.CreateNSWAdd(result, value);
      else
        result = builder.CreateNSWMul(result, value);
    }
    return result ? result : builder.getInt64(add ? 0 : 1);
  }
  case SymExpr::Kind::FloorDiv:
  case SymExpr::Kind::Mod:
    return emitFloorDivMod(expr.kind() == SymExpr::Kind::Mod,
                           emitSymExpr(expr.operands()[0]),
                           emitSymExpr(expr.operands()[1]));
  }
  fail("LLVM backend: unknown symbolic expression kind");
}

Value *KernelEmitter::indirectValue(const std::string &symbol) {
  auto found = idByName.find(symbol.substr(1));
  if (found == idByName.end() || !values[found->second])
    fail("LLVM backend: kernel @" + kernel.name + " indexes with '" + symbol +
         "', which is not a value defined before the access");
  Value *value = values[found->second];
  if (!value->getType()->isIntegerTy() ||
      value->getType()->getIntegerBitWidth() < 2)
    fail("LLVM backend: kernel @" + kernel.name + " indexes with '" + symbol +
         "', which is not an i32 or i64 value");
  return builder.CreateSExtOrTrunc(value, builder.getInt64Ty());
}

/// Python's // and %: truncating sdiv/srem, then adjusted by one divisor
/// when the remainder is nonzero and its sign differs from the divisor's.
/// Unless the divisor is a constant other than 0 and -1, it is guarded: 0
/// (an invalid program) yields garbage instead of a trap, and -1 is
/// handled without dividing so that MIN // -1 cannot trap either.
Value *KernelEmitter::emitFloorDivMod(bool wantMod, Value *lhs, Value *rhs) {
  auto *constant = llvm::dyn_cast<llvm::ConstantInt>(rhs);
  if (constant && !constant->isZero() && !constant->isMinusOne()) {
    Value *quotient = builder.CreateSDiv(lhs, rhs);
    Value *remainder = builder.CreateSRem(lhs, rhs);
    return adjust(wantMod, quotient, remainder, rhs);
  }
  Value *isZero = builder.CreateICmpEQ(rhs, builder.getInt64(0));
  Value *isMinusOne = builder.CreateICmpEQ(rhs, builder.getInt64(-1));
  Value *divisor = builder.CreateSelect(builder.CreateOr(isZero, isMinusOne),
                                        builder.getInt64(1), rhs);
  Value *quotient = builder.CreateSDiv(lhs, divisor);
  Value *remainder = builder.CreateSRem(lhs, divisor);
  Value *result = adjust(wantMod, quotient, remainder, divisor);
  Value *byMinusOne = wantMod ? builder.getInt64(0) : builder.CreateNeg(lhs);
  return builder.CreateSelect(isMinusOne, byMinusOne, result);
}

Value *KernelEmitter::adjust(bool wantMod, Value *quotient, Value *remainder,
                             Value *divisor) {
  Value *zero = builder.getInt64(0);
  Value *inexact = builder.CreateICmpNE(remainder, zero);
  Value *signsDiffer =
      builder.CreateICmpSLT(builder.CreateXor(remainder, divisor), zero);
  Value *fix = builder.CreateAnd(inexact, signsDiffer);
  if (wantMod)
    return builder.CreateSelect(fix, builder.CreateAdd(remainder, divisor),
                                remainder);
  return builder.CreateSub(quotient,
                           builder.CreateZExt(fix, builder.getInt64Ty()));
}

//===--- Loads and stores -------------------------------------------------===//

Value *KernelEmitter::elementAddress(const Instr &instr,
                                     llvm::ArrayRef<Value *> indices) {
  const LoopBuffer &param = kernel.params[instr.buffer];
  Value *offset = nullptr;
  for (size_t k = 0; k < indices.size(); ++k) {
    Value *term = indices[k];
    Value *stride = strides[instr.buffer][k];
    auto *constant = llvm::dyn_cast<llvm::ConstantInt>(stride);
    if (!constant || !constant->isOne())
      term = builder.CreateNSWMul(term, stride);
    offset = offset ? builder.CreateNSWAdd(offset, term) : term;
  }
  if (!offset)
    return bases[instr.buffer];
  return builder.CreateInBoundsGEP(storageType(context, param.type.dtype),
                                   bases[instr.buffer], offset);
}

Value *
KernelEmitter::emitGuardedAccess(const Instr &instr, Value *mask,
                                 Value *fallback,
                                 llvm::function_ref<Value *(Value *)> access) {
  const std::string label = scalarOpName(instr.op);
  llvm::BasicBlock *done = nullptr;
  // (block, value) pairs flowing into `done`.
  std::vector<std::pair<llvm::BasicBlock *, Value *>> incoming;
  auto branchOn = [&](Value *condition, const std::string &name,
                      llvm::BasicBlock *otherwise) {
    if (!done)
      done = llvm::BasicBlock::Create(context, label + ".done");
    auto *next = llvm::BasicBlock::Create(context, label + name, function);
    builder.CreateCondBr(condition, next, otherwise ? otherwise : done);
    if (!otherwise)
      incoming.push_back({builder.GetInsertBlock(), fallback});
    builder.SetInsertPoint(next);
  };
  if (mask)
    branchOn(mask, ".body", nullptr);

  const LoopBuffer &param = kernel.params[instr.buffer];
  std::vector<Value *> indices;
  for (size_t k = 0; k < instr.index.size(); ++k) {
    indices.push_back(emitSymExpr(instr.index[k]));
    if (!isIndirectIndex(instr.index[k]))
      continue;
    Value *size = emitSymExpr(param.type.sizes[k]);
    // Unsigned: negative indices are out of bounds too.
    Value *inBounds = builder.CreateICmpULT(indices.back(), size);
    auto *outOfBounds =
        llvm::BasicBlock::Create(context, label + ".oob", function);
    branchOn(inBounds, ".inbounds", outOfBounds);
    llvm::BasicBlock *resume = builder.GetInsertBlock();
    builder.SetInsertPoint(outOfBounds);
    callRuntimeFunction(builder, "dynafuse_index_error",
                        {indices.back(), size});
    builder.CreateBr(done);
    incoming.push_back({outOfBounds, fallback});
    builder.SetInsertPoint(resume);
  }

  Value *result = access(elementAddress(instr, indices));
  if (!done)
    return result;
  builder.CreateBr(done);
  incoming.push_back({builder.GetInsertBlock(), result});
  done->insertInto(function);
  builder.SetInsertPoint(done);
  if (!fallback)
    return nullptr;
  llvm::PHINode *merged =
      builder.CreatePHI(fallback->getType(), unsigned(incoming.size()));
  for (const auto &[block, value] : incoming)
    merged->addIncoming(value, block);
  return merged;
}

Value *KernelEmitter::emitLoad(const Instr &instr, Value *mask) {
  DType dtype = kernel.params[instr.buffer].type.dtype;
  Value *zero = llvm::Constant::getNullValue(scalarType(context, instr.type));
  return emitGuardedAccess(instr, mask, zero, [&](Value *address) -> Value * {
    Value *raw = builder.CreateLoad(storageType(context, dtype), address);
    switch (dtype) {
    case DType::Bool:
      return builder.CreateIsNotNull(raw);
    case DType::F16:
      return callRuntimeFunction(builder, "dynafuse_f16_to_f32", {raw});
    case DType::BF16:
      return emitBF16ToF32(builder, raw);
    default:
      return raw;
    }
  });
}

void KernelEmitter::emitStore(const Instr &instr, Value *value) {
  DType dtype = kernel.params[instr.buffer].type.dtype;
  switch (dtype) {
  case DType::Bool:
    value = builder.CreateZExt(value, builder.getInt8Ty());
    break;
  case DType::F16:
    value = callRuntimeFunction(builder, "dynafuse_f32_to_f16", {value});
    break;
  case DType::BF16:
    value = emitF32ToBF16(builder, value);
    break;
  default:
    break;
  }
  emitGuardedAccess(instr, nullptr, nullptr, [&](Value *address) -> Value * {
    builder.CreateStore(value, address);
    return nullptr;
  });
}

} // namespace llvmcg
} // namespace dynafuse

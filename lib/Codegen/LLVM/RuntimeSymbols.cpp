//===- RuntimeSymbols.cpp - C functions generated code may call -----------===//
//
// LLJIT resolves no process symbols by default, and the f16/bf16 helpers have
// hidden visibility, so the JIT gets an explicit table of addresses. The same
// table gives the emitter the LLVM signature of each function it calls. The
// entries without a signature are never called by the emitter itself but may
// appear after optimization (memset/memcpy from loop idioms, ldexp or sqrt
// from library-call simplification) or code generation (fmod for frem,
// floor or roundeven where the CPU has no rounding instruction). The index
// error reporter is the only entry that is not pure.
//
//===----------------------------------------------------------------------===//
#include "LLVMCodegen.h"

#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/HalfFloat.h"
#include "dynafuse/Support/IndexErrors.h"

#include <cmath>
#include <cstring>
#include <math.h>

namespace dynafuse {
namespace llvmcg {
namespace {

using UnaryF32 = float (*)(float);
using UnaryF64 = double (*)(double);
using BinaryF32 = float (*)(float, float);
using BinaryF64 = double (*)(double, double);

template <typename Function> void *addressOf(Function function) {
  return reinterpret_cast<void *>(function);
}

std::vector<RuntimeSymbol> buildTable() {
  using S = RuntimeSignature;
  return {
      {"expf", addressOf<UnaryF32>(::expf), S::F32ToF32},
      {"logf", addressOf<UnaryF32>(::logf), S::F32ToF32},
      {"tanhf", addressOf<UnaryF32>(::tanhf), S::F32ToF32},
      {"erff", addressOf<UnaryF32>(::erff), S::F32ToF32},
      {"powf", addressOf<BinaryF32>(::powf), S::F32F32ToF32},
      {"exp", addressOf<UnaryF64>(::exp), S::F64ToF64},
      {"log", addressOf<UnaryF64>(::log), S::F64ToF64},
      {"tanh", addressOf<UnaryF64>(::tanh), S::F64ToF64},
      {"erf", addressOf<UnaryF64>(::erf), S::F64ToF64},
      {"pow", addressOf<BinaryF64>(::pow), S::F64F64ToF64},
      {"exp2f", addressOf<UnaryF32>(::exp2f), S::F32ToF32},
      {"exp2", addressOf<UnaryF64>(::exp2), S::F64ToF64},
      {"log1pf", addressOf<UnaryF32>(::log1pf), S::F32ToF32},
      {"log1p", addressOf<UnaryF64>(::log1p), S::F64ToF64},
      {"expm1f", addressOf<UnaryF32>(::expm1f), S::F32ToF32},
      {"expm1", addressOf<UnaryF64>(::expm1), S::F64ToF64},
      {"sinf", addressOf<UnaryF32>(::sinf), S::F32ToF32},
      {"sin", addressOf<UnaryF64>(::sin), S::F64ToF64},
      {"cosf", addressOf<UnaryF32>(::cosf), S::F32ToF32},
      {"cos", addressOf<UnaryF64>(::cos), S::F64ToF64},
      {"dynafuse_index_error", addressOf(&dynafuse_index_error),
       S::I64I64ToVoid},
      {"dynafuse_division_error", addressOf(&dynafuse_division_error),
       S::I64I64ToVoid},
      {"dynafuse_f16_to_f32", addressOf(&dynafuse_f16_to_f32), S::I16ToF32},
      {"dynafuse_f32_to_f16", addressOf(&dynafuse_f32_to_f16), S::F32ToI16},
      {"dynafuse_bf16_to_f32", addressOf(&dynafuse_bf16_to_f32), S::I16ToF32},
      {"dynafuse_f32_to_bf16", addressOf(&dynafuse_f32_to_bf16), S::F32ToI16},
      // Introduced by LLVM, not by the emitter.
      {"memset", addressOf<void *(*)(void *, int, size_t)>(::memset), S::None},
      {"memcpy", addressOf<void *(*)(void *, const void *, size_t)>(::memcpy),
       S::None},
      {"memmove", addressOf<void *(*)(void *, const void *, size_t)>(::memmove),
       S::None},
      {"exp10f", addressOf<UnaryF32>(::exp10f), S::None},
      {"exp10", addressOf<UnaryF64>(::exp10), S::None},
      {"sqrtf", addressOf<UnaryF32>(::sqrtf), S::None},
      {"sqrt", addressOf<UnaryF64>(::sqrt), S::None},
      // frem, and the rounding intrinsics on targets without SSE4.1.
      {"fmodf", addressOf<BinaryF32>(::fmodf), S::None},
      {"fmod", addressOf<BinaryF64>(::fmod), S::None},
      {"floorf", addressOf<UnaryF32>(::floorf), S::None},
      {"floor", addressOf<UnaryF64>(::floor), S::None},
      {"ceilf", addressOf<UnaryF32>(::ceilf), S::None},
      {"ceil", addressOf<UnaryF64>(::ceil), S::None},
      {"truncf", addressOf<UnaryF32>(::truncf), S::None},
      {"trunc", addressOf<UnaryF64>(::trunc), S::None},
      {"roundevenf", addressOf<UnaryF32>(::roundevenf), S::None},
      {"roundeven", addressOf<UnaryF64>(::roundeven), S::None},
      {"rintf", addressOf<UnaryF32>(::rintf), S::None},
      {"rint", addressOf<UnaryF64>(::rint), S::None},
      {"nearbyintf", addressOf<UnaryF32>(::nearbyintf), S::None},
      {"nearbyint", addressOf<UnaryF64>(::nearbyint), S::None},
      {"ldexpf", addressOf<float (*)(float, int)>(::ldexpf), S::None},
      {"ldexp", addressOf<double (*)(double, int)>(::ldexp), S::None},
      // sin and cos of one value, combined by the optimizer.
      {"sincosf", addressOf<void (*)(float, float *, float *)>(::sincosf),
       S::None},
      {"sincos", addressOf<void (*)(double, double *, double *)>(::sincos),
       S::None},
  };
}

llvm::FunctionType *functionType(llvm::LLVMContext &context,
                                 RuntimeSignature signature) {
  llvm::Type *f32 = llvm::Type::getFloatTy(context);
  llvm::Type *f64 = llvm::Type::getDoubleTy(context);
  llvm::Type *i16 = llvm::Type::getInt16Ty(context);
  switch (signature) {
  case RuntimeSignature::F32ToF32:
    return llvm::FunctionType::get(f32, {f32}, false);
  case RuntimeSignature::F64ToF64:
    return llvm::FunctionType::get(f64, {f64}, false);
  case RuntimeSignature::F32F32ToF32:
    return llvm::FunctionType::get(f32, {f32, f32}, false);
  case RuntimeSignature::F64F64ToF64:
    return llvm::FunctionType::get(f64, {f64, f64}, false);
  case RuntimeSignature::I16ToF32:
    return llvm::FunctionType::get(f32, {i16}, false);
  case RuntimeSignature::F32ToI16:
    return llvm::FunctionType::get(i16, {f32}, false);
  case RuntimeSignature::I64I64ToVoid: {
    llvm::Type *i64 = llvm::Type::getInt64Ty(context);
    return llvm::FunctionType::get(llvm::Type::getVoidTy(context), {i64, i64},
                                   false);
  }
  case RuntimeSignature::None:
    break;
  }
  return nullptr;
}

} // namespace

const std::vector<RuntimeSymbol> &runtimeSymbols() {
  static const std::vector<RuntimeSymbol> table = buildTable();
  return table;
}

bool isRuntimeSymbolName(const std::string &name) {
  for (const RuntimeSymbol &symbol : runtimeSymbols())
    if (name == symbol.name)
      return true;
  return false;
}

llvm::FunctionCallee declareRuntimeFunction(llvm::Module &module,
                                            const std::string &name) {
  for (const RuntimeSymbol &symbol : runtimeSymbols()) {
    if (name != symbol.name)
      continue;
    llvm::FunctionType *type =
        functionType(module.getContext(), symbol.signature);
    assert(type && "the emitter only calls functions with a signature");
    if (llvm::Function *existing = module.getFunction(name))
      return llvm::FunctionCallee(type, existing);
    llvm::Function *function = llvm::Function::Create(
        type, llvm::Function::ExternalLinkage, name, module);
    function->setDoesNotThrow();
    function->setWillReturn();
    if (symbol.signature == RuntimeSignature::I64I64ToVoid) {
      // The error reporter records the error in thread-local state: it must
      // stay, on the (cold) path where it is called.
      function->setOnlyAccessesInaccessibleMemory();
      function->addFnAttr(llvm::Attribute::Cold);
      return llvm::FunctionCallee(type, function);
    }
    // We never read errno, so the math functions are pure (as with clang's
    // -fno-math-errno); this lets LLVM hoist and CSE them.
    function->setDoesNotAccessMemory();
    if (symbol.signature == RuntimeSignature::I16ToF32)
      function->addParamAttr(0, llvm::Attribute::ZExt);
    if (symbol.signature == RuntimeSignature::F32ToI16)
      function->addRetAttr(llvm::Attribute::ZExt);
    return llvm::FunctionCallee(type, function);
  }
  fail("LLVM backend: no runtime function named '" + name + "'");
}

llvm::CallInst *callRuntimeFunction(llvm::IRBuilder<> &builder,
                                    const std::string &name,
                                    llvm::ArrayRef<llvm::Value *> operands) {
  llvm::Module &module = *builder.GetInsertBlock()->getModule();
  llvm::FunctionCallee callee = declareRuntimeFunction(module, name);
  llvm::CallInst *call = builder.CreateCall(callee, operands);
  call->setAttributes(
      llvm::cast<llvm::Function>(callee.getCallee())->getAttributes());
  return call;
}

} // namespace llvmcg
} // namespace dynafuse

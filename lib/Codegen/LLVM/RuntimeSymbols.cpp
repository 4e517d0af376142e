//===- RuntimeSymbols.cpp - C functions generated code may call -----------===//
//
// LLJIT resolves no process symbols by default, and the f16/bf16 helpers have
// hidden visibility, so the JIT gets an explicit table of addresses. The same
// table gives the emitter the LLVM signature of each function it calls. The
// entries without a signature are never called by the emitter itself but may
// appear after optimization (memset/memcpy from loop idioms, exp2 or sqrt
// from library-call simplification) or code generation (fmod for frem).
//
//===----------------------------------------------------------------------===//
#include "LLVMCodegen.h"

#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/HalfFloat.h"

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
      {"exp2f", addressOf<UnaryF32>(::exp2f), S::None},
      {"exp2", addressOf<UnaryF64>(::exp2), S::None},
      {"exp10f", addressOf<UnaryF32>(::exp10f), S::None},
      {"exp10", addressOf<UnaryF64>(::exp10), S::None},
      {"sqrtf", addressOf<UnaryF32>(::sqrtf), S::None},
      {"sqrt", addressOf<UnaryF64>(::sqrt), S::None},
      {"fmodf", addressOf<BinaryF32>(::fmodf), S::None},
      {"fmod", addressOf<BinaryF64>(::fmod), S::None},
      {"ldexpf", addressOf<float (*)(float, int)>(::ldexpf), S::None},
      {"ldexp", addressOf<double (*)(double, int)>(::ldexp), S::None},
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

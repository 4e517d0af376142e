//===- LLVMCodegen.h - Internals shared by the LLVM backend -----*- C++ -*-===//
//
// Private to lib/Codegen/LLVM. The backend is split by concept:
//   RuntimeSymbols.cpp  the C functions generated code may call, with their
//                       addresses (the JIT's symbol map) and LLVM types;
//   ScalarOps.cpp       one scalar instruction to LLVM IR;
//   VectorMath.cpp      f32 transcendentals as inline, vectorizable IR;
//   KernelEmitter.cpp   kernels (statements, loops) to one llvm::Module,
//   MemoryAccess.cpp    with index arithmetic, loads and stores (masks,
//   ReduceEmitter.cpp   bounds checks) and reduce statements; the
//                       emitter class is in KernelEmitter.h;
//   JITCompiler.cpp     target machine, O2 pipeline, assembly and object
//                       emission, and the process-lifetime LLJIT;
//   LLVMBackend.cpp     the Backend implementation and the public API.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LIB_CODEGEN_LLVM_LLVMCODEGEN_H
#define DYNAFUSE_LIB_CODEGEN_LLVM_LLVMCODEGEN_H

#include "dynafuse/Loop/Kernel.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Target/TargetMachine.h"

#include <memory>
#include <string>
#include <vector>

namespace llvm {
namespace orc {
class JITDylib;
} // namespace orc
} // namespace llvm

namespace dynafuse {
namespace llvmcg {

//===- RuntimeSymbols.cpp -------------------------------------------------===//

enum class RuntimeSignature {
  /// Not declared by the emitter (LLVM itself may emit calls, e.g. memset).
  None,
  F32ToF32,
  F64ToF64,
  F32F32ToF32,
  F64F64ToF64,
  I16ToF32,
  F32ToI16,
  /// dynafuse_index_error(int64 index, int64 size).
  I64I64ToVoid,
};

struct RuntimeSymbol {
  const char *name;
  void *address;
  RuntimeSignature signature;
};

/// Every external function JIT-compiled code may call.
const std::vector<RuntimeSymbol> &runtimeSymbols();
bool isRuntimeSymbolName(const std::string &name);
/// Declares the named runtime function in `module` (once), with attributes
/// saying it does not throw and touches no memory (the math and conversion
/// functions) or only memory the kernel cannot see (the error reporter).
llvm::FunctionCallee declareRuntimeFunction(llvm::Module &module,
                                            const std::string &name);
/// Calls a runtime function, with the declaration's attributes (zeroext for
/// the 16-bit helpers) on the call as well.
llvm::CallInst *callRuntimeFunction(llvm::IRBuilder<> &builder,
                                    const std::string &name,
                                    llvm::ArrayRef<llvm::Value *> operands);

//===- ScalarOps.cpp ------------------------------------------------------===//

/// The LLVM type of a compute type: i1, i32, i64, float, double.
llvm::Type *scalarType(llvm::LLVMContext &context, DType type);
/// A const instruction's value.
llvm::Value *emitConstant(llvm::IRBuilder<> &builder, const Instr &instr);
/// bf16 as the runtime's helpers convert it (dynafuse_bf16_to_f32 and
/// dynafuse_f32_to_bf16: round to nearest even, NaN kept quiet), as inline
/// integer IR that vectorizes: the bits widened, the f32 rounded to bf16's
/// bits (i16), and the f32 rounded to a bf16 value (f32).
llvm::Value *emitBF16ToF32(llvm::IRBuilder<> &builder, llvm::Value *bits);
llvm::Value *emitF32ToBF16(llvm::IRBuilder<> &builder, llvm::Value *value);
llvm::Value *emitRoundToBF16(llvm::IRBuilder<> &builder, llvm::Value *value);
/// Any instruction but const, load and store. `operandType` is the type of
/// the first operand (the condition's for select is bool; use the second).
llvm::Value *emitScalarOp(llvm::IRBuilder<> &builder, const Instr &instr,
                          llvm::ArrayRef<DType> operandTypes,
                          llvm::ArrayRef<llvm::Value *> operands);

//===- VectorMath.cpp -----------------------------------------------------===//

/// Inline IR (no calls, so loops vectorize) for f32 exp, exp2, log, tanh,
/// erf, sigmoid, expm1, log1p, sin, cos and pow; null for other ops and
/// types (f64 math calls libm).
llvm::Value *emitInlineMath(llvm::IRBuilder<> &builder, ScalarOp op, DType type,
                            llvm::ArrayRef<llvm::Value *> operands);

//===- KernelEmitter.cpp --------------------------------------------------===//

/// The LLVM function name of a kernel (its name, prefixed when it would
/// clash with a runtime symbol or an LLVM-reserved name).
std::string llvmFunctionName(const Kernel &kernel);
/// The function running a range of a splittable kernel's outer loop.
std::string rangeFunctionName(const Kernel &kernel);
/// One function per kernel, in a module targeting `machine`. Verifies the
/// module and throws Error when it is broken.
/// `vectorWidth` is CodegenOptions::vectorWidth ("": the host decides).
std::unique_ptr<llvm::Module> emitLoopModule(const LoopModule &loops,
                                             llvm::LLVMContext &context,
                                             llvm::TargetMachine &machine,
                                             const std::string &vectorWidth);
/// As emitLoopModule, for some of a module's kernels (one part of a
/// parallel compile), in a module called `name`.
std::unique_ptr<llvm::Module>
emitKernels(const std::string &name, const std::vector<const Kernel *> &kernels,
            llvm::LLVMContext &context, llvm::TargetMachine &machine,
            const std::string &vectorWidth);

//===- JITCompiler.cpp ----------------------------------------------------===//

/// A target machine for the host CPU and its features, PIC, small code
/// model, O2 code generation. Initializes the native target on first use.
std::unique_ptr<llvm::TargetMachine> createHostTargetMachine();
/// The new pass manager's O2 per-module pipeline.
void optimizeModule(llvm::Module &module, llvm::TargetMachine &machine);
std::string printModule(const llvm::Module &module);
/// Assembly of a copy of `module` (code generation rewrites the IR).
std::string emitAssemblyText(const llvm::Module &module,
                             llvm::TargetMachine &machine);
llvm::SmallVector<char, 0> emitObjectFile(llvm::Module &module,
                                          llvm::TargetMachine &machine);

/// Code loaded into the JIT: one JITDylib per compile, removed when the last
/// reference goes away.
class LoadedObject {
public:
  LoadedObject(const LoadedObject &) = delete;
  LoadedObject &operator=(const LoadedObject &) = delete;
  ~LoadedObject();
  /// The address of a function defined by the object; throws Error.
  void *lookup(const std::string &name) const;

private:
  friend std::shared_ptr<LoadedObject>
  loadObjectFile(llvm::SmallVector<char, 0> object, const std::string &name);
  explicit LoadedObject(llvm::orc::JITDylib &library) : library(library) {}
  llvm::orc::JITDylib &library;
};

/// Adds an object file to a fresh JITDylib of the process-wide LLJIT, whose
/// main JITDylib holds the runtime symbols. Throws Error.
std::shared_ptr<LoadedObject> loadObjectFile(llvm::SmallVector<char, 0> object,
                                             const std::string &name);

} // namespace llvmcg
} // namespace dynafuse

#endif

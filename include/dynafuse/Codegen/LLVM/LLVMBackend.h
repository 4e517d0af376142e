//===- LLVMBackend.h - The LLVM CPU code generator --------------*- C++ -*-===//
//
// Compiles the kernels of a LoopModule to native code for the host CPU with
// LLVM 16 (ORC LLJIT, optimized at O2 for the host's CPU and features). Each
// kernel becomes one function `void(char *const *buffers, const int64_t
// *symbols)` following the kernel ABI of Runtime/Backend.h (splittable
// kernels also `NAME.range(buffers, symbols, begin, end)`). Object code is
// cached on disk (Runtime/DiskCache.h, in CompileOptions::codegen's folder).
// Only this library includes LLVM headers; this interface exposes none.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CODEGEN_LLVM_LLVMBACKEND_H
#define DYNAFUSE_CODEGEN_LLVM_LLVMBACKEND_H

#include "dynafuse/Loop/Kernel.h"
#include "dynafuse/Runtime/Backend.h"

#include <memory>
#include <string>

namespace dynafuse {

/// A new LLVM backend. All instances share one process-lifetime JIT.
std::unique_ptr<Backend> createLLVMBackend();

/// Registers createLLVMBackend under the name "llvm". Idempotent.
void registerLLVMBackend();

/// The LLVM IR text of one module holding every kernel of `module`, before
/// or after the O2 pipeline. Throws Error when the IR does not verify.
std::string emitLLVMIR(const LoopModule &module, bool optimized,
                       const CodegenOptions &codegen = CodegenOptions());

/// The host assembly of the optimized module.
std::string emitAssembly(const LoopModule &module,
                         const CodegenOptions &codegen = CodegenOptions());

} // namespace dynafuse

#endif

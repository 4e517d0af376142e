//===- MLIRBackend.h - Loop IR as MLIR, and MLIR's own CPU pipeline -*- C++ -*-===//
//
// Two jobs for MLIR 16. For users: any kernel of a LoopModule exported as
// MLIR in upstream dialects only (func, scf, memref with strided layouts,
// arith, math), so it can enter their own pipelines. For us: a second,
// independent compiler from loop IR to machine code (MLIR's conversion
// passes to the LLVM dialect, then its ExecutionEngine), registered as the
// backend "mlir" and used as an oracle against the LLVM backend and the
// interpreter. The mapping is described in docs/ir-reference.md.
// Only lib/Codegen/MLIR includes MLIR headers; this interface exposes none.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CODEGEN_MLIR_MLIRBACKEND_H
#define DYNAFUSE_CODEGEN_MLIR_MLIRBACKEND_H

#include "dynafuse/Loop/Kernel.h"
#include "dynafuse/Runtime/Backend.h"

#include <memory>
#include <string>

namespace dynafuse {

/// The kernels of `module` as one MLIR module: a `func.func` per kernel
/// taking one memref per parameter and one `index` per size symbol.
/// Verified by MLIR's verifier; throws Error naming the kernel otherwise.
std::string exportMLIR(const LoopModule &module);

/// The exported module after MLIR's lowering to the LLVM dialect (what the
/// backend hands to the ExecutionEngine).
std::string lowerMLIRToLLVMDialect(const LoopModule &module);

/// A new MLIR backend: export, MLIR's lowering, ExecutionEngine at O2.
std::unique_ptr<Backend> createMLIRBackend();

/// Registers createMLIRBackend under the name "mlir". Idempotent.
void registerMLIRBackend();

} // namespace dynafuse

#endif

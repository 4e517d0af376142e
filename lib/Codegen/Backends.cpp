//===- Backends.cpp - Every backend this build has, registered once -------===//
#include "dynafuse/Codegen/Backends.h"

#include "dynafuse/Runtime/Executor.h"

#ifdef DYNAFUSE_HAVE_LLVM
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"
#endif
#ifdef DYNAFUSE_HAVE_MLIR
#include "dynafuse/Codegen/MLIR/MLIRBackend.h"
#endif
#ifdef DYNAFUSE_HAVE_CUDA
#include "dynafuse/Codegen/CUDA/CUDABackend.h"
#endif

namespace dynafuse {

void registerAllBackends() {
  registerBuiltinBackends();
#ifdef DYNAFUSE_HAVE_LLVM
  registerLLVMBackend();
#endif
#ifdef DYNAFUSE_HAVE_MLIR
  registerMLIRBackend();
#endif
#ifdef DYNAFUSE_HAVE_CUDA
  registerCUDABackend();
#endif
}

} // namespace dynafuse

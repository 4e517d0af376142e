//===- Backends.h - Every backend this build has, registered once -*- C++ -*-===//
//
// The interpreter always, and the LLVM, MLIR and CUDA backends when the
// build has them: the one registration the extension, the tools and the
// tests share (the DynafuseBackends library links the codegen libraries
// the build configured).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CODEGEN_BACKENDS_H
#define DYNAFUSE_CODEGEN_BACKENDS_H

namespace dynafuse {

/// Registers every backend of this build (repeated calls are harmless).
void registerAllBackends();

} // namespace dynafuse

#endif

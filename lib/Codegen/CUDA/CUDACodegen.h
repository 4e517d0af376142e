//===- CUDACodegen.h - Internals of the CUDA backend ------------*- C++ -*-===//
#ifndef DYNAFUSE_LIB_CODEGEN_CUDA_CUDACODEGEN_H
#define DYNAFUSE_LIB_CODEGEN_CUDA_CUDACODEGEN_H

#include "dynafuse/Codegen/CUDA/CUDABackend.h"

#include <string>

namespace dynafuse {

/// Device helpers put in front of every emitted module.
const char *cudaPrelude();

/// The CUDA C of one kernel (no prelude) and how to launch it.
std::string emitCUDAKernel(const Kernel &kernel, CUDAKernelInfo &info);

/// NVRTC's version as "MAJOR.MINOR"; throws Error when not loadable.
std::string nvrtcVersionString();

/// Compiles with NVRTC; cubin when `cubin` (arch "sm_XY"), else PTX
/// (arch "compute_XY"). Cached on disk.
std::string nvrtcCompile(const std::string &source, const std::string &arch,
                         bool cubin);

} // namespace dynafuse

#endif

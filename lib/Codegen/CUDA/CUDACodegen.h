//===- CUDACodegen.h - Internals of the CUDA backend ------------*- C++ -*-===//
#ifndef DYNAFUSE_LIB_CODEGEN_CUDA_CUDACODEGEN_H
#define DYNAFUSE_LIB_CODEGEN_CUDA_CUDACODEGEN_H

#include "dynafuse/Codegen/CUDA/CUDABackend.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dynafuse {

/// What the cuda backend's executables offer beyond KernelExecutable.
class CUDALaunchable : public KernelExecutable {
public:
  /// Queues the kernel on `stream` over device buffers (element-0
  /// addresses, one per parameter); does not wait.
  virtual void launch(const uint64_t *buffers, const int64_t *symbols,
                      void *stream) const = 0;
  /// Bytes the parameters span for these symbol values.
  virtual int64_t parameterBytes(const int64_t *symbols) const = 0;
  virtual const Kernel &loopKernel() const = 0;
};

/// The loads and stores of a pointwise kernel that move 16-byte vectors of
/// 4 elements along the innermost loop (CUDAVectorPlan.cpp).
struct CUDAVectorPlan {
  /// Instruction id -> the dim indexed by the innermost variable.
  std::map<int, int> widened;
};

/// The plan for a pointwise kernel whose innermost loop variable is
/// `innerVar` and whose per-element statements are `body`; none when the
/// kernel cannot widen its accesses.
std::optional<CUDAVectorPlan> planVectorAccess(const Kernel &kernel,
                                               const std::string &innerVar,
                                               const std::vector<Stmt> &body);

/// Elements a strided parameter spans for these sizes: 1 + sum((size - 1)
/// * stride), 0 when a dim is empty.
int64_t spanElements(const TensorType &type,
                     const std::map<std::string, int64_t> &bindings);

/// Device helpers put in front of every emitted module.
const char *cudaPrelude();

/// The CUDA C of one kernel (no prelude) and how to launch it.
std::string emitCUDAKernel(const Kernel &kernel, CUDAKernelInfo &info);

/// NVRTC's version as "MAJOR.MINOR"; throws Error when not loadable.
std::string nvrtcVersionString(const CodegenOptions &codegen);

/// Compiles with NVRTC; cubin when `cubin` (arch "sm_XY"), else PTX
/// (arch "compute_XY"). Cached on disk.
std::string nvrtcCompile(const std::string &source, const std::string &arch,
                         bool cubin, const CodegenOptions &codegen);

} // namespace dynafuse

#endif

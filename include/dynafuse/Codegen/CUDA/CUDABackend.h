//===- CUDABackend.h - The CUDA code generator ------------------*- C++ -*-===//
//
// Emits CUDA C for the kernels of a LoopModule, compiles it with NVRTC
// (loaded at run time with dlopen: CodegenOptions::nvrtcPath
// ($DYNAFUSE_NVRTC), then the library CMake
// found, then libnvrtc.so.13) and launches it through the CUDA driver API
// (libcuda.so.1, also dlopen'ed). Nothing here links CUDA: a build without
// a GPU, the driver or NVRTC still builds, and using the missing piece
// throws a dynafuse::Error saying what is missing. This interface exposes
// no CUDA types; only lib/Codegen/CUDA includes CUDA or NVRTC headers.
//
// Kernel signature: `extern "C" __global__ void NAME(T0 *p0, ..., long long
// S_sym0, ..., long long *df_error)`: the parameters' element-0 pointers,
// the size symbols in kernel.symbols order, then three i64s of device
// memory where the first out-of-bounds indirect index is recorded (flag,
// index, size).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CODEGEN_CUDA_CUDABACKEND_H
#define DYNAFUSE_CODEGEN_CUDA_CUDABACKEND_H

#include "dynafuse/Loop/Kernel.h"
#include "dynafuse/Runtime/Backend.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dynafuse {

/// How a kernel is spread over the GPU (see CUDAEmitter.cpp).
enum class CUDAKernelShape {
  /// A grid-stride loop over the flattened loop nest: one thread per
  /// output element.
  Pointwise,
  /// One block per outer-loop iteration; each reduce statement is a block
  /// reduction.
  BlockReduce,
  /// One thread per outer-loop iteration running everything serially
  /// (reduce statements nested other ways): correct, slow.
  Serial,
};

struct CUDAKernelInfo {
  std::string name;
  CUDAKernelShape shape = CUDAKernelShape::Pointwise;
  /// Work items: threads (Pointwise) or blocks (BlockReduce, Serial:
  /// outer iterations), in the kernel's size symbols.
  SymExpr work;
};

/// Threads per block of every launch.
constexpr int cudaBlockSize = 256;

/// The CUDA C of every kernel of `module` (one translation unit).
std::string emitCUDA(const LoopModule &module,
                     std::vector<CUDAKernelInfo> *infos = nullptr);

/// Whether NVRTC can be loaded; `why` says why not.
/// NVRTC is loaded once, from the first caller's `codegen.nvrtcPath`.
bool nvrtcAvailable(std::string *why = nullptr,
                    const CodegenOptions &codegen = CodegenOptions());

/// PTX for `source` (compute_90 unless `arch` says otherwise, e.g.
/// "compute_80"), from the disk cache (codegen.diskCacheDir) when present;
/// codegen.cudaIncludeDirs are searched first. Throws Error with
/// NVRTC's log when compilation fails or NVRTC cannot be loaded.
std::string compileCUDAToPTX(const std::string &source,
                             const std::string &arch = "compute_90",
                             const CodegenOptions &codegen = CodegenOptions());

/// A cubin for `arch` ("sm_90"), cached like PTX. Where NVRTC is missing,
/// a cubin prepared on another machine for the same source and arch is
/// taken from the disk cache.
std::string
compileCUDAToCubin(const std::string &source, const std::string &arch = "sm_90",
                   const CodegenOptions &codegen = CodegenOptions());

/// A new CUDA backend; compile() works without a device (NVRTC only),
/// running a kernel needs the driver and a device.
std::unique_ptr<Backend> createCUDABackend();

/// Device memory on device 0 (tools and tests; the torch bridge uses
/// torch's allocator). Throws Error when there is no device.
class CUDADeviceBuffer {
public:
  explicit CUDADeviceBuffer(size_t bytes);
  ~CUDADeviceBuffer();
  CUDADeviceBuffer(const CUDADeviceBuffer &) = delete;
  CUDADeviceBuffer &operator=(const CUDADeviceBuffer &) = delete;
  void copyFrom(const void *host);
  void copyTo(void *host) const;
  /// The device address, as the kernel ABI takes it.
  char *address() const;

private:
  uint64_t pointer = 0;
  size_t bytes = 0;
};

/// Device bandwidth of one kernel (benchmarkCUDAKernels).
struct CUDAKernelBandwidth {
  std::string kernel;
  /// Bytes its parameters span, each read or written once (ideal traffic).
  int64_t bytes = 0;
  /// Median time of one launch, and of a device-to-device copy of bytes/2
  /// (which moves the same bytes: half read, half written).
  double seconds = 0;
  double copySeconds = 0;
};

/// Runs every kernel of `module` (compiled by the cuda backend) on device
/// buffers of random data sized by `bindings` (every size symbol bound),
/// `iterations` timed launches after a warm-up. Needs a device.
std::vector<CUDAKernelBandwidth> benchmarkCUDAKernels(
    const LoopModule &module, const std::map<std::string, int64_t> &bindings,
    int iterations, const CodegenOptions &codegen = CodegenOptions());

/// Registers createCUDABackend under the name "cuda". Idempotent.
void registerCUDABackend();

} // namespace dynafuse

#endif

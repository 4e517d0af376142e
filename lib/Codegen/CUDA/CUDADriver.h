//===- CUDADriver.h - The CUDA driver API, loaded at run time ---*- C++ -*-===//
//
// libcuda.so.1 is dlopen'ed on first use and its entry points found with
// cuGetProcAddress (cuda.h renames functions, e.g. cuMemAlloc is
// cuMemAlloc_v2; asking by base name and version avoids that). Without a
// driver or a device every call throws a dynafuse::Error saying so.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LIB_CODEGEN_CUDA_CUDADRIVER_H
#define DYNAFUSE_LIB_CODEGEN_CUDA_CUDADRIVER_H

#include <cstdint>
#include <string>

namespace dynafuse {
namespace cuda {

/// Throws Error ("CUDA backend: device unavailable: WHY") unless the driver
/// loaded and device 0 has a context (made current on the calling thread).
/// Returns the device's "sm_XY".
std::string requireDevice();

/// A loaded module (cubin) and a kernel in it.
void *loadModule(const std::string &image);
void *getFunction(void *module, const std::string &name);

uint64_t allocate(size_t bytes);
void release(uint64_t pointer);
void copyToDevice(uint64_t device, const void *host, size_t bytes);
void copyToHost(void *host, uint64_t device, size_t bytes);
void copyDeviceToDevice(uint64_t destination, uint64_t source, size_t bytes);
/// Queued on `stream` (a CUstream; null is the legacy default stream).
void copyToHostAsync(void *host, uint64_t device, size_t bytes, void *stream);
void launch(void *function, unsigned blocks, unsigned threads, void **args,
            void *stream = nullptr);
/// The whole context / one stream.
void synchronize();
void synchronize(void *stream);

} // namespace cuda
} // namespace dynafuse

#endif

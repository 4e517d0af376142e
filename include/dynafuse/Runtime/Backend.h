//===- Backend.h - The interface every code generator implements -*- C++
//-*-===//
//
// A Backend turns the kernels of a LoopModule into executables. The runtime
// knows nothing else about code generation: the reference interpreter, LLVM
// and CUDA all plug in here and register themselves by name.
//
// Kernel ABI (shared by every backend): run(buffers, symbols) where
// buffers[i] is the address of element 0 of the kernel's i-th parameter
// (strides come from the parameter's type) and symbols[j] is the value of
// kernel.symbols[j]. Backends may also run a range [begin, end) of a
// splittable kernel's outer loop (Runtime/Parallel.h), which the executor
// uses to spread large kernels over the thread pool.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_BACKEND_H
#define DYNAFUSE_RUNTIME_BACKEND_H

#include "dynafuse/Loop/Kernel.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dynafuse {

struct CompileOptions {
  /// When set, the backend writes its stages (.ll, .s, ...) here.
  std::string dumpDir;
  /// Base name of dumped files.
  std::string dumpName = "kernels";
};

class KernelExecutable {
public:
  virtual ~KernelExecutable() = default;
  virtual void run(char *const *buffers, const int64_t *symbols) const = 0;
  /// Whether runRange runs part of the outer loop (else it runs it all).
  virtual bool supportsRange() const { return false; }
  /// Iterations [begin, end) of a splittable kernel's outer loop.
  virtual void runRange(char *const *buffers, const int64_t *symbols,
                        int64_t begin, int64_t end) const {
    run(buffers, symbols);
  }
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  /// One executable per module.kernels entry, in the same order. Throws
  /// Error when a kernel cannot be compiled.
  virtual std::vector<std::unique_ptr<KernelExecutable>>
  compile(const LoopModule &module, const CompileOptions &options) = 0;
};

/// The stream device-resident kernels are queued on by the calling thread
/// (a CUstream for the cuda backend; null is the device's default stream).
/// The torch bridge sets torch's current stream around a graph's run.
void *deviceStream();
class DeviceStreamScope {
public:
  explicit DeviceStreamScope(void *stream);
  ~DeviceStreamScope();
  DeviceStreamScope(const DeviceStreamScope &) = delete;
  DeviceStreamScope &operator=(const DeviceStreamScope &) = delete;

private:
  void *previous;
};

using BackendFactory = std::function<std::unique_ptr<Backend>()>;
void registerBackend(const std::string &name, BackendFactory factory);
/// Throws Error naming the known backends when name is not registered.
std::unique_ptr<Backend> createBackend(const std::string &name);
std::vector<std::string> backendNames();

} // namespace dynafuse

#endif

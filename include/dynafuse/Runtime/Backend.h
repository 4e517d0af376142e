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
#include "dynafuse/Support/Options.h"

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
  /// Disk cache, vector width, NVRTC: from the caller's Options (the
  /// defaults use no disk cache).
  CodegenOptions codegen;
  /// Innermost iterations below which a kernel runs on one thread
  /// (Options::parallelThreshold; used by CompiledModule).
  int64_t parallelThreshold = 32768;
};

/// CompileOptions carrying what `options` says about code generation.
CompileOptions compileOptionsFrom(const Options &options);

/// Writes one dumped stage, `<dir>/<fileName>` (creating dir); throws Error
/// naming `backend` and the path when it cannot.
void writeDumpFile(const std::string &dir, const std::string &fileName,
                   const std::string &text, const std::string &backend);

class KernelExecutable {
public:
  virtual ~KernelExecutable() = default;
  virtual void run(char *const *buffers, const int64_t *symbols) const = 0;
  /// As run(), queued on `deviceStream` by device backends (a CUstream for
  /// the cuda backend; null is the device's default stream); host backends
  /// ignore it.
  virtual void runOnStream(char *const *buffers, const int64_t *symbols,
                           void *deviceStream) const {
    run(buffers, symbols);
  }
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

using BackendFactory = std::function<std::unique_ptr<Backend>()>;
void registerBackend(const std::string &name, BackendFactory factory);
/// Throws Error naming the known backends when name is not registered.
std::unique_ptr<Backend> createBackend(const std::string &name);
std::vector<std::string> backendNames();

/// What a user may ask for: "auto", "cpu", "llvm", "interp", "cuda", "mlir".
const std::vector<std::string> &backendChoices();

/// Backend resolution, the one place it happens. `requested` is one of
/// backendChoices(); "auto" becomes "cuda" when `callUsesCuda()` (asked
/// only then) says the call's tensors live on a CUDA device, else "cpu".
/// The result's `choice` is that name (what compiled entries are keyed
/// by), `registered` the backend that implements it: "cpu" is "llvm" when
/// it is registered, else "interp". Throws Error for an unknown name.
struct BackendResolution {
  std::string choice;
  std::string registered;
};
BackendResolution resolveBackend(const std::string &requested,
                                 const std::function<bool()> &callUsesCuda);

} // namespace dynafuse

#endif

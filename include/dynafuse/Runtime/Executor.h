//===- Executor.h - Runs a compiled LoopModule ------------------*- C++ -*-===//
//
// A CompiledModule is a LoopModule plus one executable per kernel. run()
// binds the size symbols from the input shapes, asks the Allocator for every
// allocation, and launches the kernel calls in order.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_EXECUTOR_H
#define DYNAFUSE_RUNTIME_EXECUTOR_H

#include "dynafuse/Runtime/Backend.h"

#include <map>

namespace dynafuse {

/// Where outputs and intermediates live. The torch bridge implements it with
/// ATen tensors; tests and tools with plain host memory.
class Allocator {
public:
  virtual ~Allocator() = default;
  /// Storage for module.allocs[allocIndex] with concrete sizes (contiguous).
  virtual char *allocate(size_t allocIndex, const LoopBuffer &buffer,
                         const std::vector<int64_t> &sizes) = 0;
};

/// A concrete tensor argument: data and its actual sizes and strides
/// (in elements).
struct TensorArg {
  char *data = nullptr;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

class CompiledModule {
public:
  CompiledModule(LoopModule module, Backend &backend,
                 const CompileOptions &options);

  const LoopModule &module() const { return loopModule; }
  /// Binds symbols, allocates, runs every call. Throws Error when inputs do
  /// not match the module's input types.
  void run(const std::vector<TensorArg> &inputs, Allocator &allocator) const;
  /// Symbol values implied by inputs (also checks the inputs).
  std::map<std::string, int64_t>
  bindSymbols(const std::vector<TensorArg> &inputs) const;

private:
  LoopModule loopModule;
  std::vector<std::unique_ptr<KernelExecutable>> executables;
  std::vector<int> callKernel;
};

/// Host-memory allocator that owns its buffers (for tools and tests).
class HostAllocator : public Allocator {
public:
  char *allocate(size_t allocIndex, const LoopBuffer &buffer,
                 const std::vector<int64_t> &sizes) override;
  std::vector<std::vector<char>> &buffers() { return storage; }

private:
  std::vector<std::vector<char>> storage;
};

/// Registers the backends that live in the core ("interp"). Idempotent.
void registerBuiltinBackends();

} // namespace dynafuse

#endif

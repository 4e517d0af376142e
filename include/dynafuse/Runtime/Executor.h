//===- Executor.h - Runs a compiled LoopModule ------------------*- C++ -*-===//
//
// A CompiledModule is a LoopModule plus one executable per kernel. run()
// binds the size symbols from the input shapes and executes the program's
// steps in order: allocations and extern ops go through an
// ExecutionContext (the torch bridge implements it with ATen), kernel calls
// through the backend's executables.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_EXECUTOR_H
#define DYNAFUSE_RUNTIME_EXECUTOR_H

#include "dynafuse/Runtime/Backend.h"
#include "dynafuse/Runtime/CachingAllocator.h"

#include <map>
#include <memory>

namespace dynafuse {

/// A concrete tensor: data (element 0) and its sizes and strides (in
/// elements).
struct TensorArg {
  char *data = nullptr;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  DType dtype = DType::F32;
};

/// How many elements a strided layout reaches: one past the offset of its
/// farthest element; 0 when a size is 0. Less than the element count when
/// a stride is 0 (an expanded dim).
int64_t stridedElementSpan(const std::vector<int64_t> &sizes,
                           const std::vector<int64_t> &strides);

/// Where storage comes from and who runs extern ops.
class ExecutionContext {
public:
  virtual ~ExecutionContext() = default;
  /// Storage for the buffer a step allocates: its sizes, and its strides
  /// when the step's type has explicit ones (else empty: row-major), both
  /// evaluated for this run. `escapes`: the storage outlives the run (a
  /// module output is, or reuses, it); other buffers may be scratch the
  /// context takes back when the run ends.
  virtual char *allocate(const ProgramStep &step,
                         const std::vector<int64_t> &sizes,
                         const std::vector<int64_t> &strides,
                         bool escapes) = 0;
  /// Runs an extern step on its arguments. `results` arrive with the sizes
  /// and strides each result must have; the call fills in their data.
  virtual void runExtern(const ProgramStep &step,
                         const std::vector<TensorArg> &args,
                         std::vector<TensorArg> &results) = 0;
  /// The storage created under `buffer` (an allocation, with the buffers
  /// reusing it, or an extern result) will not be read again in this run
  /// and is no module output: the context may free it now rather than when
  /// the run ends (a model's intermediates then need not all be alive at
  /// once).
  virtual void release(const std::string &buffer) { (void)buffer; }
  /// The stream device kernels of this run are queued on (a CUstream for
  /// the cuda backend; null: the device's default stream).
  virtual void *deviceStream() const { return nullptr; }
};

/// Binds each size of type that is a symbol (and not bound yet) to the
/// concrete size in its place.
void bindSizeSymbols(const TensorType &type, const std::vector<int64_t> &sizes,
                     std::map<std::string, int64_t> &bindings);

class CompiledModule {
public:
  CompiledModule(LoopModule module, Backend &backend,
                 const CompileOptions &options);

  const LoopModule &module() const { return loopModule; }
  /// Binds symbols, runs every step; returns the module's outputs in
  /// order. Throws Error when inputs do not match the module's input types.
  /// known: symbol values the caller has from elsewhere (a backward's
  /// from its forward's inputs), where the inputs' sizes do not give them.
  std::vector<TensorArg>
  run(const std::vector<TensorArg> &inputs, ExecutionContext &context,
      const std::map<std::string, int64_t> &known = {}) const;
  /// Symbol values implied by inputs (also checks the inputs).
  std::map<std::string, int64_t>
  bindSymbols(const std::vector<TensorArg> &inputs,
              const std::map<std::string, int64_t> &known = {}) const;
  /// Bytes of intermediate (non-output) storage live at the worst step.
  int64_t
  peakIntermediateBytes(const std::map<std::string, int64_t> &bindings) const;

private:
  LoopModule loopModule;
  std::vector<std::unique_ptr<KernelExecutable>> executables;
  /// A buffer type's sizes and strides (effective, and as declared for an
  /// allocation), evaluated once when they are constants: a static graph's
  /// steps then evaluate no size expression per run.
  struct StaticLayout {
    bool constant = false;
    std::vector<int64_t> sizes, strides, declaredStrides;
  };
  static StaticLayout staticLayout(const TensorType &type);
  /// run()'s plan, made once: per step, every buffer it names as a slot of
  /// the run's buffer table (inputs first), the kernel a call runs, and
  /// whether an allocation escapes the run (a module output is, or reuses,
  /// its storage).
  struct StepSlots {
    /// alloc and view: the result's; extern: each result's.
    std::vector<StaticLayout> layouts;
    int result = -1; ///< alloc, view: the slot defined
    int reuse = -1;  ///< alloc: the slot whose storage it takes
    int source = -1; ///< view: the slot viewed
    int kernel = -1; ///< call
    bool escapes = false;
    std::vector<int> args;    ///< call, extern
    std::vector<int> results; ///< extern
    /// Storage whose last reader this step is, by the name it was created
    /// under (ExecutionContext::release).
    std::vector<std::string> releases;
  };
  /// One storage of a run: created by an allocation (then `allocations`
  /// lists it and the allocations reusing it) or by an extern result, read
  /// up to lastStep; one an output holds escapes.
  struct StorageLifetime {
    std::string name;
    size_t firstStep = 0, lastStep = 0;
    bool escapes = false;
    std::vector<size_t> allocations;
  };
  std::vector<StorageLifetime> lifetimes;
  std::vector<StepSlots> plan;
  /// Each input's layout, for checkInput.
  std::vector<StaticLayout> inputLayouts;
  size_t slotCount = 0;
  std::vector<int> outputSlots;
  int64_t parallelThreshold;
};

/// Host-memory context that owns its buffers and runs no extern ops (for
/// tools and tests without torch).
class HostContext : public ExecutionContext {
public:
  char *allocate(const ProgramStep &step, const std::vector<int64_t> &sizes,
                 const std::vector<int64_t> &strides, bool escapes) override;
  void runExtern(const ProgramStep &step, const std::vector<TensorArg> &args,
                 std::vector<TensorArg> &results) override;
  std::map<std::string, std::vector<char>> &buffers() { return storage; }

private:
  std::map<std::string, std::vector<char>> storage;
  /// Guard-page mode (Options::guardPages): exactly sized blocks of the
  /// global allocator instead of `storage`.
  std::map<std::string, std::unique_ptr<char, ReleaseToGlobalAllocator>>
      guarded;
};

/// Registers the backends that live in the core ("interp"). Idempotent.
void registerBuiltinBackends();

} // namespace dynafuse

#endif

//===- TorchAllocators.cpp - Tensor storage from the caching allocator ----===//
//
// Part of the torch bridge (TorchBridge.h): the tensors Dynafuse creates,
// and torch's CPU allocations during a compiled run, take their memory from
// the runtime's caching allocator (decision 28); configured once, from the
// Options, when the extension loads.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Torch/TorchBridge.h"

#include "TorchTypes.h"

#include "dynafuse/Runtime/CompilerStats.h"

#include "dynafuse/Runtime/CachingAllocator.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/CPUAllocator.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>

namespace dynafuse {

/// CPU tensors Dynafuse creates take their memory from the runtime's
/// caching allocator (decision 28); torch's storage returns the block through
/// the deleter when it frees it. Options::cachingAllocator off
/// (DYNAFUSE_CACHING_ALLOCATOR=0) uses at::empty instead.
struct PoolAllocator final : c10::Allocator {
  static void returnBlock(void *block) {
    CachingAllocator::global().release(block);
  }
  c10::DataPtr allocate(size_t bytes) override {
    void *block = CachingAllocator::global().allocate(bytes, currentRun);
    return {block, block, &returnBlock, c10::Device(c10::DeviceType::CPU)};
  }
  /// The planned run whose scope (PooledTorchAllocations) this thread is
  /// in, if any: ATen's results inside its steps are part of its trace.
  static inline thread_local RunAllocations *currentRun = nullptr;
  c10::DeleterFnPtr raw_deleter() const override { return &returnBlock; }
  void copy_data(void *dest, const void *src, size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

/// What installTorchAllocators set from the Options (once, at load).
struct TorchAllocatorSettings {
  /// Options::cachingAllocator, or guard pages (which must see every
  /// tensor Dynafuse makes).
  bool pool = true;
  /// Options::guardPages == GuardPages::All.
  bool guardTorch = false;
};
static TorchAllocatorSettings torchAllocatorSettings;

/// The pool, or null with the caching allocator off.
c10::Allocator *poolAllocator() {
  static PoolAllocator *pool =
      torchAllocatorSettings.pool ? new PoolAllocator() : nullptr;
  return pool;
}

PyObject *newTensor(const std::vector<int64_t> &sizes, DType dtype,
                    const std::string &device, char **data) {
  c10::Allocator *pool = poolAllocator();
  at::Device where(device);
  at::Tensor tensor =
      pool && where.is_cpu()
          ? at::Tensor(at::detail::empty_generic(
                sizes, pool, c10::DispatchKeySet(c10::DispatchKey::CPU),
                toScalarType(dtype), std::nullopt))
          : at::empty(
                sizes,
                at::TensorOptions().dtype(toScalarType(dtype)).device(where));
  *data = static_cast<char *>(tensor.data_ptr());
  return THPVariable_Wrap(std::move(tensor));
}

/// Torch's CPU allocator while Dynafuse is loaded: on a thread that is
/// running a compiled graph (PooledTorchAllocations) it hands out pool
/// blocks, so ATen's results inside extern and call_torch steps (matmuls,
/// convolutions) do not page-fault on first touch; everywhere else it
/// forwards to the allocator it replaced. Installed once, at priority 0:
/// a later registration replaces it (and ATen's results then simply stop
/// being pooled). Tensors carry their deleter; raw deallocation asks the
/// pool whether it owns the block.
struct RunScopedAllocator final : c10::Allocator {
  static inline c10::Allocator *fallback = nullptr;
  static inline c10::DeleterFnPtr fallbackRawDeleter = nullptr;
  static inline thread_local int runDepth = 0;

  c10::DataPtr allocate(size_t bytes) override {
    return runDepth > 0 ? poolAllocator()->allocate(bytes)
                        : fallback->allocate(bytes);
  }
  static void rawDelete(void *block) {
    if (CachingAllocator::global().blockSize(block) != 0)
      CachingAllocator::global().release(block);
    else if (fallbackRawDeleter)
      fallbackRawDeleter(block);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &rawDelete; }
  void copy_data(void *dest, const void *src, size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

/// Whether ATen's allocations in a run are pooled: not with the pool off,
/// and not under guard pages (every block would be its own mapping; with
/// "all" the pool is torch's allocator anyway).
static bool poolsTorchResults() {
  return poolAllocator() && !CachingAllocator::globalUsesGuardPages();
}

static void installRunScopedAllocator() {
  if (!poolsTorchResults())
    return;
  static RunScopedAllocator *allocator = new RunScopedAllocator();
  RunScopedAllocator::fallback = c10::GetCPUAllocator();
  RunScopedAllocator::fallbackRawDeleter =
      RunScopedAllocator::fallback->raw_deleter();
  c10::SetCPUAllocator(allocator, /*priority=*/0);
}

PooledTorchAllocations::PooledTorchAllocations(AllocationPlanner *planner) {
  if (!RunScopedAllocator::fallback)
    return;
  ++RunScopedAllocator::runDepth;
  active = true;
  if (!planner)
    return;
  this->planner = planner;
  planned = CachingAllocator::global().beginRun(planner->current());
  outer = PoolAllocator::currentRun;
  PoolAllocator::currentRun = planned.get();
}

PooledTorchAllocations::~PooledTorchAllocations() {
  if (!active)
    return;
  --RunScopedAllocator::runDepth;
  if (!planned)
    return;
  PoolAllocator::currentRun = outer;
  RunOutcome outcome = CachingAllocator::global().endRun(*planned);
  try {
    if (planner->learn(outcome))
      ++compilerStats().allocationPlans;
  } catch (const std::exception &) {
    // No memory for a plan: the current one stays.
  }
}

WeightPackingAllocations::WeightPackingAllocations()
    : suspended(PoolAllocator::currentRun),
      opened(CachingAllocator::clock()) {
  PoolAllocator::currentRun = nullptr;
}

WeightPackingAllocations::~WeightPackingAllocations() {
  PoolAllocator::currentRun = suspended;
  // The packing's temporaries are free now and nothing later asks for
  // their sizes; the blocks the run cached before stay.
  CachingAllocator::global().trimReleasedSince(opened);
}

bool cachingAllocatorInUse() { return torchAllocatorSettings.pool; }

void installTorchAllocators(const Options &options) {
  torchAllocatorSettings.pool =
      options.cachingAllocator || options.guardPages != GuardPages::Off;
  torchAllocatorSettings.guardTorch = options.guardPages == GuardPages::All;
  if (torchAllocatorSettings.guardTorch) {
    c10::SetCPUAllocator(poolAllocator(), /*priority=*/100);
    return;
  }
  installRunScopedAllocator();
}

PyObject *newStridedTensor(const std::vector<int64_t> &sizes,
                           const std::vector<int64_t> &strides, DType dtype,
                           const std::string &device, char **data) {
  if (CachingAllocator::globalUsesGuardPages() && at::Device(device).is_cpu()) {
    // The storage spans exactly the strided layout, ending at a guard page.
    at::Tensor tensor(at::detail::empty_strided_generic(
        sizes, strides, poolAllocator(),
        c10::DispatchKeySet(c10::DispatchKey::CPU), toScalarType(dtype)));
    *data = static_cast<char *>(tensor.data_ptr());
    return THPVariable_Wrap(std::move(tensor));
  }
  at::Tensor tensor = at::empty_strided(sizes, strides,
                                        at::TensorOptions()
                                            .dtype(toScalarType(dtype))
                                            .device(at::Device(device)));
  *data = static_cast<char *>(tensor.data_ptr());
  return THPVariable_Wrap(std::move(tensor));
}

} // namespace dynafuse

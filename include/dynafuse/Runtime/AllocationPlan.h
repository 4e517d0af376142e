//===- AllocationPlan.h - Where a compiled run's blocks go, planned -*- C++
//-*-===//
//
// Decision 86. A compiled run allocates its large blocks (intermediates,
// ATen's results inside extern steps, their scratch) in the same order with
// the same sizes call after call, but a heap places them online, one at a
// time, without knowing when each dies: resnet50 at batch 8 keeps 55 MB of
// them live at once at most, yet every online placement of its trace needs
// 84 MB or more. This file plans them offline, from one run's trace:
// - a trace is the run's large allocations and releases, in order; a block
//   released within the run has a lifetime, one that outlived the run (an
//   output, a prepacked weight) is left to the heap;
// - the plan gives each block with a lifetime an offset in one region,
//   greedily by size (largest first, into the best-fitting gap between the
//   blocks already placed whose lifetimes overlap its own), and lists, per
//   block, the other planned blocks sharing any of its bytes; a large
//   block starts at a staggered cache-line offset modulo the page;
// - the caching allocator (CachingAllocator::beginRun) hands the k-th large
//   allocation of a later run its planned place only when its size is the
//   trace's and none of the blocks sharing its bytes is live, so a run that
//   strays from its trace gets heap blocks, never overlapping ones;
// - an AllocationPlanner keeps one compiled program's plan across runs and
//   plans again, a bounded number of times, from a run that strayed.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_ALLOCATIONPLAN_H
#define DYNAFUSE_RUNTIME_ALLOCATIONPLAN_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace dynafuse {

/// One step of a run's trace: the index-th large allocation of the run was
/// made (with its size in bytes), or released.
struct AllocationEvent {
  enum class Kind : uint8_t { Allocate, Release };
  Kind kind;
  uint32_t index;
  /// Allocate: the block's size; Release: 0.
  size_t bytes;
};

/// Where each large allocation of a run goes.
struct AllocationPlan {
  struct Slot {
    /// The size the trace's allocation had.
    size_t bytes = 0;
    /// Its offset in the region; -1: left to the heap (it outlived its run).
    int64_t offset = -1;
    /// The planned slots sharing some of its bytes (their lifetimes are
    /// disjoint from its own in the trace).
    std::vector<uint32_t> sharing;
  };
  std::vector<Slot> slots;
  /// Bytes of the region the planned slots lie in.
  size_t regionBytes = 0;
  /// The most bytes of planned slots live at once in the trace: no
  /// placement needs less than this.
  size_t peakLiveBytes = 0;
  /// The planned slots.
  size_t plannedSlots() const;

  /// Plans the trace of one run (blocks of at most kMaxSlots allocations;
  /// a longer trace, or a malformed one, gives a plan of no planned slot).
  static AllocationPlan fromTrace(const std::vector<AllocationEvent> &trace);
  static constexpr size_t kMaxSlots = 8192;
  /// Blocks of at least kStaggeredMinBytes reserve kStaggerPadBytes more
  /// and start at one of its cache-line offsets, spread so that streams a
  /// kernel touches do not all lie at one offset modulo the page.
  static constexpr size_t kStaggeredMinBytes = size_t(64) << 10;
  static constexpr size_t kStaggerPadBytes = 4096;
};

/// How one run went against its plan (CachingAllocator::endRun).
struct RunOutcome {
  /// Every allocation matched the plan's slot of its index, the run made as
  /// many as the plan has slots, and each planned slot got its place.
  bool followedPlan = false;
  /// Allocations the plan placed.
  size_t plannedAllocations = 0;
  /// The run's trace.
  std::vector<AllocationEvent> trace;
};

/// One compiled program's plan across its runs (thread-safe): runs read the
/// current plan; a run that did not follow it (or ran without one) plans
/// the next, at most kMaxPlans times, after which the last plan stays.
class AllocationPlanner {
public:
  std::shared_ptr<const AllocationPlan> current() const;
  /// Learns from a finished run; returns whether it made a new plan.
  bool learn(const RunOutcome &outcome);
  /// Plans made so far.
  int plansMade() const;
  static constexpr int kMaxPlans = 4;

private:
  mutable std::mutex mutex;
  std::shared_ptr<const AllocationPlan> plan;
  int made = 0;
};

} // namespace dynafuse

#endif

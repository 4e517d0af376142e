//===- CachingAllocator.h - Reused host memory for tensors ------*- C++ -*-===//
//
// Decision 28. A fresh large allocation is fresh mmap'd memory that page-faults
// on first touch, which costs more than the kernel filling it. This allocator
// keeps freed memory mapped and hands it out again:
// - blocks of 64 KiB and more are pieces of one reserved address range, a
//   heap with best fit and merged free neighbours (BlockArena.h, decision
//   81): a request takes free memory of any earlier size that fits, so the
//   process keeps the peak of the bytes live at once, not the peak of each
//   size; fresh pages are faulted in at once (MADV_POPULATE_WRITE); huge
//   pages on request (Options::hugePages, DYNAFUSE_HUGE_PAGES=hugetlb: the
//   reserved pool where the system set pages aside; =thp: transparent ones;
//   see BlockArena.cpp and docs/performance.md for why neither is the
//   default);
// - smaller blocks come from aligned_alloc (64 bytes) and are reused by
//   exact rounded size, the one freed last first;
// - the cached (free, resident) bytes are bounded: releasing past the cap
//   gives the oldest free memory back to the system, and memory idle for
//   longer than the idle time goes back by trimIdle() (the global allocator
//   runs it from a background thread);
// - a compiled run's large blocks can follow a plan (AllocationPlan.h,
//   decision 86): beginRun() opens the run, allocate(bytes, run) gives the
//   k-th large block of the run its planned place in one region carved for
//   the run (or a heap block when the run strays from its plan), and
//   endRun() returns the run's trace for the next plan; the region goes
//   back to the heap when the run has ended and its last planned block is
//   released;
// - every method is thread-safe.
// Guard-page mode (Options::guardPages; DYNAFUSE_GUARD_PAGES=1 for the global
// allocator, through dynafuse::Options) is a debugging aid for JIT code, which
// ASan cannot see: every block gets its own mapping, placed so that its last
// byte is immediately followed by an inaccessible page (and the mapping starts
// with one), and is never reused. A read or write past the end then faults at
// once. Releasing a block makes its pages inaccessible and keeps them reserved
// for a while (a bounded quarantine), so a use after release faults as well.
// The torch bridge hands these blocks to torch with a deleter that calls
// release() when torch frees the tensor's storage.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_CACHINGALLOCATOR_H
#define DYNAFUSE_RUNTIME_CACHINGALLOCATOR_H

#include "dynafuse/Runtime/AllocationPlan.h"
#include "dynafuse/Runtime/BlockArena.h"
#include "dynafuse/Support/Options.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace dynafuse {

struct AllocatorStats {
  /// Bytes of blocks handed out and not yet released.
  size_t bytesInUse = 0;
  /// Bytes of released blocks kept for reuse.
  size_t bytesCached = 0;
  /// Allocations served from the cache / from the system.
  int64_t hits = 0;
  int64_t misses = 0;
  /// Cached blocks and free ranges returned to the system.
  int64_t trimmed = 0;
  /// The large blocks' mapped extent: the most bytes ever in use at once
  /// plus what fragmentation left free below it.
  size_t bytesMapped = 0;
  /// Large blocks of runs placed by their plan, and those the plan would
  /// have placed but a block sharing their bytes was still live.
  int64_t plannedAllocations = 0;
  int64_t planConflicts = 0;
};

/// One compiled run's large allocations (CachingAllocator::beginRun): its
/// plan, its trace so far, the region its planned blocks lie in. Only the
/// caching allocator reads or changes it, under its lock.
class RunAllocations : public std::enable_shared_from_this<RunAllocations> {
  friend class CachingAllocator;
  std::shared_ptr<const AllocationPlan> plan;
  std::vector<AllocationEvent> trace;
  /// The index the run's next large allocation gets.
  uint32_t next = 0;
  /// Cleared when an allocation's size differs from its slot's, or a slot's
  /// place was taken.
  bool followsPlan = true;
  size_t planned = 0;
  /// The region (carved at the first planned allocation) and which of its
  /// slots are live.
  char *region = nullptr;
  std::vector<uint8_t> slotLive;
  size_t liveInRegion = 0;
  bool open = true;
};

class CachingAllocator {
public:
  struct Options {
    /// The most bytes kept cached; 0 caches nothing.
    size_t cacheLimit = size_t(2) << 30;
    /// Cached blocks unused for this long are unmapped by trimIdle().
    double idleSeconds = 10;
    /// Guard-page mode (see above); nothing is cached.
    bool guardPages = false;
    /// Which pages large blocks are mapped with.
    HugePages hugePages = HugePages::Off;
    /// Address space reserved for large blocks; 0: twice the machine's
    /// memory (at least 4 GiB).
    size_t arenaBytes = 0;
  };

  explicit CachingAllocator(Options options);
  CachingAllocator() : CachingAllocator(Options()) {}
  /// Frees the cached blocks; blocks still in use stay valid (leaked).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator &) = delete;
  CachingAllocator &operator=(const CachingAllocator &) = delete;

  /// At least `bytes` bytes (a valid block even for 0), 64-byte aligned.
  /// In guard-page mode exactly `bytes` bytes ending at a page boundary, so
  /// aligned only to the largest power of two (up to the page) dividing
  /// `bytes`. Throws Error when the system has no memory left.
  void *allocate(size_t bytes);
  /// A large block (`bytes` of at least 64 KiB) of `run` (null: none) in
  /// its planned place where the plan holds, else as allocate(bytes); a
  /// small one as allocate(bytes).
  void *allocate(size_t bytes, RunAllocations *run);
  /// Opens a run placed by `plan` (null: recorded only). Guard-page mode
  /// plans nothing (every block keeps its own mapping).
  std::shared_ptr<RunAllocations> beginRun(
      std::shared_ptr<const AllocationPlan> plan);
  /// Closes the run: its trace and how it went against its plan. Blocks
  /// released afterwards are no longer traced; the region is returned when
  /// the last of its blocks is.
  RunOutcome endRun(RunAllocations &run);
  /// Returns a block from allocate() to the cache.
  void release(void *block);
  /// Unmaps cached blocks until at most `keepBytes` stay cached.
  void trim(size_t keepBytes = 0);
  /// Unmaps cached blocks idle for longer than the idle time.
  void trimIdle();
  /// Unmaps the cached blocks released at or after `since` (a clock()
  /// reading): what one piece of work left cached, older blocks untouched
  /// (a free range merged with a newer neighbour counts as newer).
  void trimReleasedSince(double since);
  /// The clock of release times, in seconds.
  static double clock();
  AllocatorStats stats() const;
  /// The usable size of a block from allocate().
  size_t blockSize(void *block) const;

  /// Sets what the process-wide allocator is created with (cache limit,
  /// idle time, guard and huge pages of `options`). Call before its first
  /// use (the boundary does, at start): it is created once.
  static void configureGlobal(const dynafuse::Options &options);
  /// The process-wide allocator (leaked), created at first use from what
  /// configureGlobal set; a background thread trims it when idle.
  static CachingAllocator &global();
  /// Whether the process-wide allocator is (or will be) in guard-page mode.
  static bool globalUsesGuardPages();
  bool guardPages() const { return options.guardPages; }

private:
  struct SmallBlock {
    void *block;
    double releasedAt;
  };
  /// A block in use: its size and, for a large block of a run, the run
  /// and its index there (planned: in the run's region).
  struct LiveBlock {
    size_t size = 0;
    std::shared_ptr<RunAllocations> run;
    uint32_t index = 0;
    bool planned = false;
  };
  void *allocateLarge(size_t bytes, RunAllocations *run);
  /// The planned place of the run's next allocation of `size`, or null.
  void *placeLocked(RunAllocations &run, uint32_t index, size_t size);
  void releaseRegionLocked(RunAllocations &run);
  size_t cachedBytesLocked() const;
  void evictLocked(size_t keepBytes, double idleBefore);
  /// Frees a cached small block; returns the entry after it.
  std::multimap<size_t, SmallBlock>::iterator
  freeSmallLocked(std::multimap<size_t, SmallBlock>::iterator cached);
  /// Gives back the pages of the arena's resident free ranges released at
  /// or after `since` (0: all of them).
  void trimRangesReleasedSinceLocked(double since);
  void *allocateGuarded(size_t bytes);
  void releaseGuardedLocked(void *block, size_t bytes);
  Options options;
  mutable std::mutex mutex;
  std::map<void *, LiveBlock> live;
  /// Large blocks (null in guard-page mode).
  std::unique_ptr<BlockArena> arena;
  /// Released small blocks by size.
  std::multimap<size_t, SmallBlock> smallCached;
  size_t smallCachedBytes = 0;
  /// Hits, misses, bytes in use and trims (bytesCached is computed).
  AllocatorStats counters;
  /// Guard-page mode: each block's whole mapping (start, length), and the
  /// released mappings kept inaccessible, oldest first.
  std::map<void *, std::pair<void *, size_t>> mappings;
  std::deque<std::pair<void *, size_t>> quarantine;
};

/// Returns blocks of the global allocator (for std::unique_ptr).
struct ReleaseToGlobalAllocator {
  void operator()(void *block) const {
    CachingAllocator::global().release(block);
  }
};

} // namespace dynafuse

#endif

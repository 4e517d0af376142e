//===- CachingAllocator.cpp - Reused host memory for tensors --------------===//
#include "dynafuse/Runtime/CachingAllocator.h"

#include "dynafuse/Support/Error.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace dynafuse {
namespace {

constexpr size_t kLargeBlock = size_t(64) << 10;
/// Guard-page mode: how many released mappings stay reserved and
/// inaccessible (each costs a kernel mapping, not memory).
constexpr size_t kQuarantinedMappings = 1024;

size_t roundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/// The bytes a run's region takes in the arena.
size_t regionSize(const AllocationPlan &plan) {
  return roundUp(plan.regionBytes, BlockArena::pageSize());
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Address space for the large blocks: twice the machine's memory (only
/// what is ever in use gets pages), at least 4 GiB, at most 64 TiB.
size_t defaultArenaBytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  size_t memory = pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
  return std::min(std::max(2 * memory, size_t(4) << 30), size_t(1) << 46);
}

} // namespace

CachingAllocator::CachingAllocator(Options options) : options(options) {
  if (!options.guardPages)
    arena = std::make_unique<BlockArena>(
        options.arenaBytes ? options.arenaBytes : defaultArenaBytes(),
        options.hugePages);
}

CachingAllocator::~CachingAllocator() {
  for (auto &entry : smallCached)
    std::free(entry.second.block);
  // Blocks still in use stay valid: the arena's range is then left mapped.
  for (const auto &entry : live)
    if (arena && arena->owns(entry.first)) {
      (void)arena.release();
      break;
    }
  for (auto &mapping : quarantine)
    munmap(mapping.first, mapping.second);
}

void *CachingAllocator::allocate(size_t bytes) {
  return allocate(bytes, nullptr);
}

void *CachingAllocator::allocate(size_t bytes, RunAllocations *run) {
  if (options.guardPages)
    return allocateGuarded(bytes);
  if (bytes >= kLargeBlock)
    return allocateLarge(bytes, run);
  size_t size = roundUp(bytes ? bytes : 1, 64);
  {
    std::lock_guard<std::mutex> lock(mutex);
    // Of the cached blocks of this size, the one freed last: still in cache.
    auto found = smallCached.upper_bound(size);
    if (found != smallCached.begin() && (--found)->first == size) {
      void *block = found->second.block;
      smallCached.erase(found);
      smallCachedBytes -= size;
      ++counters.hits;
      counters.bytesInUse += size;
      live[block].size = size;
      return block;
    }
  }
  void *block = std::aligned_alloc(64, size);
  if (!block) {
    // Give the cache back to the system and try once more.
    trim(0);
    block = std::aligned_alloc(64, size);
    if (!block)
      fail("out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  std::lock_guard<std::mutex> lock(mutex);
  ++counters.misses;
  counters.bytesInUse += size;
  live[block].size = size;
  return block;
}

void *CachingAllocator::allocateLarge(size_t bytes, RunAllocations *run) {
  size_t size = roundUp(bytes, BlockArena::pageSize());
  std::lock_guard<std::mutex> lock(mutex);
  LiveBlock entry;
  entry.size = size;
  if (run && run->open) {
    entry.run = run->shared_from_this();
    entry.index = run->next++;
    run->trace.push_back(
        {AllocationEvent::Kind::Allocate, entry.index, size});
    if (void *block = placeLocked(*run, entry.index, size)) {
      entry.planned = true;
      ++counters.hits;
      ++counters.plannedAllocations;
      live[block] = std::move(entry);
      return block;
    }
  }
  bool fromCache = false;
  void *block = arena->carve(size, fromCache);
  if (!block) {
    // Give the cache back to the system and try once more.
    evictLocked(0, 0);
    block = arena->carve(size, fromCache);
    if (!block)
      fail("out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  ++(fromCache ? counters.hits : counters.misses);
  counters.bytesInUse += size;
  live[block] = std::move(entry);
  return block;
}

/// The slot's place in the run's region when the plan has one for an
/// allocation of this size at this index and no block sharing its bytes is
/// live; the region is carved at the first. A size other than the slot's,
/// or a run longer than its plan, stops the planning for the rest of the
/// run (the sizes no longer say which block is which).
void *CachingAllocator::placeLocked(RunAllocations &run, uint32_t index,
                                    size_t size) {
  if (!run.plan || !run.followsPlan)
    return nullptr;
  const AllocationPlan &plan = *run.plan;
  if (index >= plan.slots.size() || plan.slots[index].bytes != size) {
    run.followsPlan = false;
    return nullptr;
  }
  const AllocationPlan::Slot &slot = plan.slots[index];
  if (slot.offset < 0)
    return nullptr;
  for (uint32_t other : slot.sharing)
    if (run.slotLive[other]) {
      // The trace said this block had died by now; this run keeps it.
      ++counters.planConflicts;
      run.followsPlan = false;
      return nullptr;
    }
  if (!run.region) {
    size_t bytes = regionSize(plan);
    if (!arena->fits(bytes))
      // The region grows the top: the free ranges below, too small for
      // it, give their pages back first (runs that follow the plan do not
      // need them), so the process does not hold both.
      trimRangesReleasedSinceLocked(0);
    bool fromCache = false;
    run.region = static_cast<char *>(arena->carve(bytes, fromCache));
    if (!run.region) {
      run.followsPlan = false;
      return nullptr;
    }
    counters.bytesInUse += bytes;
  }
  run.slotLive[index] = 1;
  ++run.liveInRegion;
  ++run.planned;
  return run.region + slot.offset;
}

std::shared_ptr<RunAllocations>
CachingAllocator::beginRun(std::shared_ptr<const AllocationPlan> plan) {
  auto run = std::make_shared<RunAllocations>();
  if (options.guardPages) {
    run->open = false; // nothing traced, nothing planned
    return run;
  }
  if (plan)
    run->slotLive.assign(plan->slots.size(), 0);
  run->plan = std::move(plan);
  return run;
}

RunOutcome CachingAllocator::endRun(RunAllocations &run) {
  std::lock_guard<std::mutex> lock(mutex);
  RunOutcome outcome;
  outcome.followedPlan = run.plan && run.followsPlan &&
                         run.next == run.plan->slots.size();
  outcome.plannedAllocations = run.planned;
  outcome.trace = std::move(run.trace);
  run.trace.clear();
  run.open = false;
  if (run.liveInRegion == 0)
    releaseRegionLocked(run);
  return outcome;
}

void CachingAllocator::releaseRegionLocked(RunAllocations &run) {
  if (!run.region)
    return;
  size_t size = regionSize(*run.plan);
  arena->release(run.region, size, now());
  counters.bytesInUse -= size;
  run.region = nullptr;
}

void CachingAllocator::release(void *block) {
  if (!block)
    return;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = live.find(block);
  if (found == live.end())
    fail("CachingAllocator: release of a block it did not allocate");
  LiveBlock entry = std::move(found->second);
  live.erase(found);
  size_t size = entry.size;
  if (entry.run) {
    RunAllocations &run = *entry.run;
    if (run.open)
      run.trace.push_back({AllocationEvent::Kind::Release, entry.index, 0});
    if (entry.planned) {
      run.slotLive[entry.index] = 0;
      if (--run.liveInRegion == 0 && !run.open)
        releaseRegionLocked(run);
      return;
    }
  }
  counters.bytesInUse -= size;
  if (options.guardPages) {
    releaseGuardedLocked(block, size);
    return;
  }
  if (arena->owns(block)) {
    arena->release(block, size, now());
  } else {
    smallCached.emplace(size, SmallBlock{block, now()});
    smallCachedBytes += size;
  }
  if (cachedBytesLocked() > options.cacheLimit)
    evictLocked(options.cacheLimit, 0);
}

size_t CachingAllocator::cachedBytesLocked() const {
  return smallCachedBytes + (arena ? arena->residentFreeBytes() : 0);
}

/// One mapping per block: an inaccessible page, the block's pages, an
/// inaccessible page; the block ends where the last inaccessible page
/// starts.
void *CachingAllocator::allocateGuarded(size_t bytes) {
  size_t page = BlockArena::pageSize();
  size_t dataPages = roundUp(bytes ? bytes : 1, page);
  size_t length = dataPages + 2 * page;
  void *base =
      mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    fail("out of memory allocating " + std::to_string(bytes) +
         " bytes (guard pages)");
  char *data = static_cast<char *>(base) + page;
  if (mprotect(data, dataPages, PROT_READ | PROT_WRITE) != 0) {
    munmap(base, length);
    fail("guard pages: mprotect failed");
  }
  void *block = data + dataPages - bytes;
  std::lock_guard<std::mutex> lock(mutex);
  ++counters.misses;
  counters.bytesInUse += bytes;
  live[block].size = bytes;
  mappings[block] = {base, length};
  return block;
}

/// Makes the block's mapping inaccessible and quarantines it, unmapping
/// the oldest quarantined mappings past the bound.
void CachingAllocator::releaseGuardedLocked(void *block, size_t bytes) {
  auto found = mappings.find(block);
  std::pair<void *, size_t> mapping = found->second;
  mappings.erase(found);
  madvise(mapping.first, mapping.second, MADV_DONTNEED);
  mprotect(mapping.first, mapping.second, PROT_NONE);
  quarantine.push_back(mapping);
  while (quarantine.size() > kQuarantinedMappings) {
    munmap(quarantine.front().first, quarantine.front().second);
    quarantine.pop_front();
  }
}

/// Frees cached memory, oldest first, while more than keepBytes are cached,
/// and everything released before idleBefore (when nonzero): small blocks
/// go back to the C heap, the arena's free ranges give their pages back.
void CachingAllocator::evictLocked(size_t keepBytes, double idleBefore) {
  struct Candidate {
    double releasedAt;
    std::multimap<size_t, SmallBlock>::iterator small; // or end(): arena
    size_t offset;
  };
  std::vector<Candidate> order;
  for (auto it = smallCached.begin(); it != smallCached.end(); ++it)
    order.push_back({it->second.releasedAt, it, 0});
  if (arena)
    arena->forEachResidentRange(
        [&](size_t offset, size_t, double releasedAt) {
          order.push_back({releasedAt, smallCached.end(), offset});
        });
  std::sort(order.begin(), order.end(),
            [](const Candidate &a, const Candidate &b) {
              return a.releasedAt < b.releasedAt;
            });
  for (const Candidate &candidate : order) {
    bool idle = idleBefore > 0 && candidate.releasedAt < idleBefore;
    if (!idle && cachedBytesLocked() <= keepBytes)
      continue;
    if (candidate.small == smallCached.end()) {
      if (arena->trimRange(candidate.offset))
        ++counters.trimmed;
      continue;
    }
    freeSmallLocked(candidate.small);
  }
}

std::multimap<size_t, CachingAllocator::SmallBlock>::iterator
CachingAllocator::freeSmallLocked(
    std::multimap<size_t, SmallBlock>::iterator cached) {
  smallCachedBytes -= cached->first;
  std::free(cached->second.block);
  ++counters.trimmed;
  return smallCached.erase(cached);
}

void CachingAllocator::trimRangesReleasedSinceLocked(double since) {
  std::vector<size_t> offsets;
  arena->forEachResidentRange([&](size_t offset, size_t, double releasedAt) {
    if (releasedAt >= since)
      offsets.push_back(offset);
  });
  for (size_t offset : offsets)
    if (arena->trimRange(offset))
      ++counters.trimmed;
}

void CachingAllocator::trim(size_t keepBytes) {
  std::lock_guard<std::mutex> lock(mutex);
  evictLocked(keepBytes, 0);
}

void CachingAllocator::trimIdle() {
  std::lock_guard<std::mutex> lock(mutex);
  evictLocked(cachedBytesLocked(), now() - options.idleSeconds);
}

void CachingAllocator::trimReleasedSince(double since) {
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = smallCached.begin(); it != smallCached.end();)
    it = it->second.releasedAt >= since ? freeSmallLocked(it) : std::next(it);
  if (arena)
    trimRangesReleasedSinceLocked(since);
}

double CachingAllocator::clock() { return now(); }

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex);
  AllocatorStats stats = counters;
  stats.bytesCached = cachedBytesLocked();
  stats.bytesMapped = arena ? arena->mappedBytes() : 0;
  return stats;
}

size_t CachingAllocator::blockSize(void *block) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto found = live.find(block);
  return found == live.end() ? 0 : found->second.size;
}

namespace {
/// What configureGlobal set; read once, when global() creates the allocator.
CachingAllocator::Options &globalOptions() {
  static CachingAllocator::Options options;
  return options;
}
} // namespace

void CachingAllocator::configureGlobal(const dynafuse::Options &options) {
  Options &global = globalOptions();
  global.cacheLimit = size_t(options.allocatorCacheMB * (1 << 20));
  global.idleSeconds = options.allocatorIdleSeconds;
  global.guardPages = options.guardPages != GuardPages::Off;
  global.hugePages = options.hugePages;
}

bool CachingAllocator::globalUsesGuardPages() {
  return globalOptions().guardPages;
}

CachingAllocator &CachingAllocator::global() {
  static CachingAllocator *allocator = [] {
    Options options = globalOptions();
    // Leaked with its trimming thread: both live as long as the process.
    auto *created = new CachingAllocator(options);
    double period = std::max(0.05, options.idleSeconds / 2);
    std::thread([created, period] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::duration<double>(period));
        created->trimIdle();
      }
    }).detach();
    return created;
  }();
  return *allocator;
}

} // namespace dynafuse

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

constexpr size_t kLargeBlock = size_t(1) << 20;
constexpr size_t kHugePage = size_t(2) << 20;
/// Guard-page mode: how many released mappings stay reserved and
/// inaccessible (each costs a kernel mapping, not memory).
constexpr size_t kQuarantinedMappings = 1024;
#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;
#endif

size_t roundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

size_t roundedSize(size_t bytes) {
  if (bytes < kLargeBlock)
    return roundUp(bytes ? bytes : 1, 64);
  return roundUp(bytes, kHugePage);
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << 26)
#endif

/// A block of reserved 2 MiB huge pages, or null when none are free.
void *mapReservedHugePages(size_t size) {
  void *raw =
      mmap(nullptr, size, PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB, -1, 0);
  return raw == MAP_FAILED ? nullptr : raw;
}

/// Options::hugePages (DYNAFUSE_HUGE_PAGES): "off" (the default, also "auto"):
/// normal pages; "hugetlb": the reserved 2 MiB hugetlb pool when the
/// administrator set pages aside (vm.nr_hugepages), else normal pages; "thp":
/// transparent huge pages (madvise). Neither is the default. Private hugetlb
/// pages are reserved for this process only: a forked child (a DataLoader
/// worker) writing to one needs a copy the pool may not have, and dies of
/// SIGBUS. Transparent huge pages under the kernel's usual defrag=madvise may
/// compact memory synchronously on a fault: every other first call of the
/// GPT-2 block took 0.22 s instead of 0.08 s, and no steady-state gain was
/// measurable on the memory-bound workloads.
void *mapLarge(size_t size, HugePages hugePages) {
  if (hugePages == HugePages::Reserved)
    if (void *block = mapReservedHugePages(size))
      return block;
  // Map one huge page more and cut the ends off to align the block.
  size_t mapped = size + kHugePage;
  void *raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    return nullptr;
  uintptr_t start = uintptr_t(raw);
  uintptr_t aligned = roundUp(start, kHugePage);
  if (aligned > start)
    munmap(raw, aligned - start);
  size_t tail = (start + mapped) - (aligned + size);
  if (tail)
    munmap(reinterpret_cast<void *>(aligned + size), tail);
  void *block = reinterpret_cast<void *>(aligned);
  if (hugePages == HugePages::Transparent)
    madvise(block, size, MADV_HUGEPAGE);
  // Fault the pages in now, in the kernel, rather than one by one on first
  // touch (ignored where unsupported).
  madvise(block, size, MADV_POPULATE_WRITE);
  return block;
}

size_t pageSize() {
  static const size_t size = size_t(sysconf(_SC_PAGESIZE));
  return size;
}

} // namespace

CachingAllocator::CachingAllocator(Options options) : options(options) {}

CachingAllocator::~CachingAllocator() {
  trim(0);
  for (auto &mapping : quarantine)
    munmap(mapping.first, mapping.second);
}

void *CachingAllocator::allocate(size_t bytes) {
  if (options.guardPages)
    return allocateGuarded(bytes);
  size_t size = roundedSize(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = cached.lower_bound(size);
    // Of the blocks of the best size, the one freed last: still in cache.
    if (found != cached.end())
      found = std::prev(cached.upper_bound(found->first));
    size_t slack = size < kLargeBlock ? 0 : size / 4;
    if (found != cached.end() && found->first <= size + slack) {
      Cached entry = found->second;
      cached.erase(found);
      counters.bytesCached -= entry.size;
      counters.bytesInUse += entry.size;
      ++counters.hits;
      live[entry.block] = entry.size;
      return entry.block;
    }
  }
  void *block = size < kLargeBlock ? std::aligned_alloc(64, size)
                                   : mapLarge(size, options.hugePages);
  if (!block) {
    // Give the cache back to the system and try once more.
    trim(0);
    block = size < kLargeBlock ? std::aligned_alloc(64, size)
                               : mapLarge(size, options.hugePages);
    if (!block)
      fail("out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  std::lock_guard<std::mutex> lock(mutex);
  ++counters.misses;
  counters.bytesInUse += size;
  live[block] = size;
  return block;
}

void CachingAllocator::release(void *block) {
  if (!block)
    return;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = live.find(block);
  if (found == live.end())
    fail("CachingAllocator: release of a block it did not allocate");
  size_t size = found->second;
  live.erase(found);
  counters.bytesInUse -= size;
  if (options.guardPages) {
    releaseGuardedLocked(block, size);
    return;
  }
  if (size > options.cacheLimit) {
    freeBlockLocked(block, size);
    return;
  }
  cached.emplace(size, Cached{block, size, now()});
  counters.bytesCached += size;
  if (counters.bytesCached > options.cacheLimit)
    evictLocked(options.cacheLimit, 0);
}

/// One mapping per block: an inaccessible page, the block's pages, an
/// inaccessible page; the block ends where the last inaccessible page
/// starts.
void *CachingAllocator::allocateGuarded(size_t bytes) {
  size_t page = pageSize();
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
  live[block] = bytes;
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

void CachingAllocator::freeBlockLocked(void *block, size_t size) {
  if (size < kLargeBlock)
    std::free(block);
  else
    munmap(block, size);
  ++counters.trimmed;
}

/// Frees the oldest cached blocks while more than keepBytes are cached,
/// and every block released before idleBefore (when nonzero).
void CachingAllocator::evictLocked(size_t keepBytes, double idleBefore) {
  std::vector<std::multimap<size_t, Cached>::iterator> order;
  for (auto it = cached.begin(); it != cached.end(); ++it)
    order.push_back(it);
  std::sort(order.begin(), order.end(), [](auto a, auto b) {
    return a->second.releasedAt < b->second.releasedAt;
  });
  for (auto it : order) {
    bool idle = idleBefore > 0 && it->second.releasedAt < idleBefore;
    if (!idle && counters.bytesCached <= keepBytes)
      continue;
    counters.bytesCached -= it->second.size;
    freeBlockLocked(it->second.block, it->second.size);
    cached.erase(it);
  }
}

void CachingAllocator::trim(size_t keepBytes) {
  std::lock_guard<std::mutex> lock(mutex);
  evictLocked(keepBytes, 0);
}

void CachingAllocator::trimIdle() {
  std::lock_guard<std::mutex> lock(mutex);
  evictLocked(counters.bytesCached, now() - options.idleSeconds);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex);
  return counters;
}

size_t CachingAllocator::blockSize(void *block) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto found = live.find(block);
  return found == live.end() ? 0 : found->second;
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

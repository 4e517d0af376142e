//===- BlockArena.cpp - Large blocks carved from one address range --------===//
#include "dynafuse/Runtime/BlockArena.h"

#include <iterator>
#include <sys/mman.h>
#include <unistd.h>

namespace dynafuse {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kMinReserve = size_t(1) << 30;
#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << 26)
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

size_t alignUp(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

size_t alignDown(size_t value, size_t alignment) {
  return value / alignment * alignment;
}

/// Faults the pages in now, in the kernel, rather than one by one on first
/// touch (ignored where unsupported).
void populate(char *start, size_t size) {
  if (size)
    madvise(start, size, MADV_POPULATE_WRITE);
}

} // namespace

size_t BlockArena::pageSize() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}

BlockArena::BlockArena(size_t reserveBytes, HugePages hugePages)
    : hugePages(hugePages) {
  // Inaccessible and not committed: address space only. Halved while the
  // system refuses (an address-space limit); 2 MiB aligned.
  for (size_t want = alignUp(reserveBytes, kHugePage); want; want /= 2) {
    void *raw = mmap(nullptr, want + kHugePage, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
      if (want <= kMinReserve)
        return;
      continue;
    }
    uintptr_t start = uintptr_t(raw);
    uintptr_t aligned = alignUp(start, kHugePage);
    if (aligned > start)
      munmap(raw, aligned - start);
    size_t tail = (start + want + kHugePage) - (aligned + want);
    if (tail)
      munmap(reinterpret_cast<void *>(aligned + want), tail);
    base = reinterpret_cast<char *>(aligned);
    reserved = want;
    return;
  }
}

BlockArena::~BlockArena() {
  if (base)
    munmap(base, reserved);
}

bool BlockArena::owns(const void *block) const {
  const char *at = static_cast<const char *>(block);
  return base && at >= base && at < base + reserved;
}

void BlockArena::insertFree(size_t offset, const FreeRange &range) {
  freeByOffset.emplace(offset, range);
  freeBySize.emplace(range.size, offset);
  if (range.resident)
    resident += range.size;
}

void BlockArena::eraseFree(std::map<size_t, FreeRange>::iterator found) {
  auto [first, last] = freeBySize.equal_range(found->second.size);
  for (auto it = first; it != last; ++it)
    if (it->second == found->first) {
      freeBySize.erase(it);
      break;
    }
  if (found->second.resident)
    resident -= found->second.size;
  freeByOffset.erase(found);
}

void *BlockArena::carve(size_t size, bool &fromCache) {
  fromCache = false;
  if (!base || size == 0 || size % pageSize())
    return nullptr;
  // Best fit: the smallest free range that holds the block; of several of
  // that size the one inserted last (freed last: the likeliest in cache).
  auto fit = freeBySize.lower_bound(size);
  if (fit != freeBySize.end())
    fit = std::prev(freeBySize.upper_bound(fit->first));
  if (fit != freeBySize.end()) {
    auto found = freeByOffset.find(fit->second);
    size_t offset = found->first;
    FreeRange range = found->second;
    eraseFree(found);
    if (range.size > size)
      insertFree(offset + size,
                 {range.size - size, range.releasedAt, range.resident});
    if (range.resident)
      fromCache = true;
    else
      populate(base + offset, size);
    return base + offset;
  }
  // None fits: grow the top, starting at the free range that ends there.
  size_t start = top;
  bool tailResident = true;
  auto tail = freeByOffset.end();
  if (!freeByOffset.empty()) {
    auto last = std::prev(freeByOffset.end());
    if (last->first + last->second.size == top) {
      tail = last;
      start = last->first;
      tailResident = last->second.resident;
    }
  }
  if (start + size > reserved || start + size < start)
    return nullptr;
  size_t oldTop = top;
  size_t newTop = grow(start + size);
  if (!newTop)
    return nullptr;
  if (tail != freeByOffset.end())
    eraseFree(tail);
  top = newTop;
  if (newTop > start + size)
    insertFree(start + size, {newTop - start - size, 0, false});
  // Fresh pages: the grown part, and the tail range too if it was trimmed.
  size_t faultFrom = tailResident ? oldTop : start;
  populate(base + faultFrom, start + size - faultFrom);
  return base + start;
}

bool BlockArena::fits(size_t size) const {
  return freeBySize.lower_bound(size) != freeBySize.end();
}

bool BlockArena::growReserved(size_t end) {
  void *mapped = mmap(base + top, end - top, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_HUGETLB |
                          MAP_HUGE_2MB,
                      -1, 0);
  if (mapped != MAP_FAILED)
    return true;
  // A failed fixed mapping leaves a hole where the reservation was: put it
  // back (NOREPLACE: never over a mapping another thread placed there).
  mmap(base + top, end - top, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1,
       0);
  return false;
}

/// Neither huge-page mode is the default. Private hugetlb pages are
/// reserved for this process only: a forked child (a DataLoader worker)
/// writing to one needs a copy the pool may not have, and dies of SIGBUS.
/// Transparent huge pages under the kernel's usual defrag=madvise may
/// compact memory synchronously on a fault: every other first call of the
/// GPT-2 block took 0.22 s instead of 0.08 s, and no steady-state gain was
/// measurable on the memory-bound workloads.
size_t BlockArena::grow(size_t wanted) {
  size_t wholeHugePages = alignUp(wanted, kHugePage);
  if (hugePages == HugePages::Reserved && top % kHugePage == 0 &&
      wholeHugePages <= reserved && growReserved(wholeHugePages))
    return wholeHugePages;
  if (mprotect(base + top, wanted - top, PROT_READ | PROT_WRITE) != 0)
    return 0;
  if (hugePages == HugePages::Transparent)
    madvise(base + top, wanted - top, MADV_HUGEPAGE);
  return wanted;
}

void BlockArena::release(void *block, size_t size, double releasedAt) {
  size_t offset = size_t(static_cast<char *>(block) - base);
  FreeRange range{size, releasedAt, true};
  // Merge with the free neighbours on both sides. A merged range counts as
  // resident when any part is: trimming then reaches every resident page
  // (remapping a trimmed part again is harmless), and a carve from it lets
  // the trimmed part fault on first touch instead of populating it.
  auto next = freeByOffset.lower_bound(offset);
  if (next != freeByOffset.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second.size == offset) {
      offset = previous->first;
      range.size += previous->second.size;
      range.resident = range.resident || previous->second.resident;
      eraseFree(previous);
    }
  }
  next = freeByOffset.lower_bound(offset + range.size);
  if (next != freeByOffset.end() && next->first == offset + range.size) {
    range.size += next->second.size;
    range.resident = range.resident || next->second.resident;
    eraseFree(next);
  }
  insertFree(offset, range);
}

void BlockArena::forEachResidentRange(
    const std::function<void(size_t, size_t, double)> &visit) const {
  for (const auto &[offset, range] : freeByOffset)
    if (range.resident)
      visit(offset, range.size, range.releasedAt);
}

void BlockArena::remapUntouched(size_t offset, size_t size) {
  // Over the old pages (of any kind): they go back to the system.
  mmap(base + offset, size, PROT_READ | PROT_WRITE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (hugePages == HugePages::Transparent)
    madvise(base + offset, size, MADV_HUGEPAGE);
}

size_t BlockArena::trimRange(size_t offset) {
  auto found = freeByOffset.find(offset);
  if (found == freeByOffset.end() || !found->second.resident)
    return 0;
  // Hugetlb pages are unmapped whole; a smaller range keeps its pages.
  size_t unit =
      hugePages == HugePages::Reserved ? kHugePage : pageSize();
  size_t start = alignUp(offset, unit);
  size_t end = alignDown(offset + found->second.size, unit);
  if (end <= start)
    return 0;
  remapUntouched(start, end - start);
  found->second.resident = false;
  resident -= found->second.size;
  return found->second.size;
}

} // namespace dynafuse

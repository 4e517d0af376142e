//===- BlockArena.h - Large blocks carved from one address range -*- C++ -*-===//
//
// The large blocks of the caching allocator (CachingAllocator.h). A model's
// intermediates come in a dozen sizes whose peaks fall at different times
// (resnet50 at batch 8: 24.5 MB blocks in its first stage, 12, 6 and 3 MB
// ones later); a cache of separately mapped blocks reused by size holds the
// peak of every size at once, 310 MB where 218 MB were ever live together.
// Here every large block is a piece of one reserved range of address
// space, as in a heap:
// - a request takes the smallest free range that fits (best fit) and leaves
//   the rest free; only when none fits does the mapped top of the range grow
//   (the fresh pages faulted in at once, MADV_POPULATE_WRITE);
// - a released block merges with free neighbours, so the freed stages' big
//   blocks serve the later stages' smaller ones;
// - freed ranges stay resident (that is the cache) until trimmed: their
//   pages go back to the system (the range is mapped afresh, untouched) and
//   are faulted in again when carved.
// The range is reserved inaccessible (PROT_NONE, no commit charge) and made
// accessible as the top grows; with HugePages::Reserved the top grows by
// hugetlb pages where the system set some aside (else normal pages), with
// HugePages::Transparent it is madvised MADV_HUGEPAGE.
// Not thread-safe: the caching allocator calls it under its lock.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_BLOCKARENA_H
#define DYNAFUSE_RUNTIME_BLOCKARENA_H

#include "dynafuse/Support/Options.h"

#include <cstddef>
#include <functional>
#include <map>

namespace dynafuse {

class BlockArena {
public:
  /// Reserves up to `reserveBytes` of address space (less when the system
  /// refuses that much: halved down to 1 GiB; nothing then, and carve()
  /// returns null).
  BlockArena(size_t reserveBytes, HugePages hugePages);
  /// Unmaps the whole range, blocks in use included.
  ~BlockArena();
  BlockArena(const BlockArena &) = delete;
  BlockArena &operator=(const BlockArena &) = delete;

  /// The system's page size: block sizes are multiples of it.
  static size_t pageSize();
  /// A block of `size` bytes (a multiple of pageSize()), its pages
  /// resident; null when the reserved range is full or the system has no
  /// memory. `fromCache` says whether it was carved from resident free
  /// memory alone (no page was faulted in).
  void *carve(size_t size, bool &fromCache);
  /// Whether a free range holds `size` bytes (else carve() grows the top).
  bool fits(size_t size) const;
  /// Returns a block carve() gave, of the size it was carved with.
  void release(void *block, size_t size, double releasedAt);
  /// Whether `block` lies in the reserved range.
  bool owns(const void *block) const;

  /// Free bytes whose pages are resident (the cache).
  size_t residentFreeBytes() const { return resident; }
  /// The mapped extent: the most address space ever in use at once, plus
  /// what fragmentation left free below it.
  size_t mappedBytes() const { return top; }
  /// A free range's start and when it was last released, of the resident
  /// ones, for the allocator's eviction order.
  void forEachResidentRange(
      const std::function<void(size_t offset, size_t size,
                               double releasedAt)> &visit) const;
  /// Gives the pages of the free range at `offset` back to the system.
  /// Returns the resident bytes freed (0 for a range too small to hold a
  /// whole page of the trimming granularity).
  size_t trimRange(size_t offset);

private:
  struct FreeRange {
    size_t size;
    double releasedAt;
    bool resident;
  };
  void insertFree(size_t offset, const FreeRange &range);
  void eraseFree(std::map<size_t, FreeRange>::iterator found);
  /// Makes [top, wanted) accessible, or more (hugetlb pages come whole);
  /// returns the new top, 0 when the system refuses.
  size_t grow(size_t wanted);
  /// Maps [top, end) with reserved hugetlb pages; false when there are
  /// not enough.
  bool growReserved(size_t end);
  /// Maps [offset, offset + size) afresh, readable and writable, untouched.
  void remapUntouched(size_t offset, size_t size);

  char *base = nullptr;
  size_t reserved = 0;
  size_t top = 0;
  size_t resident = 0;
  HugePages hugePages;
  std::map<size_t, FreeRange> freeByOffset;
  std::multimap<size_t, size_t> freeBySize;
};

} // namespace dynafuse

#endif

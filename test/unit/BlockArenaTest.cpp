//===- BlockArenaTest.cpp - Large blocks carved from one range ------------===//
#include "dynafuse/Runtime/BlockArena.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace dynafuse;

namespace {

constexpr size_t MiB = size_t(1) << 20;

char *carve(BlockArena &arena, size_t bytes, bool *fromCache = nullptr) {
  bool cached = false;
  char *block = static_cast<char *>(arena.carve(bytes, cached));
  if (fromCache)
    *fromCache = cached;
  return block;
}

} // namespace

TEST(BlockArena, TakesTheSmallestFreeRangeThatFits) {
  BlockArena arena(64 * MiB, HugePages::Off);
  char *four = carve(arena, 4 * MiB);
  char *one = carve(arena, MiB);
  char *two = carve(arena, 2 * MiB);
  char *last = carve(arena, MiB);
  ASSERT_TRUE(four && one && two && last);
  EXPECT_EQ(one, four + 4 * MiB) << "carved in order from the top";
  EXPECT_EQ(arena.mappedBytes(), 8 * MiB);
  arena.release(four, 4 * MiB, 1);
  arena.release(two, 2 * MiB, 2);
  bool fromCache = false;
  EXPECT_EQ(carve(arena, 2 * MiB, &fromCache), two) << "best fit, not first";
  EXPECT_TRUE(fromCache);
  // The rest of a range stays free: 3 + 1 MiB from the 4 MiB one.
  EXPECT_EQ(carve(arena, 3 * MiB), four);
  EXPECT_EQ(carve(arena, MiB), four + 3 * MiB);
  EXPECT_EQ(arena.mappedBytes(), 8 * MiB) << "no growth while free memory fits";
  EXPECT_EQ(arena.residentFreeBytes(), 0u);
}

TEST(BlockArena, OfEqualFitsTheOneFreedLast) {
  // Its lines are the likeliest to be in cache.
  BlockArena arena(64 * MiB, HugePages::Off);
  char *a = carve(arena, 2 * MiB);
  carve(arena, MiB);
  char *b = carve(arena, 2 * MiB);
  carve(arena, MiB);
  arena.release(a, 2 * MiB, 1);
  arena.release(b, 2 * MiB, 2);
  EXPECT_EQ(carve(arena, 2 * MiB), b);
  arena.release(b, 2 * MiB, 3);
  char *c = carve(arena, MiB);
  EXPECT_EQ(c, b) << "the range freed last, though a is as good a fit";
}

TEST(BlockArena, FreedNeighboursMergeForALargerBlock) {
  BlockArena arena(64 * MiB, HugePages::Off);
  char *a = carve(arena, 2 * MiB), *b = carve(arena, 2 * MiB),
       *c = carve(arena, 2 * MiB);
  carve(arena, MiB); // keeps the three off the top
  // Released out of order: a and c first, then b joins both.
  arena.release(a, 2 * MiB, 1);
  arena.release(c, 2 * MiB, 2);
  EXPECT_EQ(arena.residentFreeBytes(), 4 * MiB);
  arena.release(b, 2 * MiB, 3);
  EXPECT_EQ(arena.residentFreeBytes(), 6 * MiB);
  bool fromCache = false;
  EXPECT_EQ(carve(arena, 6 * MiB, &fromCache), a);
  EXPECT_TRUE(fromCache);
  EXPECT_EQ(arena.mappedBytes(), 7 * MiB);
}

TEST(BlockArena, GrowsTheTopFromTheFreeRangeEndingThere) {
  BlockArena arena(64 * MiB, HugePages::Off);
  char *a = carve(arena, 2 * MiB), *b = carve(arena, 2 * MiB);
  arena.release(b, 2 * MiB, 1);
  char *big = carve(arena, 5 * MiB);
  EXPECT_EQ(big, b) << "the free tail is part of the new block";
  EXPECT_EQ(arena.mappedBytes(), 7 * MiB);
  std::memset(big, 7, 5 * MiB); // every page writable
  EXPECT_EQ(big[5 * MiB - 1], 7);
  arena.release(a, 2 * MiB, 2);
  arena.release(big, 5 * MiB, 3);
  EXPECT_EQ(arena.residentFreeBytes(), 7 * MiB);
}

TEST(BlockArena, TrimmedRangesGiveTheirPagesBack) {
  BlockArena arena(64 * MiB, HugePages::Off);
  char *block = carve(arena, 3 * MiB);
  carve(arena, MiB);
  std::memset(block, 0x5a, 3 * MiB);
  arena.release(block, 3 * MiB, 1);
  size_t offset = 0;
  int ranges = 0;
  arena.forEachResidentRange([&](size_t at, size_t size, double releasedAt) {
    offset = at;
    EXPECT_EQ(size, 3 * MiB);
    EXPECT_EQ(releasedAt, 1);
    ++ranges;
  });
  ASSERT_EQ(ranges, 1);
  EXPECT_EQ(arena.trimRange(offset), 3 * MiB);
  EXPECT_EQ(arena.residentFreeBytes(), 0u);
  EXPECT_EQ(arena.trimRange(offset), 0u) << "already trimmed";
  bool fromCache = true;
  char *again = carve(arena, 3 * MiB, &fromCache);
  EXPECT_EQ(again, block);
  EXPECT_FALSE(fromCache) << "its pages were faulted in afresh";
  // Fresh pages: the old contents are gone.
  EXPECT_EQ(again[0], 0);
  EXPECT_EQ(again[3 * MiB - 1], 0);
}

TEST(BlockArena, AResidentBlockMergedWithATrimmedRangeCanStillBeTrimmed) {
  // Its pages are resident: counted in the cache and reached by trimming,
  // not hidden in a range marked trimmed.
  BlockArena arena(64 * MiB, HugePages::Off);
  char *a = carve(arena, 2 * MiB), *b = carve(arena, 2 * MiB);
  carve(arena, MiB);
  arena.release(a, 2 * MiB, 1);
  EXPECT_EQ(arena.trimRange(0), 2 * MiB);
  std::memset(b, 9, 2 * MiB);
  arena.release(b, 2 * MiB, 2);
  EXPECT_EQ(arena.residentFreeBytes(), 4 * MiB);
  EXPECT_EQ(arena.trimRange(0), 4 * MiB);
  EXPECT_EQ(arena.residentFreeBytes(), 0u);
  char *again = carve(arena, 4 * MiB);
  EXPECT_EQ(again, a);
  EXPECT_EQ(again[2 * MiB], 0) << "b's old pages were given back";
}

TEST(BlockArena, AFullRangeRefusesUntilMemoryIsReleased) {
  BlockArena arena(8 * MiB, HugePages::Off);
  char *six = carve(arena, 6 * MiB);
  ASSERT_NE(six, nullptr);
  EXPECT_EQ(carve(arena, 4 * MiB), nullptr);
  EXPECT_EQ(carve(arena, 1000), nullptr) << "not a multiple of the page";
  arena.release(six, 6 * MiB, 1);
  EXPECT_EQ(carve(arena, 8 * MiB), six);
  EXPECT_TRUE(arena.owns(six + 8 * MiB - 1));
  EXPECT_FALSE(arena.owns(six + 8 * MiB));
}

TEST(BlockArena, HugePageModesFallBackToNormalPages) {
  // Where the system set no hugetlb pages aside (as here) the top grows by
  // normal pages; the failed hugetlb mapping must not leave a hole.
  for (HugePages mode : {HugePages::Reserved, HugePages::Transparent}) {
    BlockArena arena(64 * MiB, mode);
    char *a = carve(arena, 3 * MiB);
    char *b = carve(arena, 2 * MiB);
    ASSERT_TRUE(a && b);
    std::memset(a, 1, 3 * MiB);
    std::memset(b, 2, 2 * MiB);
    EXPECT_EQ(a[3 * MiB - 1], 1);
    EXPECT_EQ(b[0], 2);
    arena.release(a, 3 * MiB, 1);
    char *again = carve(arena, 4 * MiB);
    ASSERT_NE(again, nullptr);
    std::memset(again, 3, 4 * MiB);
  }
}

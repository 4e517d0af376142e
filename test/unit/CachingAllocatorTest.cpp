//===- CachingAllocatorTest.cpp - The runtime's caching allocator ---------===//
#include "dynafuse/Runtime/CachingAllocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

using namespace dynafuse;

namespace {

CachingAllocator::Options limit(size_t bytes, double idleSeconds = 100) {
  CachingAllocator::Options options;
  options.cacheLimit = bytes;
  options.idleSeconds = idleSeconds;
  return options;
}

} // namespace

TEST(CachingAllocator, SmallBlocksReuseTheOneFreedLast) {
  // Of cached small blocks of one size the one freed last comes back (its
  // lines are the likeliest to be in cache).
  CachingAllocator allocator(limit(64 << 20));
  void *first = allocator.allocate(4096);
  void *second = allocator.allocate(4096);
  allocator.release(first);
  allocator.release(second);
  EXPECT_EQ(allocator.allocate(4096), second);
  allocator.release(second);
  EXPECT_EQ(allocator.allocate(4090), second) << "same rounded size";
  EXPECT_NE(allocator.allocate(8192), first) << "small sizes match exactly";
}

TEST(CachingAllocator, LargeBlocksReuseFreedMemoryOfAnySize) {
  // Decision 81: the freed memory of one size serves requests of others,
  // so the pool holds the peak of the bytes in use at once.
  CachingAllocator allocator(limit(64 << 20));
  void *big = allocator.allocate(8 << 20);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(uintptr_t(big) % 4096, 0u) << "large blocks are page aligned";
  std::memset(big, 1, 8 << 20);
  allocator.release(big);
  EXPECT_EQ(allocator.stats().bytesCached, size_t(8) << 20);
  void *two = allocator.allocate(2 << 20);
  void *five = allocator.allocate((5 << 20) + 1);
  EXPECT_EQ(two, big) << "best fit from the freed block";
  EXPECT_EQ(five, static_cast<char *>(big) + (2 << 20));
  EXPECT_EQ(allocator.blockSize(five), (size_t(5) << 20) + 4096)
      << "rounded to the page";
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.bytesMapped, size_t(8) << 20) << "nothing mapped anew";
  EXPECT_EQ(stats.hits, 2);
  EXPECT_EQ(stats.misses, 1);
  allocator.release(two);
  allocator.release(five);
  // Released neighbours merge: the whole block again.
  EXPECT_EQ(allocator.allocate(8 << 20), big);
  allocator.release(big);
}

TEST(CachingAllocator, ReusesReleasedBlocks) {
  CachingAllocator allocator(limit(64 << 20));
  void *large = allocator.allocate(3 << 20);
  void *small = allocator.allocate(100);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(uintptr_t(small) % 64, 0u);
  std::memset(large, 1, 3 << 20);
  allocator.release(large);
  allocator.release(small);
  EXPECT_EQ(allocator.stats().bytesInUse, 0u);
  EXPECT_GE(allocator.stats().bytesCached, size_t(3) << 20);
  EXPECT_EQ(allocator.allocate(3 << 20), large);
  EXPECT_EQ(allocator.allocate(90), small) << "same rounded size";
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.hits, 2);
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.bytesCached, 0u);
  allocator.release(large);
  allocator.release(small);
  void *empty = allocator.allocate(0);
  EXPECT_NE(empty, nullptr);
  EXPECT_GE(allocator.blockSize(empty), 1u);
  allocator.release(empty);
}

TEST(CachingAllocator, CapBoundsTheCache) {
  CachingAllocator allocator(limit(5 << 20));
  std::vector<void *> blocks;
  for (int i = 0; i < 4; ++i)
    blocks.push_back(allocator.allocate(2 << 20));
  void *keep = allocator.allocate(4096);
  for (void *block : blocks) {
    allocator.release(block);
    EXPECT_LE(allocator.stats().bytesCached, size_t(5) << 20);
  }
  AllocatorStats stats = allocator.stats();
  EXPECT_GT(stats.trimmed, 0);
  EXPECT_EQ(stats.bytesMapped, size_t(8) << 20)
      << "trimming gives pages back, not address space";
  allocator.release(keep);
  allocator.trim(0);
  EXPECT_EQ(allocator.stats().bytesCached, 0u);
  // A zero cap caches nothing.
  CachingAllocator none(limit(0));
  none.release(none.allocate(1 << 20));
  none.release(none.allocate(100));
  EXPECT_EQ(none.stats().bytesCached, 0u);
}

TEST(CachingAllocator, TrimIdleFreesOldBlocks) {
  CachingAllocator allocator(limit(64 << 20, /*idleSeconds=*/0.05));
  allocator.release(allocator.allocate(2 << 20));
  allocator.trimIdle();
  EXPECT_GT(allocator.stats().bytesCached, 0u) << "not idle yet";
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  allocator.trimIdle();
  EXPECT_EQ(allocator.stats().bytesCached, 0u);
}

TEST(CachingAllocator, TrimReleasedSinceLeavesOlderBlocks) {
  // Weight packing gives back what its temporaries left cached, and only
  // that: the blocks a run cached before stay for its later steps.
  CachingAllocator allocator(limit(64 << 20));
  void *older = allocator.allocate(2 << 20);
  void *separator = allocator.allocate(1 << 20);
  void *olderSmall = allocator.allocate(1000);
  allocator.release(older);
  allocator.release(olderSmall);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  double since = CachingAllocator::clock();
  void *recent = allocator.allocate(3 << 20);
  void *recentSmall = allocator.allocate(2000);
  allocator.release(recent);
  allocator.release(recentSmall);
  size_t cached = allocator.stats().bytesCached;
  allocator.trimReleasedSince(since);
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.trimmed, 2) << "the recent large range and small block";
  EXPECT_LE(stats.bytesCached + (3 << 20) + 2000, cached);
  EXPECT_GE(stats.bytesCached, size_t(2) << 20) << "the older range stays";
  EXPECT_EQ(allocator.allocate(1000), olderSmall) << "older small block stays";
  // A trimmed range is still free address space: it serves requests again.
  void *again = allocator.allocate(3 << 20);
  EXPECT_NE(again, nullptr);
  std::memset(again, 1, 3 << 20);
  allocator.release(again);
  allocator.release(separator);
  allocator.release(olderSmall);
}

TEST(CachingAllocator, ThreadSafe) {
  CachingAllocator allocator(limit(32 << 20));
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        size_t bytes = size_t((i % 5) + 1) << (i % 2 ? 20 : 10);
        auto *block = static_cast<unsigned char *>(allocator.allocate(bytes));
        std::memset(block, t + 1, bytes);
        for (size_t k = 0; k < bytes; k += 4093)
          failures[t] += block[k] != t + 1;
        allocator.release(block);
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  for (int t = 0; t < 4; ++t)
    EXPECT_EQ(failures[t], 0);
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.bytesInUse, 0u);
  EXPECT_EQ(stats.hits + stats.misses, 1200);
  EXPECT_GT(stats.hits, 0);
}

TEST(CachingAllocator, ReleasingAForeignBlockThrows) {
  CachingAllocator allocator;
  int local = 0;
  EXPECT_ANY_THROW(allocator.release(&local));
}

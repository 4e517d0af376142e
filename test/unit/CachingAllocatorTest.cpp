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

TEST(CachingAllocator, ReusesTheBlockFreedLast) {
  // Of cached blocks of one size the one freed last comes back (its lines
  // are the likeliest to be in cache), for large and small blocks.
  CachingAllocator allocator(limit(64 << 20));
  for (size_t bytes : {size_t(4) << 20, size_t(4096)}) {
    void *first = allocator.allocate(bytes);
    void *second = allocator.allocate(bytes);
    allocator.release(first);
    allocator.release(second);
    EXPECT_EQ(allocator.allocate(bytes), second) << bytes;
    allocator.release(second);
    allocator.release(first = allocator.allocate(bytes));
    EXPECT_EQ(first, second) << bytes;
  }
}

TEST(CachingAllocator, ReusesReleasedBlocks) {
  CachingAllocator allocator(limit(64 << 20));
  void *large = allocator.allocate(3 << 20);
  void *small = allocator.allocate(100);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(uintptr_t(large) % (2 << 20), 0u)
      << "large blocks are 2 MiB aligned";
  EXPECT_EQ(uintptr_t(small) % 64, 0u);
  std::memset(large, 1, 3 << 20);
  allocator.release(large);
  allocator.release(small);
  EXPECT_EQ(allocator.stats().bytesInUse, 0u);
  EXPECT_GT(allocator.stats().bytesCached, size_t(3) << 20);
  EXPECT_EQ(allocator.allocate(3 << 20), large);
  EXPECT_EQ(allocator.allocate(90), small) << "same rounded size";
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.hits, 2);
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.bytesCached, 0u);
  allocator.release(large);
  allocator.release(small);
}

TEST(CachingAllocator, ZeroBytesAndSizeClasses) {
  CachingAllocator allocator(limit(64 << 20));
  void *empty = allocator.allocate(0);
  EXPECT_NE(empty, nullptr);
  EXPECT_GE(allocator.blockSize(empty), 1u);
  void *big = allocator.allocate(8 << 20);
  allocator.release(big);
  // A much smaller request does not take the big block (at most 1/4 slack).
  void *other = allocator.allocate(2 << 20);
  EXPECT_NE(other, big);
  // A slightly smaller one does.
  allocator.release(other);
  void *close = allocator.allocate((7 << 20) + 1);
  EXPECT_EQ(close, big);
  EXPECT_EQ(allocator.blockSize(close), size_t(8) << 20);
  allocator.release(close);
  allocator.release(empty);
}

TEST(CachingAllocator, CapBoundsTheCache) {
  CachingAllocator allocator(limit(5 << 20));
  std::vector<void *> blocks;
  for (int i = 0; i < 4; ++i)
    blocks.push_back(allocator.allocate(2 << 20));
  for (void *block : blocks)
    allocator.release(block);
  AllocatorStats stats = allocator.stats();
  EXPECT_LE(stats.bytesCached, size_t(5) << 20);
  EXPECT_EQ(stats.trimmed, 2);
  allocator.trim(0);
  EXPECT_EQ(allocator.stats().bytesCached, 0u);
  // A zero cap caches nothing.
  CachingAllocator none(limit(0));
  none.release(none.allocate(1 << 20));
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

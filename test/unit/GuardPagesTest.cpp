//===- GuardPagesTest.cpp - The caching allocator's guard-page mode -------===//
//
// Whether an address is accessible is asked of the kernel without touching
// it: write(2) from an inaccessible buffer fails with EFAULT instead of
// raising SIGSEGV. One death test checks the real fault as well.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Runtime/CachingAllocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <unistd.h>

using namespace dynafuse;

namespace {

CachingAllocator::Options guarded() {
  CachingAllocator::Options options;
  options.guardPages = true;
  return options;
}

/// Whether the byte at `address` can be read, by the kernel's account.
bool readable(const void *address) {
  int pipeEnds[2];
  if (pipe(pipeEnds) != 0)
    ADD_FAILURE() << "pipe: " << std::strerror(errno);
  ssize_t written = write(pipeEnds[1], address, 1);
  int error = errno;
  close(pipeEnds[0]);
  close(pipeEnds[1]);
  if (written < 0 && error != EFAULT)
    ADD_FAILURE() << "write: " << std::strerror(error);
  return written == 1;
}

uintptr_t pageStart(const void *address) {
  uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  return uintptr_t(address) / page * page;
}

} // namespace

TEST(GuardPages, BlockEndsAtAnInaccessiblePage) {
  CachingAllocator allocator(guarded());
  for (size_t bytes : {size_t(1), size_t(3), size_t(4), size_t(100),
                       size_t(4096), size_t(4097), size_t(3) << 20}) {
    SCOPED_TRACE(bytes);
    auto *block = static_cast<unsigned char *>(allocator.allocate(bytes));
    ASSERT_NE(block, nullptr);
    EXPECT_EQ(allocator.blockSize(block), bytes);
    std::memset(block, 7, bytes);
    EXPECT_EQ(block[0], 7);
    EXPECT_EQ(block[bytes - 1], 7);
    EXPECT_TRUE(readable(block));
    EXPECT_TRUE(readable(block + bytes - 1));
    EXPECT_FALSE(readable(block + bytes)) << "no slack after the block";
    EXPECT_FALSE(readable(reinterpret_cast<void *>(pageStart(block) - 1)))
        << "an inaccessible page before the block's first page";
    // The start is as aligned as the size allows, up to the page.
    size_t alignment = std::min(bytes & -bytes, size_t(sysconf(_SC_PAGESIZE)));
    EXPECT_EQ(uintptr_t(block) % alignment, 0u);
    allocator.release(block);
  }
  EXPECT_EQ(allocator.stats().bytesInUse, 0u);
}

TEST(GuardPages, ZeroBytesIsAValidInaccessibleBlock) {
  CachingAllocator allocator(guarded());
  void *empty = allocator.allocate(0);
  EXPECT_NE(empty, nullptr);
  EXPECT_EQ(allocator.blockSize(empty), 0u);
  EXPECT_FALSE(readable(empty));
  allocator.release(empty);
}

TEST(GuardPages, ReleasedBlocksAreNotReusedAndFault) {
  CachingAllocator allocator(guarded());
  void *first = allocator.allocate(256);
  allocator.release(first);
  EXPECT_FALSE(readable(first)) << "a use after release faults";
  void *second = allocator.allocate(256);
  EXPECT_NE(second, first);
  allocator.release(second);
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.hits, 0);
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.bytesCached, 0u);
}

TEST(GuardPages, ManyBlocksStayWithinTheQuarantine) {
  CachingAllocator allocator(guarded());
  for (int i = 0; i < 5000; ++i)
    allocator.release(allocator.allocate(size_t(i % 97) * 8 + 1));
  EXPECT_EQ(allocator.stats().bytesInUse, 0u);
}

TEST(GuardPagesDeathTest, ReadingPastTheEndRaisesSIGSEGV) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  CachingAllocator allocator(guarded());
  auto *block = static_cast<volatile float *>(allocator.allocate(10 * 4));
  EXPECT_EXIT(
      {
        float sum = 0;
        for (int i = 0; i <= 10; ++i)
          sum += block[i];
        std::exit(int(sum));
      },
      ::testing::KilledBySignal(SIGSEGV), "");
  allocator.release(const_cast<float *>(block));
}

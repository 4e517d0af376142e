//===- LLVMDiskCacheTest.cpp - Object code cached on disk -----------------===//
//
// The LLVM backend stores each module's object code under
// CompileOptions::codegen.diskCacheDir and loads it on the next compile of the
// same IR; a corrupt or truncated entry is never loaded: it is recompiled and
// rewritten. DiskCache itself: sizes, checksum and key are verified.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Runtime/DiskCache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>

using namespace dynafuse;

namespace {

class TemporaryCacheDir {
public:
  TemporaryCacheDir()
      : path(std::filesystem::temp_directory_path() /
             ("dynafuse-cache-test-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
  }
  ~TemporaryCacheDir() { std::filesystem::remove_all(path); }
  std::vector<std::filesystem::path> entries() const {
    std::vector<std::filesystem::path> found;
    for (auto &entry : std::filesystem::directory_iterator(path))
      found.push_back(entry.path());
    return found;
  }
  std::filesystem::path path;
};

std::string readAll(const std::filesystem::path &path) {
  std::ifstream file(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(file)),
                     std::istreambuf_iterator<char>());
}

void writeAll(const std::filesystem::path &path, const std::string &data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

const char *kKernel = R"(
kernel @k0[s0](%x: f32[s0], %out: f32[s0]) {
  %c = const 3.0 : f32
  for i0 in 0..s0 {
    %0 = load %x[i0] : f32
    %1 = mul %0, %c : f32
    store %out[i0], %1
  }
}
)";

/// Compiles kKernel with the disk cache in `cacheDir` and checks that it
/// computes 3x.
void compileAndRun(const TemporaryCacheDir &cacheDir) {
  LoopModule module = parseLoopModule(kKernel);
  CompileOptions options;
  options.codegen.diskCacheDir = cacheDir.path.string();
  auto kernels = createLLVMBackend()->compile(module, options);
  std::vector<float> x = {1, 2, 3}, out(3);
  char *buffers[] = {reinterpret_cast<char *>(x.data()),
                     reinterpret_cast<char *>(out.data())};
  int64_t symbols[] = {3};
  kernels[0]->run(buffers, symbols);
  EXPECT_EQ(out[2], 9.0f);
}

} // namespace

TEST(DiskCache, RoundTripAndRejections) {
  TemporaryCacheDir dir;
  DiskCache cache(dir.path.string());
  EXPECT_FALSE(cache.load("key"));
  cache.store("key", std::string("pay\0load", 8));
  ASSERT_TRUE(cache.load("key"));
  EXPECT_EQ(*cache.load("key"), std::string("pay\0load", 8));
  std::string entry = readAll(cache.pathFor("key"));

  DiskCacheStats before = DiskCache::stats();
  writeAll(cache.pathFor("key"), entry.substr(0, entry.size() - 1));
  EXPECT_FALSE(cache.load("key")) << "truncated";
  std::string flipped = entry;
  flipped.back() ^= 1;
  writeAll(cache.pathFor("key"), flipped);
  EXPECT_FALSE(cache.load("key")) << "checksum";
  writeAll(cache.pathFor("key"), "");
  EXPECT_FALSE(cache.load("key")) << "empty";
  // Another key's entry under this key's name (a hash collision).
  cache.store("other", "payload");
  writeAll(cache.pathFor("key"), readAll(cache.pathFor("other")));
  EXPECT_FALSE(cache.load("key")) << "other key";
  EXPECT_EQ(DiskCache::stats().rejected - before.rejected, 4);
  cache.store("key", "fresh");
  EXPECT_EQ(*cache.load("key"), "fresh");
  EXPECT_TRUE(DiskCache("").load("key") == std::nullopt);
}

TEST(DiskCache, LLVMBackendStoresLoadsAndRecompilesCorruptEntries) {
  TemporaryCacheDir dir;
  DiskCacheStats start = DiskCache::stats();
  compileAndRun(dir);
  ASSERT_EQ(dir.entries().size(), 1u);
  EXPECT_EQ(DiskCache::stats().stores - start.stores, 1);
  std::filesystem::path entry = dir.entries()[0];
  std::string good = readAll(entry);

  DiskCacheStats warm = DiskCache::stats();
  compileAndRun(dir);
  EXPECT_EQ(DiskCache::stats().hits - warm.hits, 1);
  EXPECT_EQ(DiskCache::stats().stores - warm.stores, 0);

  // Truncated and bit-flipped entries are recompiled and rewritten.
  for (int variant = 0; variant < 2; ++variant) {
    std::string bad = good;
    if (variant == 0)
      bad.resize(bad.size() / 2);
    else
      bad[bad.size() - 100] ^= 0x40;
    writeAll(entry, bad);
    DiskCacheStats before = DiskCache::stats();
    compileAndRun(dir);
    DiskCacheStats after = DiskCache::stats();
    EXPECT_EQ(after.rejected - before.rejected, 1) << variant;
    EXPECT_EQ(after.stores - before.stores, 1) << variant;
    EXPECT_EQ(readAll(entry), good) << variant;
  }
  EXPECT_EQ(dir.entries().size(), 1u) << "no temporary files left";
}

//===- LLVMParallelCompileTest.cpp - Large modules compile in parts -------===//
//
// The LLVM backend compiles a large module's kernels in parts, one thread,
// LLVM context and object each. Every kernel must still come back at its
// own index (the parts are dealt by size, not in order), each part is a
// disk cache entry of its own, and a corrupt entry of one part is
// recompiled without disturbing the others.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Runtime/DiskCache.h"
#include "dynafuse/Support/ThreadPool.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace dynafuse;

namespace {

/// Kernel k adds 1.0 to its input (k * 7) % 61 + 20 times, so the kernels
/// differ in size (the partition deals them by size) and in result.
int64_t additionsOf(int kernel) { return (kernel * 7) % 61 + 20; }

std::string largeModuleText(int kernels) {
  std::ostringstream text;
  for (int k = 0; k < kernels; ++k) {
    text << "kernel @k" << k << "[s0](%x: f32[s0], %out: f32[s0]) {\n"
         << "  %one = const 1.0 : f32\n"
         << "  for i0 in 0..s0 {\n"
         << "    %v0 = load %x[i0] : f32\n";
    int64_t additions = additionsOf(k);
    for (int64_t a = 1; a <= additions; ++a)
      text << "    %v" << a << " = add %v" << a - 1 << ", %one : f32\n";
    text << "    store %out[i0], %v" << additions << "\n  }\n}\n";
  }
  return text.str();
}

/// Compiles the module and checks every kernel's result at its index.
void compileAndCheck(const LoopModule &module, const std::string &cacheDir) {
  CompileOptions options;
  options.codegen.diskCacheDir = cacheDir;
  auto kernels = createLLVMBackend()->compile(module, options);
  ASSERT_EQ(kernels.size(), module.kernels.size());
  for (size_t k = 0; k < kernels.size(); ++k) {
    std::vector<float> x = {0.5f, -3.0f, 10.0f}, out(3, 0.0f);
    char *buffers[] = {reinterpret_cast<char *>(x.data()),
                       reinterpret_cast<char *>(out.data())};
    int64_t symbols[] = {3};
    kernels[k]->run(buffers, symbols);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_EQ(out[i], x[i] + float(additionsOf(int(k))))
          << "kernel " << k << " element " << i;
  }
}

std::vector<std::filesystem::path> entriesOf(const std::filesystem::path &dir) {
  std::vector<std::filesystem::path> found;
  if (std::filesystem::exists(dir))
    for (auto &entry : std::filesystem::directory_iterator(dir))
      found.push_back(entry.path());
  return found;
}

} // namespace

TEST(ParallelCompile, EveryKernelAtItsIndexFromEveryPart) {
  configureThreadPool(2);
  ASSERT_GE(configuredThreadCount(), 2);
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("dynafuse-parallel-compile-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  // 80 kernels of 20-80 additions: about 4,000 instructions, two parts
  // (one per thread; a part holds at least 1,500).
  LoopModule module = parseLoopModule(largeModuleText(80));
  compileAndCheck(module, dir.string());
  std::vector<std::filesystem::path> entries = entriesOf(dir);
  EXPECT_EQ(entries.size(), 2u) << "one cache entry per part";

  // Warm: both parts load from the cache.
  DiskCacheStats warm = DiskCache::stats();
  compileAndCheck(module, dir.string());
  EXPECT_EQ(DiskCache::stats().hits - warm.hits, 2);
  EXPECT_EQ(DiskCache::stats().stores - warm.stores, 0);

  // One part's entry corrupted: that part alone is recompiled and stored.
  std::string bad;
  {
    std::ifstream file(entries[0], std::ios::binary);
    bad.assign(std::istreambuf_iterator<char>(file), {});
  }
  bad.resize(bad.size() / 2);
  std::ofstream(entries[0], std::ios::binary | std::ios::trunc) << bad;
  DiskCacheStats before = DiskCache::stats();
  compileAndCheck(module, dir.string());
  EXPECT_EQ(DiskCache::stats().hits - before.hits, 1);
  EXPECT_EQ(DiskCache::stats().stores - before.stores, 1);
  std::filesystem::remove_all(dir);
}

TEST(ParallelCompile, SmallModulesCompileAsOnePart) {
  // A module below the part size compiles as one part.
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("dynafuse-parallel-small-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  LoopModule small = parseLoopModule(largeModuleText(3));
  compileAndCheck(small, dir.string());
  EXPECT_EQ(entriesOf(dir).size(), 1u);
  std::filesystem::remove_all(dir);
  // An empty module compiles to no kernels.
  EXPECT_TRUE(createLLVMBackend()->compile(LoopModule(), CompileOptions())
                  .empty());
}

//===- OptionsTest.cpp - Settings read from a given environment -----------===//
//
// readOptions() through a lookup over a map (no process environment), one
// case per reader of Settings.def, and optionVariables() as the list makes
// it.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Support/Options.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

using namespace dynafuse;

namespace {
Options read(const std::map<std::string, std::string> &environment) {
  return readOptions([&](const char *name) -> const char * {
    auto found = environment.find(name);
    return found == environment.end() ? nullptr : found->second.c_str();
  });
}
} // namespace

TEST(Options, DefaultsWithoutVariables) {
  Options options = read({});
  EXPECT_EQ(options.recompileLimit, 8);
  EXPECT_TRUE(options.resumeAfterBreaks);
  EXPECT_TRUE(options.automaticDynamicShapes);
  EXPECT_EQ(options.parallelThreshold, 32768);
  EXPECT_EQ(options.gemmLibrary, GemmLibrary::Auto);
  EXPECT_EQ(options.guardPages, GuardPages::Off);
  EXPECT_EQ(options.hugePages, HugePages::Off);
  EXPECT_DOUBLE_EQ(options.allocatorCacheMB, 2048);
  EXPECT_FALSE(options.codegen.nvrtcPath.has_value());
  EXPECT_EQ(options.codegen.diskCacheDir, "");
}

TEST(Options, EachReaderParsesItsKind) {
  Options options = read({{"DYNAFUSE_LOG", "compile,guards"},
                          {"DYNAFUSE_RECOMPILE_LIMIT", " 3 "},
                          {"DYNAFUSE_RESUME_AFTER_BREAKS", "0"},
                          {"DYNAFUSE_NUM_THREADS", "-4"},
                          {"DYNAFUSE_PARALLEL_THRESHOLD", "100"},
                          {"DYNAFUSE_VECTOR_WIDTH", "256"},
                          {"DYNAFUSE_HUGE_PAGES", "thp"},
                          {"DYNAFUSE_GUARD_PAGES", "all"},
                          {"DYNAFUSE_GEMM_LIBRARY", "onednn"},
                          {"DYNAFUSE_ALLOCATOR_IDLE_S", "2.5"},
                          {"DYNAFUSE_NVRTC", ""},
                          {"DYNAFUSE_CUDA_INCLUDE", "/a;/b"}});
  EXPECT_EQ(options.logChannels, "compile,guards");
  EXPECT_EQ(options.recompileLimit, 3);
  EXPECT_FALSE(options.resumeAfterBreaks);
  EXPECT_EQ(options.numThreads, 0);
  EXPECT_EQ(options.parallelThreshold, 100);
  EXPECT_EQ(options.codegen.vectorWidth, "256");
  EXPECT_EQ(options.hugePages, HugePages::Transparent);
  EXPECT_EQ(options.guardPages, GuardPages::All);
  EXPECT_EQ(options.gemmLibrary, GemmLibrary::OneDnn);
  EXPECT_DOUBLE_EQ(options.allocatorIdleSeconds, 2.5);
  ASSERT_TRUE(options.codegen.nvrtcPath.has_value());
  EXPECT_EQ(*options.codegen.nvrtcPath, "");
  EXPECT_EQ(options.codegen.cudaIncludeDirs, "/a;/b");
}

TEST(Options, MalformedValuesKeepTheirDefaults) {
  Options options = read({{"DYNAFUSE_RECOMPILE_LIMIT", "many"},
                          {"DYNAFUSE_PARALLEL_THRESHOLD", "0"},
                          {"DYNAFUSE_ALLOCATOR_CACHE_MB", "-1"},
                          {"DYNAFUSE_CACHING_ALLOCATOR", ""}});
  EXPECT_EQ(options.recompileLimit, 8);
  EXPECT_EQ(options.parallelThreshold, 32768);
  EXPECT_DOUBLE_EQ(options.allocatorCacheMB, 2048);
  EXPECT_TRUE(options.cachingAllocator);
}

TEST(Options, CacheFolderFollowsItsThreeVariables) {
  EXPECT_EQ(read({{"HOME", "/h"}}).codegen.diskCacheDir, "/h/.cache/dynafuse");
  EXPECT_EQ(
      read({{"HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}}).codegen.diskCacheDir,
      "/x/dynafuse");
  EXPECT_EQ(
      read({{"HOME", "/h"}, {"DYNAFUSE_CACHE_DIR", "/c"}}).codegen.diskCacheDir,
      "/c");
  EXPECT_EQ(read({{"DYNAFUSE_CACHE_DIR", "/c"}, {"DYNAFUSE_DISK_CACHE", "0"}})
                .codegen.diskCacheDir,
            "");
}

TEST(Options, VariablesAreListedOnceWithTheirRunTimeNames) {
  std::set<std::string> names, pythonNames;
  for (const OptionVariable &variable : optionVariables()) {
    EXPECT_TRUE(names.insert(variable.name).second) << variable.name;
    EXPECT_EQ(std::string(variable.name).rfind("DYNAFUSE_", 0), 0u);
    EXPECT_NE(std::string(variable.meaning), "");
    if (*variable.pythonName)
      pythonNames.insert(variable.pythonName);
  }
  EXPECT_EQ(names.size(), 21u);
  EXPECT_EQ(pythonNames,
            (std::set<std::string>{"log", "dump_dir", "recompile_limit",
                                   "resume_after_breaks",
                                   "automatic_dynamic_shapes"}));
}

//===- Options.cpp - Reading every setting from the environment ----------===//
#include "dynafuse/Support/Options.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace dynafuse {
namespace {

/// The variable's value, or null when unset or empty.
const char *nonEmpty(const EnvironmentLookup &lookup, const char *name) {
  const char *value = lookup(name);
  return value && *value ? value : nullptr;
}

/// A non-negative number, or `fallback` when unset, empty or malformed.
double readNumber(const EnvironmentLookup &lookup, const char *name,
                  double fallback) {
  const char *value = nonEmpty(lookup, name);
  if (!value)
    return fallback;
  char *end = nullptr;
  double parsed = std::strtod(value, &end);
  return end && *end == 0 && parsed >= 0 ? parsed : fallback;
}

std::string diskCacheDirectory(const EnvironmentLookup &lookup) {
  const char *off = lookup("DYNAFUSE_DISK_CACHE");
  if (off && std::string(off) == "0")
    return "";
  if (const char *dir = nonEmpty(lookup, "DYNAFUSE_CACHE_DIR"))
    return dir;
  if (const char *xdg = nonEmpty(lookup, "XDG_CACHE_HOME"))
    return std::string(xdg) + "/dynafuse";
  if (const char *home = nonEmpty(lookup, "HOME"))
    return std::string(home) + "/.cache/dynafuse";
  return "";
}

GuardPages guardPagesOf(const char *value) {
  if (!value || !*value || std::string(value) == "0")
    return GuardPages::Off;
  return std::string(value) == "all" ? GuardPages::All : GuardPages::Dynafuse;
}

HugePages hugePagesOf(const char *value) {
  std::string text = value ? value : "off";
  if (text == "thp")
    return HugePages::Transparent;
  if (text == "hugetlb")
    return HugePages::Reserved;
  return HugePages::Off;
}

GemmLibrary gemmLibraryOf(const char *value) {
  std::string text = value ? value : "auto";
  if (text == "mkl")
    return GemmLibrary::Mkl;
  if (text == "onednn")
    return GemmLibrary::OneDnn;
  return GemmLibrary::Auto;
}

} // namespace

Options readOptions(const EnvironmentLookup &lookup) {
  Options options;
  if (const char *log = lookup("DYNAFUSE_LOG"))
    options.logChannels = log;
  if (const char *dir = lookup("DYNAFUSE_DUMP_DIR"))
    options.dumpDir = dir;
  if (const char *limit = nonEmpty(lookup, "DYNAFUSE_RECOMPILE_LIMIT")) {
    // Like Python's int(): surrounding spaces allowed, nothing else; a
    // malformed value keeps the default.
    char *end = nullptr;
    long parsed = std::strtol(limit, &end, 10);
    while (end && std::isspace(static_cast<unsigned char>(*end)))
      ++end;
    if (end != limit && end && *end == 0)
      options.recompileLimit = int(parsed);
  }
  if (const char *resume = nonEmpty(lookup, "DYNAFUSE_RESUME_AFTER_BREAKS"))
    options.resumeAfterBreaks = std::string(resume) != "0";
  if (const char *automatic = nonEmpty(lookup, "DYNAFUSE_AUTOMATIC_DYNAMIC"))
    options.automaticDynamicShapes = std::string(automatic) != "0";
  options.codegen.diskCacheDir = diskCacheDirectory(lookup);
  if (const char *width = nonEmpty(lookup, "DYNAFUSE_VECTOR_WIDTH"))
    options.codegen.vectorWidth = width;
  if (const char *nvrtc = lookup("DYNAFUSE_NVRTC"))
    options.codegen.nvrtcPath = std::string(nvrtc);
  if (const char *include = lookup("DYNAFUSE_CUDA_INCLUDE"))
    options.codegen.cudaIncludeDirs = include;
  if (const char *threads = lookup("DYNAFUSE_NUM_THREADS"))
    options.numThreads = std::max(0, std::atoi(threads));
  if (const char *threshold = lookup("DYNAFUSE_PARALLEL_THRESHOLD")) {
    long long parsed = std::atoll(threshold);
    if (parsed > 0)
      options.parallelThreshold = parsed;
  }
  options.hugePages = hugePagesOf(lookup("DYNAFUSE_HUGE_PAGES"));
  options.guardPages = guardPagesOf(lookup("DYNAFUSE_GUARD_PAGES"));
  const char *pool = lookup("DYNAFUSE_CACHING_ALLOCATOR");
  options.cachingAllocator = !(pool && std::string(pool) == "0");
  const char *prepack = lookup("DYNAFUSE_PREPACK_WEIGHTS");
  options.prepackWeights = !(prepack && std::string(prepack) == "0");
  options.gemmLibrary = gemmLibraryOf(lookup("DYNAFUSE_GEMM_LIBRARY"));
  const char *fold = lookup("DYNAFUSE_FOLD_BATCH_NORM");
  options.foldBatchNorm = !(fold && std::string(fold) == "0");
  const char *plan = lookup("DYNAFUSE_ALLOCATION_PLAN");
  options.allocationPlan = !(plan && std::string(plan) == "0");
  options.allocatorCacheMB =
      readNumber(lookup, "DYNAFUSE_ALLOCATOR_CACHE_MB", 2048);
  options.allocatorIdleSeconds =
      readNumber(lookup, "DYNAFUSE_ALLOCATOR_IDLE_S", 10);
  return options;
}

const std::vector<OptionVariable> &optionVariables() {
  static const std::vector<OptionVariable> variables = {
      {"DYNAFUSE_LOG", "",
       "comma-separated log channels on stderr: graph_breaks, guards, "
       "recompiles, compile, steps, profile, or all"},
      {"DYNAFUSE_DUMP_DIR", "",
       "folder that receives, per compiled graph, the text of every stage"},
      {"DYNAFUSE_RECOMPILE_LIMIT", "8",
       "compilations per code object before it runs eagerly for good"},
      {"DYNAFUSE_RESUME_AFTER_BREAKS", "1",
       "0: a graph break runs its frame eagerly instead of compiling the "
       "graph before it and resuming after it"},
      {"DYNAFUSE_AUTOMATIC_DYNAMIC", "1",
       "0: dynamic=None compiles every new size statically instead of "
       "making the dims whose size changed symbolic"},
      {"DYNAFUSE_DISK_CACHE", "1", "0 turns the on-disk kernel cache off"},
      {"DYNAFUSE_CACHE_DIR", "$XDG_CACHE_HOME/dynafuse or ~/.cache/dynafuse",
       "folder of the on-disk kernel cache"},
      {"DYNAFUSE_NUM_THREADS", "",
       "threads of Dynafuse's own pool; unset: the hardware's count (in "
       "Python: torch's intra-op threads)"},
      {"DYNAFUSE_PARALLEL_THRESHOLD", "32768",
       "innermost iterations below which a kernel runs on one thread"},
      {"DYNAFUSE_VECTOR_WIDTH", "",
       "LLVM prefer-vector-width for kernels; unset: 512 on AVX-512, else "
       "LLVM's choice"},
      {"DYNAFUSE_HUGE_PAGES", "off",
       "large blocks on huge pages: off, hugetlb (the reserved pool), thp"},
      {"DYNAFUSE_GUARD_PAGES", "0",
       "1: every block Dynafuse allocates is fenced by guard pages and never "
       "reused; all: torch's CPU allocations too"},
      {"DYNAFUSE_CACHING_ALLOCATOR", "1",
       "0: tensors Dynafuse creates come from at::empty, not the pool"},
      {"DYNAFUSE_PREPACK_WEIGHTS", "1",
       "0: inference convolutions and linear layers keep no packed copy of "
       "their weights (oneDNN and MKL pack them on every call; less memory, "
       "slower)"},
      {"DYNAFUSE_GEMM_LIBRARY", "auto",
       "library running the float32 matrix products of inference graphs: "
       "mkl (packed sgemm for linear layers, ATen's for the rest), onednn, "
       "or auto (MKL on Intel CPUs, oneDNN elsewhere)"},
      {"DYNAFUSE_FOLD_BATCH_NORM", "1",
       "0: prepacked convolutions leave their batch norm and activation to "
       "a fused kernel instead of folding them into oneDNN's call"},
      {"DYNAFUSE_ALLOCATION_PLAN", "1",
       "0: a compiled run's large blocks are placed by the pool's heap as "
       "they come instead of by a plan made from an earlier run"},
      {"DYNAFUSE_ALLOCATOR_CACHE_MB", "2048",
       "most megabytes of freed blocks the pool keeps"},
      {"DYNAFUSE_ALLOCATOR_IDLE_S", "10",
       "seconds after which an unused cached block is unmapped"},
      {"DYNAFUSE_NVRTC", "",
       "path of libnvrtc, the only one tried; unset: the build's, then "
       "libnvrtc.so.13"},
      {"DYNAFUSE_CUDA_INCLUDE", "",
       "include folders NVRTC searches first (;-separated)"},
  };
  return variables;
}

} // namespace dynafuse

//===- Options.h - Every setting of Dynafuse, as one value ------*- C++ -*-===//
//
// DESIGN decision 15. Options are one value, read from the environment once
// at the boundary (the Python module's init, a tool's main()) and passed
// explicitly from there. Nothing below the boundary reads the environment:
// readOptions() parses the variables through the lookup it is given, so the
// boundary is the only caller of getenv.
//
// Every variable (README.md's table and python/dynafuse/config.py list the
// same names, defaults and meanings):
//   DYNAFUSE_LOG                 log channels, comma-separated ("all")
//   DYNAFUSE_DUMP_DIR            folder for the text of every stage
//   DYNAFUSE_RECOMPILE_LIMIT     compilations per code object (8)
//   DYNAFUSE_RESUME_AFTER_BREAKS 0: a graph break runs the frame eagerly
//                                instead of resuming after it (1)
//   DYNAFUSE_DISK_CACHE          0 turns the on-disk kernel cache off
//   DYNAFUSE_CACHE_DIR           its folder (else $XDG_CACHE_HOME/dynafuse,
//                                else $HOME/.cache/dynafuse)
//   DYNAFUSE_NUM_THREADS         size of Dynafuse's own thread pool
//   DYNAFUSE_PARALLEL_THRESHOLD  work below which a kernel is serial (32768)
//   DYNAFUSE_VECTOR_WIDTH        LLVM's prefer-vector-width for kernels
//   DYNAFUSE_HUGE_PAGES          off | hugetlb | thp
//   DYNAFUSE_GUARD_PAGES         1: guard pages on Dynafuse's blocks; all:
//                                on torch's CPU allocations too
//   DYNAFUSE_CACHING_ALLOCATOR   0: tensors from at::empty, no pool
//   DYNAFUSE_PREPACK_WEIGHTS     0: inference convolutions and linear layers
//                                let oneDNN and MKL pack their weights on
//                                every call
//   DYNAFUSE_GEMM_LIBRARY        auto | mkl | onednn: the library running
//                                inference float32 matrix products (auto:
//                                MKL on Intel CPUs, oneDNN elsewhere)
//   DYNAFUSE_FOLD_BATCH_NORM     0: prepacked convolutions leave their batch
//                                norm and activation to a fused kernel
//   DYNAFUSE_ALLOCATOR_CACHE_MB  cached bytes the pool keeps (2048)
//   DYNAFUSE_ALLOCATOR_IDLE_S    seconds before idle blocks are unmapped (10)
//   DYNAFUSE_NVRTC               path of libnvrtc (the only one tried)
//   DYNAFUSE_CUDA_INCLUDE        extra include folders for NVRTC (;-separated)
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_OPTIONS_H
#define DYNAFUSE_SUPPORT_OPTIONS_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dynafuse {

/// What the code generators need (a backend's compile() gets it through
/// CompileOptions).
struct CodegenOptions {
  /// The on-disk kernel cache's folder; "" turns the cache off.
  std::string diskCacheDir;
  /// LLVM's prefer-vector-width for kernels; "" lets the host decide (512
  /// on AVX-512 CPUs).
  std::string vectorWidth;
  /// libnvrtc to load; unset: the build's path, then libnvrtc.so.13.
  std::optional<std::string> nvrtcPath;
  /// Include folders NVRTC searches before the build's CUDA include folders
  /// (';'-separated).
  std::string cudaIncludeDirs;
};

/// Guard-page mode of the caching allocator (a debugging aid for JIT code).
enum class GuardPages {
  Off,
  /// Every block Dynafuse allocates gets its own mapping with guard pages.
  Dynafuse,
  /// As Dynafuse, and torch's CPU allocations are made by that allocator.
  All,
};

enum class HugePages { Off, Reserved, Transparent };

/// The library computing the float32 matrix products of inference graphs:
/// MKL (its packed sgemm for linear layers, ATen's sgemm for the rest) or
/// oneDNN (inner product and matmul); Auto picks by the CPU
/// (TorchPackedGemms.cpp).
enum class GemmLibrary { Auto, Mkl, OneDnn };

struct Options {
  /// Comma-separated log channels (graph_breaks, guards, recompiles,
  /// compile, steps, profile, or all).
  std::string logChannels;
  /// Folder that receives, per compiled graph, the text of every stage.
  std::string dumpDir;
  /// Compilations per code object before it runs eagerly for good.
  int recompileLimit = 8;
  /// A graph break compiles the graph before it and resumes after it
  /// (DESIGN decision 11); off, the frame runs eagerly.
  bool resumeAfterBreaks = true;
  /// dynamic=None: a dim whose size changed between calls is symbolic at
  /// the next capture (docs/dynamic-shapes.md); off, None is static.
  bool automaticDynamicShapes = true;
  CodegenOptions codegen;
  /// Threads of Dynafuse's own pool; 0: the hardware's count (and, inside
  /// Python, torch's intra-op threads instead of a pool of our own).
  int numThreads = 0;
  /// Innermost iterations below which a kernel runs on one thread.
  int64_t parallelThreshold = 32768;
  HugePages hugePages = HugePages::Off;
  GuardPages guardPages = GuardPages::Off;
  /// Whether tensors Dynafuse creates come from the caching allocator.
  bool cachingAllocator = true;
  /// Inference convolutions and linear layers keep their weights packed in
  /// oneDNN's and MKL's layouts (a copy per weight, packed once per
  /// parameter version).
  bool prepackWeights = true;
  /// Which library runs the matrix products of inference graphs.
  GemmLibrary gemmLibrary = GemmLibrary::Auto;
  /// Prepacked convolutions fold their eval batch norm into the weight and
  /// run their activation as a oneDNN post-op (fuse-conv-epilogues).
  bool foldBatchNorm = true;
  /// A compiled run's large blocks follow a plan made from an earlier run's
  /// trace (AllocationPlan.h) instead of the heap's online placement.
  bool allocationPlan = true;
  /// The most bytes the caching allocator keeps cached.
  double allocatorCacheMB = 2048;
  /// Cached blocks idle for this long are unmapped.
  double allocatorIdleSeconds = 10;
};

/// Returns the value of an environment variable, or null when it is unset.
using EnvironmentLookup = std::function<const char *(const char *name)>;

/// The options the environment sets, seen through `lookup` (the boundary
/// passes std::getenv); unset or malformed variables keep their defaults.
Options readOptions(const EnvironmentLookup &lookup);

/// One documented variable: its name, its default as text, its meaning.
struct OptionVariable {
  const char *name;
  const char *defaultValue;
  const char *meaning;
};
/// Every DYNAFUSE_* variable readOptions() reads.
const std::vector<OptionVariable> &optionVariables();

} // namespace dynafuse

#endif

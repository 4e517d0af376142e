//===- Parallel.h - Splitting a kernel's outer loop over threads -*- C++
//-*-===//
//
// A kernel whose body is one top-level `for` (plus instructions that store
// nothing) is "splittable": its iterations are independent (every store of
// iteration i writes elements indexed by i), so a backend may run a range
// [begin, end) of that loop (KernelExecutable::runRange) and the executor
// runs chunks of it on the thread pool. Kernels doing less work than the
// threshold stay on the calling thread.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_PARALLEL_H
#define DYNAFUSE_RUNTIME_PARALLEL_H

#include "dynafuse/Loop/Kernel.h"

#include <cstdint>
#include <map>
#include <string>

namespace dynafuse {

class KernelExecutable;

/// The top-level loop of a splittable kernel; null otherwise.
const Stmt *splittableLoop(const Kernel &kernel);
/// Innermost loop iterations the kernel runs (about its element count).
int64_t estimateWork(const Kernel &kernel,
                     const std::map<std::string, int64_t> &bindings);
/// How one kernel call runs, from the caller's options and context.
struct KernelLaunch {
  /// Work below which a kernel runs on one thread
  /// (Options::parallelThreshold).
  int64_t parallelThreshold = 32768;
  /// Where device kernels are queued (KernelExecutable::runOnStream).
  void *deviceStream = nullptr;
};

/// Runs `executable` on all of `kernel`, splitting its outer loop over the
/// pool when it is splittable, supports ranges and does enough work.
/// Returns the first index error any thread reported ("" when none).
std::string runKernel(const Kernel &kernel, const KernelExecutable &executable,
                      char *const *buffers, const int64_t *symbols,
                      const std::map<std::string, int64_t> &bindings,
                      const KernelLaunch &launch);

} // namespace dynafuse

#endif

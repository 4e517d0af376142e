//===- Parallel.cpp - Splitting a kernel's outer loop over threads --------===//
#include "dynafuse/Runtime/Parallel.h"

#include "dynafuse/Runtime/Backend.h"
#include "dynafuse/Support/IndexErrors.h"
#include "dynafuse/Support/ThreadPool.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace dynafuse {
namespace {

int64_t blockWork(const std::vector<Stmt> &block,
                  const std::map<std::string, int64_t> &bindings) {
  int64_t work = 0;
  for (const Stmt &stmt : block) {
    if (stmt.kind == Stmt::Kind::Instr)
      continue;
    int64_t trips = 1;
    if (stmt.kind == Stmt::Kind::For)
      trips = stmt.extent.evaluate(bindings);
    for (const SymExpr &extent : stmt.extents)
      trips *= extent.evaluate(bindings);
    work += std::max<int64_t>(trips, 0) *
            std::max<int64_t>(1, blockWork(stmt.body, bindings));
  }
  return work;
}

} // namespace

const Stmt *splittableLoop(const Kernel &kernel) {
  const Stmt *loop = nullptr;
  for (const Stmt &stmt : kernel.body) {
    if (stmt.kind == Stmt::Kind::For) {
      if (loop)
        return nullptr;
      loop = &stmt;
      continue;
    }
    if (stmt.kind != Stmt::Kind::Instr ||
        kernel.instrs[stmt.instr].op == ScalarOp::Store)
      return nullptr;
  }
  return loop;
}

int64_t estimateWork(const Kernel &kernel,
                     const std::map<std::string, int64_t> &bindings) {
  return blockWork(kernel.body, bindings);
}

std::string runKernel(const Kernel &kernel, const KernelExecutable &executable,
                      char *const *buffers, const int64_t *symbols,
                      const std::map<std::string, int64_t> &bindings,
                      const KernelLaunch &launch) {
  auto runSerially = [&] {
    executable.runOnStream(buffers, symbols, launch.deviceStream);
    std::string error;
    takeIndexError(error);
    return error;
  };
  const Stmt *loop =
      executable.supportsRange() ? splittableLoop(kernel) : nullptr;
  ThreadPool &pool = threadPool();
  if (!loop || pool.size() == 1)
    return runSerially();
  int64_t extent = loop->extent.evaluate(bindings);
  int64_t work = estimateWork(kernel, bindings);
  int64_t threshold = std::max<int64_t>(1, launch.parallelThreshold);
  if (extent < 2 || work < 2 * threshold)
    return runSerially();
  // A few chunks per thread (claimed dynamically by Dynafuse's own pool,
  // split evenly by torch's parallel_for); none smaller than the threshold.
  int64_t chunks =
      std::min<int64_t>({extent, int64_t(pool.size()) * 4, work / threshold});
  std::mutex errorMutex;
  std::string firstError;
  pool.run(chunks, [&](int64_t chunk) {
    int64_t begin = extent * chunk / chunks;
    int64_t end = extent * (chunk + 1) / chunks;
    executable.runRange(buffers, symbols, begin, end);
    std::string error;
    if (takeIndexError(error)) {
      std::lock_guard<std::mutex> lock(errorMutex);
      if (firstError.empty())
        firstError = error;
    }
  });
  return firstError;
}

} // namespace dynafuse

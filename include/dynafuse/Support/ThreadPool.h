//===- ThreadPool.h - The process-wide pool parallel kernels run on -*- C++
//-*-===//
//
// One pool per process, created on first use and intentionally leaked (it
// must outlive kernels freed at interpreter shutdown). Its size is
// Options::numThreads (DYNAFUSE_NUM_THREADS), handed over by the boundary
// through configureThreadPool before the first kernel runs, or the
// machine's hardware concurrency; the calling thread is one of the workers.
// Inside Python, torch's intra-op threads replace it
// (lib/Torch/TorchThreadPool.cpp) unless Options::numThreads is set. A call
// made while the pool is busy (from another thread, or nested inside a chunk)
// runs serially in the caller.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_THREADPOOL_H
#define DYNAFUSE_SUPPORT_THREADPOOL_H

#include <cstdint>
#include <functional>

namespace dynafuse {

class ThreadPool {
public:
  virtual ~ThreadPool() = default;
  /// Threads that run chunks, the caller included (at least 1).
  virtual int size() const = 0;
  /// Runs body(chunk) for every chunk in [0, chunks), spread over the
  /// workers and the caller; returns when all have finished. Exceptions
  /// must not escape `body`.
  virtual void run(int64_t chunks,
                   const std::function<void(int64_t)> &body) = 0;
};

/// The process-wide pool: the installed one, else Dynafuse's own.
ThreadPool &threadPool();
/// Makes `pool` (which must outlive every kernel run) the process-wide
/// pool; the Python module installs torch's intra-op threads here.
void installThreadPool(ThreadPool *pool);
/// Sets the size Dynafuse's own pool is created with (Options::numThreads;
/// 0: the hardware's count). Call before the pool's first use: the pool is
/// created once.
void configureThreadPool(int threads);
/// The thread count the pool was (or will be) created with.
int configuredThreadCount();

} // namespace dynafuse

#endif

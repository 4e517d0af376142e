//===- ThreadPool.cpp - A small fork-join pool ----------------------------===//
//
// Workers sleep on a condition variable until a job is posted; a job is a
// chunk counter that every participant (workers and caller) claims from
// until it runs out. The caller waits for the last chunk to finish and for
// every worker that joined to leave. Before sleeping, workers and the
// waiting caller spin briefly (kSpinMicroseconds): a graph's kernels come
// back to back, and a futex wake-up costs tens of microseconds on a VM,
// as much as a small kernel's whole run. The
// `busy` flag makes concurrent and nested calls run serially instead of
// queueing behind each other.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Support/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dynafuse {
namespace {

/// How long an idle participant polls before it blocks.
constexpr int kSpinMicroseconds = 50;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Polls `ready` for up to kSpinMicroseconds; whether it became true.
template <typename Ready> bool spinUntil(Ready ready) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::microseconds(kSpinMicroseconds);
  for (int polls = 0;; ++polls) {
    if (ready())
      return true;
    cpuRelax();
    if (polls % 64 == 63 && std::chrono::steady_clock::now() > deadline)
      return false;
  }
}

class ForkJoinPool : public ThreadPool {
public:
  explicit ForkJoinPool(int threads) : threads(threads) {
    for (int i = 1; i < threads; ++i)
      std::thread([this] { workerLoop(); }).detach();
  }

  int size() const override { return threads; }

  void run(int64_t chunks, const std::function<void(int64_t)> &body) override {
    bool expected = false;
    if (threads == 1 || chunks <= 1 ||
        !busy.compare_exchange_strong(expected, true)) {
      for (int64_t chunk = 0; chunk < chunks; ++chunk)
        body(chunk);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      job = &body;
      total = chunks;
      next.store(0);
      unfinished.store(chunks);
      ++generation;
    }
    wake.notify_all();
    work(body, chunks);
    spinUntil([&] { return unfinished.load() == 0 && active.load() == 0; });
    {
      std::unique_lock<std::mutex> lock(mutex);
      // Also wait for every worker that joined to leave, so none can claim
      // chunks of the next job through this one's `body`.
      done.wait(lock, [&] { return unfinished.load() == 0 && active == 0; });
      job = nullptr;
    }
    busy.store(false);
  }

private:
  void work(const std::function<void(int64_t)> &body, int64_t chunks) {
    for (int64_t chunk = next.fetch_add(1); chunk < chunks;
         chunk = next.fetch_add(1)) {
      body(chunk);
      if (unfinished.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(mutex);
        done.notify_all();
      }
    }
  }

  void workerLoop() {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int64_t)> *body;
      int64_t chunks;
      spinUntil([&] { return generation.load() != seen; });
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return generation != seen && job; });
        seen = generation;
        body = job;
        chunks = total;
        ++active;
      }
      work(*body, chunks);
      std::lock_guard<std::mutex> lock(mutex);
      if (--active == 0)
        done.notify_all();
    }
  }

  const int threads;
  std::atomic<bool> busy{false};
  std::mutex mutex;
  std::condition_variable wake, done;
  const std::function<void(int64_t)> *job = nullptr;
  int64_t total = 0;
  /// Changed under the mutex; atomic so idle workers can poll it.
  std::atomic<uint64_t> generation{0};
  std::atomic<int> active{0};
  std::atomic<int64_t> next{0}, unfinished{0};
};

} // namespace

namespace {
/// Options::numThreads as the boundary configured it (0: the hardware's).
std::atomic<int> requestedThreads{0};
} // namespace

void configureThreadPool(int threads) {
  requestedThreads.store(threads, std::memory_order_release);
}

int configuredThreadCount() {
  int threads = requestedThreads.load(std::memory_order_acquire);
  if (threads >= 1)
    return threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

static std::atomic<ThreadPool *> installedPool{nullptr};

ThreadPool &threadPool() {
  if (ThreadPool *installed = installedPool.load(std::memory_order_acquire))
    return *installed;
  // Leaked on purpose: see the header.
  static ThreadPool *pool = new ForkJoinPool(configuredThreadCount());
  return *pool;
}

void installThreadPool(ThreadPool *pool) {
  installedPool.store(pool, std::memory_order_release);
}

} // namespace dynafuse

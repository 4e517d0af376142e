//===- TorchThreadPool.cpp - Kernels on torch's intra-op threads ----------===//
//
// Inside a Python process, compiled kernels share the cores with ATen's
// own parallel ops (the matmuls and convolutions of extern steps). Two
// pools on the same cores fight: after an ATen op, torch's OpenMP workers
// spin for a while, and a kernel split over Dynafuse's own workers then
// waits for a core (a 20 us relu took 50-70 us right after an eager op).
// So, unless Options::numThreads (DYNAFUSE_NUM_THREADS) asks for a pool of
// a given size, kernels
// run on torch's intra-op threads through at::parallel_for: the same
// threads, sized by torch.set_num_threads.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Torch/TorchBridge.h"

#include "dynafuse/Support/ThreadPool.h"

#include <ATen/Parallel.h>
#include <omp.h>

namespace dynafuse {
namespace {

class TorchIntraOpPool final : public ThreadPool {
public:
  int size() const override { return at::get_num_threads(); }

  void run(int64_t chunks, const std::function<void(int64_t)> &body) override {
    if (chunks <= 1 || at::in_parallel_region() || size() == 1) {
      for (int64_t chunk = 0; chunk < chunks; ++chunk)
        body(chunk);
      return;
    }
    // Grain 1: one thread per chunk range, at most get_num_threads().
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t chunk = begin; chunk < end; ++chunk)
        body(chunk);
    });
  }
};

} // namespace

void useTorchThreadPool(int numThreads) {
  if (numThreads >= 1)
    return;
  // Only when the OpenMP runtime this file was built against is torch's
  // (the same libgomp.so.1): then both see torch.set_num_threads. Another
  // runtime (libomp, libiomp5) would be a second pool: keep our own.
  if (omp_get_max_threads() != at::get_num_threads())
    return;
  static TorchIntraOpPool *pool = new TorchIntraOpPool();
  installThreadPool(pool);
}

} // namespace dynafuse

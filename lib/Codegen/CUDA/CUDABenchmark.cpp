//===- CUDABenchmark.cpp - Device bandwidth of compiled kernels -----------===//
//
// CUDADeviceBuffer (device memory for tools and tests) and
// benchmarkCUDAKernels: each kernel of a module on device buffers of random
// data, timed over back-to-back launches on the default stream (one
// synchronize at the end, so launch latency overlaps execution), beside a
// cuMemcpyDtoD moving the same bytes. The GPU check (benchmarks/gpu/check.sh)
// prints these through `dynafuse-run --bench`.
//
//===----------------------------------------------------------------------===//
#include "CUDACodegen.h"
#include "CUDADriver.h"

#include "dynafuse/Loop/ScalarSemantics.h"
#include "dynafuse/Support/Error.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>

namespace dynafuse {
namespace {

/// Median seconds of one call of `body`, over `iterations` back-to-back
/// calls in 5 batches, after one warm-up batch.
double medianSeconds(const std::function<void()> &body, int iterations) {
  std::vector<double> batches;
  int perBatch = std::max(1, iterations / 5);
  for (int batch = 0; batch <= 5; ++batch) {
    cuda::synchronize();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < perBatch; ++i)
      body();
    cuda::synchronize();
    std::chrono::duration<double> elapsed =
        std::chrono::steady_clock::now() - start;
    if (batch > 0)
      batches.push_back(elapsed.count() / perBatch);
  }
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

CUDAKernelBandwidth
benchmarkKernel(const CUDALaunchable &executable,
                const std::map<std::string, int64_t> &bindings, int iterations,
                std::mt19937 &rng) {
  const Kernel &kernel = executable.loopKernel();
  std::vector<int64_t> symbols;
  for (const std::string &symbol : kernel.symbols) {
    auto found = bindings.find(symbol);
    if (found == bindings.end())
      fail("benchmark: size symbol '" + symbol + "' of @" + kernel.name +
           " has no value (pass --sizes)");
    symbols.push_back(found->second);
  }
  // Owned, so that a failing launch does not leak them.
  std::vector<std::unique_ptr<CUDADeviceBuffer>> owned;
  std::vector<uint64_t> buffers;
  for (const LoopBuffer &param : kernel.params) {
    int64_t count = spanElements(param.type, bindings);
    std::vector<char> host(size_t(std::max<int64_t>(count, 1)) *
                           dtypeSize(param.type.dtype));
    fillRandomElements(param.type.dtype, host.data(), count, rng);
    owned.push_back(std::make_unique<CUDADeviceBuffer>(host.size()));
    owned.back()->copyFrom(host.data());
    buffers.push_back(uint64_t(uintptr_t(owned.back()->address())));
  }
  CUDAKernelBandwidth result;
  result.kernel = kernel.name;
  result.bytes = executable.parameterBytes(symbols.data());
  result.seconds = medianSeconds(
      [&] { executable.launch(buffers.data(), symbols.data(), nullptr); },
      iterations);
  size_t half = size_t(std::max<int64_t>(result.bytes / 2, 1));
  CUDADeviceBuffer from(half), to(half);
  result.copySeconds = medianSeconds(
      [&] {
        cuda::copyDeviceToDevice(uint64_t(uintptr_t(to.address())),
                                 uint64_t(uintptr_t(from.address())), half);
      },
      iterations);
  return result;
}

} // namespace

std::vector<CUDAKernelBandwidth>
benchmarkCUDAKernels(const LoopModule &module,
                     const std::map<std::string, int64_t> &bindings,
                     int iterations, const CodegenOptions &codegen) {
  cuda::requireDevice();
  CompileOptions compileOptions;
  compileOptions.codegen = codegen;
  std::vector<std::unique_ptr<KernelExecutable>> executables =
      createCUDABackend()->compile(module, compileOptions);
  std::mt19937 rng(1);
  std::vector<CUDAKernelBandwidth> results;
  for (const auto &executable : executables) {
    auto *launchable = dynamic_cast<const CUDALaunchable *>(executable.get());
    if (!launchable)
      fail("benchmark: not a kernel of the cuda backend");
    results.push_back(benchmarkKernel(*launchable, bindings, iterations, rng));
  }
  return results;
}

} // namespace dynafuse

namespace dynafuse {

CUDADeviceBuffer::CUDADeviceBuffer(size_t bytes)
    : pointer(cuda::allocate(bytes)), bytes(bytes) {}

CUDADeviceBuffer::~CUDADeviceBuffer() { cuda::release(pointer); }

void CUDADeviceBuffer::copyFrom(const void *host) {
  cuda::copyToDevice(pointer, host, bytes);
}

void CUDADeviceBuffer::copyTo(void *host) const {
  cuda::copyToHost(host, pointer, bytes);
}

char *CUDADeviceBuffer::address() const {
  return reinterpret_cast<char *>(uintptr_t(pointer));
}

} // namespace dynafuse

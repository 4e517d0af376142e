//===- CUDABackend.cpp - The "cuda" backend: NVRTC plus the driver API ----===//
//
// compile() emits CUDA C for the whole module and checks it with NVRTC
// (PTX for compute_90, so it works without a GPU). The first run() needs
// the driver and a device: it compiles a cubin for the device's sm_XY and
// loads it. Two ways to run:
// - device-resident (parameters typed on a cuda device, as captured from
//   CUDA tensors): the buffers are device addresses; the kernel is queued
//   on the run's device stream (KernelExecutable::runOnStream, from the
//   ExecutionContext)
//   and run() returns without waiting, except for kernels that index
//   indirectly, whose bad-index flag is read back (a stream sync);
// - staged (host-typed parameters, as in dynafuse-run and the tests): run()
//   copies every parameter's elements to the device, launches, copies them
//   back and reports a bad indirect index like the CPU backends do.
//   Parameters that alias one another (views of one storage) are not
//   supported by this staging: each is copied separately.
//
//===----------------------------------------------------------------------===//
#include "CUDACodegen.h"
#include "CUDADriver.h"

#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/IndexErrors.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

namespace dynafuse {
namespace {

/// The device module of one compiled LoopModule, loaded on first use.
struct DeviceModule {
  std::string source;
  /// The compile's disk cache and NVRTC settings.
  CodegenOptions codegen;
  std::once_flag loaded;
  void *module = nullptr;
  uint64_t errorInfo = 0;

  void load() {
    std::call_once(loaded, [&] {
      std::string arch = cuda::requireDevice();
      module =
          cuda::loadModule(nvrtcCompile(source, arch, /*cubin=*/true, codegen));
      int64_t cleared[3] = {0, 0, 0};
      errorInfo = cuda::allocate(sizeof cleared);
      cuda::copyToDevice(errorInfo, cleared, sizeof cleared);
    });
  }
};

bool onDevice(const Kernel &kernel) {
  for (const LoopBuffer &param : kernel.params)
    if (param.type.device.rfind("cuda", 0) != 0)
      return false;
  return !kernel.params.empty();
}

bool indexesIndirectly(const Kernel &kernel) {
  for (const Instr &instr : kernel.instrs) {
    std::set<std::string> symbols;
    for (const SymExpr &index : instr.index)
      index.collectSymbols(symbols);
    for (const std::string &symbol : symbols)
      if (!symbol.empty() && symbol[0] == '%')
        return true;
  }
  return false;
}

class CUDAKernel : public CUDALaunchable {
public:
  CUDAKernel(std::shared_ptr<DeviceModule> device, const Kernel &kernel,
             CUDAKernelInfo info)
      : device(std::move(device)), kernel(kernel), info(std::move(info)),
        deviceResident(onDevice(kernel)),
        checksIndices(indexesIndirectly(kernel)) {}

  void run(char *const *buffers, const int64_t *symbols) const override {
    runOnStream(buffers, symbols, nullptr);
  }

  void runOnStream(char *const *buffers, const int64_t *symbols,
                   void *stream) const override {
    if (!deviceResident) {
      runStaged(buffers, symbols);
      return;
    }
    std::vector<uint64_t> pointers(kernel.params.size());
    for (size_t i = 0; i < pointers.size(); ++i)
      pointers[i] = uint64_t(reinterpret_cast<uintptr_t>(buffers[i]));
    launch(pointers.data(), symbols, stream);
    if (checksIndices)
      reportIndexError(stream);
  }

  /// Queues the kernel on `stream` over device buffers.
  void launch(const uint64_t *buffers, const int64_t *symbols,
              void *stream) const override {
    device->load();
    std::call_once(found, [&] {
      function = cuda::getFunction(device->module, info.name);
    });
    int64_t work = info.work.evaluate(bindingsOf(symbols));
    if (work <= 0)
      return;
    std::vector<uint64_t> pointers(buffers, buffers + kernel.params.size());
    std::vector<int64_t> values(symbols, symbols + kernel.symbols.size());
    std::vector<void *> args;
    for (uint64_t &pointer : pointers)
      args.push_back(&pointer);
    for (int64_t &value : values)
      args.push_back(&value);
    uint64_t errorInfo = device->errorInfo;
    args.push_back(&errorInfo);
    int64_t blocks = info.shape == CUDAKernelShape::BlockReduce
                         ? work
                         : (work + cudaBlockSize - 1) / cudaBlockSize;
    blocks = std::clamp<int64_t>(blocks, 1, int64_t(1) << 20);
    cuda::launch(function, unsigned(blocks), cudaBlockSize, args.data(),
                 stream);
  }

  /// Bytes the kernel's parameters span (each read or written once).
  int64_t parameterBytes(const int64_t *symbols) const override {
    std::map<std::string, int64_t> bindings = bindingsOf(symbols);
    int64_t total = 0;
    for (const LoopBuffer &param : kernel.params)
      total += spanElements(param.type, bindings) * dtypeSize(param.type.dtype);
    return total;
  }

  const Kernel &loopKernel() const override { return kernel; }

private:
  std::map<std::string, int64_t> bindingsOf(const int64_t *symbols) const {
    std::map<std::string, int64_t> bindings;
    for (size_t j = 0; j < kernel.symbols.size(); ++j)
      bindings[kernel.symbols[j]] = symbols[j];
    return bindings;
  }

  void runStaged(char *const *buffers, const int64_t *symbols) const {
    std::map<std::string, int64_t> bindings = bindingsOf(symbols);
    std::vector<uint64_t> pointers(kernel.params.size());
    std::vector<size_t> bytes(kernel.params.size());
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      const TensorType &type = kernel.params[i].type;
      bytes[i] = size_t(spanElements(type, bindings)) * dtypeSize(type.dtype);
      pointers[i] = cuda::allocate(bytes[i]);
      cuda::copyToDevice(pointers[i], buffers[i], bytes[i]);
    }
    launch(pointers.data(), symbols, nullptr);
    cuda::synchronize();
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      cuda::copyToHost(buffers[i], pointers[i], bytes[i]);
      cuda::release(pointers[i]);
    }
    reportIndexError(nullptr);
  }

  /// Reads the bad-index flag (waiting for `stream`), clears it and
  /// reports it like the CPU backends.
  void reportIndexError(void *stream) const {
    int64_t error[3] = {0, 0, 0};
    cuda::copyToHostAsync(error, device->errorInfo, sizeof error, stream);
    cuda::synchronize(stream);
    if (!error[0])
      return;
    int64_t cleared[3] = {0, 0, 0};
    cuda::copyToDevice(device->errorInfo, cleared, sizeof cleared);
    dynafuse_index_error(error[1], error[2]);
  }

  std::shared_ptr<DeviceModule> device;
  Kernel kernel;
  CUDAKernelInfo info;
  bool deviceResident, checksIndices;
  mutable std::once_flag found;
  mutable void *function = nullptr;
};

class CUDABackend : public Backend {
public:
  std::string name() const override { return "cuda"; }

  std::vector<std::unique_ptr<KernelExecutable>>
  compile(const LoopModule &module, const CompileOptions &options) override {
    auto device = std::make_shared<DeviceModule>();
    std::vector<CUDAKernelInfo> infos;
    device->source = emitCUDA(module, &infos);
    device->codegen = options.codegen;
    // Reports NVRTC errors now (skipped where only prepared cubins exist).
    if (nvrtcAvailable(nullptr, options.codegen))
      compileCUDAToPTX(device->source, "compute_90", options.codegen);
    std::vector<std::unique_ptr<KernelExecutable>> executables;
    for (size_t i = 0; i < module.kernels.size(); ++i)
      executables.push_back(
          std::make_unique<CUDAKernel>(device, module.kernels[i], infos[i]));
    return executables;
  }
};

} // namespace

int64_t spanElements(const TensorType &type,
                     const std::map<std::string, int64_t> &bindings) {
  std::vector<SymExpr> strides = type.effectiveStrides();
  int64_t span = 1;
  for (size_t k = 0; k < type.rank(); ++k) {
    int64_t size = type.sizes[k].evaluate(bindings);
    if (size <= 0)
      return 0;
    span += (size - 1) * strides[k].evaluate(bindings);
  }
  return span;
}

std::unique_ptr<Backend> createCUDABackend() {
  return std::make_unique<CUDABackend>();
}

void registerCUDABackend() {
  registerBackend("cuda", [] { return createCUDABackend(); });
}

} // namespace dynafuse

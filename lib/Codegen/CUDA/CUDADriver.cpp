//===- CUDADriver.cpp - The CUDA driver API, loaded at run time -----------===//
#include "CUDADriver.h"

#include "dynafuse/Support/Error.h"

#include <cuda.h>
#include <dlfcn.h>
#include <mutex>

namespace dynafuse {
namespace cuda {
namespace {

struct Driver {
  std::string error;
  CUcontext context = nullptr;
  std::string arch;
  decltype(&::cuGetErrorString) getErrorString = nullptr;
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGetCount) deviceGetCount = nullptr;
  decltype(&::cuDeviceGet) deviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primaryCtxRetain = nullptr;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent = nullptr;
  decltype(&::cuModuleLoadData) moduleLoadData = nullptr;
  decltype(&::cuModuleGetFunction) moduleGetFunction = nullptr;
  decltype(&::cuMemAlloc) memAlloc = nullptr;
  decltype(&::cuMemFree) memFree = nullptr;
  decltype(&::cuMemcpyHtoD) memcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH) memcpyDtoH = nullptr;
  decltype(&::cuLaunchKernel) launchKernel = nullptr;
  decltype(&::cuCtxSynchronize) ctxSynchronize = nullptr;
  decltype(&::cuMemcpyDtoD) memcpyDtoD = nullptr;
  decltype(&::cuMemcpyDtoHAsync) memcpyDtoHAsync = nullptr;
  decltype(&::cuStreamSynchronize) streamSynchronize = nullptr;
};

using GetProcAddress = CUresult (*)(const char *, void **, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult *);

template <typename F>
bool lookup(GetProcAddress getProc, const char *name, F &function) {
  void *address = nullptr;
  CUdriverProcAddressQueryResult status;
  if (getProc(name, &address, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
          CUDA_SUCCESS ||
      !address)
    return false;
  function = reinterpret_cast<F>(address);
  return true;
}

Driver loadDriver() {
  Driver d;
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    d.error = "no CUDA driver (cannot load libcuda.so.1)";
    return d;
  }
  auto getProc =
      reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
  if (!getProc) {
    d.error = "the CUDA driver is too old (no cuGetProcAddress_v2)";
    return d;
  }
  bool ok = lookup(getProc, "cuGetErrorString", d.getErrorString) &&
            lookup(getProc, "cuInit", d.init) &&
            lookup(getProc, "cuDeviceGetCount", d.deviceGetCount) &&
            lookup(getProc, "cuDeviceGet", d.deviceGet) &&
            lookup(getProc, "cuDeviceGetAttribute", d.deviceGetAttribute) &&
            lookup(getProc, "cuDevicePrimaryCtxRetain", d.primaryCtxRetain) &&
            lookup(getProc, "cuCtxSetCurrent", d.ctxSetCurrent) &&
            lookup(getProc, "cuModuleLoadData", d.moduleLoadData) &&
            lookup(getProc, "cuModuleGetFunction", d.moduleGetFunction) &&
            lookup(getProc, "cuMemAlloc", d.memAlloc) &&
            lookup(getProc, "cuMemFree", d.memFree) &&
            lookup(getProc, "cuMemcpyHtoD", d.memcpyHtoD) &&
            lookup(getProc, "cuMemcpyDtoH", d.memcpyDtoH) &&
            lookup(getProc, "cuLaunchKernel", d.launchKernel) &&
            lookup(getProc, "cuCtxSynchronize", d.ctxSynchronize) &&
            lookup(getProc, "cuMemcpyDtoD", d.memcpyDtoD) &&
            lookup(getProc, "cuMemcpyDtoHAsync", d.memcpyDtoHAsync) &&
            lookup(getProc, "cuStreamSynchronize", d.streamSynchronize);
  if (!ok) {
    d.error = "the CUDA driver lacks an entry point Dynafuse uses";
    return d;
  }
  if (d.init(0) != CUDA_SUCCESS) {
    d.error = "cuInit failed: no usable CUDA device";
    return d;
  }
  int count = 0;
  CUdevice device = 0;
  if (d.deviceGetCount(&count) != CUDA_SUCCESS || count == 0 ||
      d.deviceGet(&device, 0) != CUDA_SUCCESS) {
    d.error = "no CUDA device";
    return d;
  }
  int major = 0, minor = 0;
  d.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                       device);
  d.deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                       device);
  d.arch = "sm_" + std::to_string(major) + std::to_string(minor);
  if (d.primaryCtxRetain(&d.context, device) != CUDA_SUCCESS) {
    d.error = "cannot create a context on CUDA device 0";
    d.context = nullptr;
  }
  return d;
}

Driver &driver() {
  static Driver d = loadDriver();
  if (!d.context)
    fail("CUDA backend: device unavailable: " + d.error);
  d.ctxSetCurrent(d.context);
  return d;
}

void check(CUresult rc, const char *what) {
  if (rc == CUDA_SUCCESS)
    return;
  const char *text = "unknown error";
  if (Driver &d = driver(); d.getErrorString)
    d.getErrorString(rc, &text);
  fail(std::string("CUDA backend: ") + what + ": " + text);
}

} // namespace

std::string requireDevice() { return driver().arch; }

void *loadModule(const std::string &image) {
  CUmodule module = nullptr;
  check(driver().moduleLoadData(&module, image.data()), "cuModuleLoadData");
  return module;
}

void *getFunction(void *module, const std::string &name) {
  CUfunction function = nullptr;
  check(driver().moduleGetFunction(&function, CUmodule(module), name.c_str()),
        "cuModuleGetFunction");
  return function;
}

uint64_t allocate(size_t bytes) {
  CUdeviceptr pointer = 0;
  check(driver().memAlloc(&pointer, bytes ? bytes : 1), "cuMemAlloc");
  return pointer;
}

void release(uint64_t pointer) { driver().memFree(CUdeviceptr(pointer)); }

void copyToDevice(uint64_t device, const void *host, size_t bytes) {
  if (bytes)
    check(driver().memcpyHtoD(CUdeviceptr(device), host, bytes),
          "cuMemcpyHtoD");
}

void copyToHost(void *host, uint64_t device, size_t bytes) {
  if (bytes)
    check(driver().memcpyDtoH(host, CUdeviceptr(device), bytes),
          "cuMemcpyDtoH");
}

void copyDeviceToDevice(uint64_t destination, uint64_t source, size_t bytes) {
  if (bytes)
    check(driver().memcpyDtoD(CUdeviceptr(destination), CUdeviceptr(source),
                              bytes),
          "cuMemcpyDtoD");
}

void copyToHostAsync(void *host, uint64_t device, size_t bytes, void *stream) {
  if (bytes)
    check(driver().memcpyDtoHAsync(host, CUdeviceptr(device), bytes,
                                   CUstream(stream)),
          "cuMemcpyDtoHAsync");
}

void launch(void *function, unsigned blocks, unsigned threads, void **args,
            void *stream) {
  check(driver().launchKernel(CUfunction(function), blocks, 1, 1, threads, 1, 1,
                              0, CUstream(stream), args, nullptr),
        "cuLaunchKernel");
}

void synchronize() { check(driver().ctxSynchronize(), "cuCtxSynchronize"); }

void synchronize(void *stream) {
  check(driver().streamSynchronize(CUstream(stream)), "cuStreamSynchronize");
}

} // namespace cuda
} // namespace dynafuse

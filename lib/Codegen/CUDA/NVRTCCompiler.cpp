//===- NVRTCCompiler.cpp - CUDA C to PTX or cubin with NVRTC --------------===//
//
// NVRTC is loaded at run time (dlopen), once per process, from the first
// caller's CodegenOptions: nvrtcPath ($DYNAFUSE_NVRTC) when set, else the
// library CMake found (DYNAFUSE_NVRTC_PATH), then the soname libnvrtc.so.13,
// so the build links no CUDA library. Only the few entry points used here
// are declared. Results are cached on disk (Runtime/DiskCache.h) under a
// key of source, options and NVRTC version, and under a "prepared" key
// (output kind, arch, source) that a machine without NVRTC can use.
//
//===----------------------------------------------------------------------===//
#include "CUDACodegen.h"

#include "dynafuse/Runtime/DiskCache.h"
#include "dynafuse/Support/Error.h"

#include <dlfcn.h>
#include <filesystem>
#include <mutex>
#include <optional>
#include <vector>

#ifndef DYNAFUSE_NVRTC_PATH
#define DYNAFUSE_NVRTC_PATH ""
#endif
#ifndef DYNAFUSE_CUDA_INCLUDE_DIRS
#define DYNAFUSE_CUDA_INCLUDE_DIRS ""
#endif

namespace dynafuse {
namespace {

using nvrtcProgram = struct _nvrtcProgram *;
using nvrtcResult = int;

/// The NVRTC entry points this file uses.
struct NVRTC {
  void *handle = nullptr;
  std::string error;
  const char *(*getErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*version)(int *, int *) = nullptr;
  nvrtcResult (*createProgram)(nvrtcProgram *, const char *, const char *, int,
                               const char *const *,
                               const char *const *) = nullptr;
  nvrtcResult (*destroyProgram)(nvrtcProgram *) = nullptr;
  nvrtcResult (*compileProgram)(nvrtcProgram, int,
                                const char *const *) = nullptr;
  nvrtcResult (*getPTXSize)(nvrtcProgram, size_t *) = nullptr;
  nvrtcResult (*getPTX)(nvrtcProgram, char *) = nullptr;
  nvrtcResult (*getCUBINSize)(nvrtcProgram, size_t *) = nullptr;
  nvrtcResult (*getCUBIN)(nvrtcProgram, char *) = nullptr;
  nvrtcResult (*getProgramLogSize)(nvrtcProgram, size_t *) = nullptr;
  nvrtcResult (*getProgramLog)(nvrtcProgram, char *) = nullptr;
  int major = 0, minor = 0;
};

template <typename F> bool bind(void *handle, const char *name, F &function) {
  function = reinterpret_cast<F>(dlsym(handle, name));
  return function != nullptr;
}

/// NVRTC dlopens libnvrtc-builtins.so.MAJOR.MINOR by name, which fails
/// when NVRTC is not on the library path (e.g. inside a Python wheel):
/// loading it first from NVRTC's own directory makes that name resolve.
void preloadBuiltins(void *nvrtcSymbol) {
  Dl_info info;
  if (!dladdr(nvrtcSymbol, &info) || !info.dli_fname)
    return;
  std::filesystem::path directory =
      std::filesystem::path(info.dli_fname).parent_path();
  std::error_code error;
  for (const auto &entry :
       std::filesystem::directory_iterator(directory, error)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("libnvrtc-builtins.so", 0) == 0)
      dlopen(entry.path().c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
}

NVRTC loadNVRTC(const std::optional<std::string> &nvrtcPath) {
  NVRTC api;
  std::vector<std::string> candidates;
  // An explicit path ($DYNAFUSE_NVRTC) is the only candidate (a path that
  // does not exist turns NVRTC off).
  if (nvrtcPath) {
    candidates.push_back(*nvrtcPath);
  } else {
    if (std::string(DYNAFUSE_NVRTC_PATH) != "")
      candidates.push_back(DYNAFUSE_NVRTC_PATH);
    candidates.push_back("libnvrtc.so.13");
  }
  std::string tried;
  for (const std::string &path : candidates) {
    api.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (api.handle)
      break;
    tried += (tried.empty() ? "" : ", ") + path;
  }
  if (!api.handle) {
    api.error = "cannot load NVRTC (tried " + tried +
                "; set DYNAFUSE_NVRTC to the path of libnvrtc.so.13)";
    return api;
  }
  bool ok = bind(api.handle, "nvrtcGetErrorString", api.getErrorString) &&
            bind(api.handle, "nvrtcVersion", api.version) &&
            bind(api.handle, "nvrtcCreateProgram", api.createProgram) &&
            bind(api.handle, "nvrtcDestroyProgram", api.destroyProgram) &&
            bind(api.handle, "nvrtcCompileProgram", api.compileProgram) &&
            bind(api.handle, "nvrtcGetPTXSize", api.getPTXSize) &&
            bind(api.handle, "nvrtcGetPTX", api.getPTX) &&
            bind(api.handle, "nvrtcGetCUBINSize", api.getCUBINSize) &&
            bind(api.handle, "nvrtcGetCUBIN", api.getCUBIN) &&
            bind(api.handle, "nvrtcGetProgramLogSize", api.getProgramLogSize) &&
            bind(api.handle, "nvrtcGetProgramLog", api.getProgramLog);
  if (!ok) {
    api.error = "NVRTC lacks an entry point Dynafuse uses";
    api.handle = nullptr;
    return api;
  }
  api.version(&api.major, &api.minor);
  preloadBuiltins(reinterpret_cast<void *>(api.version));
  return api;
}

/// Loaded once, by the first caller (a process-lifetime library).
const NVRTC &nvrtc(const CodegenOptions &codegen) {
  static NVRTC api = loadNVRTC(codegen.nvrtcPath);
  return api;
}

const NVRTC &requireNVRTC(const CodegenOptions &codegen) {
  const NVRTC &api = nvrtc(codegen);
  if (!api.handle)
    fail("CUDA backend: " + api.error);
  return api;
}

std::vector<std::string> compileOptions(const std::string &arch,
                                        const CodegenOptions &codegen) {
  std::vector<std::string> options = {"--gpu-architecture=" + arch,
                                      "--std=c++17", "-default-device"};
  std::string dirs = DYNAFUSE_CUDA_INCLUDE_DIRS;
  if (!codegen.cudaIncludeDirs.empty())
    dirs = codegen.cudaIncludeDirs + ";" + dirs;
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(';', start);
    if (end == std::string::npos)
      end = dirs.size();
    if (end > start)
      options.push_back("-I" + dirs.substr(start, end - start));
    start = end + 1;
  }
  return options;
}

std::string runNVRTC(const NVRTC &api, const std::string &source,
                     const std::vector<std::string> &options, bool cubin) {
  nvrtcProgram program = nullptr;
  if (int rc = api.createProgram(&program, source.c_str(), "dynafuse.cu", 0,
                                 nullptr, nullptr))
    fail(std::string("CUDA backend: nvrtcCreateProgram: ") +
         api.getErrorString(rc));
  std::vector<const char *> argv;
  for (const std::string &option : options)
    argv.push_back(option.c_str());
  int rc = api.compileProgram(program, int(argv.size()), argv.data());
  if (rc) {
    size_t size = 0;
    api.getProgramLogSize(program, &size);
    std::string log(size, '\0');
    api.getProgramLog(program, log.data());
    api.destroyProgram(&program);
    fail(std::string("CUDA backend: NVRTC failed (") + api.getErrorString(rc) +
         "):\n" + log);
  }
  size_t size = 0;
  std::string result;
  if (cubin) {
    api.getCUBINSize(program, &size);
    result.resize(size);
    api.getCUBIN(program, result.data());
  } else {
    api.getPTXSize(program, &size);
    result.resize(size);
    api.getPTX(program, result.data());
    while (!result.empty() && result.back() == '\0')
      result.pop_back();
  }
  api.destroyProgram(&program);
  return result;
}

} // namespace

bool nvrtcAvailable(std::string *why, const CodegenOptions &codegen) {
  const NVRTC &api = nvrtc(codegen);
  if (!api.handle && why)
    *why = api.error;
  return api.handle != nullptr;
}

std::string nvrtcVersionString(const CodegenOptions &codegen) {
  const NVRTC &api = requireNVRTC(codegen);
  return std::to_string(api.major) + "." + std::to_string(api.minor);
}

std::string nvrtcCompile(const std::string &source, const std::string &arch,
                         bool cubin, const CodegenOptions &codegen) {
  // Every result is stored twice: under the exact key (NVRTC version and
  // all options) and under a "prepared" key of only the output kind, arch
  // and source. Without NVRTC (a GPU machine without the toolkit), a
  // prepared entry made elsewhere is used (benchmarks/gpu/check.sh
  // --prepare); with NVRTC only exact entries are.
  std::string prepared = std::string("dynafuse-cuda-prepared-1\n") +
                         (cubin ? "cubin " : "ptx ") + arch + "\n" + source;
  DiskCache cache(codegen.diskCacheDir);
  if (!nvrtcAvailable(nullptr, codegen)) {
    if (std::optional<std::string> hit = cache.load(prepared))
      return *hit;
    requireNVRTC(codegen);
  }
  const NVRTC &api = requireNVRTC(codegen);
  std::vector<std::string> options = compileOptions(arch, codegen);
  std::string key = "dynafuse-cuda-1\nnvrtc " + nvrtcVersionString(codegen) +
                    (cubin ? "\ncubin" : "\nptx");
  for (const std::string &option : options)
    key += "\n" + option;
  key += "\n" + source;
  if (std::optional<std::string> hit = cache.load(key))
    return *hit;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::string result = runNVRTC(api, source, options, cubin);
  cache.store(key, result);
  cache.store(prepared, result);
  return result;
}

std::string compileCUDAToCubin(const std::string &source,
                               const std::string &arch,
                               const CodegenOptions &codegen) {
  return nvrtcCompile(source, arch, /*cubin=*/true, codegen);
}

std::string compileCUDAToPTX(const std::string &source, const std::string &arch,
                             const CodegenOptions &codegen) {
  return nvrtcCompile(source, arch, /*cubin=*/false, codegen);
}

} // namespace dynafuse

//===- Backend.cpp - The registry of code generators ----------------------===//
#include "dynafuse/Runtime/Backend.h"

#include "dynafuse/Support/Error.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

namespace dynafuse {
namespace {
std::mutex registryMutex;
std::map<std::string, BackendFactory> &registry() {
  static std::map<std::string, BackendFactory> factories;
  return factories;
}
} // namespace

void registerBackend(const std::string &name, BackendFactory factory) {
  std::lock_guard<std::mutex> lock(registryMutex);
  registry()[name] = std::move(factory);
}

std::vector<std::string> backendNames() {
  std::lock_guard<std::mutex> lock(registryMutex);
  std::vector<std::string> names;
  for (auto &entry : registry())
    names.push_back(entry.first);
  return names;
}

std::unique_ptr<Backend> createBackend(const std::string &name) {
  BackendFactory factory;
  {
    std::lock_guard<std::mutex> lock(registryMutex);
    auto found = registry().find(name);
    if (found != registry().end())
      factory = found->second;
  }
  if (factory)
    return factory();
  std::string known;
  for (const std::string &each : backendNames())
    known += (known.empty() ? "" : ", ") + each;
  fail("unknown backend '" + name + "' (available: " + known + ")");
}

const std::vector<std::string> &backendChoices() {
  static const std::vector<std::string> choices = {"auto",   "cpu",  "llvm",
                                                   "interp", "cuda", "mlir"};
  return choices;
}

BackendResolution resolveBackend(const std::string &requested,
                                 const std::function<bool()> &callUsesCuda) {
  const std::vector<std::string> &choices = backendChoices();
  if (std::find(choices.begin(), choices.end(), requested) == choices.end())
    fail("unknown backend '" + requested + "'");
  BackendResolution resolved;
  resolved.choice = requested;
  if (requested == "auto")
    resolved.choice = callUsesCuda && callUsesCuda() ? "cuda" : "cpu";
  resolved.registered = resolved.choice;
  if (resolved.choice == "cpu") {
    std::vector<std::string> known = backendNames();
    bool haveLLVM =
        std::find(known.begin(), known.end(), "llvm") != known.end();
    resolved.registered = haveLLVM ? "llvm" : "interp";
  }
  return resolved;
}

CompileOptions compileOptionsFrom(const Options &options) {
  CompileOptions compileOptions;
  compileOptions.codegen = options.codegen;
  compileOptions.parallelThreshold = options.parallelThreshold;
  return compileOptions;
}

void writeDumpFile(const std::string &dir, const std::string &fileName,
                   const std::string &text, const std::string &backend) {
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  std::string path = (std::filesystem::path(dir) / fileName).string();
  std::ofstream file(path, std::ios::binary);
  file << text;
  if (!file)
    fail(backend + " backend: cannot write " + path);
}

} // namespace dynafuse

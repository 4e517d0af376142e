//===- Backend.cpp - The registry of code generators ----------------------===//
#include "dynafuse/Runtime/Backend.h"

#include "dynafuse/Support/Error.h"

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

static thread_local void *threadDeviceStream = nullptr;

void *deviceStream() { return threadDeviceStream; }

DeviceStreamScope::DeviceStreamScope(void *stream)
    : previous(threadDeviceStream) {
  threadDeviceStream = stream;
}

DeviceStreamScope::~DeviceStreamScope() { threadDeviceStream = previous; }

} // namespace dynafuse

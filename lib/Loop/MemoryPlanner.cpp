//===- MemoryPlanner.cpp - Storage reuse for intermediate buffers ---------===//
//
// Walks the program in order. An allocation that is not a module output
// takes the storage of an earlier intermediate whose last use has passed and
// whose byte size is the same symbolic expression; otherwise it gets fresh
// storage. Outputs always get fresh storage (they outlive the call).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Loop/LoopPasses.h"

#include <algorithm>
#include <map>
#include <set>

namespace dynafuse {
namespace {

SymExpr byteSize(const TensorType &type) {
  return type.numel() * int64_t(dtypeSize(type.dtype));
}

/// Last step index that reads each buffer (views count for their source).
std::map<std::string, size_t> lastUses(const LoopModule &module) {
  std::map<std::string, std::string> root;
  std::map<std::string, size_t> last;
  for (size_t s = 0; s < module.steps.size(); ++s) {
    const ProgramStep &step = module.steps[s];
    if (step.kind == ProgramStep::Kind::View)
      root[step.result] =
          root.count(step.source) ? root[step.source] : step.source;
    for (const std::string &arg : step.args)
      last[root.count(arg) ? root[arg] : arg] = s;
    if (step.kind == ProgramStep::Kind::Alloc)
      last[step.result] = std::max(last[step.result], s);
  }
  return last;
}

} // namespace

void planMemory(LoopModule &module) {
  std::set<std::string> outputs(module.outputs.begin(), module.outputs.end());
  std::map<std::string, size_t> last = lastUses(module);
  // Free storages: (owning allocation, byte size).
  std::vector<std::pair<std::string, SymExpr>> freeList;
  std::map<std::string, std::string> storageOf;
  std::vector<std::pair<size_t, std::string>> pendingRelease;
  for (size_t s = 0; s < module.steps.size(); ++s) {
    for (auto it = pendingRelease.begin(); it != pendingRelease.end();) {
      if (it->first < s) {
        const ProgramStep *owner = module.definingStep(it->second);
        freeList.push_back({storageOf[it->second], byteSize(owner->type)});
        it = pendingRelease.erase(it);
      } else {
        ++it;
      }
    }
    ProgramStep &step = module.steps[s];
    if (step.kind != ProgramStep::Kind::Alloc || outputs.count(step.result))
      continue;
    SymExpr bytes = byteSize(step.type);
    auto reusable =
        std::find_if(freeList.begin(), freeList.end(),
                     [&](const auto &entry) { return entry.second == bytes; });
    if (reusable != freeList.end()) {
      step.reuse = reusable->first;
      storageOf[step.result] = reusable->first;
      freeList.erase(reusable);
    } else {
      storageOf[step.result] = step.result;
    }
    pendingRelease.push_back({last[step.result], step.result});
  }
}

} // namespace dynafuse

//===- LoopPasses.cpp - The loop pass table -------------------------------===//
#include "dynafuse/Loop/LoopPasses.h"

#include "dynafuse/Support/Error.h"

#include <functional>
#include <map>

namespace dynafuse {
namespace {

using LoopPassFn = std::function<void(LoopModule &)>;

/// A kernel rewrite applied to every kernel of a module.
LoopPassFn eachKernel(void (*rewrite)(Kernel &)) {
  return [rewrite](LoopModule &module) {
    for (Kernel &kernel : module.kernels)
      rewrite(kernel);
  };
}

const std::map<std::string, LoopPassFn> &loopPassTable() {
  static const std::map<std::string, LoopPassFn> table = {
      {"drop-empty-loops", eachKernel(dropEmptyLoops)},
      {"drop-unit-loops", eachKernel(dropUnitLoops)},
      {"column-reductions", eachKernel(interchangeColumnReductions)},
      {"reuse-reduction-elements", eachKernel(reuseReductionElements)},
      {"plan-memory", planMemory},
      {"merge-duplicate-kernels", mergeDuplicateKernels},
  };
  return table;
}

} // namespace

void runLoopPass(const std::string &name, LoopModule &module) {
  auto found = loopPassTable().find(name);
  if (found == loopPassTable().end()) {
    std::string known;
    for (const std::string &pass : loopPassNames())
      known += (known.empty() ? "" : ", ") + pass;
    fail("unknown loop pass '" + name + "' (loop passes: " + known + ")");
  }
  found->second(module);
}

bool isLoopPass(const std::string &name) {
  return loopPassTable().count(name) != 0;
}

std::vector<std::string> loopPassNames() {
  std::vector<std::string> names;
  for (auto &entry : loopPassTable())
    names.push_back(entry.first);
  return names;
}

} // namespace dynafuse

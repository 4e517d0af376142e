//===- DuplicateKernels.cpp - One kernel for identical kernels ------------===//
//
// The layers of a model lower to kernels that differ only in their names
// and their parameters' names (a 12-layer transformer's twelve layer-norm
// kernels): the pass keeps the first of each identical set and points
// every call at it, so the code generator compiles it once. Two kernels
// are identical when their text is, with the name and the parameter names
// replaced by positional ones (loads and stores name parameters by
// position, so the body does not mention them).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Loop/LoopPasses.h"
#include "dynafuse/Loop/LoopText.h"

#include <map>

namespace dynafuse {
namespace {

std::string canonicalText(const Kernel &kernel) {
  Kernel renamed = kernel;
  renamed.name = "kernel";
  for (size_t i = 0; i < renamed.params.size(); ++i)
    renamed.params[i].name = "p" + std::to_string(i);
  return printKernel(renamed);
}

} // namespace

void mergeDuplicateKernels(LoopModule &module) {
  std::map<std::string, std::string> firstOfText;
  std::map<std::string, std::string> replacement;
  std::vector<Kernel> kept;
  for (Kernel &kernel : module.kernels) {
    auto first = firstOfText.emplace(canonicalText(kernel), kernel.name);
    if (first.second)
      kept.push_back(std::move(kernel));
    else
      replacement[kernel.name] = first.first->second;
  }
  module.kernels = std::move(kept);
  if (replacement.empty())
    return;
  for (ProgramStep &step : module.steps) {
    if (step.kind != ProgramStep::Kind::Call)
      continue;
    auto found = replacement.find(step.kernel);
    if (found != replacement.end())
      step.kernel = found->second;
  }
}

} // namespace dynafuse

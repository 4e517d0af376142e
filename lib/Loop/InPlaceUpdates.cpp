//===- InPlaceUpdates.cpp - Torch calls that may write their input -------===//
//
// markInPlaceUpdates (InPlaceUpdates.h). A step may write the caller's
// tensor only where that cannot change what another step reads: the input
// is read by this step alone, once, and is not itself an output (a step
// that viewed it, or a later read of its old value, would see the update).
// The result takes the input's buffer, so its type must be the input's
// layout, or kernels reading it would index another layout.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Loop/InPlaceUpdates.h"

#include <algorithm>

namespace dynafuse {
namespace {

/// How many times the program mentions `name` as a step's argument or a
/// view's source, or as an output.
int readsOf(const LoopModule &module, const std::string &name) {
  int reads =
      int(std::count(module.outputs.begin(), module.outputs.end(), name));
  for (const ProgramStep &step : module.steps) {
    reads += int(std::count(step.args.begin(), step.args.end(), name));
    reads += step.kind == ProgramStep::Kind::View && step.source == name;
  }
  return reads;
}

bool sameLayout(const TensorType &a, const TensorType &b) {
  return a.dtype == b.dtype && a.device == b.device && a.sizes == b.sizes &&
         a.effectiveStrides() == b.effectiveStrides();
}

ProgramStep *definingExtern(LoopModule &module, const std::string &name) {
  for (ProgramStep &step : module.steps)
    if (step.kind == ProgramStep::Kind::Extern &&
        std::find(step.results.begin(), step.results.end(), name) !=
            step.results.end())
      return &step;
  return nullptr;
}

} // namespace

int markInPlaceUpdates(LoopModule &module,
                       const std::vector<std::pair<int, int>> &writeBacks) {
  int marked = 0;
  for (const auto &[inputIndex, outputIndex] : writeBacks) {
    if (inputIndex < 0 || size_t(inputIndex) >= module.inputs.size() ||
        outputIndex < 0 || size_t(outputIndex) >= module.outputs.size())
      continue;
    const LoopBuffer &input = module.inputs[size_t(inputIndex)];
    const std::string &output = module.outputs[size_t(outputIndex)];
    ProgramStep *step = definingExtern(module, output);
    if (!step || step->op != Op::CallTorch || step->results.size() != 1 ||
        !step->attributes.count(kInPlaceFormAttribute) || step->args.empty() ||
        step->args[0] != input.name)
      continue;
    if (!sameLayout(input.type, step->types.at(0)))
      continue;
    // The write-back's output once (another output of the same buffer
    // would be handed to the caller as a second tensor of its memory).
    if (std::count(module.outputs.begin(), module.outputs.end(), output) != 1)
      continue;
    if (readsOf(module, input.name) != 1)
      continue;
    step->attributes[kInPlaceAttribute] = true;
    ++marked;
  }
  return marked;
}

} // namespace dynafuse

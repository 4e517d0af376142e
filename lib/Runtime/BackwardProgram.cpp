//===- BackwardProgram.cpp - The backward module for the tangents that came -===//
#include "dynafuse/Runtime/BackwardProgram.h"

#include "dynafuse/Graph/SymbolicZeros.h"
#include "dynafuse/Support/Logging.h"

namespace dynafuse {

const BackwardModule &
BackwardProgram::moduleFor(const std::vector<bool> &arrived) const {
  bool all = true;
  for (size_t t = 0; t < arrived.size(); ++t)
    all = all && (arrived[t] || neverArrives.at(t));
  if (all)
    return whole;
  std::lock_guard<std::mutex> lock(variantsMutex);
  std::unique_ptr<BackwardModule> &variant = variants[arrived];
  if (variant)
    return *variant;
  if (!graph || !compile)
    throw Error("the backward graph '" + name + "' has no variant compiler",
                Location{});
  std::vector<bool> isZero;
  size_t tangent = 0;
  for (const TrainingGraphs::BackwardInput &input : inputs) {
    bool missing = input.kind == TrainingGraphs::BackwardInput::Kind::Tangent &&
                   !arrived.at(tangent++);
    isZero.push_back(missing);
  }
  std::unique_ptr<Graph> reduced = withZeroInputs(*graph, isZero);
  std::string which;
  for (bool came : arrived)
    which += came ? '1' : '0';
  reduced->name = graph->name + "_tangents_" + which;
  logLine("compile", "backward " + graph->name + " for the tangents that " +
                         "arrived (" + which + "): the others are zeros");
  std::unique_ptr<BackwardModule> compiled = compile(*reduced);
  if (compiled->module->module().inputs.size() != inputs.size() ||
      compiled->outputInput.size() != whole.outputInput.size())
    throw Error("the backward graph '" + reduced->name +
                    "' compiled to another signature than its whole graph",
                Location{});
  variant = std::move(compiled);
  return *variant;
}

} // namespace dynafuse

//===- LowerGraph.cpp - Graph IR to loop IR, as a list of passes ----------===//
//
// The pipeline the pass registry lists (PassRegistry.h), each pass reported
// to the observer under its name. Realization converges: layout, schedule
// and emit run on the realized set until emission places every value; a
// value it cannot place is realized and they run again.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Lowering/LowerGraph.h"

#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Lowering/LoweringPasses.h"
#include "dynafuse/Lowering/PassRegistry.h"

#include <algorithm>

namespace dynafuse {
namespace {

/// Runs layout, schedule, share and emit until share realizes nothing more
/// and emission places every value, realizing each value emission reports.
/// Share decides afresh in every emission round, from what realize decided
/// and what emission has asked for so far: a value shared only because a
/// reduction it feeds was inlined into two kernels (a batch norm's g * xhat,
/// before emission realized its per-channel sum) stays inline once that
/// reduction is a buffer. Emission's requests only grow, one per round, so
/// a graph of N values converges within N rounds.
void placeValues(LoweringState &state) {
  size_t values = 0;
  for (const auto &node : state.graph.nodes)
    values += node->results.size();
  const std::set<const Value *> upFront = state.realized;
  std::set<const Value *> asked;
  for (size_t round = 0;; ++round) {
    state.realized = upFront;
    state.realized.insert(asked.begin(), asked.end());
    state.shared.clear();
    for (size_t attempt = 0;; ++attempt) {
      state.resetPlacement();
      chooseLayouts(state);
      scheduleSteps(state);
      if (!realizeSharedValues(state))
        break;
      if (attempt > values)
        fail("lowering did not converge on graph '@" + state.graph.name +
             "'");
    }
    const Value *unplaced = emitProgram(state);
    if (!unplaced)
      return;
    if (!asked.insert(unplaced).second || round > values)
      fail("lowering could not place '%" + unplaced->name + "'");
  }
}

} // namespace

LoopModule lowerGraph(const Graph &input, const LoweringObserver &observer) {
  std::unique_ptr<Graph> graph = input.clone();
  for (const PassInfo &pass : passRegistry())
    if (pass.input == PassInput::Graph && pass.inPipeline) {
      pass.runOnGraph(*graph);
      if (observer)
        observer(pass.name, printGraph(*graph));
    }
  verifyGraph(*graph);

  LoweringState state(*graph);
  realizeValues(state);
  placeValues(state);
  // The converged state: what realize decided plus what emission asked for.
  if (observer)
    for (const PassInfo &pass : passRegistry())
      if (pass.input == PassInput::Lowering)
        observer(pass.name, pass.printState(state));

  LoopModule module = std::move(state.module);
  for (const PassInfo &pass : passRegistry())
    if (pass.input == PassInput::Loop && pass.inPipeline) {
      pass.runOnLoop(module);
      if (observer)
        observer(pass.name, printLoopModule(module));
    }
  verifyLoopModule(module);
  return module;
}

} // namespace dynafuse

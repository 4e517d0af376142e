//===- PassRegistry.h - Every pass, once ------------------------*- C++ -*-===//
//
// The one list of passes, in pipeline order: name, summary and the input
// each works on, as MLIR's Passes.td gives them. lowerGraph runs the ones
// marked inPipeline in this order, dynafuse-opt --passes finds any of them
// by name (--list-passes prints the list), and docs/passes.md is that
// print-out (test/lit/passes-doc.graph checks it).
//
//   graph passes      rewrite .graph IR (Graph/Passes.h)
//   lowering passes   decide lowering's in-memory state; realize, then
//                     layout, schedule, share and emit until emission places
//                     every value (LoweringPasses.h). Their state prints but
//                     does not parse: --passes=...,NAME runs lowering and
//                     prints the state after NAME
//   loop passes       rewrite .loop IR (Loop/LoopPasses.h)
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_PASSREGISTRY_H
#define DYNAFUSE_LOWERING_PASSREGISTRY_H

#include "dynafuse/Graph/Graph.h"
#include "dynafuse/Loop/Kernel.h"
#include "dynafuse/Lowering/LoweringState.h"

#include <functional>
#include <string>
#include <vector>

namespace dynafuse {

enum class PassInput { Graph, Lowering, Loop };

struct PassInfo {
  std::string name;
  std::string summary;
  PassInput input = PassInput::Graph;
  /// lowerGraph runs it (graph and loop passes; every lowering pass).
  bool inPipeline = true;
  /// A graph pass: rewrites the graph (returns whether it changed it).
  std::function<bool(Graph &)> runOnGraph;
  /// A lowering pass: prints the state it decided.
  std::function<std::string(const LoweringState &)> printState;
  /// A loop pass: rewrites the module.
  std::function<void(LoopModule &)> runOnLoop;
};

/// Every pass, in pipeline order.
const std::vector<PassInfo> &passRegistry();
/// The pass called `name`, or null.
const PassInfo *findPass(const std::string &name);
/// "graph", "lowering", "loop".
const char *passInputName(PassInput input);
/// The registry as a Markdown table (docs/passes.md; dynafuse-opt
/// --list-passes).
std::string passTableMarkdown();

} // namespace dynafuse

#endif

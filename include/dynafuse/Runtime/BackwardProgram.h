//===- BackwardProgram.h - The backward half of a training entry -*- C++ -*-===//
//
// A training entry (its graph's inputs require grad, captured in grad mode)
// runs its forward module like any entry and then hangs a DynafuseBackward
// autograd node (TorchAutograd.cpp) on the outputs; the node runs this
// program when autograd reaches it. Shared by the entry and every node made
// from it, so a node outlives a cache reset.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_BACKWARDPROGRAM_H
#define DYNAFUSE_RUNTIME_BACKWARDPROGRAM_H

#include "dynafuse/Graph/Autodiff.h"
#include "dynafuse/Runtime/AllocationPlan.h"
#include "dynafuse/Runtime/Executor.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dynafuse {

/// A compiled module's output that is a view step of one of its inputs:
/// the input (or -1 when the output is not such a view) and the view,
/// symbolic with the module's sizes (evaluated with the run's symbols).
/// Such outputs are returned sharing the input's memory, as eager does.
struct OutputView {
  int input = -1;
  std::vector<SymExpr> sizes, strides;
  SymExpr offset;
};

/// A backward graph compiled: its module and how its outputs come back.
struct BackwardModule {
  std::unique_ptr<CompiledModule> module;
  /// Where its runs' large blocks go (null with Options::allocationPlan
  /// off).
  std::unique_ptr<AllocationPlanner> allocationPlanner;
  /// Per backward module output: the backward input it is (index), or -1.
  std::vector<int> outputInput;
  /// Per backward module output: a view of a backward input, or not.
  std::vector<OutputView> outputViews;
};

struct BackwardProgram {
  /// The backward graph's name (in errors and the node's name).
  std::string name;
  /// The backward graph compiled for every tangent arriving but those that
  /// never do (neverArrives: outputs that are inputs, or views of inputs
  /// or of other outputs, whose gradients autograd routes around the node).
  BackwardModule whole;
  std::vector<bool> neverArrives;
  /// The backward graph, and how to compile a variant of it: a call whose
  /// loss did not use some forward outputs gets no gradient for them, and
  /// runs the graph with those tangents as symbolic zeros
  /// (SymbolicZeros.h), compiled on first use and kept per set of
  /// tangents that arrived.
  std::shared_ptr<const Graph> graph;
  std::function<std::unique_ptr<BackwardModule>(const Graph &)> compile;
  /// The module for the tangents flagged in `arrived` (whole when all
  /// that can did). Throws Error when the variant does not compile.
  const BackwardModule &moduleFor(const std::vector<bool> &arrived) const;
  /// What each backward module input is bound to (Autodiff.h).
  std::vector<TrainingGraphs::BackwardInput> inputs;
  /// Per backward module output: the forward graph input it is the
  /// gradient of.
  std::vector<int> gradientOf;
  /// Forward module outputs that take a tangent, in tangent order.
  std::vector<int> tangentOutputs;
  /// Per backward module output: the tangents it is computed from (an
  /// undefined gradient when none arrives).
  std::vector<std::vector<int>> tangentsOfGradient;
  /// The forward graph's input types: the size symbols their sizes give
  /// bind the backward's symbols its own inputs may not give (a gradient
  /// of a flatten of [s0, s1] is [s0 * s1]).
  std::vector<TensorType> forwardInputTypes;
  /// The forward graph, replayed by ATen from the forward's inputs when a
  /// backward must itself be differentiable (create_graph=True), and why
  /// it cannot be when it cannot (then empty: nothing is kept for it).
  std::shared_ptr<const Graph> replayableForward;
  std::string replayBlocked;

private:
  mutable std::mutex variantsMutex;
  mutable std::map<std::vector<bool>, std::unique_ptr<BackwardModule>>
      variants;
};

} // namespace dynafuse

#endif

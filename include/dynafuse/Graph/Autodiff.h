//===- Autodiff.h - Forward and backward graphs of a graph ------*- C++ -*-===//
//
// Ahead-of-time reverse-mode differentiation (issue 16). A captured graph
// whose inputs require grad becomes a pair:
//   - the forward graph: the captured one (composites decomposed), with
//     the values the backward reads appended to its outputs;
//   - the backward graph: from those saved values and one tangent (the
//     incoming gradient) per differentiable output, the gradients of the
//     inputs that require grad.
// Both are ordinary graphs: lowering fuses each on its own. The pair is
// built from a joint graph (forward and gradient nodes together, by the
// rules of Derivatives.h), split where the tangents start: the backward
// gets every node that depends on a tangent, and the forward-only nodes
// only it needs (transposed weights, masks); views the backward reads are
// redone there from their base instead of being saved.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_AUTODIFF_H
#define DYNAFUSE_GRAPH_AUTODIFF_H

#include "dynafuse/Graph/Graph.h"

#include <memory>
#include <string>
#include <vector>

namespace dynafuse {

struct TrainingGraphs {
  std::unique_ptr<Graph> forward;
  std::unique_ptr<Graph> backward;
  /// The forward's outputs before the saved values: the captured graph's.
  size_t userOutputs = 0;

  /// What each backward input is bound to at run time.
  struct BackwardInput {
    enum class Kind {
      /// A forward input (index), saved by reference.
      ForwardInput,
      /// A forward output (index: a user output or a saved value).
      ForwardOutput,
      /// The incoming gradient of a forward output (index).
      Tangent,
    };
    Kind kind = Kind::ForwardInput;
    int index = 0;
  };
  std::vector<BackwardInput> backwardInputs;
  /// Per backward output: the forward input it is the gradient of.
  std::vector<int> gradientOf;
  /// Forward outputs that get a tangent (differentiable, depending on an
  /// input that requires grad), in tangent order; each value once.
  std::vector<int> tangentOutputs;
  /// Per backward output: the tangents (positions in tangentOutputs) it is
  /// computed from. When none of them arrives (the loss did not use those
  /// outputs), the gradient is undefined, as eager leaves it: `.grad`
  /// stays None rather than becoming zeros an optimizer would act on.
  std::vector<std::vector<int>> tangentsOfGradient;
};

/// Differentiates `graph` with respect to the inputs flagged in
/// inputRequiresGrad. Throws Error naming the op and its location when an
/// op has no derivative rule, or a rule cannot handle its operands.
TrainingGraphs differentiateGraph(const Graph &graph,
                                  const std::vector<bool> &inputRequiresGrad);

/// The pair as text: the forward graph, a comment line per backward input
/// and gradient, then the backward graph (dynafuse-opt --passes=autodiff).
std::string printTrainingGraphs(const TrainingGraphs &graphs);

} // namespace dynafuse

#endif

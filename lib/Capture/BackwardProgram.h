//===- BackwardProgram.h - The backward half of a training entry -*- C++ -*-===//
//
// A training entry (its graph's inputs require grad, captured in grad mode)
// runs its forward module like any entry and then hangs a DynafuseBackward
// autograd node (TorchAutograd.cpp) on the outputs; the node runs this
// program when autograd reaches it. Shared by the entry and every node made
// from it, so a node outlives a cache reset.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_BACKWARDPROGRAM_H
#define DYNAFUSE_CAPTURE_BACKWARDPROGRAM_H

#include "dynafuse/Graph/Autodiff.h"
#include "dynafuse/Runtime/Executor.h"

#include <memory>
#include <string>
#include <vector>

namespace dynafuse {

struct BackwardProgram {
  /// The backward graph's name (in errors and the node's name).
  std::string name;
  std::unique_ptr<CompiledModule> module;
  /// What each backward module input is bound to (Autodiff.h).
  std::vector<TrainingGraphs::BackwardInput> inputs;
  /// Per backward module output: the forward graph input it is the
  /// gradient of.
  std::vector<int> gradientOf;
  /// Forward module outputs that take a tangent, in tangent order.
  std::vector<int> tangentOutputs;
  /// Per backward module output: the backward input it is (index), or -1.
  std::vector<int> outputInput;
  /// Per backward module output that is a view of a backward input: the
  /// input (or -1), and the view in the module's sizes.
  struct InputView {
    int input = -1;
    std::vector<SymExpr> sizes, strides;
    SymExpr offset;
  };
  std::vector<InputView> outputViews;
};

} // namespace dynafuse

#endif

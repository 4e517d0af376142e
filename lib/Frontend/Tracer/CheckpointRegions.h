//===- CheckpointRegions.h - torch.utils.checkpoint in the graph -*- C++
//-*-===//
//
// Activation checkpointing is a region of the graph, not a graph break:
// checkpoint(function, *args, use_reentrant=..., **kwargs) traces
// function(*args, **kwargs) in place and marks the nodes it adds `recompute`,
// so autodiff's partition saves none of the region's inner values and the
// compiled backward recomputes them from what enters and leaves it (as
// eager's checkpoint recomputes the region in its backward). The reentrant
// form's gradient rule is kept: when no tensor argument requires grad, its
// results require none (eager's CheckpointFunction warns and returns them
// detached), so the region is traced outside grad mode.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_CHECKPOINTREGIONS_H
#define DYNAFUSE_CAPTURE_CHECKPOINTREGIONS_H

#include "Var.h"

#include <vector>

namespace dynafuse {
namespace capture {

class BytecodeTracer;

class CheckpointRegions {
public:
  explicit CheckpointRegions(BytecodeTracer &tracer) : tracer(tracer) {}

  /// The result of a torch.utils.checkpoint.checkpoint call traced as a
  /// region; null when callable is another function.
  VarPtr call(PyObject *callable, const std::vector<VarPtr> &args,
              const Keywords &keywords);

private:
  BytecodeTracer &tracer;

  /// Whether any tensor among values (and their items) requires grad.
  bool anyRequiresGrad(const std::vector<VarPtr> &values) const;
};

} // namespace capture
} // namespace dynafuse

#endif

//===- LoweringPasses.h - The passes from graph IR to loop IR ---*- C++ -*-===//
//
// Lowering's own passes, in pipeline order (lowerGraph, LowerGraph.cpp):
//
//   realize   which values live in buffers (RealizationPolicy.cpp)
//   layout    the memory order of each buffer (LayoutChoice.cpp)
//   schedule  realized values grouped into kernels (FusionScheduler.cpp)
//   share     values several kernels would recompute, realized
//             (SharedValues.cpp; layout and schedule run again after it)
//   emit      the loop module: kernels and program (ProgramEmission.cpp)
//
// They work on an in-memory LoweringState, not on IR text, so dynafuse-opt
// cannot run them alone; --emit=loop --print-ir-after-all prints the state
// after each of them by its name.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_LOWERINGPASSES_H
#define DYNAFUSE_LOWERING_LOWERINGPASSES_H

#include "dynafuse/Lowering/LoweringState.h"

namespace dynafuse {

/// realize: the values that must live in buffers before any kernel is
/// emitted: graph outputs (except static views of inputs), extern results,
/// extern operands that are not views of buffers, indices of indexed ops,
/// and costly math a much larger consumer broadcasts.
void realizeValues(LoweringState &state);

/// A cast to f16 or bf16 from another type: realized when read, and never
/// computed in the kernel of what reads it (kernels hold f16 and bf16 in
/// f32 registers; only the store into its buffer rounds it as eager does).
bool narrowsToHalfPrecision(const Value *value);

/// layout: each realized value's loop order and buffer strides (pointwise
/// results follow a strided input's layout; convolution networks run
/// channels-last inside the graph).
void chooseLayouts(LoweringState &state);

/// schedule: groups realized values into kernels over one iteration space
/// (horizontal fusion, respecting dependencies) and orders extern ops.
void scheduleSteps(LoweringState &state);

/// share: realizes values that several of the schedule's kernels would
/// compute inline and whose computation streams two or more full-size
/// buffers. Returns whether it realized any (layout and schedule must then
/// run again).
bool realizeSharedValues(LoweringState &state);

/// emit: builds state.module from the schedule. Returns null when every
/// value could be placed, else a value that must be realized first (a
/// reduction that would be recomputed where it is used, a reshape that is
/// no view in the chosen layout); the module is then incomplete.
const Value *emitProgram(LoweringState &state);

} // namespace dynafuse

#endif

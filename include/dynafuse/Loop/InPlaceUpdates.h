//===- InPlaceUpdates.h - Torch calls that update inputs --------*- C++ -*-===//
//
// A traced in-place method (`cache.index_copy_(2, pos, k)`) is a call_torch
// of its out-of-place form, whose result the run copies back into the
// caller's tensor (a write-back). When nothing else reads that input, the
// out-of-place result is a copy made only to be copied back: the runtime
// may call the in-place form on the caller's tensor instead and skip the
// write-back. This pass decides where (InPlaceUpdates.cpp); it needs the
// module's write-backs, which the loop IR does not spell, so it is not in
// the pass registry.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOOP_INPLACEUPDATES_H
#define DYNAFUSE_LOOP_INPLACEUPDATES_H

#include "dynafuse/Loop/Kernel.h"

#include <string>
#include <utility>
#include <vector>

namespace dynafuse {

/// The attribute capture puts on a call_torch whose callable is the
/// out-of-place form of an in-place method the user called (its value: what
/// the user called, "Tensor.index_copy_").
inline constexpr const char *kInPlaceFormAttribute = "in_place_form";
/// The attribute this pass sets (true) on the steps that may run in place.
inline constexpr const char *kInPlaceAttribute = "in_place";

/// For each write-back (module input index, module output index): when the
/// output is defined by a call_torch with an in-place form whose first
/// argument is that input, whose result has the input's type (sizes,
/// strides, dtype, device), and no other step, argument or output reads the
/// input, marks the step `in_place`. Returns how many it marked.
int markInPlaceUpdates(LoopModule &module,
                       const std::vector<std::pair<int, int>> &writeBacks);

} // namespace dynafuse

#endif

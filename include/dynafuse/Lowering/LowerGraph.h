//===- LowerGraph.h - Graph IR to loop IR -----------------------*- C++ -*-===//
//
// The lowering pipeline, one list of named passes (LowerGraph.cpp):
//
//   decompose, cse, dce        graph passes (Graph/Passes.h)
//   realize                    which values live in buffers
//   layout                     the memory order of each buffer
//   schedule                   realized values grouped into kernels
//   emit                       kernels and program (inlining producers)
//   column-reductions,
//   reuse-reduction-elements,
//   plan-memory                loop passes (Loop/LoopPasses.h)
//
// realize, layout, schedule and emit are in Lowering/LoweringPasses.h; the
// loop module is verified at the end.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_LOWERGRAPH_H
#define DYNAFUSE_LOWERING_LOWERGRAPH_H

#include "dynafuse/Graph/Graph.h"
#include "dynafuse/Loop/Kernel.h"

#include <functional>
#include <string>
#include <vector>

namespace dynafuse {

/// Called after each named pass with the pass's name and its result as
/// text (for --print-ir-after-all and dumps); may be empty.
using LoweringObserver =
    std::function<void(const std::string &step, const std::string &text)>;

/// Lowering's own passes in pipeline order (realize, layout, schedule,
/// emit): they work on in-memory state, reported to the observer under
/// these names.
const std::vector<std::string> &loweringPassNames();
bool isLoweringPass(const std::string &name);

/// Throws Error naming the node when an op cannot be lowered.
LoopModule lowerGraph(const Graph &graph,
                      const LoweringObserver &observer = nullptr);

} // namespace dynafuse

#endif

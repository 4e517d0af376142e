//===- LowerGraph.h - Graph IR to loop IR -----------------------*- C++ -*-===//
//
// The lowering pipeline: the passes of the registry (PassRegistry.h) marked
// inPipeline, in its order: graph passes on a copy of the graph, lowering's
// passes on its state, loop passes on the module, which is verified at the
// end.
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

/// Throws Error naming the node when an op cannot be lowered.
LoopModule lowerGraph(const Graph &graph,
                      const LoweringObserver &observer = nullptr);

} // namespace dynafuse

#endif

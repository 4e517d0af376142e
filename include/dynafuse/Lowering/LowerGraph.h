//===- LowerGraph.h - Graph IR to loop IR -----------------------*- C++ -*-===//
//
// Lowers a graph to a LoopModule. Pointwise producers are inlined into their
// consumers, so a chain of pointwise ops becomes one kernel; graph outputs of
// the same shape share one kernel (horizontal fusion). Broadcasting becomes
// index remapping (a broadcast dim is indexed with 0), never a copy.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_LOWERGRAPH_H
#define DYNAFUSE_LOWERING_LOWERGRAPH_H

#include "dynafuse/Graph/Graph.h"
#include "dynafuse/Loop/Kernel.h"

namespace dynafuse {

/// Throws Error naming the node when an op has no lowering.
LoopModule lowerGraph(const Graph &graph);

} // namespace dynafuse

#endif

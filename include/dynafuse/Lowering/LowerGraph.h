//===- LowerGraph.h - Graph IR to loop IR -----------------------*- C++ -*-===//
//
// The lowering pipeline, one readable function: decompose composites, CSE
// and DCE, decide which values live in buffers ("realized": graph outputs,
// extern results and operands, reductions that cannot be fused where they
// are used), group realized values into kernels by iteration space
// (horizontal fusion, respecting dependencies), emit each kernel by inlining
// producers into consumers, and plan memory (intermediates reuse the storage
// of dead ones).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_LOWERGRAPH_H
#define DYNAFUSE_LOWERING_LOWERGRAPH_H

#include "dynafuse/Graph/Graph.h"
#include "dynafuse/Loop/Kernel.h"

#include <functional>
#include <string>

namespace dynafuse {

/// Called after each named lowering step with that step's text (for
/// --print-ir-after-all and dumps); may be empty.
using LoweringObserver =
    std::function<void(const std::string &step, const std::string &text)>;

/// Throws Error naming the node when an op cannot be lowered.
LoopModule lowerGraph(const Graph &graph,
                      const LoweringObserver &observer = nullptr);

/// Whether a store index ends in exactly `var` and no other dim mentions
/// it (so distinct iterations of var store distinct elements).
bool injectiveIn(const std::vector<SymExpr> &index, const std::string &var);

/// Sums over a non-innermost dim accumulate in the output buffer with the
/// output loop innermost (contiguous, vectorizable) instead of striding
/// through memory per output element (lib/Lowering/ColumnReductions.cpp).
void interchangeColumnReductions(Kernel &kernel);

/// A sum whose elements the next loop recomputes (softmax's exp) stores
/// them into that loop's output buffer, which the loop reads back
/// (lib/Lowering/ReductionElementReuse.cpp).
void reuseReductionElements(Kernel &kernel);

/// Rewrites module's allocations so that intermediates reuse the storage of
/// allocations no longer needed (same byte size).
void planMemory(LoopModule &module);

} // namespace dynafuse

#endif

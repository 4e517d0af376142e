//===- LoopPasses.h - Loop-IR-to-loop-IR transformations --------*- C++ -*-===//
//
// Rewrites that touch only loop IR, run by lowering after program emission
// and by dynafuse-opt by name on .loop text (--passes=plan-memory). Each is
// listed, by name, in the pass registry (Lowering/PassRegistry.h).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOOP_LOOPPASSES_H
#define DYNAFUSE_LOOP_LOOPPASSES_H

#include "dynafuse/Loop/Kernel.h"

#include <string>
#include <vector>

namespace dynafuse {

/// Whether a store index ends in exactly `var` and no other dim mentions
/// it (so distinct iterations of var store distinct elements).
bool injectiveIn(const std::vector<SymExpr> &index, const std::string &var);

/// Loops of no iteration (an empty dim) removed, with the loads and
/// arithmetic only they read: a load placed before such a loop would read
/// an empty buffer (EmptyLoops.cpp).
void dropEmptyLoops(Kernel &kernel);

/// Loops of one iteration (a batch-1 dim) replaced by their body with the
/// variable 0, so the outermost loop left is the one worth splitting over
/// threads (UnitLoops.cpp).
void dropUnitLoops(Kernel &kernel);

/// Sums over a non-innermost dim accumulate in the output buffer with the
/// output loop innermost (contiguous, vectorizable) instead of striding
/// through memory per output element (ColumnReductions.cpp).
void interchangeColumnReductions(Kernel &kernel);

/// Loops whose indexes divide and take remainders of their variable by a
/// divisor of its extent (a view merging two dims) split in two, so the
/// inner one walks contiguous addresses and vectorizes (RegroupedLoops.cpp).
void splitRegroupedLoops(Kernel &kernel);

/// A sum whose elements the next loop recomputes (softmax's exp) stores
/// them into that loop's output buffer, which the loop reads back
/// (ReductionElementReuse.cpp).
void reuseReductionElements(Kernel &kernel);

/// Rewrites module's allocations so that intermediates reuse the storage of
/// allocations no longer needed (same byte size; MemoryPlanner.cpp).
void planMemory(LoopModule &module);

/// Kernels identical but for their own and their parameters' names become
/// one, every call pointing at it: the code generator compiles a model's
/// repeated layers once (DuplicateKernels.cpp).
void mergeDuplicateKernels(LoopModule &module);

} // namespace dynafuse

#endif

//===- Passes.h - Graph-to-graph transformations ----------------*- C++ -*-===//
//
// Each pass is a free function over a Graph that returns whether it changed
// anything; the pass registry (Lowering/PassRegistry.h) names them, and
// dynafuse-opt runs them by those names (--passes=cse,dce).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_PASSES_H
#define DYNAFUSE_GRAPH_PASSES_H

#include "dynafuse/Graph/Graph.h"

#include <functional>
#include <set>

#include <string>
#include <vector>

namespace dynafuse {

/// Removes nodes whose results are never used.
bool eliminateDeadCode(Graph &graph);
/// The outputs and every value a node computing one reads, transitively.
std::set<const Value *> liveValues(const Graph &graph);
/// Merges nodes with the same op, operands and attributes.
bool eliminateCommonSubexpressions(Graph &graph);
/// Which composite nodes decomposeComposites rewrites (null: all).
using CompositeFilter = std::function<bool(const Node &)>;
/// Rewrites composite ops (softmax, layer_norm, linear, ...) into primitives
/// through the decomposition table (Graph/CompositeOps.cpp); with a
/// filter, only the composites it accepts (and those their decompositions
/// make).
bool decomposeComposites(Graph &graph, const CompositeFilter &which = nullptr);
/// GEMMs and convolutions of bf16 or f16 (the dtypes in slowTypes) on the
/// CPU computed in f32 from exact upcasts of their operands, the result
/// rounded once to its type (HalfProducts.cpp): what the torch runtime
/// runs where the host has no fast 16-bit product kernels.
bool computeHalfProductsInFloat32(Graph &graph,
                                  const std::set<DType> &slowTypes);
/// Float matmuls of one row by a 2-D matrix (a decode step's linear
/// layers), unless marked weight_prepacked, as a fused sum over K of the
/// row times the matrix's columns (MatrixVectorProducts.cpp).
bool matrixVectorProductsAsReductions(Graph &graph);

} // namespace dynafuse

#endif

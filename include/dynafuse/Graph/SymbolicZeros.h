//===- SymbolicZeros.h - A graph with some inputs known to be zero -*- C++ -*-===//
//
// Eager autograd never computes with a gradient that did not arrive: a
// node whose output gradients are all undefined does not run, and a sum of
// gradients skips the undefined ones. A compiled backward takes one tangent
// per forward output, so a tangent that did not arrive (the loss did not
// use that output) must not be fed as zeros: 0 * inf in a derivative would
// make a NaN that eager never computes. withZeroInputs rewrites a backward
// graph for the tangents that arrived: values computed linearly from the
// zero inputs are symbolic zeros, sums skip them, and only an op that is
// not linear in them sees materialized zeros (as eager's formulas would).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_SYMBOLICZEROS_H
#define DYNAFUSE_GRAPH_SYMBOLICZEROS_H

#include "dynafuse/Graph/Graph.h"

#include <memory>
#include <vector>

namespace dynafuse {

/// `graph` with the inputs flagged in `isZero` known to hold zeros. The
/// result has the same inputs (the zero ones unread) and outputs; an output
/// computed only from zeros is a zero fill.
std::unique_ptr<Graph> withZeroInputs(const Graph &graph,
                                      const std::vector<bool> &isZero);

} // namespace dynafuse

#endif

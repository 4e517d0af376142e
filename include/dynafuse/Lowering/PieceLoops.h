//===- PieceLoops.h - Loops split at a concatenation's pieces ---*- C++ -*-===//
//
// A kernel whose members read a concatenation element for element (its
// pieces are not buffers of their own: cat inlined) would pick, for every
// element, one of the pieces by a chain of masks: one masked load and one
// select per piece, per element. A densenet layer reads the concatenation
// of every earlier layer's output (up to 48 pieces) through batch norm and
// ReLU. Emission instead splits the loop over the concatenated dim at the
// pieces' boundaries: one loop nest per piece, in which the element emitter
// sees the position's range and reads that piece alone (emitCat).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_PIECELOOPS_H
#define DYNAFUSE_LOWERING_PIECELOOPS_H

#include "dynafuse/Lowering/LoweringState.h"

#include <optional>
#include <vector>

namespace dynafuse {

struct PieceSplit {
  /// The members' dim the concatenation runs along.
  size_t dim = 0;
  /// The pieces' lengths along it, in order.
  std::vector<int64_t> lengths;
};

/// The split for step's kernel: the concatenation with the most pieces
/// (two or more, of constant lengths) that its members reach through
/// pointwise ops, and pads and slices of other dims (a pool's taps), so
/// that the position along its dim is the loop's. None when there is no
/// such concatenation.
std::optional<PieceSplit> pieceSplitOf(const LoweringState &state,
                                       const LoweringStep &step);

} // namespace dynafuse

#endif

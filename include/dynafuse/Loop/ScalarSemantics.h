//===- ScalarSemantics.h - What each scalar instruction computes -*- C++
//-*-===//
//
// The reference meaning of every loop-IR scalar op, reduction combiner and
// element load/store, as the interpreter executes them; backends must match
// (f32 math rounded to f32, NaN-propagating max/min, truncating float-to-int
// casts, Python-style remainder, integer division by zero giving 0).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOOP_SCALARSEMANTICS_H
#define DYNAFUSE_LOOP_SCALARSEMANTICS_H

#include "dynafuse/Loop/Kernel.h"

#include <cstdint>
#include <random>

namespace dynafuse {

/// A scalar: floats in f (f32 values rounded to float), integers and bools
/// in i.
struct ScalarValue {
  double f = 0;
  int64_t i = 0;
};

ScalarValue loadElement(DType type, const char *address);
void storeElement(DType type, char *address, ScalarValue value);
/// `count` random elements of `type` at `data` for tools and benchmarks:
/// floats uniform in [-2, 2], integers (and bools) uniform in [0, 3].
void fillRandomElements(DType type, char *data, int64_t count,
                        std::mt19937 &rng);
ScalarValue constantValue(const Instr &instr);
ScalarValue evalCast(DType from, DType to, ScalarValue value);
/// type is the operand type.
ScalarValue evalUnary(ScalarOp op, DType type, ScalarValue x);
ScalarValue evalBinary(ScalarOp op, DType type, ScalarValue a, ScalarValue b);

/// Accumulators of a reduction: value (and position for argmax/argmin).
struct ReduceState {
  ScalarValue value;
  ScalarValue position;
};
ReduceState reduceIdentity(ReduceKind kind, DType type);
void reduceCombine(ReduceKind kind, DType type, ReduceState &state,
                   ScalarValue value, ScalarValue position);

} // namespace dynafuse

#endif

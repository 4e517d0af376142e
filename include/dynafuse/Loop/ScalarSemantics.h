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
/// A float truncated toward zero to i64; NaN and values outside
/// [-2^63, 2^63) give INT64_MIN (what x86's conversion gives at run time;
/// C++ leaves it undefined and LLVM's fptosi makes it poison, so every
/// backend selects this value explicitly).
int64_t truncateToInt64(double value);
ScalarValue evalCast(DType from, DType to, ScalarValue value);
/// type is the operand type.
ScalarValue evalUnary(ScalarOp op, DType type, ScalarValue x);
ScalarValue evalBinary(ScalarOp op, DType type, ScalarValue a, ScalarValue b);

/// `random key, counter`: a counter-based uniform number in [0, 1) with 24
/// random bits, the same in every backend (the LLVM and CUDA backends emit
/// these steps): the splitmix64 finalizer of key ^ (counter * golden), its
/// top 24 bits scaled by 2^-24. Element i of a graph's `uniform` is
/// random(seed + stream offset, i), so a run's seed (drawn from torch's
/// generator) and a counter give every element its own number, with no
/// state between elements.
constexpr uint64_t kRandomGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kRandomMix1 = 0xBF58476D1CE4E5B9ull;
constexpr uint64_t kRandomMix2 = 0x94D049BB133111EBull;
inline double counterRandom(int64_t key, int64_t counter) {
  uint64_t z = uint64_t(key) ^ (uint64_t(counter) * kRandomGolden);
  z += kRandomGolden;
  z = (z ^ (z >> 30)) * kRandomMix1;
  z = (z ^ (z >> 27)) * kRandomMix2;
  z ^= z >> 31;
  return double(z >> 40) * 0x1p-24;
}

/// Accumulators of a reduction: value (and position for argmax/argmin).
struct ReduceState {
  ScalarValue value;
  ScalarValue position;
};
ReduceState reduceIdentity(ReduceKind kind, DType type);
/// Combines one yielded value. A float sum accumulates in f64 whatever its
/// type: an f32 sum of thousands of terms that cancel (a batch norm's
/// gradient per channel) would otherwise lose digits that eager's cascade
/// summation keeps; reduceFinish rounds it to the type once.
void reduceCombine(ReduceKind kind, DType type, ReduceState &state,
                   ScalarValue value, ScalarValue position);
void reduceFinish(ReduceKind kind, DType type, ReduceState &state);

} // namespace dynafuse

#endif

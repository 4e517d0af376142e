//===- PointwiseRules.h - Per-op lowering to scalar instructions -*- C++
//-*-===//
//
// The lowering table: for each pointwise graph op, a rule that emits the
// scalar instructions computing one element from its operands' elements.
// A new pointwise op is one entry here plus one in Graph/OpRegistry.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_POINTWISERULES_H
#define DYNAFUSE_LOWERING_POINTWISERULES_H

#include "dynafuse/Graph/Graph.h"
#include "dynafuse/Loop/Kernel.h"
#include "dynafuse/Lowering/KernelBuilder.h"

#include <functional>
#include <vector>

namespace dynafuse {

/// Appends scalar instructions to one kernel (placed by its KernelBuilder);
/// rules build through it.
class ScalarBuilder {
public:
  ScalarBuilder(Kernel &kernel, KernelBuilder &builder)
      : kernel(kernel), builder(builder) {}

  int constant(DType type, double value);
  int unary(ScalarOp op, int arg);
  int binary(ScalarOp op, int lhs, int rhs);
  int select(int condition, int onTrue, int onFalse);
  /// No-op when arg already has type.
  int cast(int arg, DType type);
  DType typeOf(int value) const { return kernel.instrs[value].type; }

private:
  int append(Instr instr);
  Kernel &kernel;
  KernelBuilder &builder;
};

/// Emits one element of node's result. elements holds, per node operand, the
/// id of its element value in its own compute type, or -1 for a scalar
/// operand.
struct PointwiseContext {
  ScalarBuilder &builder;
  const Node &node;
  /// The type the op computes in.
  DType type;
  std::vector<int> elements;

  /// Operand i converted to `type` (scalars become constants of `type`).
  int operand(size_t i) const;
  /// Operand i in its own type (scalars as constants of `type`).
  int raw(size_t i) const;
};

using PointwiseRule = std::function<int(PointwiseContext &)>;

/// Null when op has no pointwise lowering.
const PointwiseRule *findPointwiseRule(Op op);
/// The compute type of node's operation (before its result is stored).
DType operationType(const Node &node);

} // namespace dynafuse

#endif

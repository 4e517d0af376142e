//===- ElementEmitter.h - One element of a graph value as scalars -*- C++
//-*-===//
//
// Emits the scalar instructions computing a graph value's element at a
// symbolic index, inside one kernel: buffers (graph inputs and realized
// values) are loaded, pointwise ops inlined through their rules, views
// become index arithmetic, reductions become reduce statements (placed by
// the KernelBuilder), cat and pad become masked loads. Results are memoized
// per (value, index, mask), so shared producers are computed once. A
// reduction that cannot be placed where it is used (it would be recomputed
// for every element of an enclosing loop) is reported by
// needsRealization(); the kernel is then to be discarded.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_ELEMENTEMITTER_H
#define DYNAFUSE_LOWERING_ELEMENTEMITTER_H

#include "dynafuse/Graph/Graph.h"
#include "dynafuse/Lowering/KernelBuilder.h"

#include <functional>
#include <map>

namespace dynafuse {

class ElementEmitter {
public:
  /// bufferOf names the buffer of every input and realized value; values in
  /// `inlineHere` are computed rather than loaded even if realized (they are
  /// the kernel's own outputs).
  /// bufferTypes overrides a realized value's type (its chosen layout).
  ElementEmitter(Kernel &kernel, KernelBuilder &builder,
                 const std::map<const Value *, std::string> &bufferOf,
                 const std::map<const Value *, TensorType> &bufferTypes,
                 const std::set<const Value *> &inlineHere);

  /// The element of value at index, in computeType(value dtype).
  int emit(const Value *value, const std::vector<SymExpr> &index);
  void store(const Value *value, const std::vector<SymExpr> &index, int scalar);
  /// The first value that could not be inlined where it is used (a
  /// reduction that would be recomputed), or null. Once set, emit() only
  /// returns placeholders: lowering realizes the value and starts over.
  const Value *needsRealization() const { return unplaced; }

private:
  int emitUncached(const Value *value, const std::vector<SymExpr> &index);
  int load(const Value *value, const std::vector<SymExpr> &index);
  int emitPointwise(const Node &node, const std::vector<SymExpr> &index);
  int emitReduction(const Node &node, size_t result,
                    const std::vector<SymExpr> &index);
  int emitView(const Node &node, size_t result,
               const std::vector<SymExpr> &index);
  int emitMasked(const Value *value, const std::vector<SymExpr> &index,
                 int mask);
  int emitCat(const Node &node, const std::vector<SymExpr> &index);
  int emitPad(const Node &node, const std::vector<SymExpr> &index);
  int emitIndexed(const Node &node, const std::vector<SymExpr> &index);
  int emitGenerator(const Node &node, const std::vector<SymExpr> &index);
  int param(const Value *value);

  // Scalar helpers.
  int constant(DType type, double value);
  int indexValue(const SymExpr &expr);
  int unary(ScalarOp op, int arg);
  int binary(ScalarOp op, int lhs, int rhs);
  int select(int condition, int onTrue, int onFalse);
  int cast(int arg, DType type);
  /// index >= lo && index < hi, as a bool value.
  int inRange(const SymExpr &position, const SymExpr &lo, const SymExpr &hi);
  /// AND of the current mask stack and extra (-1: none).
  int combinedMask(int extra);
  std::vector<SymExpr> simplify(std::vector<SymExpr> index) const;
  /// position - offset for the piece of a cat or pad at [offset, offset +
  /// length). Where position is one variable plus a constant and the bounds
  /// are constant, a fresh masked-position symbol: the piece's mask holds
  /// only where it lies in [0, length), and its loads read only there, so
  /// the index arithmetic of the views below it simplifies with that range
  /// (a flatten under a cat needs no floordiv and mod).
  SymExpr piecePosition(const SymExpr &position, const SymExpr &offset,
                        const SymExpr &length);
  /// expr with every masked-position symbol replaced by what it stands for
  /// (instructions never name those symbols).
  SymExpr resolved(const SymExpr &expr) const;
  std::vector<SymExpr> resolved(std::vector<SymExpr> index) const;

  Kernel &kernel;
  KernelBuilder &builder;
  const std::map<const Value *, std::string> &bufferOf;
  const std::map<const Value *, TensorType> &bufferTypes;
  const std::set<const Value *> &inlineHere;
  std::map<std::string, int> memo;
  /// The loop variables (and symbols) instruction id reads, through its
  /// arguments.
  void symbolsOfInstr(int id, std::set<std::string> &symbols) const;
  std::vector<int> masks;
  /// Masked-position symbols (piecePosition): what each stands for, already
  /// resolved, and its extent.
  struct MaskedPosition {
    SymExpr expr;
    int64_t extent;
  };
  std::map<std::string, MaskedPosition> maskedPositions;
  const Value *unplaced = nullptr;
};

} // namespace dynafuse

#endif

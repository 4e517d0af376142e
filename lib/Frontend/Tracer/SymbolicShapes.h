//===- SymbolicShapes.h - The tracer's decisions on sizes ------*- C++ -*-===//
//
// The tracer's half of dynamic shapes (ShapeEnv.h has the model), with its
// state explicit: the call's shape policy, the ShapeEnv of the capture, the
// guards its decisions add and the graph whose types unification rewrites.
// It decides which dims of a tensor input become size symbols, compares
// sizes at their hints (each outcome guarded), and unifies symbols an op
// needs equal. The tracer's SymInt values, their arithmetic and slices with
// symbolic bounds build on it (TracerSizes.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_FRONTEND_SYMBOLICSHAPES_H
#define DYNAFUSE_FRONTEND_SYMBOLICSHAPES_H

#include "Entry/CapturedFrame.h"
#include "Guards/GuardBuilder.h"
#include "Guards/ShapeEnv.h"
#include "dynafuse/Torch/TorchBridge.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dynafuse {
namespace capture {

class SymbolicShapes {
public:
  SymbolicShapes(const ShapePolicy &policy, GuardBuilder &guards,
                 CapturedFrame &frame);

  /// The symbols made and what is known of them.
  ShapeEnv env;

  /// The dims of a tensor input (read from source) to make symbolic; records
  /// its sizes for the policy's history.
  std::vector<bool> symbolicDims(PyObject *object, int source,
                                 const std::vector<int64_t> &sizes);
  /// A Python int read from source: under the automatic policy, a size
  /// symbol (bound by an IntSymbol guard) when mayVary (the source is an
  /// argument, or an item or a plain object's attribute under one) and its
  /// value changed since the code's first capture; nullopt keeps it a
  /// constant. Records the value for the policy's history. One source
  /// reads as one symbol.
  std::optional<SymExpr> symbolicInt(PyObject *object, int source,
                                     bool mayVary);
  bool madeIntSymbols() const { return !intSymbols.empty(); }
  /// A tensor input's type and guard with the chosen dims symbolic (false
  /// when its strides are not a dense layout: then it stays static).
  bool makeSymbolic(const std::vector<bool> &dims, const TensorMeta &meta,
                    TensorType &type, Guard &guard);
  /// Records decisions on sizes as the entry's shape guards.
  void addGuards(std::vector<ShapeGuard> shapeGuards);
  /// lhs <relation> rhs decided at the hints, guarded.
  bool decide(int relation, const SymExpr &lhs, const SymExpr &rhs);
  /// Before an op combines tensors: sizes it needs equal (broadcast dims,
  /// matmul's inner dims, cat's other dims) that are two symbols of equal
  /// hints become one.
  void unifyOperandSizes(Op op, const std::vector<Operand> &operands,
                         const std::map<std::string, Attribute> &attributes);
  /// Two sizes an op needs equal, as unifyOperandSizes pairs them: two
  /// symbols of equal hints become one, a symbol meeting a constant (not
  /// 1) of its hint becomes it. Whether it unified.
  bool unifyEqualSizes(const SymExpr &lhs, const SymExpr &rhs,
                       std::vector<ShapeGuard> &decided);
  /// An expand's kept dims: the input's size and the target's (other
  /// than -1), right-aligned, are unified (`x.expand_as(y)` with x
  /// [s0, 1] and y [s1, 4], s0 and s1 of one hint), and the target shape
  /// is rewritten in the unified symbols.
  void unifyExpandedSizes(const TensorType &input,
                          std::map<std::string, Attribute> &attributes);
  /// narrow on a symbolic dim: start and start + length inside it, decided
  /// at the hints and guarded (eager raises past the end; the static rule
  /// checks it, the symbolic one needs the guard). What is out of range,
  /// or nullopt.
  std::optional<std::string>
  narrowOutOfRange(const TensorType &input,
                   const std::map<std::string, Attribute> &attributes);
  /// A reshape's -1 on symbolic sizes that does not divide provably:
  /// numel // (the other sizes), guarded to divide exactly.
  void resolveInferredSize(const TensorType &input,
                           std::map<std::string, Attribute> &attributes);
  /// Rewrites the graph's types after symbols were unified.
  void applyUnified();
  /// expr where only a constant will do (a list index, an op's dim, a
  /// loop's count, a float of it): its value at the hints, guarded equal
  /// to it, as torch.compile specializes a SymInt. A lone symbol becomes
  /// that constant everywhere; the capture's other symbols stay.
  int64_t specialize(const SymExpr &expr);
  /// An op's symbolic attributes specialized (an op that needs them
  /// constant: `x.sum(n % 2)`), or only their values at the hints when not
  /// guarded (to try the op first).
  void specializeAttributes(std::map<std::string, Attribute> &attributes,
                            bool guarded);

private:
  /// Which dims of tensor inputs stay symbolic.
  ShapePolicy policy;
  GuardBuilder &guards;
  CapturedFrame &frame;
  /// The symbol of each int source made symbolic.
  std::map<int, SymExpr> intSymbols;
};

} // namespace capture
} // namespace dynafuse

#endif

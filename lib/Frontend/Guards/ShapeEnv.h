//===- ShapeEnv.h - Symbolic sizes of one capture ---------------*- C++ -*-===//
//
// Dynamic shapes (docs/dynamic-shapes.md). A capture that keeps some tensor
// dims symbolic gives each such dim a size symbol ("s0", "s1", ...) with
// its value in this call as the hint. Python code computes with sizes
// (Var::Kind::SymInt holds a SymExpr); where it decides something on them
// (a branch, a comparison, a slice bound clamped) the outcome at the hints
// is what the trace follows, and the decision becomes a ShapeGuard the
// entry checks before it runs. Two symbols the program needs equal (a
// broadcast, a matmul's inner dims) are unified: one replaces the other
// from then on, with an equality guard.
//
// Which dims are symbolic is the ShapePolicy's: dynamic=False never,
// True every dim of the frame's tensor arguments, automatic (the default)
// the dims whose size changed since the code's first capture; mark_dynamic
// and mark_static decide per tensor.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_SHAPEENV_H
#define DYNAFUSE_CAPTURE_SHAPEENV_H

#include "dynafuse/Support/SymExpr.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace dynafuse {

/// A decision on sizes: lhs <relation> rhs, relation one of Python's rich
/// comparison codes (Py_LT ... Py_GE).
struct ShapeGuard {
  SymExpr lhs, rhs;
  int relation = 2; // Py_EQ
  bool holds(const std::map<std::string, int64_t> &bindings) const;
  /// A Python int's value the code needed (SymbolicShapes::specialize):
  /// failing, it counts as a failed value guard does (Settling.h).
  bool specializesInt = false;
  /// "s0 >= 2", "s1 == s0".
  std::string str() const;
};

/// What a code object's captures saw of sizes (kept on its cache): the
/// sizes of each tensor source (by its description) at the first capture
/// that read it, the dims found to change since, and whether a capture
/// with symbolic sizes failed (later captures of the code are static).
struct ShapeHistory {
  std::map<std::string, std::vector<int64_t>> firstSizes;
  std::map<std::string, std::set<size_t>> changedDims;
  bool symbolicFailed = false;
  /// Whether a capture with int symbols (ShapePolicy::symbolicInts) failed:
  /// later captures keep ints constant (their tensor dims may still be
  /// symbolic).
  bool symbolicIntsFailed = false;
  /// The dims of the source `key`, now of `sizes`, that changed: found to
  /// change before, or other than at the first capture (of the same rank).
  std::vector<bool> changed(const std::string &key,
                            const std::vector<int64_t> &sizes) const;
  /// Records a capture's input sizes.
  void record(const std::map<std::string, std::vector<int64_t>> &sizes);
};

/// How a call's tensor dims become symbolic.
struct ShapePolicy {
  enum class Mode { Static, Automatic, Dynamic };
  Mode mode = Mode::Automatic;
  /// Automatic: what the code's captures saw of sizes.
  const ShapeHistory *history = nullptr;
  /// Automatic: a Python int read from an argument (or an item or a plain
  /// object's attribute under one) whose value changed since the first
  /// capture becomes a symbol too, as torch.compile's automatic dynamic
  /// does (a cache's length, a step's position). Ints on modules stay
  /// constants, as there.
  bool symbolicInts = true;
};

class ShapeEnv {
public:
  /// A new size symbol whose value in this call is hint (>= 2).
  SymExpr newSymbol(int64_t hint);
  /// expr at the hints.
  int64_t hintOf(const SymExpr &expr) const;
  /// expr with unified symbols replaced.
  SymExpr canonical(const SymExpr &expr) const;
  /// lhs <relation> rhs at the hints. The guard to record is returned in
  /// guard (unless the outcome holds for every size, sizes being >= 2).
  bool decide(int relation, const SymExpr &lhs, const SymExpr &rhs,
              std::vector<ShapeGuard> &guards) const;
  /// Makes symbols a and b one (their hints are equal): b is replaced by
  /// a from now on; the equality guard goes to guards.
  void unify(const SymExpr &a, const SymExpr &b,
             std::vector<ShapeGuard> &guards);
  /// Whether the capture made any symbol.
  bool empty() const { return hints.empty(); }
  const std::map<std::string, int64_t> &symbolHints() const { return hints; }
  /// Symbols unified away: name -> its replacement.
  const std::map<std::string, SymExpr> &unified() const {
    return replacements;
  }

private:
  std::map<std::string, int64_t> hints;
  std::map<std::string, SymExpr> replacements;
};

} // namespace dynafuse

#endif

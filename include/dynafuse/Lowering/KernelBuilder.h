//===- KernelBuilder.h - Builds a kernel body with placement ----*- C++ -*-===//
//
// Builds a kernel's statement tree while lowering emits scalar instructions
// in any order. Each instruction is placed in the outermost scope that
// defines everything it uses (its operands and the loop variables of its
// index expressions), so loop-invariant work lands outside inner loops:
// a row's reduction is computed once per row before the loop over the row's
// elements, a broadcast load once per outer iteration.
//
// Scopes form a tree; the "current path" runs from the root to where
// emission happens. A reduction opens a scope under the placement its
// output index allows and closes back to the path it left.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOWERING_KERNELBUILDER_H
#define DYNAFUSE_LOWERING_KERNELBUILDER_H

#include "dynafuse/Loop/Kernel.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dynafuse {

class KernelBuilder {
public:
  explicit KernelBuilder(Kernel &kernel);

  /// Opens a loop over 0..extent as a child of the current scope; returns
  /// its variable.
  SymExpr openLoop(const SymExpr &extent);
  void closeLoop();

  /// Places instr (args, index, mask already set) and returns its id.
  int append(Instr instr);

  /// Opens a reduction over extents under the scope that defines all of
  /// `outerVars` and `maskSymbols` (what the mask its loads carry reads);
  /// returns its variables. Fails (returns false) when that placement would
  /// recompute the reduction across an enclosing loop whose variable its
  /// index does not use, or uses only through `coarseVars` (read only
  /// divided or as a remainder: several of its values share an index).
  bool openReduce(ReduceKind kind, const std::vector<SymExpr> &extents,
                  const std::set<std::string> &outerVars,
                  const std::set<std::string> &coarseVars,
                  const std::set<std::string> &maskSymbols,
                  std::vector<SymExpr> &vars);
  /// Closes the innermost open reduction; returns its result ids.
  std::vector<int> closeReduce(const std::vector<int> &yields);

  /// Whether value id may be reused here (its scope is on the current path).
  bool visible(int id) const;
  /// The constant extents of the loop and reduction variables open now.
  SymRanges openRanges() const;
  /// Their symbolic extents (`for i2 in 0..s1`), for those not constant.
  SymExtents openSymbolicExtents() const;
  /// Finishes: the kernel's body.
  void finish();

private:
  struct Scope {
    int parent = -1;
    bool isReduce = false;
    std::vector<std::string> vars;
    std::vector<SymExpr> extents;
    ReduceKind reduceKind = ReduceKind::Sum;
    std::vector<Stmt> body;
    std::vector<int> savedPath;
  };

  int placementOf(const Instr &instr) const;
  int deepestOnPath(const std::set<int> &scopes) const;
  void varsOf(const SymExpr &expr, std::set<int> &scopes) const;
  std::string freshVar(const char *prefix);
  void recordExtent(const std::string &var, const SymExpr &extent);

  Kernel &kernel;
  std::vector<Scope> scopes;
  std::vector<int> path;
  std::map<int, int> scopeOfInstr;
  std::map<std::string, int> scopeOfVar;
  std::map<std::string, int64_t> constantExtents;
  SymExtents symbolicExtents;
  /// Constants are placed at the root once each.
  std::map<std::string, int> constants;
  int varCounter = 0;
};

} // namespace dynafuse

#endif

//===- UnitLoops.cpp - Loops of one iteration removed ---------------------===//
//
// A loop over a dim of size 1 (the batch of a batch-1 model) runs its body
// once with its variable 0. Kernel building emits one loop per dim, so
// these are common, and one of them as a kernel's outermost loop hides the
// loop that could be split over threads (the runtime splits the outermost
// loop only): gelu over f32[1, 197, 1024] ran on one core. This pass
// replaces each `for v in 0..1 { body }` by body with v = 0.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Loop/LoopPasses.h"

#include <map>

namespace dynafuse {
namespace {

bool isUnitLoop(const Stmt &stmt) {
  return stmt.kind == Stmt::Kind::For && stmt.extent.isConstant() &&
         stmt.extent.constant() == 1;
}

/// Replaces var by 0 in every index and extent under block.
void substituteZero(Kernel &kernel, std::vector<Stmt> &block,
                    const std::map<std::string, SymExpr> &zero) {
  for (Stmt &stmt : block) {
    if (stmt.kind == Stmt::Kind::Instr) {
      for (SymExpr &index : kernel.instrs[stmt.instr].index)
        index = index.substitute(zero);
      continue;
    }
    stmt.extent = stmt.extent.substitute(zero);
    for (SymExpr &extent : stmt.extents)
      extent = extent.substitute(zero);
    substituteZero(kernel, stmt.body, zero);
  }
}

void dropUnitLoops(Kernel &kernel, std::vector<Stmt> &block) {
  std::vector<Stmt> rewritten;
  for (Stmt &stmt : block) {
    dropUnitLoops(kernel, stmt.body);
    if (!isUnitLoop(stmt)) {
      rewritten.push_back(std::move(stmt));
      continue;
    }
    substituteZero(kernel, stmt.body, {{stmt.var, SymExpr(0)}});
    for (Stmt &inner : stmt.body)
      rewritten.push_back(std::move(inner));
  }
  block = std::move(rewritten);
}

} // namespace

void dropUnitLoops(Kernel &kernel) { dropUnitLoops(kernel, kernel.body); }

} // namespace dynafuse

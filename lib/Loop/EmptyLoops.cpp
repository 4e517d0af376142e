//===- EmptyLoops.cpp - Loops of no iteration removed ---------------------===//
//
// A loop over a dim of size 0 (an empty tensor) runs no iteration, but
// kernel building places a load whose index does not depend on the loop's
// variable before the loop: `load %arg0[0, 0, 0]` of an f32[1, 0, 1] input
// read memory the tensor does not have. This pass removes every
// `for v in 0..0 { ... }` and then the instructions nothing reads any more
// (loads, arithmetic; stores stay), so no load of an empty buffer is left
// outside a loop over its empty dim.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Loop/LoopPasses.h"

#include <set>

namespace dynafuse {
namespace {

bool isEmptyLoop(const Stmt &stmt) {
  return stmt.kind == Stmt::Kind::For && stmt.extent.isConstant() &&
         stmt.extent.constant() == 0;
}

bool dropEmptyLoops(std::vector<Stmt> &block) {
  bool dropped = false;
  std::vector<Stmt> kept;
  for (Stmt &stmt : block) {
    if (isEmptyLoop(stmt)) {
      dropped = true;
      continue;
    }
    dropped |= dropEmptyLoops(stmt.body);
    kept.push_back(std::move(stmt));
  }
  block = std::move(kept);
  return dropped;
}

/// Instructions some statement still reads: operands of kept instructions,
/// reduce yields, and the values indexes name (indirect indexing).
void collectReads(const Kernel &kernel, const std::vector<Stmt> &block,
                  std::set<int> &read) {
  for (const Stmt &stmt : block) {
    if (stmt.kind == Stmt::Kind::Instr) {
      const Instr &instr = kernel.instrs[size_t(stmt.instr)];
      read.insert(instr.args.begin(), instr.args.end());
      for (const SymExpr &index : instr.index) {
        std::set<std::string> symbols;
        index.collectSymbols(symbols);
        for (const std::string &symbol : symbols)
          if (symbol.size() > 1 && symbol[0] == '%')
            read.insert(std::stoi(symbol.substr(1)));
      }
      continue;
    }
    read.insert(stmt.yields.begin(), stmt.yields.end());
    collectReads(kernel, stmt.body, read);
  }
}

/// Removes unread instructions without effects; whether any went.
bool dropUnread(const Kernel &kernel, std::vector<Stmt> &block,
                const std::set<int> &read) {
  bool dropped = false;
  std::vector<Stmt> kept;
  for (Stmt &stmt : block) {
    if (stmt.kind == Stmt::Kind::Instr &&
        kernel.instrs[size_t(stmt.instr)].op != ScalarOp::Store &&
        !read.count(stmt.instr)) {
      dropped = true;
      continue;
    }
    dropped |= dropUnread(kernel, stmt.body, read);
    kept.push_back(std::move(stmt));
  }
  block = std::move(kept);
  return dropped;
}

} // namespace

void dropEmptyLoops(Kernel &kernel) {
  if (!dropEmptyLoops(kernel.body))
    return;
  for (;;) {
    std::set<int> read;
    collectReads(kernel, kernel.body, read);
    if (!dropUnread(kernel, kernel.body, read))
      return;
  }
}

} // namespace dynafuse

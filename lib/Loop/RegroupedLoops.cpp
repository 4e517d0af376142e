//===- RegroupedLoops.cpp - Loops split where their indexes regroup -------===//
//
// A loop over a dim that a view merged from two (attention's output
// [b, heads, tokens, d] read as [b, tokens, heads * d]) indexes its buffer
// with `v // d` and `v % d`: every element's address takes a division and
// a remainder, and consecutive iterations are not consecutive addresses
// once v crosses a multiple of d, so the loop does not vectorize. Its
// reading kernel (the attention output's norm of a small decoder, 2 x 64
// x 64 elements) took 73 us where the same work over contiguous rows
// takes a few.
//
// This pass splits such a loop `for v in 0..E` into `for a in 0..E/d { for
// b in 0..d { ... } }` with v = a * d + b, when d divides E, and a
// reduction's variable likewise into two of its domain; the indexes are
// then simplified in the loops' ranges ((a * d + b) // d is a), and the
// split is kept only where it leaves fewer divisions and remainders of the
// variable. A kernel's outermost loop or reduction (what the runtime
// splits over threads) and argmax/argmin reductions (whose position is the
// flattened one) are left alone, and so are kernels of CUDA buffers (the
// CUDA emitter spreads one loop level over a block's threads; a split would
// narrow it).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Loop/LoopPasses.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

namespace dynafuse {
namespace {

/// Divisions and remainders in expr whose numerator mentions one of vars;
/// with `divisors`, their constant divisors are collected.
int regroupingCount(const SymExpr &expr, const std::set<std::string> &vars,
                    std::set<int64_t> *divisors = nullptr) {
  int count = 0;
  if (expr.kind() == SymExpr::Kind::FloorDiv ||
      expr.kind() == SymExpr::Kind::Mod) {
    std::set<std::string> mentioned;
    expr.operands()[0].collectSymbols(mentioned);
    bool mentions =
        std::any_of(vars.begin(), vars.end(), [&](const std::string &var) {
          return mentioned.count(var) != 0;
        });
    if (mentions) {
      ++count;
      const SymExpr &divisor = expr.operands()[1];
      if (divisors && divisor.isConstant())
        divisors->insert(divisor.constant());
    }
  }
  if (expr.kind() != SymExpr::Kind::Constant &&
      expr.kind() != SymExpr::Kind::Symbol)
    for (const SymExpr &operand : expr.operands())
      count += regroupingCount(operand, vars, divisors);
  return count;
}

/// Calls visit on every instruction under block.
void forEachInstr(std::vector<Stmt> &block,
                  const std::function<void(int)> &visit) {
  for (Stmt &stmt : block) {
    if (stmt.kind == Stmt::Kind::Instr)
      visit(stmt.instr);
    else
      forEachInstr(stmt.body, visit);
  }
}

/// Every loop and reduction variable of a constant extent in the kernel
/// with its extent (the largest, for a name two loops share: a bound).
void collectRanges(const std::vector<Stmt> &block, SymRanges &ranges) {
  auto note = [&](const std::string &var, const SymExpr &extent) {
    if (extent.isConstant())
      ranges[var] = std::max(ranges[var], extent.constant());
  };
  for (const Stmt &stmt : block) {
    if (stmt.kind == Stmt::Kind::For)
      note(stmt.var, stmt.extent);
    for (size_t i = 0; i < stmt.vars.size() && i < stmt.extents.size(); ++i)
      note(stmt.vars[i], stmt.extents[i]);
    collectRanges(stmt.body, ranges);
  }
}

/// Whether a loop or reduction extent under block mentions var (a split
/// would leave it naming a variable that no longer exists).
bool extentsMention(const std::vector<Stmt> &block, const std::string &var) {
  for (const Stmt &stmt : block) {
    std::set<std::string> mentioned;
    stmt.extent.collectSymbols(mentioned);
    for (const SymExpr &extent : stmt.extents)
      extent.collectSymbols(mentioned);
    if (mentioned.count(var) || extentsMention(stmt.body, var))
      return true;
  }
  return false;
}

void collectNames(const std::vector<Stmt> &block,
                  std::set<std::string> &names) {
  for (const Stmt &stmt : block) {
    if (stmt.kind == Stmt::Kind::For)
      names.insert(stmt.var);
    names.insert(stmt.vars.begin(), stmt.vars.end());
    collectNames(stmt.body, names);
  }
}

class LoopSplitter {
public:
  explicit LoopSplitter(Kernel &kernel) : kernel(kernel) {
    collectNames(kernel.body, names);
    collectRanges(kernel.body, ranges);
  }

  void run() {
    for (Stmt &stmt : kernel.body)
      visit(stmt, /*outermost=*/true);
  }

private:
  Kernel &kernel;
  std::set<std::string> names;
  /// Every loop variable's range, the split ones' halves added as made.
  SymRanges ranges;

  std::string freshName(char prefix) {
    for (int n = 0;; ++n) {
      std::string name = prefix + std::to_string(n);
      if (names.insert(name).second)
        return name;
    }
  }

  void visit(Stmt &stmt, bool outermost) {
    for (Stmt &inner : stmt.body)
      visit(inner, false);
    if (stmt.kind == Stmt::Kind::For && !outermost)
      splitLoop(stmt);
    if (stmt.kind == Stmt::Kind::Reduce && !outermost &&
        stmt.reduceKind != ReduceKind::ArgMax &&
        stmt.reduceKind != ReduceKind::ArgMin)
      for (size_t i = 0; i < stmt.vars.size(); ++i)
        if (splitReduceVar(stmt, i))
          ++i; // the inner half needs no second look
  }

  /// The split of var (of constant extent) over body that removes the most
  /// divisions and remainders: the divisor, and the body's rewritten
  /// indexes (instruction -> index), or nullopt.
  std::optional<std::pair<int64_t, std::map<int, std::vector<SymExpr>>>>
  bestSplit(std::vector<Stmt> &body, const std::string &var,
            const SymExpr &extent, const std::string &outer,
            const std::string &inner) {
    if (!extent.isConstant() || extentsMention(body, var))
      return std::nullopt;
    int64_t trips = extent.constant();
    std::set<int64_t> divisors;
    int before = 0;
    std::vector<int> instrs;
    forEachInstr(body, [&](int instr) { instrs.push_back(instr); });
    for (int instr : instrs)
      for (const SymExpr &index : kernel.instrs[size_t(instr)].index)
        before += regroupingCount(index, {var}, &divisors);
    if (before == 0)
      return std::nullopt;
    SymRanges ranges = this->ranges;
    std::optional<std::pair<int64_t, std::map<int, std::vector<SymExpr>>>> best;
    int bestCount = before;
    for (int64_t divisor : divisors) {
      if (divisor <= 1 || divisor >= trips || trips % divisor != 0)
        continue;
      ranges[outer] = trips / divisor;
      ranges[inner] = divisor;
      std::map<std::string, SymExpr> replacement{
          {var,
           SymExpr::symbol(outer) * SymExpr(divisor) + SymExpr::symbol(inner)}};
      std::map<int, std::vector<SymExpr>> rewritten;
      int after = 0;
      for (int instr : instrs) {
        std::vector<SymExpr> indexes;
        for (const SymExpr &index : kernel.instrs[size_t(instr)].index) {
          indexes.push_back(
              simplifyInRanges(index.substitute(replacement), ranges));
          after += regroupingCount(indexes.back(), {outer, inner});
        }
        rewritten[instr] = std::move(indexes);
      }
      if (after < bestCount) {
        bestCount = after;
        best = std::make_pair(divisor, std::move(rewritten));
      }
    }
    return best;
  }

  /// The split's indexes written, its two variables' ranges noted.
  void apply(const std::map<int, std::vector<SymExpr>> &rewritten,
             const std::string &outer, const std::string &inner, int64_t trips,
             int64_t divisor) {
    for (const auto &[instr, indexes] : rewritten)
      kernel.instrs[size_t(instr)].index = indexes;
    ranges[outer] = trips / divisor;
    ranges[inner] = divisor;
  }

  void splitLoop(Stmt &stmt) {
    std::string outer = freshName('i'), inner = freshName('i');
    auto split = bestSplit(stmt.body, stmt.var, stmt.extent, outer, inner);
    if (!split) {
      names.erase(outer);
      names.erase(inner);
      return;
    }
    int64_t divisor = split->first, trips = stmt.extent.constant();
    apply(split->second, outer, inner, trips, divisor);
    Stmt innerLoop = Stmt::loop(inner, SymExpr(divisor), std::move(stmt.body));
    stmt.var = outer;
    stmt.extent = SymExpr(trips / divisor);
    stmt.body.clear();
    stmt.body.push_back(std::move(innerLoop));
  }

  bool splitReduceVar(Stmt &stmt, size_t position) {
    std::string outer = freshName('r'), inner = freshName('r');
    auto split = bestSplit(stmt.body, stmt.vars[position],
                           stmt.extents[position], outer, inner);
    if (!split) {
      names.erase(outer);
      names.erase(inner);
      return false;
    }
    int64_t divisor = split->first;
    int64_t trips = stmt.extents[position].constant();
    apply(split->second, outer, inner, trips, divisor);
    stmt.vars[position] = outer;
    stmt.extents[position] = SymExpr(trips / divisor);
    stmt.vars.insert(stmt.vars.begin() + long(position) + 1, inner);
    stmt.extents.insert(stmt.extents.begin() + long(position) + 1,
                        SymExpr(divisor));
    return true;
  }
};

} // namespace

void splitRegroupedLoops(Kernel &kernel) {
  for (const LoopBuffer &param : kernel.params)
    if (param.type.device != "cpu")
      return;
  LoopSplitter(kernel).run();
}

} // namespace dynafuse

//===- ReductionElementReuse.cpp - Keep a row sum's elements --------------===//
//
// Softmax comes out of kernel building computing exp twice per element:
//
//   %s = reduce sum (r in 0..N) { ... %e = exp(x[i, r] - %max) ; yield %e }
//   for j in 0..N { ... %f = exp(x[i, j] - %max) ; store %out[i, j], %f * %inv
//   }
//
// When the loop after a sum recomputes the summed element (the same
// instructions with r renamed to j) and stores to a buffer nothing else
// touches, the reduction also stores each element into that buffer and the
// loop reads it back instead of recomputing it:
//
//   %s = reduce sum (r in 0..N) { ... ; store %out[i, r], %e ; yield %e }
//   for j in 0..N { %f = load %out[i, j] ; store %out[i, j], %f * %inv }
//
// The stored value is exact (the buffer's dtype is the element's), so the
// result is bitwise the same.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Loop/LoopPasses.h"

#include <set>

namespace dynafuse {
namespace {

class ElementReuse {
public:
  explicit ElementReuse(Kernel &kernel) : kernel(kernel) {}

  void run(std::vector<Stmt> &block) {
    for (size_t s = 0; s < block.size(); ++s) {
      if (block[s].kind == Stmt::Kind::For)
        run(block[s].body);
      if (block[s].kind != Stmt::Kind::Reduce)
        continue;
      for (size_t f = s + 1; f < block.size(); ++f)
        if (block[f].kind == Stmt::Kind::For && reuse(block[s], block[f]))
          break;
    }
  }

private:
  Kernel &kernel;

  Instr &instr(int id) { return kernel.instrs[size_t(id)]; }

  static std::set<int> definedIn(const std::vector<Stmt> &block) {
    std::set<int> ids;
    for (const Stmt &stmt : block)
      if (stmt.kind == Stmt::Kind::Instr)
        ids.insert(stmt.instr);
    return ids;
  }

  bool onlyInstrs(const std::vector<Stmt> &block) {
    for (const Stmt &stmt : block)
      if (stmt.kind != Stmt::Kind::Instr)
        return false;
    return true;
  }

  /// The only store in loop's body, to a buffer nothing else in the kernel
  /// loads or stores; -1 otherwise.
  int soleStore(const Stmt &loop) {
    int store = -1;
    for (const Stmt &stmt : loop.body)
      if (instr(stmt.instr).op == ScalarOp::Store) {
        if (store >= 0)
          return -1;
        store = stmt.instr;
      }
    if (store < 0)
      return -1;
    int buffer = instr(store).buffer;
    for (size_t i = 0; i < kernel.instrs.size(); ++i) {
      const Instr &other = kernel.instrs[i];
      if ((other.op == ScalarOp::Load || other.op == ScalarOp::Store) &&
          other.buffer == buffer && int(i) != store)
        return -1;
    }
    return store;
  }

  /// Whether instruction a (in the reduction, var r) computes what b (in
  /// the loop, var j) does.
  bool same(int a, int b, const std::map<std::string, SymExpr> &rToJ,
            const std::set<int> &inReduce, const std::set<int> &inLoop) {
    if (!inReduce.count(a) || !inLoop.count(b))
      return a == b && !inReduce.count(a) && !inLoop.count(b);
    const Instr &x = instr(a), &y = instr(b);
    if (x.op != y.op || x.type != y.type || x.buffer != y.buffer ||
        x.floatValue != y.floatValue || x.intValue != y.intValue ||
        x.args.size() != y.args.size() || x.index.size() != y.index.size() ||
        x.op == ScalarOp::Store)
      return false;
    for (size_t k = 0; k < x.index.size(); ++k)
      if (isIndirectIndex(x.index[k]) ||
          x.index[k].substitute(rToJ) != y.index[k])
        return false;
    for (size_t k = 0; k < x.args.size(); ++k)
      if (!same(x.args[k], y.args[k], rToJ, inReduce, inLoop))
        return false;
    return true;
  }

  bool reuse(Stmt &reduce, Stmt &loop) {
    if (reduce.reduceKind != ReduceKind::Sum || reduce.vars.size() != 1 ||
        reduce.yields.size() != 1 || reduce.extents[0] != loop.extent ||
        !onlyInstrs(reduce.body) || !onlyInstrs(loop.body))
      return false;
    int store = soleStore(loop);
    if (store < 0 || !injectiveIn(instr(store).index, loop.var))
      return false;
    const std::string &r = reduce.vars[0];
    int yield = reduce.yields[0];
    const LoopBuffer &out = kernel.params[size_t(instr(store).buffer)];
    if (out.type.dtype != instr(yield).type)
      return false;
    std::map<std::string, SymExpr> rToJ = {{r, SymExpr::symbol(loop.var)}};
    std::set<int> inReduce = definedIn(reduce.body);
    std::set<int> inLoop = definedIn(loop.body);
    int twin = -1;
    for (const Stmt &stmt : loop.body)
      if (stmt.instr != store &&
          same(yield, stmt.instr, rToJ, inReduce, inLoop))
        twin = stmt.instr;
    if (twin < 0 || instr(twin).op == ScalarOp::Load)
      return false;
    std::map<std::string, SymExpr> jToR = {{loop.var, SymExpr::symbol(r)}};
    Instr keep;
    keep.op = ScalarOp::Store;
    keep.buffer = instr(store).buffer;
    for (const SymExpr &index : instr(store).index) {
      if (isIndirectIndex(index))
        return false;
      keep.index.push_back(index.substitute(jToR));
    }
    keep.args = {yield};
    keep.name = std::to_string(kernel.instrs.size());
    reduce.body.push_back(Stmt::instruction(kernel.addInstr(keep)));
    Instr &reloaded = instr(twin);
    std::string name = reloaded.name;
    DType type = reloaded.type;
    reloaded = Instr();
    reloaded.op = ScalarOp::Load;
    reloaded.type = type;
    reloaded.name = name;
    reloaded.buffer = instr(store).buffer;
    reloaded.index = instr(store).index;
    removeDead(loop.body);
    return true;
  }

  /// Drops instructions of block nothing uses any more (stores stay).
  void removeDead(std::vector<Stmt> &block) {
    for (bool changed = true; changed;) {
      changed = false;
      std::set<int> used;
      for (const Instr &each : kernel.instrs)
        used.insert(each.args.begin(), each.args.end());
      for (const Stmt &stmt : kernel.body)
        collectUses(stmt, used);
      for (auto it = block.begin(); it != block.end();) {
        const Instr &candidate = instr(it->instr);
        if (candidate.op != ScalarOp::Store && !used.count(it->instr)) {
          instr(it->instr).args.clear();
          it = block.erase(it);
          changed = true;
        } else {
          ++it;
        }
      }
    }
  }

  /// Yields and reduce results count as uses; so do indirect indices.
  void collectUses(const Stmt &stmt, std::set<int> &used) {
    used.insert(stmt.yields.begin(), stmt.yields.end());
    for (const Stmt &child : stmt.body)
      collectUses(child, used);
    if (stmt.kind != Stmt::Kind::Instr)
      return;
    for (const SymExpr &index : instr(stmt.instr).index) {
      std::set<std::string> symbols;
      index.collectSymbols(symbols);
      for (const std::string &symbol : symbols)
        if (!symbol.empty() && symbol[0] == '%')
          for (size_t i = 0; i < kernel.instrs.size(); ++i)
            if (kernel.instrs[i].name == symbol.substr(1))
              used.insert(int(i));
    }
  }
};

} // namespace

void reuseReductionElements(Kernel &kernel) {
  ElementReuse(kernel).run(kernel.body);
}

} // namespace dynafuse

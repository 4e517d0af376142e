//===- ColumnReductions.cpp - Reductions over a non-contiguous dim --------===//
//
// A sum over a dim that is not the innermost one (x.sum(0) of a row-major
// matrix) comes out of kernel building as
//
//   for i in 0..M {                       // output index, contiguous in x
//     %r = reduce sum (r0 in 0..N) { ... load %x[r0, i] ... yield %v }
//     ... epilogue of %r ...
//     store %out[i], %y
//   }
//
// whose reduce loop strides through memory a row at a time. This pass
// accumulates in the output buffer instead, with the output loop innermost:
//
//   for i in 0..M { store %out[i], 0 }
//   for r0 in 0..N {                      // (a loop per reduction variable)
//     for i in 0..M { ... %o = load %out[i]; store %out[i], %o + %v }
//   }
//   for i in 0..M { %r = load %out[i]; ... epilogue ...; store %out[i], %y }
//
// so every loop reads and writes memory contiguously and vectorizes. It
// applies to f32/f64 sum, prod, max and min (NaN-propagating, as the
// reduction) whose output is stored once, at an index the reduction does
// not change, and is not otherwise read by the kernel. A loop computing
// several independent column reductions (the weight and bias gradients of
// a norm, each ending in its store) is first split into one loop each.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Loop/LoopPasses.h"

#include <limits>
#include <map>
#include <optional>
#include <set>

namespace dynafuse {
namespace {

bool mentions(const SymExpr &expr, const std::string &symbol) {
  std::set<std::string> symbols;
  expr.collectSymbols(symbols);
  return symbols.count(symbol) > 0;
}

} // namespace

/// The index ends in exactly `var`, which no other dim mentions: distinct
/// iterations of var store to distinct elements.
bool injectiveIn(const std::vector<SymExpr> &index, const std::string &var) {
  if (index.empty() || index.back() != SymExpr::symbol(var))
    return false;
  for (size_t k = 0; k < index.size(); ++k)
    if (isIndirectIndex(index[k]) ||
        (k + 1 < index.size() && mentions(index[k], var)))
      return false;
  return true;
}

namespace {

/// The dim of buffer's index that is innermost in memory, of a size other
/// than 1: the last such for a row-major buffer, the one of stride 1 for
/// explicit strides (channels-last: the channel); -1 when there is none.
int innermostDim(const LoopBuffer &buffer) {
  const TensorType &type = buffer.type;
  size_t rank = type.sizes.size();
  for (size_t k = rank; k-- > 0;) {
    if (type.sizes[k] == SymExpr(1))
      continue;
    if (type.strides.empty() || type.strides[k] == SymExpr(1))
      return int(k);
  }
  return -1;
}

/// The index is exactly `var` in the buffer's innermost dim, which no
/// other dim mentions: distinct iterations of var store to distinct,
/// adjacent elements (a [1, C, 1, 1] mean stored per channel).
bool storesAlong(const std::vector<SymExpr> &index, const LoopBuffer &buffer,
                 const std::string &var) {
  int inner = innermostDim(buffer);
  if (inner < 0 || size_t(inner) >= index.size() ||
      index[size_t(inner)] != SymExpr::symbol(var))
    return false;
  for (size_t k = 0; k < index.size(); ++k)
    if (isIndirectIndex(index[k]) ||
        (int(k) != inner && mentions(index[k], var)))
      return false;
  return true;
}

/// The pieces of a loop `for v { pre; reduce; post; store }` that match.
struct ColumnSum {
  std::vector<Stmt> pre, post;
  Stmt reduce;
  int store = -1;
};

class Interchanger {
public:
  explicit Interchanger(Kernel &kernel) : kernel(kernel) {}

  void run(std::vector<Stmt> &block) {
    for (size_t s = 0; s < block.size(); ++s) {
      if (block[s].kind != Stmt::Kind::For)
        continue;
      std::vector<Stmt> pieces = independentPieces(block[s]);
      if (pieces.size() > 1) {
        block.erase(block.begin() + long(s));
        block.insert(block.begin() + long(s), pieces.begin(), pieces.end());
      }
      ColumnSum match;
      if (matches(block[s], match)) {
        std::vector<Stmt> loops = rewrite(block[s], match);
        block.erase(block.begin() + long(s));
        block.insert(block.begin() + long(s), loops.begin(), loops.end());
        s += loops.size() - 1;
        continue;
      }
      run(block[s].body);
    }
  }

private:
  Kernel &kernel;

  const Instr &instr(const Stmt &stmt) const {
    return kernel.instrs[size_t(stmt.instr)];
  }

  /// The instructions a statement defines, and those it reads.
  void collect(const Stmt &stmt, std::set<int> &defined,
               std::set<int> &used) const {
    if (stmt.kind == Stmt::Kind::Instr) {
      defined.insert(stmt.instr);
      for (int arg : instr(stmt).args)
        used.insert(arg);
      return;
    }
    for (int result : stmt.results)
      defined.insert(result);
    for (int yield : stmt.yields)
      used.insert(yield);
    for (const Stmt &inner : stmt.body)
      collect(inner, defined, used);
  }

  /// A loop whose body is several column reductions, each ending in its
  /// store and reading nothing another defines, as one loop per reduction
  /// (in order: each stores to its own elements); the loop itself
  /// otherwise (fused pointwise stores stay together). A pure instruction
  /// of an earlier segment's top level that a later one reads (a weight
  /// loaded at the output index) is copied into it.
  std::vector<Stmt> independentPieces(const Stmt &loop) {
    std::vector<std::vector<Stmt>> segments(1);
    for (const Stmt &stmt : loop.body) {
      segments.back().push_back(stmt);
      if (stmt.kind == Stmt::Kind::Instr &&
          instr(stmt).op == ScalarOp::Store)
        segments.emplace_back();
    }
    if (segments.back().empty())
      segments.pop_back();
    if (segments.size() < 2)
      return {loop};
    std::vector<std::set<int>> defined(segments.size()), used(segments.size());
    std::set<int> stored;
    for (size_t k = 0; k < segments.size(); ++k)
      for (const Stmt &stmt : segments[k]) {
        collect(stmt, defined[k], used[k]);
        if (stmt.kind == Stmt::Kind::Instr &&
            instr(stmt).op == ScalarOp::Store)
          if (!stored.insert(instr(stmt).buffer).second)
            return {loop}; // two stores to one buffer: keep their order
      }
    // Pure top-level instructions, by id, with the segment defining them.
    std::map<int, size_t> copyable;
    for (size_t k = 0; k < segments.size(); ++k)
      for (const Stmt &stmt : segments[k])
        if (stmt.kind == Stmt::Kind::Instr && instr(stmt).op != ScalarOp::Store)
          copyable[stmt.instr] = k;
    for (const std::vector<Stmt> &segment : segments) {
      ColumnSum match;
      if (!matches(Stmt::loop(loop.var, loop.extent, segment), match))
        return {loop};
    }
    std::vector<std::set<int>> neededBy(segments.size());
    for (size_t k = 0; k < segments.size(); ++k) {
      // What segment k reads from earlier ones, with their arguments.
      std::set<int> needed;
      std::vector<int> pending(used[k].begin(), used[k].end());
      while (!pending.empty()) {
        int id = pending.back();
        pending.pop_back();
        bool elsewhere = false;
        for (size_t j = 0; j < segments.size(); ++j)
          elsewhere |= j != k && defined[j].count(id);
        if (!elsewhere || defined[k].count(id))
          continue;
        auto found = copyable.find(id);
        if (found == copyable.end() || found->second > k)
          return {loop}; // a reduction's result, or a later segment's value
        if (needed.insert(id).second)
          for (int arg : kernel.instrs[size_t(id)].args)
            pending.push_back(arg);
      }
      neededBy[k] = needed;
    }
    // Only now change instructions: every segment can be split off.
    for (size_t k = 0; k < segments.size(); ++k) {
      const std::set<int> &needed = neededBy[k];
      if (needed.empty())
        continue;
      std::vector<Stmt> copies;
      for (size_t j = 0; j < k; ++j)
        for (const Stmt &stmt : segments[j])
          if (stmt.kind == Stmt::Kind::Instr && needed.count(stmt.instr))
            copies.push_back(stmt);
      copies = cloned(copies);
      std::map<int, int> renamed = lastRenames;
      for (Stmt &stmt : segments[k])
        remapStmt(stmt, renamed);
      segments[k].insert(segments[k].begin(), copies.begin(), copies.end());
    }
    // A segment must not load what another stores.
    for (size_t k = 0; k < segments.size(); ++k)
      for (int id : defined[k]) {
        const Instr &load = kernel.instrs[size_t(id)];
        if (load.op == ScalarOp::Load && stored.count(load.buffer))
          return {loop};
      }
    std::vector<Stmt> pieces;
    for (std::vector<Stmt> &segment : segments)
      pieces.push_back(Stmt::loop(loop.var, loop.extent, std::move(segment)));
    return pieces;
  }

  bool onlyInstrs(const std::vector<Stmt> &block) const {
    for (const Stmt &stmt : block)
      if (stmt.kind != Stmt::Kind::Instr || instr(stmt).op == ScalarOp::Store)
        return false;
    return true;
  }

  bool matches(const Stmt &loop, ColumnSum &match) const {
    size_t at = 0;
    const std::vector<Stmt> &body = loop.body;
    while (at < body.size() && body[at].kind == Stmt::Kind::Instr)
      match.pre.push_back(body[at++]);
    if (at == body.size() || body[at].kind != Stmt::Kind::Reduce)
      return false;
    match.reduce = body[at++];
    for (; at + 1 < body.size(); ++at)
      match.post.push_back(body[at]);
    if (at >= body.size() || body[at].kind != Stmt::Kind::Instr ||
        instr(body[at]).op != ScalarOp::Store)
      return false;
    match.store = body[at].instr;
    const Stmt &reduce = match.reduce;
    if (!combinerOf(reduce.reduceKind) || reduce.vars.empty() ||
        reduce.yields.size() != 1 || !onlyInstrs(reduce.body) ||
        !onlyInstrs(match.pre) || !onlyInstrs(match.post))
      return false;
    const Instr &store = kernel.instrs[size_t(match.store)];
    DType type = kernel.instrs[size_t(reduce.results[0])].type;
    const LoopBuffer &out = kernel.params[size_t(store.buffer)];
    if ((type != DType::F32 && type != DType::F64) || out.type.dtype != type)
      return false;
    if (!injectiveIn(store.index, loop.var) &&
        !storesAlong(store.index, out, loop.var))
      return false;
    for (const SymExpr &index : store.index)
      for (const std::string &var : reduce.vars)
        if (mentions(index, var))
          return false;
    return readsOnlyOnce(store.buffer, match.store) &&
           stridesAlongRows(reduce, loop.var);
  }

  /// The output buffer is written by this store alone and never read.
  bool readsOnlyOnce(int buffer, int store) const {
    for (size_t i = 0; i < kernel.instrs.size(); ++i) {
      const Instr &other = kernel.instrs[i];
      bool touches =
          (other.op == ScalarOp::Load || other.op == ScalarOp::Store) &&
          other.buffer == buffer;
      if (touches && int(i) != store)
        return false;
    }
    return true;
  }

  /// Some load reads along v contiguously (v in the index of its buffer's
  /// innermost dim) while the reduction moves it across rows (its
  /// variables in other dims only: a sum over dims 0 and 1 of [4, 256, C]
  /// moves across 1024 rows, as does a mean over the pixels of a
  /// channels-last image).
  bool stridesAlongRows(const Stmt &reduce, const std::string &var) const {
    auto mentionsReduced = [&](const SymExpr &index) {
      for (const std::string &r : reduce.vars)
        if (mentions(index, r))
          return true;
      return false;
    };
    for (const Stmt &stmt : reduce.body) {
      const Instr &load = instr(stmt);
      if (load.op != ScalarOp::Load || load.index.size() < 2)
        continue;
      int inner = innermostDim(kernel.params[size_t(load.buffer)]);
      if (inner < 0 || size_t(inner) >= load.index.size())
        continue;
      bool rowMove = false;
      for (size_t k = 0; k < load.index.size(); ++k)
        rowMove = rowMove ||
                  (int(k) != inner && mentionsReduced(load.index[k]));
      const SymExpr &along = load.index[size_t(inner)];
      if (rowMove && mentions(along, var) && !mentionsReduced(along))
        return true;
    }
    return false;
  }

  /// Appends an instruction, named by its index as kernel building names
  /// them (clones need fresh names).
  int add(Instr instr) {
    instr.name = std::to_string(kernel.instrs.size());
    return kernel.addInstr(std::move(instr));
  }

  /// The scalar op that folds one more value into an accumulator, for the
  /// kinds this pass handles.
  static std::optional<ScalarOp> combinerOf(ReduceKind kind) {
    switch (kind) {
    case ReduceKind::Sum:
      return ScalarOp::Add;
    case ReduceKind::Prod:
      return ScalarOp::Mul;
    case ReduceKind::Max: // NaN-propagating, as the reduction
      return ScalarOp::Max;
    case ReduceKind::Min:
      return ScalarOp::Min;
    default:
      return std::nullopt;
    }
  }

  static Instr identityOf(ReduceKind kind, DType type) {
    Instr identity;
    identity.op = ScalarOp::Const;
    identity.type = type;
    double inf = std::numeric_limits<double>::infinity();
    identity.floatValue = kind == ReduceKind::Prod  ? 1.0
                          : kind == ReduceKind::Max ? -inf
                          : kind == ReduceKind::Min ? inf
                                                    : 0.0;
    return identity;
  }

  Instr access(ScalarOp op, const Instr &store, std::vector<int> args,
               DType type) const {
    Instr access;
    access.op = op;
    access.type = type;
    access.buffer = store.buffer;
    access.index = store.index;
    access.args = std::move(args);
    return access;
  }

  std::vector<Stmt> rewrite(const Stmt &loop, const ColumnSum &match) {
    const Instr store = kernel.instrs[size_t(match.store)];
    int result = match.reduce.results[0];
    DType type = kernel.instrs[size_t(result)].type;
    // 1: zero the accumulators.
    ReduceKind kind = match.reduce.reduceKind;
    int zero = add(identityOf(kind, type));
    int init = add(access(ScalarOp::Store, store, {zero}, type));
    Stmt initLoop =
        Stmt::loop(loop.var, loop.extent,
                   {Stmt::instruction(zero), Stmt::instruction(init)});
    // 2: accumulate row by row, the output loop innermost.
    std::vector<Stmt> inner = cloned(match.pre);
    std::map<int, int> renamed = lastRenames;
    for (const Stmt &stmt : match.reduce.body) {
      remapArgs(stmt, renamed);
      inner.push_back(stmt);
    }
    int old = add(access(ScalarOp::Load, store, {}, type));
    int yield = match.reduce.yields[0];
    if (renamed.count(yield))
      yield = renamed[yield];
    Instr sum;
    sum.op = *combinerOf(kind);
    sum.type = type;
    sum.args = {old, yield};
    int added = add(sum);
    int write = add(access(ScalarOp::Store, store, {added}, type));
    for (int id : {old, added, write})
      inner.push_back(Stmt::instruction(id));
    // One loop per reduction variable, the first outermost.
    Stmt rows = Stmt::loop(loop.var, loop.extent, inner);
    for (size_t k = match.reduce.vars.size(); k-- > 0;)
      rows = Stmt::loop(match.reduce.vars[k], match.reduce.extents[k], {rows});
    // 3: the epilogue reads the sums back (the reduced value becomes a
    // load of its accumulator).
    Instr &reduced = kernel.instrs[size_t(result)];
    std::string name = reduced.name;
    reduced = access(ScalarOp::Load, store, {}, type);
    reduced.name = name;
    std::vector<Stmt> last = {Stmt::instruction(result)};
    for (const Stmt &stmt : match.pre)
      last.push_back(stmt);
    for (const Stmt &stmt : match.post)
      last.push_back(stmt);
    last.push_back(Stmt::instruction(match.store));
    return {initLoop, rows, Stmt::loop(loop.var, loop.extent, last)};
  }

  /// Copies of pure instructions, their arguments renamed among the copies;
  /// the renaming is kept in lastRenames.
  std::vector<Stmt> cloned(const std::vector<Stmt> &block) {
    lastRenames.clear();
    std::vector<Stmt> copies;
    for (const Stmt &stmt : block) {
      Instr copy = instr(stmt);
      for (int &arg : copy.args)
        if (lastRenames.count(arg))
          arg = lastRenames[arg];
      remapIndirectIndex(copy, lastRenames);
      int id = add(copy);
      lastRenames[stmt.instr] = id;
      copies.push_back(Stmt::instruction(id));
    }
    return copies;
  }

  /// remapArgs through reductions' bodies and yields.
  void remapStmt(Stmt &stmt, const std::map<int, int> &renamed) {
    if (stmt.kind == Stmt::Kind::Instr) {
      remapArgs(stmt, renamed);
      return;
    }
    for (int &yield : stmt.yields)
      if (renamed.count(yield))
        yield = renamed.at(yield);
    for (Stmt &inner : stmt.body)
      remapStmt(inner, renamed);
  }

  void remapArgs(const Stmt &stmt, const std::map<int, int> &renamed) {
    Instr &target = kernel.instrs[size_t(stmt.instr)];
    for (int &arg : target.args) {
      auto found = renamed.find(arg);
      if (found != renamed.end())
        arg = found->second;
    }
    remapIndirectIndex(target, renamed);
  }

  /// An indirect index names the value it reads ("%7"): the copy's name.
  void remapIndirectIndex(Instr &target, const std::map<int, int> &renamed) {
    std::map<std::string, SymExpr> replacements;
    for (const auto &[from, to] : renamed)
      replacements["%" + kernel.instrs[size_t(from)].name] =
          SymExpr::symbol("%" + kernel.instrs[size_t(to)].name);
    for (SymExpr &index : target.index)
      if (isIndirectIndex(index))
        index = index.substitute(replacements);
  }

  std::map<int, int> lastRenames;
};

} // namespace

void interchangeColumnReductions(Kernel &kernel) {
  Interchanger(kernel).run(kernel.body);
}

} // namespace dynafuse

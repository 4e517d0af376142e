//===- KernelBuilder.cpp - Builds a kernel body with placement ------------===//
#include "dynafuse/Lowering/KernelBuilder.h"

#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/TextCursor.h"

#include <algorithm>
#include <cassert>

namespace dynafuse {

KernelBuilder::KernelBuilder(Kernel &kernel) : kernel(kernel) {
  scopes.emplace_back();
  path.push_back(0);
}

std::string KernelBuilder::freshVar(const char *prefix) {
  return prefix + std::to_string(varCounter++);
}

SymExpr KernelBuilder::openLoop(const SymExpr &extent) {
  Scope scope;
  scope.parent = path.back();
  scope.vars = {freshVar("i")};
  scope.extents = {extent};
  scopes.push_back(scope);
  int id = int(scopes.size()) - 1;
  scopeOfVar[scope.vars[0]] = id;
  recordExtent(scope.vars[0], extent);
  path.push_back(id);
  return SymExpr::symbol(scope.vars[0]);
}

void KernelBuilder::closeLoop() {
  int id = path.back();
  Scope &scope = scopes[id];
  assert(!scope.isReduce && "closeLoop on a reduction");
  path.pop_back();
  Stmt loop =
      Stmt::loop(scope.vars[0], scope.extents[0], std::move(scope.body));
  scopes[scope.parent].body.push_back(std::move(loop));
}

void KernelBuilder::varsOf(const SymExpr &expr, std::set<int> &found) const {
  std::set<std::string> symbols;
  expr.collectSymbols(symbols);
  for (const std::string &symbol : symbols) {
    if (symbol[0] == '%') {
      for (size_t i = 0; i < kernel.instrs.size(); ++i)
        if ("%" + kernel.instrs[i].name == symbol)
          found.insert(scopeOfInstr.at(int(i)));
      continue;
    }
    auto var = scopeOfVar.find(symbol);
    if (var != scopeOfVar.end())
      found.insert(var->second);
  }
}

int KernelBuilder::deepestOnPath(const std::set<int> &found) const {
  int position = 0;
  for (int scope : found) {
    auto at = std::find(path.begin(), path.end(), scope);
    if (at == path.end())
      fail("lowering placed a value outside its scope");
    position = std::max(position, int(at - path.begin()));
  }
  return path[position];
}

int KernelBuilder::placementOf(const Instr &instr) const {
  std::set<int> found;
  for (int arg : instr.args)
    found.insert(scopeOfInstr.at(arg));
  for (const SymExpr &expr : instr.index)
    varsOf(expr, found);
  return deepestOnPath(found);
}

int KernelBuilder::append(Instr instr) {
  std::string constantKey;
  if (instr.op == ScalarOp::Const) {
    constantKey = std::string(dtypeName(instr.type)) + ":" +
                  formatFloatLiteral(instr.floatValue) + ":" +
                  std::to_string(instr.intValue);
    auto found = constants.find(constantKey);
    if (found != constants.end())
      return found->second;
  }
  int scope = placementOf(instr);
  if (instr.op != ScalarOp::Store)
    instr.name = std::to_string(kernel.instrs.size());
  int id = kernel.addInstr(std::move(instr));
  scopeOfInstr[id] = scope;
  scopes[scope].body.push_back(Stmt::instruction(id));
  if (!constantKey.empty())
    constants[constantKey] = id;
  return id;
}

bool KernelBuilder::openReduce(ReduceKind kind,
                               const std::vector<SymExpr> &extents,
                               const std::set<std::string> &outerVars,
                               const std::set<std::string> &coarseVars,
                               const std::set<std::string> &maskSymbols,
                               std::vector<SymExpr> &vars) {
  std::set<int> found;
  for (const std::string &var : outerVars)
    varsOf(SymExpr::symbol(var), found);
  for (const std::string &symbol : maskSymbols)
    varsOf(SymExpr::symbol(symbol), found);
  int placement = deepestOnPath(found);
  // Every variable of the scopes down to the placement must be used, each
  // of its values giving another index, or the reduction would be
  // recomputed for each of its values (a group norm's statistics, indexed
  // by `channel // 8` in a loop over channels: 8 times each).
  for (int scope : path) {
    for (size_t k = 0; k < scopes[scope].vars.size(); ++k) {
      const std::string &var = scopes[scope].vars[k];
      bool single = scopes[scope].extents[k] == SymExpr(1);
      if ((!outerVars.count(var) || coarseVars.count(var)) && !single)
        return false;
    }
    if (scope == placement)
      break;
  }
  Scope scope;
  scope.parent = placement;
  scope.isReduce = true;
  scope.reduceKind = kind;
  scope.extents = extents;
  for (size_t k = 0; k < extents.size(); ++k)
    scope.vars.push_back(freshVar("r"));
  scope.savedPath = path;
  scopes.push_back(scope);
  int id = int(scopes.size()) - 1;
  vars.clear();
  for (size_t k = 0; k < extents.size(); ++k) {
    const std::string &name = scopes[id].vars[k];
    scopeOfVar[name] = id;
    recordExtent(name, extents[k]);
    vars.push_back(SymExpr::symbol(name));
  }
  path.resize(std::find(path.begin(), path.end(), placement) - path.begin() +
              1);
  path.push_back(id);
  return true;
}

std::vector<int> KernelBuilder::closeReduce(const std::vector<int> &yields) {
  int id = path.back();
  Scope &scope = scopes[id];
  assert(scope.isReduce && "closeReduce without an open reduction");
  std::vector<int> results;
  for (int yield : yields) {
    Instr result;
    result.op = ScalarOp::Reduced;
    result.type = kernel.instrs[yield].type;
    result.name = std::to_string(kernel.instrs.size());
    int resultId = kernel.addInstr(result);
    scopeOfInstr[resultId] = scope.parent;
    results.push_back(resultId);
  }
  Stmt reduce = Stmt::reduce(scope.reduceKind, scope.vars, scope.extents,
                             std::move(scope.body), yields, results);
  scopes[scope.parent].body.push_back(std::move(reduce));
  path = scope.savedPath;
  return results;
}

bool KernelBuilder::visible(int id) const {
  auto found = scopeOfInstr.find(id);
  return found != scopeOfInstr.end() &&
         std::find(path.begin(), path.end(), found->second) != path.end();
}

void KernelBuilder::recordExtent(const std::string &var,
                                 const SymExpr &extent) {
  if (extent.isConstant())
    constantExtents[var] = extent.constant();
  else
    symbolicExtents[var] = extent;
}

SymRanges KernelBuilder::openRanges() const { return constantExtents; }

SymExtents KernelBuilder::openSymbolicExtents() const {
  return symbolicExtents;
}

void KernelBuilder::finish() {
  if (path.size() != 1)
    fail("lowering left a loop open");
  kernel.body = std::move(scopes[0].body);
}

} // namespace dynafuse

//===- CUDAVectorPlan.cpp - Which accesses of a pointwise kernel widen ----===//
//
// A pointwise kernel's threads each take 4 consecutive elements of the
// innermost loop when its loads and stores of 4-byte elements move in
// 16-byte vectors (ld.global.v4 / st.global.v4): fewer, wider memory
// instructions keep more bytes in flight per thread. The plan lists the
// accesses that widen: those whose index is the innermost variable in one
// dim of stride 1 and that variable nowhere else. The kernel qualifies
// only when every access either widens or does not depend on the
// innermost variable (a broadcast, loaded per lane), its body has no
// loops or reductions, no buffer is both read and written (a widened load
// happens before every lane's stores), and no index is indirect. Whether
// the sizes and addresses allow it is checked when the kernel runs
// (CUDAEmitter.cpp).
//
//===----------------------------------------------------------------------===//
#include "CUDACodegen.h"

#include <set>

namespace dynafuse {
namespace {

bool mentions(const SymExpr &e, const std::string &var) {
  std::set<std::string> symbols;
  e.collectSymbols(symbols);
  return symbols.count(var) != 0;
}

bool isFourBytes(DType type) {
  return type == DType::F32 || type == DType::I32;
}

/// The dim whose index is exactly `var` (stride 1), when no other dim
/// mentions it; -1 otherwise.
int unitStrideDim(const Kernel &kernel, const Instr &instr,
                  const std::string &var) {
  std::vector<SymExpr> strides =
      kernel.params[instr.buffer].type.effectiveStrides();
  int found = -1;
  for (size_t k = 0; k < instr.index.size(); ++k) {
    if (!mentions(instr.index[k], var))
      continue;
    bool exact = instr.index[k].kind() == SymExpr::Kind::Symbol &&
                 instr.index[k].symbolName() == var;
    bool unit = strides[k].isConstant() && strides[k].constant() == 1;
    if (!exact || !unit || found >= 0)
      return -1;
    found = int(k);
  }
  return found;
}

} // namespace

std::optional<CUDAVectorPlan> planVectorAccess(const Kernel &kernel,
                                               const std::string &innerVar,
                                               const std::vector<Stmt> &body) {
  CUDAVectorPlan plan;
  std::set<int> loaded, stored;
  for (const Stmt &stmt : body) {
    if (stmt.kind != Stmt::Kind::Instr)
      return std::nullopt;
    const Instr &instr = kernel.instrs[stmt.instr];
    if (instr.op != ScalarOp::Load && instr.op != ScalarOp::Store)
      continue;
    (instr.op == ScalarOp::Load ? loaded : stored).insert(instr.buffer);
    bool dependent = false;
    for (const SymExpr &index : instr.index) {
      if (isIndirectIndex(index))
        return std::nullopt;
      dependent = dependent || mentions(index, innerVar);
    }
    if (!dependent)
      continue;
    bool masked = instr.op == ScalarOp::Load && !instr.args.empty();
    int dim = unitStrideDim(kernel, instr, innerVar);
    if (masked || dim < 0 ||
        !isFourBytes(kernel.params[instr.buffer].type.dtype))
      return std::nullopt;
    plan.widened[stmt.instr] = dim;
  }
  for (int buffer : loaded)
    if (stored.count(buffer))
      return std::nullopt;
  if (plan.widened.empty())
    return std::nullopt;
  return plan;
}

} // namespace dynafuse

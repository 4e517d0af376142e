//===- ShapeEnv.cpp - Symbolic sizes of one capture -----------------------===//
#include "ShapeEnv.h"

#include "dynafuse/Support/Error.h"

#include <Python.h>

namespace dynafuse {
namespace {

const char *relationText(int relation) {
  static const char *texts[] = {"<", "<=", "==", "!=", ">", ">="};
  return relation >= 0 && relation <= 5 ? texts[relation] : "?";
}

bool compare(int relation, int64_t lhs, int64_t rhs) {
  switch (relation) {
  case Py_LT:
    return lhs < rhs;
  case Py_LE:
    return lhs <= rhs;
  case Py_EQ:
    return lhs == rhs;
  case Py_NE:
    return lhs != rhs;
  case Py_GT:
    return lhs > rhs;
  case Py_GE:
    return lhs >= rhs;
  }
  fail("unknown comparison " + std::to_string(relation));
}

/// The relation that holds when `relation` does not.
int negated(int relation) {
  switch (relation) {
  case Py_LT:
    return Py_GE;
  case Py_LE:
    return Py_GT;
  case Py_EQ:
    return Py_NE;
  case Py_NE:
    return Py_EQ;
  case Py_GT:
    return Py_LE;
  default:
    return Py_LT;
  }
}

/// Whether lhs <relation> rhs holds for every size >= 2.
bool alwaysHolds(int relation, const SymExpr &lhs, const SymExpr &rhs) {
  SymExpr difference = lhs - rhs;
  switch (relation) {
  case Py_LT:
    return provablyNonNegative(rhs - lhs - 1);
  case Py_LE:
    return provablyNonNegative(rhs - lhs);
  case Py_GT:
    return provablyNonNegative(difference - 1);
  case Py_GE:
    return provablyNonNegative(difference);
  case Py_EQ:
    return difference == SymExpr(0);
  case Py_NE:
    return provablyNonNegative(difference - 1) ||
           provablyNonNegative(SymExpr(-1) - difference);
  }
  return false;
}

} // namespace

bool ShapeGuard::holds(const std::map<std::string, int64_t> &bindings) const {
  return compare(relation, lhs.evaluate(bindings), rhs.evaluate(bindings));
}

std::string ShapeGuard::str() const {
  return lhs.str() + " " + relationText(relation) + " " + rhs.str();
}

std::vector<bool> ShapeHistory::changed(const std::string &key,
                                        const std::vector<int64_t> &sizes) const {
  std::vector<bool> dims(sizes.size(), false);
  auto first = firstSizes.find(key);
  if (first != firstSizes.end() && first->second.size() == sizes.size())
    for (size_t k = 0; k < sizes.size(); ++k)
      dims[k] = first->second[k] != sizes[k];
  auto before = changedDims.find(key);
  if (before != changedDims.end())
    for (size_t k : before->second)
      if (k < dims.size())
        dims[k] = true;
  return dims;
}

void ShapeHistory::record(
    const std::map<std::string, std::vector<int64_t>> &sizes) {
  for (const auto &[source, seen] : sizes) {
    std::vector<bool> dims = changed(source, seen);
    for (size_t k = 0; k < dims.size(); ++k)
      if (dims[k])
        changedDims[source].insert(k);
    firstSizes.emplace(source, seen);
  }
}

SymExpr ShapeEnv::newSymbol(int64_t hint) {
  std::string name = "s" + std::to_string(hints.size());
  hints[name] = hint;
  return SymExpr::symbol(name);
}

int64_t ShapeEnv::hintOf(const SymExpr &expr) const {
  return expr.evaluate(hints);
}

SymExpr ShapeEnv::canonical(const SymExpr &expr) const {
  return replacements.empty() ? expr : expr.substitute(replacements);
}

bool ShapeEnv::decide(int relation, const SymExpr &lhs, const SymExpr &rhs,
                      std::vector<ShapeGuard> &guards) const {
  SymExpr left = canonical(lhs), right = canonical(rhs);
  bool outcome = compare(relation, hintOf(left), hintOf(right));
  int holding = outcome ? relation : negated(relation);
  if (!alwaysHolds(holding, left, right))
    guards.push_back(ShapeGuard{left, right, holding});
  return outcome;
}

void ShapeEnv::unify(const SymExpr &a, const SymExpr &b,
                     std::vector<ShapeGuard> &guards) {
  SymExpr kept = canonical(a), replaced = canonical(b);
  if (kept == replaced)
    return;
  if (!replaced.isSymbol() || hintOf(kept) != hintOf(replaced))
    fail("cannot unify sizes " + kept.str() + " and " + replaced.str());
  guards.push_back(ShapeGuard{replaced, kept, Py_EQ});
  replacements[replaced.symbolName()] = kept;
  for (auto &entry : replacements)
    entry.second = entry.second.substitute(
        {{replaced.symbolName(), kept}});
}

} // namespace dynafuse

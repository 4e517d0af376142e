//===- SymPolynomial.h - The polynomial view of SymExpr ---------*- C++ -*-===//
//
// Canonicalization goes through a polynomial view: every expression is a map
// from monomials (sorted atom lists) to coefficients. Building an expression
// converts operands to polynomials, combines them and converts back
// (SymExpr.cpp); the range rules (SymRanges.cpp) split and divide
// polynomials term by term. Private to lib/Support.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_SYMPOLYNOMIAL_H
#define DYNAFUSE_SUPPORT_SYMPOLYNOMIAL_H

#include "dynafuse/Support/SymExpr.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace dynafuse {

/// A monomial is a sorted list of atoms; its key joins their texts.
struct Term {
  int64_t coefficient = 0;
  std::vector<SymExpr> atoms;
};
using Poly = std::map<std::string, Term>;

inline std::string monomialKey(const std::vector<SymExpr> &atoms) {
  std::string key;
  for (const SymExpr &atom : atoms)
    key += atom.str() + "\x1f";
  return key;
}

inline void addTerm(Poly &poly, int64_t coefficient,
                    std::vector<SymExpr> atoms) {
  if (coefficient == 0)
    return;
  std::sort(atoms.begin(), atoms.end());
  std::string key = monomialKey(atoms);
  Term &term = poly[key];
  term.atoms = std::move(atoms);
  term.coefficient += coefficient;
  if (term.coefficient == 0)
    poly.erase(key);
}

/// Conversions between expressions and polynomials, and the polynomial
/// arithmetic the simplifier needs (a friend of SymExpr: it builds nodes).
struct SymExprBuilder {
  static Poly toPoly(const SymExpr &expr) {
    Poly poly;
    switch (expr.kind()) {
    case SymExpr::Kind::Constant:
      addTerm(poly, expr.constant(), {});
      return poly;
    case SymExpr::Kind::Add:
      for (const SymExpr &operand : expr.operands())
        for (auto &entry : toPoly(operand))
          addTerm(poly, entry.second.coefficient, entry.second.atoms);
      return poly;
    case SymExpr::Kind::Mul: {
      addTerm(poly, 1, {});
      for (const SymExpr &operand : expr.operands())
        poly = multiply(poly, toPoly(operand));
      return poly;
    }
    default:
      addTerm(poly, 1, {expr});
      return poly;
    }
  }

  static Poly multiply(const Poly &lhs, const Poly &rhs) {
    Poly product;
    for (auto &left : lhs) {
      for (auto &right : rhs) {
        std::vector<SymExpr> atoms = left.second.atoms;
        atoms.insert(atoms.end(), right.second.atoms.begin(),
                     right.second.atoms.end());
        addTerm(product, left.second.coefficient * right.second.coefficient,
                atoms);
      }
    }
    return product;
  }

  static SymExpr termToExpr(const Term &term) {
    if (term.atoms.empty())
      return SymExpr(term.coefficient);
    if (term.atoms.size() == 1 && term.coefficient == 1)
      return term.atoms[0];
    std::vector<SymExpr> factors;
    if (term.coefficient != 1)
      factors.push_back(SymExpr(term.coefficient));
    factors.insert(factors.end(), term.atoms.begin(), term.atoms.end());
    return SymExpr::make(SymExpr::Kind::Mul, factors);
  }

  static SymExpr fromPoly(const Poly &poly) {
    std::vector<SymExpr> terms;
    const Term *constantTerm = nullptr;
    for (auto &entry : poly) {
      if (entry.second.atoms.empty()) {
        constantTerm = &entry.second;
        continue;
      }
      terms.push_back(termToExpr(entry.second));
    }
    if (constantTerm)
      terms.push_back(SymExpr(constantTerm->coefficient));
    if (terms.empty())
      return SymExpr(int64_t(0));
    if (terms.size() == 1)
      return terms[0];
    return SymExpr::make(SymExpr::Kind::Add, terms);
  }

  /// True when every coefficient of poly is a multiple of divisor.
  static bool allDivisible(const Poly &poly, int64_t divisor) {
    for (auto &entry : poly)
      if (entry.second.coefficient % divisor != 0)
        return false;
    return true;
  }

  /// poly / divisor when divisor is one term (c * atoms) that divides every
  /// term of poly: (s0*s1*768) // (s0*s1*12) is 64, as a reshape's -1 needs.
  static bool divideByMonomial(const Poly &poly, const Poly &divisor,
                               Poly &quotient) {
    if (divisor.size() != 1)
      return false;
    const Term &by = divisor.begin()->second;
    if (by.coefficient == 0)
      return false;
    for (auto &entry : poly) {
      if (entry.second.coefficient % by.coefficient != 0)
        return false;
      std::vector<SymExpr> atoms = entry.second.atoms;
      for (const SymExpr &atom : by.atoms) {
        auto found = std::find(atoms.begin(), atoms.end(), atom);
        if (found == atoms.end())
          return false;
        atoms.erase(found);
      }
      addTerm(quotient, entry.second.coefficient / by.coefficient, atoms);
    }
    return true;
  }

  /// The largest monomial (positive gcd of the coefficients times the atoms
  /// all terms share) dividing every term of a and the one term of b,
  /// when it is more than 1.
  static bool commonFactor(const Poly &a, const Poly &b, Poly &common) {
    if (b.size() != 1 || a.empty())
      return false;
    const Term &divisor = b.begin()->second;
    int64_t gcd =
        divisor.coefficient < 0 ? -divisor.coefficient : divisor.coefficient;
    std::vector<SymExpr> atoms = divisor.atoms;
    for (auto &entry : a) {
      int64_t c = entry.second.coefficient < 0 ? -entry.second.coefficient
                                               : entry.second.coefficient;
      while (c != 0) {
        int64_t r = gcd % c;
        gcd = c;
        c = r;
      }
      std::vector<SymExpr> kept, rest = entry.second.atoms;
      for (const SymExpr &atom : atoms) {
        auto found = std::find(rest.begin(), rest.end(), atom);
        if (found != rest.end()) {
          kept.push_back(atom);
          rest.erase(found);
        }
      }
      atoms = kept;
    }
    if (gcd <= 1 && atoms.empty())
      return false;
    addTerm(common, gcd <= 0 ? 1 : gcd, atoms);
    return true;
  }

  static Poly divideExactly(const Poly &poly, int64_t divisor) {
    Poly quotient;
    for (auto &entry : poly)
      addTerm(quotient, entry.second.coefficient / divisor, entry.second.atoms);
    return quotient;
  }
};

} // namespace dynafuse

#endif

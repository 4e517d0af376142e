//===- SymExpr.cpp - Symbolic integer expressions -------------------------===//
//
// Canonicalization goes through a polynomial view: every expression is a map
// from monomials (sorted atom lists) to coefficients. Building an expression
// converts operands to polynomials, combines them and converts back.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Support/SymExpr.h"

#include "dynafuse/Support/Error.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <numeric>
#include <set>

namespace dynafuse {

struct SymExpr::Node {
  Kind kind;
  int64_t value = 0;
  std::string name;
  std::vector<SymExpr> operands;
  std::string text;
};

namespace {

/// A monomial is a sorted list of atoms; its key joins their texts.
struct Term {
  int64_t coefficient = 0;
  std::vector<SymExpr> atoms;
};
using Poly = std::map<std::string, Term>;

std::string monomialKey(const std::vector<SymExpr> &atoms) {
  std::string key;
  for (const SymExpr &atom : atoms)
    key += atom.str() + "\x1f";
  return key;
}

void addTerm(Poly &poly, int64_t coefficient, std::vector<SymExpr> atoms) {
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

bool needsParens(const SymExpr &expr) {
  return expr.kind() == SymExpr::Kind::Add;
}

std::string parenthesized(const SymExpr &expr) {
  return needsParens(expr) ? "(" + expr.str() + ")" : expr.str();
}

/// A divisor in parentheses also when a product: x // (64*s1), not
/// x // 64*s1, which reads back as (x // 64)*s1.
std::string parenthesizedDivisor(const SymExpr &expr) {
  return expr.kind() == SymExpr::Kind::Mul ? "(" + expr.str() + ")"
                                           : parenthesized(expr);
}

} // namespace

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
    int64_t gcd = divisor.coefficient < 0 ? -divisor.coefficient
                                          : divisor.coefficient;
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

static std::string renderText(SymExpr::Kind kind, int64_t value,
                              const std::string &name,
                              const std::vector<SymExpr> &operands) {
  switch (kind) {
  case SymExpr::Kind::Constant:
    return std::to_string(value);
  case SymExpr::Kind::Symbol:
    return name;
  case SymExpr::Kind::FloorDiv:
    return "(" + parenthesized(operands[0]) + " // " +
           parenthesizedDivisor(operands[1]) + ")";
  case SymExpr::Kind::Mod:
    return "(" + parenthesized(operands[0]) + " % " +
           parenthesizedDivisor(operands[1]) + ")";
  case SymExpr::Kind::Mul: {
    std::string text;
    for (const SymExpr &factor : operands)
      text += (text.empty() ? "" : "*") + parenthesized(factor);
    return text;
  }
  case SymExpr::Kind::Add: {
    std::string text = operands[0].str();
    for (size_t i = 1; i < operands.size(); ++i) {
      const SymExpr &term = operands[i];
      std::string termText = term.str();
      if (!termText.empty() && termText[0] == '-')
        text += " - " + termText.substr(1);
      else
        text += " + " + termText;
    }
    return text;
  }
  }
  return "";
}

SymExpr SymExpr::make(Kind kind, std::vector<SymExpr> operands) {
  auto node = std::make_shared<Node>();
  node->kind = kind;
  node->operands = std::move(operands);
  node->text = renderText(kind, 0, "", node->operands);
  return SymExpr(std::shared_ptr<const Node>(std::move(node)));
}

SymExpr::SymExpr(int64_t value) {
  auto fresh = std::make_shared<Node>();
  fresh->kind = Kind::Constant;
  fresh->value = value;
  fresh->text = std::to_string(value);
  node = std::move(fresh);
}

SymExpr SymExpr::symbol(const std::string &name) {
  auto fresh = std::make_shared<Node>();
  fresh->kind = Kind::Symbol;
  fresh->name = name;
  fresh->text = name;
  return SymExpr(std::shared_ptr<const Node>(std::move(fresh)));
}

SymExpr::Kind SymExpr::kind() const { return node->kind; }
int64_t SymExpr::constant() const {
  // A symbolic size read as a number would be a wrong result, not an error:
  // every rule that needs a constant must have checked isConstant().
  if (node->kind != Kind::Constant)
    fail("a symbolic size (" + node->text +
         ") where a static one is needed");
  return node->value;
}
const std::string &SymExpr::symbolName() const { return node->name; }
const std::vector<SymExpr> &SymExpr::operands() const { return node->operands; }
const std::string &SymExpr::str() const { return node->text; }

bool isSizeSymbolName(const std::string &name) {
  if (name.size() < 2 || name[0] != 's')
    return false;
  for (size_t i = 1; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i])))
      return false;
  return true;
}

bool provablyNonNegative(const SymExpr &expr) {
  if (expr.isConstant())
    return expr.constant() >= 0;
  std::set<std::string> symbols;
  expr.collectSymbols(symbols);
  std::map<std::string, SymExpr> shifted;
  for (const std::string &name : symbols) {
    if (!isSizeSymbolName(name))
      return false;
    shifted[name] = SymExpr::symbol(name) + 2;
  }
  SymExpr moved = expr.substitute(shifted);
  // A polynomial in t >= 0 with no negative coefficient (and no division)
  // is >= 0.
  std::function<bool(const SymExpr &)> nonNegative = [&](const SymExpr &e) {
    switch (e.kind()) {
    case SymExpr::Kind::Constant:
      return e.constant() >= 0;
    case SymExpr::Kind::Symbol:
      return true;
    case SymExpr::Kind::Add:
    case SymExpr::Kind::Mul:
      for (const SymExpr &operand : e.operands())
        if (!nonNegative(operand))
          return false;
      return true;
    default:
      return false;
    }
  };
  return nonNegative(moved);
}

int64_t floorDivInt(int64_t lhs, int64_t rhs) {
  if (rhs == 0)
    fail("symbolic integer division by zero");
  int64_t quotient = lhs / rhs;
  if ((lhs % rhs != 0) && ((lhs < 0) != (rhs < 0)))
    --quotient;
  return quotient;
}

int64_t modInt(int64_t lhs, int64_t rhs) {
  return lhs - floorDivInt(lhs, rhs) * rhs;
}

SymExpr operator+(const SymExpr &lhs, const SymExpr &rhs) {
  if (lhs.isConstant() && rhs.isConstant())
    return SymExpr(lhs.constant() + rhs.constant());
  Poly sum = SymExprBuilder::toPoly(lhs);
  for (auto &entry : SymExprBuilder::toPoly(rhs))
    addTerm(sum, entry.second.coefficient, entry.second.atoms);
  return SymExprBuilder::fromPoly(sum);
}

SymExpr operator-(const SymExpr &lhs, const SymExpr &rhs) {
  return lhs + SymExpr(int64_t(-1)) * rhs;
}

SymExpr operator*(const SymExpr &lhs, const SymExpr &rhs) {
  if (lhs.isConstant() && rhs.isConstant())
    return SymExpr(lhs.constant() * rhs.constant());
  return SymExprBuilder::fromPoly(SymExprBuilder::multiply(
      SymExprBuilder::toPoly(lhs), SymExprBuilder::toPoly(rhs)));
}

SymExpr floorDiv(const SymExpr &lhs, const SymExpr &rhs) {
  if (rhs.isConstant()) {
    int64_t divisor = rhs.constant();
    // A zero divisor is the extent of an empty dim in index arithmetic
    // (delinearizing over a [0, n] shape): loops over it run no iteration,
    // so any index will do. Sizes a program divides are checked by the
    // tracer (a zero divisor raises in eager) before they get here.
    if (divisor == 0)
      return SymExpr(int64_t(0));
    if (lhs.isConstant())
      return SymExpr(floorDivInt(lhs.constant(), divisor));
    if (divisor == 1)
      return lhs;
    Poly poly = SymExprBuilder::toPoly(lhs);
    if (SymExprBuilder::allDivisible(poly, divisor))
      return SymExprBuilder::fromPoly(
          SymExprBuilder::divideExactly(poly, divisor));
  } else {
    Poly numerator = SymExprBuilder::toPoly(lhs);
    Poly divisor = SymExprBuilder::toPoly(rhs);
    Poly quotient;
    if (SymExprBuilder::divideByMonomial(numerator, divisor, quotient))
      return SymExprBuilder::fromPoly(quotient);
    // (a*c) // (b*c) is a // b for any c != 0 (and both divide by zero
    // when c is 0): a factor common to every term cancels, so a reshape's
    // (s0*s1*s2) // (4*s0*s1) is s2 // 4.
    Poly common;
    if (SymExprBuilder::commonFactor(numerator, divisor, common)) {
      Poly reducedNumerator, reducedDivisor;
      SymExprBuilder::divideByMonomial(numerator, common, reducedNumerator);
      SymExprBuilder::divideByMonomial(divisor, common, reducedDivisor);
      return floorDiv(SymExprBuilder::fromPoly(reducedNumerator),
                      SymExprBuilder::fromPoly(reducedDivisor));
    }
  }
  return SymExpr::make(SymExpr::Kind::FloorDiv, {lhs, rhs});
}

SymExpr mod(const SymExpr &lhs, const SymExpr &rhs) {
  if (rhs.isConstant()) {
    int64_t divisor = rhs.constant();
    if (divisor == 0) // as in floorDiv: an empty dim's index
      return SymExpr(int64_t(0));
    if (lhs.isConstant())
      return SymExpr(modInt(lhs.constant(), divisor));
    if (divisor == 1 || divisor == -1)
      return SymExpr(int64_t(0));
    if (SymExprBuilder::allDivisible(SymExprBuilder::toPoly(lhs), divisor))
      return SymExpr(int64_t(0));
  } else {
    Poly quotient;
    if (SymExprBuilder::divideByMonomial(SymExprBuilder::toPoly(lhs),
                                         SymExprBuilder::toPoly(rhs),
                                         quotient))
      return SymExpr(int64_t(0));
  }
  return SymExpr::make(SymExpr::Kind::Mod, {lhs, rhs});
}

int64_t
SymExpr::evaluate(const std::map<std::string, int64_t> &bindings) const {
  switch (kind()) {
  case Kind::Constant:
    return constant();
  case Kind::Symbol: {
    auto found = bindings.find(symbolName());
    if (found == bindings.end())
      fail("unbound symbol '" + symbolName() + "'");
    return found->second;
  }
  case Kind::Add: {
    int64_t sum = 0;
    for (const SymExpr &operand : operands())
      sum += operand.evaluate(bindings);
    return sum;
  }
  case Kind::Mul: {
    int64_t product = 1;
    for (const SymExpr &operand : operands())
      product *= operand.evaluate(bindings);
    return product;
  }
  case Kind::FloorDiv:
    return floorDivInt(operands()[0].evaluate(bindings),
                       operands()[1].evaluate(bindings));
  case Kind::Mod:
    return modInt(operands()[0].evaluate(bindings),
                  operands()[1].evaluate(bindings));
  }
  return 0;
}

SymExpr
SymExpr::substitute(const std::map<std::string, SymExpr> &replacements) const {
  switch (kind()) {
  case Kind::Constant:
    return *this;
  case Kind::Symbol: {
    auto found = replacements.find(symbolName());
    return found == replacements.end() ? *this : found->second;
  }
  case Kind::Add: {
    SymExpr sum(int64_t(0));
    for (const SymExpr &operand : operands())
      sum = sum + operand.substitute(replacements);
    return sum;
  }
  case Kind::Mul: {
    SymExpr product(int64_t(1));
    for (const SymExpr &operand : operands())
      product = product * operand.substitute(replacements);
    return product;
  }
  case Kind::FloorDiv:
    return floorDiv(operands()[0].substitute(replacements),
                    operands()[1].substitute(replacements));
  case Kind::Mod:
    return mod(operands()[0].substitute(replacements),
               operands()[1].substitute(replacements));
  }
  return *this;
}

void SymExpr::collectSymbols(std::set<std::string> &symbols) const {
  if (isSymbol()) {
    symbols.insert(symbolName());
    return;
  }
  for (const SymExpr &operand : operands())
    operand.collectSymbols(symbols);
}

//===----------------------------------------------------------------------===//
// Range-based simplification
//===----------------------------------------------------------------------===//

std::vector<int64_t> evaluateAll(const std::vector<SymExpr> &exprs,
                                 const std::map<std::string, int64_t> &bindings) {
  std::vector<int64_t> values;
  for (const SymExpr &expr : exprs)
    values.push_back(expr.evaluate(bindings));
  return values;
}

bool allConstant(const std::vector<SymExpr> &exprs) {
  for (const SymExpr &expr : exprs)
    if (!expr.isConstant())
      return false;
  return true;
}

bool symRange(const SymExpr &expr, const SymRanges &ranges, int64_t &lo,
              int64_t &hi) {
  switch (expr.kind()) {
  case SymExpr::Kind::Constant:
    lo = hi = expr.constant();
    return true;
  case SymExpr::Kind::Symbol: {
    auto found = ranges.find(expr.symbolName());
    if (found == ranges.end() || found->second <= 0)
      return false;
    lo = 0;
    hi = found->second - 1;
    return true;
  }
  case SymExpr::Kind::Add: {
    lo = hi = 0;
    for (const SymExpr &operand : expr.operands()) {
      int64_t l, h;
      if (!symRange(operand, ranges, l, h))
        return false;
      lo += l;
      hi += h;
    }
    return true;
  }
  case SymExpr::Kind::Mul: {
    lo = hi = 1;
    for (const SymExpr &operand : expr.operands()) {
      int64_t l, h;
      if (!symRange(operand, ranges, l, h))
        return false;
      int64_t corners[] = {lo * l, lo * h, hi * l, hi * h};
      lo = *std::min_element(corners, corners + 4);
      hi = *std::max_element(corners, corners + 4);
    }
    return true;
  }
  case SymExpr::Kind::FloorDiv:
  case SymExpr::Kind::Mod: {
    const SymExpr &divisor = expr.operands()[1];
    int64_t l, h;
    if (!divisor.isConstant() || divisor.constant() <= 0 ||
        !symRange(expr.operands()[0], ranges, l, h))
      return false;
    int64_t c = divisor.constant();
    if (expr.kind() == SymExpr::Kind::FloorDiv) {
      lo = floorDivInt(l, c);
      hi = floorDivInt(h, c);
    } else if (l >= 0 && h < c) {
      lo = l;
      hi = h;
    } else {
      lo = 0;
      hi = c - 1;
    }
    return true;
  }
  }
  return false;
}

namespace {

/// What the range rules know of the variables: constant extents and
/// symbolic ones.
struct Bounds {
  const SymRanges &ranges;
  const SymExtents &extents;
};

//===----------------------------------------------------------------------===//
// Symbolic bounds: proofs that 0 <= r < D when D or the extents hold size
// symbols. A polynomial whose coefficients are all >= 0, over atoms that are
// all >= 0, is >= 0; r's upper bound puts each atom at its largest value (a
// loop variable at its extent - 1) in the terms with a positive coefficient,
// its lower bound does so in the terms with a negative one.
//===----------------------------------------------------------------------===//

/// c*atoms with c > 0 and every atom a size symbol (or a positive constant):
/// positive wherever a division by it is evaluated, as sizes are >= 0 and a
/// divisor is not 0 there.
bool isPositiveDivisor(const SymExpr &divisor) {
  Poly poly = SymExprBuilder::toPoly(divisor);
  if (poly.size() != 1 || poly.begin()->second.coefficient <= 0)
    return false;
  for (const SymExpr &atom : poly.begin()->second.atoms)
    if (!atom.isSymbol() || !isSizeSymbolName(atom.symbolName()))
      return false;
  return true;
}

bool knownNonnegative(const SymExpr &atom, const Bounds &bounds);

/// Whether every coefficient of expr is >= 0 and every atom is >= 0.
bool provablyNonnegative(const SymExpr &expr, const Bounds &bounds) {
  for (auto &entry : SymExprBuilder::toPoly(expr)) {
    if (entry.second.coefficient < 0)
      return false;
    for (const SymExpr &atom : entry.second.atoms)
      if (!knownNonnegative(atom, bounds))
        return false;
  }
  return true;
}

/// Size symbols, variables with a range, x // D for x >= 0, and x % D, for
/// positive divisors D.
bool knownNonnegative(const SymExpr &atom, const Bounds &bounds) {
  switch (atom.kind()) {
  case SymExpr::Kind::Symbol: {
    const std::string &name = atom.symbolName();
    return isSizeSymbolName(name) || bounds.ranges.count(name) ||
           bounds.extents.count(name);
  }
  case SymExpr::Kind::FloorDiv:
    return isPositiveDivisor(atom.operands()[1]) &&
           provablyNonnegative(atom.operands()[0], bounds);
  case SymExpr::Kind::Mod:
    return isPositiveDivisor(atom.operands()[1]);
  default:
    return false;
  }
}

bool symbolicBounds(const SymExpr &expr, const Bounds &bounds, SymExpr &lower,
                    SymExpr &upper);
SymExpr simplifyDivisionBy(const SymExpr &numerator, const SymExpr &divisor,
                           bool isDiv, const Bounds &bounds);

/// The largest value of an atom known to be >= 0, as a polynomial over
/// atoms >= 0: a variable's extent - 1, x % D's D - 1, x // D's (the upper
/// bound of x) // D, a size symbol itself.
bool atomUpperBound(const SymExpr &atom, const Bounds &bounds,
                    SymExpr &upper) {
  int64_t lo, hi;
  if (symRange(atom, bounds.ranges, lo, hi)) {
    upper = SymExpr(hi);
    return lo >= 0;
  }
  if (!knownNonnegative(atom, bounds))
    return false;
  if (atom.isSymbol()) {
    auto extent = bounds.extents.find(atom.symbolName());
    if (extent == bounds.extents.end()) {
      upper = atom;
      return isSizeSymbolName(atom.symbolName());
    }
    upper = extent->second - 1;
    return true;
  }
  if (atom.kind() == SymExpr::Kind::Mod) {
    upper = atom.operands()[1] - 1;
    return true;
  }
  upper = atom;
  SymExpr numeratorLower, numeratorUpper;
  if (atom.kind() == SymExpr::Kind::FloorDiv &&
      symbolicBounds(atom.operands()[0], bounds, numeratorLower,
                     numeratorUpper))
    upper = simplifyDivisionBy(numeratorUpper, atom.operands()[1], true,
                               bounds);
  return true;
}

/// [lower, upper] of expr over the values its atoms (all >= 0) take: a term
/// with a positive coefficient is at most its atoms' upper bounds multiplied
/// and at least 0; a negative one the other way round.
bool symbolicBounds(const SymExpr &expr, const Bounds &bounds, SymExpr &lower,
                    SymExpr &upper) {
  lower = upper = SymExpr(int64_t(0));
  for (auto &entry : SymExprBuilder::toPoly(expr)) {
    SymExpr largest(int64_t(1));
    for (const SymExpr &atom : entry.second.atoms) {
      SymExpr atomUpper;
      if (!atomUpperBound(atom, bounds, atomUpper))
        return false;
      largest = largest * atomUpper;
    }
    SymExpr term = SymExpr(entry.second.coefficient) * largest;
    if (entry.second.atoms.empty() || entry.second.coefficient > 0)
      upper = upper + term;
    if (entry.second.atoms.empty() || entry.second.coefficient < 0)
      lower = lower + term;
  }
  return true;
}

/// Whether 0 <= expr < divisor wherever both are evaluated, for a positive
/// divisor: from constant ranges when they bound expr, else symbolically
/// (lower >= 0 and divisor - 1 - upper >= 0).
bool fitsBelow(const SymExpr &expr, const SymExpr &divisor,
               const Bounds &bounds) {
  int64_t lo, hi;
  if (divisor.isConstant() && symRange(expr, bounds.ranges, lo, hi))
    return lo >= 0 && hi < divisor.constant();
  SymExpr lower, upper;
  return symbolicBounds(expr, bounds, lower, upper) &&
         provablyNonnegative(lower, bounds) &&
         provablyNonnegative(divisor - SymExpr(int64_t(1)) - upper, bounds);
}

//===----------------------------------------------------------------------===//
// Division rules
//===----------------------------------------------------------------------===//

/// Splits expr into terms whose coefficients divide by divisor and the rest.
void splitByDivisor(const SymExpr &expr, int64_t divisor, SymExpr &multiple,
                    SymExpr &rest) {
  multiple = SymExpr(int64_t(0));
  rest = SymExpr(int64_t(0));
  for (auto &entry : SymExprBuilder::toPoly(expr)) {
    Poly single;
    addTerm(single, entry.second.coefficient, entry.second.atoms);
    SymExpr term = SymExprBuilder::fromPoly(single);
    if (entry.second.coefficient % divisor == 0)
      multiple = multiple + term;
    else
      rest = rest + term;
  }
}

/// Splits expr into the terms that are multiples of the monomial divisor,
/// divided by it (the quotient), and the rest.
void splitByMonomial(const SymExpr &expr, const SymExpr &divisor,
                     SymExpr &quotient, SymExpr &rest) {
  quotient = SymExpr(int64_t(0));
  rest = SymExpr(int64_t(0));
  Poly by = SymExprBuilder::toPoly(divisor);
  for (auto &entry : SymExprBuilder::toPoly(expr)) {
    Poly single, divided;
    addTerm(single, entry.second.coefficient, entry.second.atoms);
    if (SymExprBuilder::divideByMonomial(single, by, divided))
      quotient = quotient + SymExprBuilder::fromPoly(divided);
    else
      rest = rest + SymExprBuilder::fromPoly(single);
  }
}

/// The coefficients of expr's terms (absolute values above 1) that divide
/// c, largest first: the candidate block sizes of a nested reshape.
std::vector<int64_t> coefficientsDividing(const SymExpr &expr, int64_t c) {
  std::set<int64_t> found;
  for (auto &entry : SymExprBuilder::toPoly(expr)) {
    if (entry.second.atoms.empty())
      continue;
    int64_t k = entry.second.coefficient < 0 ? -entry.second.coefficient
                                             : entry.second.coefficient;
    if (k > 1 && k < c && c % k == 0)
      found.insert(k);
  }
  return std::vector<int64_t>(found.rbegin(), found.rend());
}

/// The monomials dividing both a term of expr and the monomial divisor
/// (the gcd of the coefficients times the shared atoms), other than 1 and
/// the divisor, most atoms first: the candidate block sizes of a nested
/// reshape with symbolic sizes.
std::vector<SymExpr> monomialsDividing(const SymExpr &expr,
                                       const SymExpr &divisor) {
  Poly divisorPoly = SymExprBuilder::toPoly(divisor);
  const Term &by = divisorPoly.begin()->second;
  std::vector<std::pair<Term, SymExpr>> found;
  for (auto &entry : SymExprBuilder::toPoly(expr)) {
    Term shared;
    shared.coefficient = std::gcd(entry.second.coefficient, by.coefficient);
    std::vector<SymExpr> left = entry.second.atoms;
    for (const SymExpr &atom : by.atoms) {
      auto at = std::find(left.begin(), left.end(), atom);
      if (at == left.end())
        continue;
      shared.atoms.push_back(atom);
      left.erase(at);
    }
    SymExpr block = SymExprBuilder::termToExpr(shared);
    bool seen = std::any_of(found.begin(), found.end(),
                            [&](auto &other) { return other.second == block; });
    if (!seen && block != SymExpr(int64_t(1)) && block != divisor)
      found.push_back({shared, block});
  }
  std::sort(found.begin(), found.end(), [](auto &lhs, auto &rhs) {
    if (lhs.first.atoms.size() != rhs.first.atoms.size())
      return lhs.first.atoms.size() > rhs.first.atoms.size();
    return lhs.first.coefficient > rhs.first.coefficient;
  });
  std::vector<SymExpr> blocks;
  for (auto &entry : found)
    blocks.push_back(entry.second);
  return blocks;
}

/// numerator // c (isDiv) or numerator % c, for a numerator already
/// simplified and c > 0; what the rules leave is divided again here, not
/// simplified from the top (its terms are simplified already).
SymExpr simplifyDivision(const SymExpr &numerator, int64_t c, bool isDiv,
                         const Bounds &bounds) {
  SymExpr divisor(c);
  SymExpr multiple, rest;
  splitByDivisor(numerator, c, multiple, rest);
  if (fitsBelow(rest, divisor, bounds))
    return isDiv ? floorDiv(multiple, divisor) : rest;
  // (m*c + r) // c is m + r // c and (m*c + r) % c is r % c for any r: the
  // remainder part alone may simplify ((q + 196*i) // 14 with q in [0, 196)
  // is 14*i + q // 14).
  if (!multiple.isConstant() || multiple.constant() != 0) {
    SymExpr restPart = simplifyDivision(rest, c, isDiv, bounds);
    return isDiv ? floorDiv(multiple, divisor) + restPart : restPart;
  }
  // (g*a + r) // c is a // (c/g) and (g*a + r) % c is g*(a % (c/g)) + r
  // for g dividing c and r in [0, g): the flat position of a reshape read
  // in blocks of g (swin's window partition: (4704*i + 96*j + k) // 37632
  // with 96*j + k < 4704 is i // 8, free of the innermost k).
  for (int64_t g : coefficientsDividing(numerator, c)) {
    SymExpr blocks, within;
    splitByDivisor(numerator, g, blocks, within);
    if (!fitsBelow(within, SymExpr(g), bounds))
      continue;
    SymExpr a = floorDiv(blocks, SymExpr(g));
    if (isDiv)
      return simplifyDivision(a, c / g, true, bounds);
    return SymExpr(g) * simplifyDivision(a, c / g, false, bounds) + within;
  }
  // A numerator within one multiple of c: [k*c, (k+1)*c).
  int64_t lo, hi;
  if (symRange(numerator, bounds.ranges, lo, hi) &&
      floorDivInt(lo, c) == floorDivInt(hi, c)) {
    int64_t k = floorDivInt(lo, c);
    return isDiv ? SymExpr(k) : numerator - SymExpr(k * c);
  }
  return isDiv ? floorDiv(numerator, divisor) : mod(numerator, divisor);
}

/// numerator // divisor or numerator % divisor for a divisor that is a
/// positive monomial of size symbols (64*s1): the rules of simplifyDivision
/// with monomials for coefficients, the remainder bounded symbolically.
/// (64*s1*i0 + 16*i1 + 64*i2 + i3) // (64*s1) with i1 < 4, i2 < s1, i3 < 16
/// is i0: 16*3 + 64*(s1 - 1) + 15 is 64*s1 - 1.
SymExpr simplifyMonomialDivision(const SymExpr &numerator,
                                 const SymExpr &divisor, bool isDiv,
                                 const Bounds &bounds) {
  SymExpr quotient, rest;
  splitByMonomial(numerator, divisor, quotient, rest);
  if (fitsBelow(rest, divisor, bounds))
    return isDiv ? quotient : rest;
  // (q*D + r) // D is q + r // D and (q*D + r) % D is r % D for any r.
  if (!quotient.isConstant() || quotient.constant() != 0) {
    SymExpr restPart = simplifyMonomialDivision(rest, divisor, isDiv, bounds);
    return isDiv ? quotient + restPart : restPart;
  }
  // (g*a + r) // D is a // (D/g) and (g*a + r) % D is g*(a % (D/g)) + r for
  // a monomial g dividing D and r in [0, g).
  for (const SymExpr &g : monomialsDividing(numerator, divisor)) {
    SymExpr a, within;
    splitByMonomial(numerator, g, a, within);
    if (!fitsBelow(within, g, bounds))
      continue;
    SymExpr outer = floorDiv(divisor, g);
    if (isDiv)
      return simplifyDivisionBy(a, outer, true, bounds);
    return g * simplifyDivisionBy(a, outer, false, bounds) + within;
  }
  return isDiv ? floorDiv(numerator, divisor) : mod(numerator, divisor);
}

/// Divides by a positive constant or a positive monomial of size symbols
/// through their rules; other divisors stay divisions.
SymExpr simplifyDivisionBy(const SymExpr &numerator, const SymExpr &divisor,
                           bool isDiv, const Bounds &bounds) {
  if (divisor.isConstant() && divisor.constant() > 0)
    return simplifyDivision(numerator, divisor.constant(), isDiv, bounds);
  if (isPositiveDivisor(divisor))
    return simplifyMonomialDivision(numerator, divisor, isDiv, bounds);
  return isDiv ? floorDiv(numerator, divisor) : mod(numerator, divisor);
}

} // namespace

SymExpr simplifyInRanges(const SymExpr &expr, const SymRanges &ranges,
                         const SymExtents &extents) {
  switch (expr.kind()) {
  case SymExpr::Kind::Constant:
  case SymExpr::Kind::Symbol:
    return expr;
  case SymExpr::Kind::Add: {
    SymExpr sum(int64_t(0));
    for (const SymExpr &operand : expr.operands())
      sum = sum + simplifyInRanges(operand, ranges, extents);
    return sum;
  }
  case SymExpr::Kind::Mul: {
    SymExpr product(int64_t(1));
    for (const SymExpr &operand : expr.operands())
      product = product * simplifyInRanges(operand, ranges, extents);
    return product;
  }
  default:
    break;
  }
  SymExpr numerator = simplifyInRanges(expr.operands()[0], ranges, extents);
  SymExpr divisor = simplifyInRanges(expr.operands()[1], ranges, extents);
  bool isDiv = expr.kind() == SymExpr::Kind::FloorDiv;
  return simplifyDivisionBy(numerator, divisor, isDiv, Bounds{ranges, extents});
}

//===----------------------------------------------------------------------===//
// Parsing: expr := term (('+'|'-') term)*; term := unary (('*'|'//'|'%')
// unary)*; unary := '-' unary | INT | NAME | '(' expr ')'.
//===----------------------------------------------------------------------===//

namespace {

class SymExprParser {
public:
  explicit SymExprParser(const std::string &text) : text(text) {}

  SymExpr parseAll() {
    SymExpr result = parseSum();
    skipSpace();
    if (pos != text.size())
      error("unexpected '" + std::string(1, text[pos]) + "'");
    return result;
  }

private:
  const std::string &text;
  size_t pos = 0;

  [[noreturn]] void error(const std::string &what) {
    fail("bad symbolic expression '" + text + "' at column " +
         std::to_string(pos + 1) + ": " + what);
  }

  void skipSpace() {
    while (pos < text.size() && text[pos] == ' ')
      ++pos;
  }

  bool accept(const std::string &token) {
    skipSpace();
    if (text.compare(pos, token.size(), token) != 0)
      return false;
    pos += token.size();
    return true;
  }

  SymExpr parseSum() {
    SymExpr result = parseProduct();
    while (true) {
      if (accept("+"))
        result = result + parseProduct();
      else if (accept("-"))
        result = result - parseProduct();
      else
        return result;
    }
  }

  SymExpr parseProduct() {
    SymExpr result = parseUnary();
    while (true) {
      if (accept("*"))
        result = result * parseUnary();
      else if (accept("//"))
        result = floorDiv(result, parseUnary());
      else if (accept("%"))
        result = mod(result, parseUnary());
      else
        return result;
    }
  }

  SymExpr parseUnary() {
    if (accept("-"))
      return SymExpr(int64_t(-1)) * parseUnary();
    if (accept("(")) {
      SymExpr inner = parseSum();
      if (!accept(")"))
        error("expected ')'");
      return inner;
    }
    skipSpace();
    if (pos < text.size() && std::isdigit((unsigned char)text[pos]))
      return parseInteger();
    if (pos < text.size() && (std::isalpha((unsigned char)text[pos]) ||
                              text[pos] == '_' || text[pos] == '%'))
      return parseName();
    error("expected an integer, a symbol or '('");
  }

  SymExpr parseInteger() {
    size_t start = pos;
    while (pos < text.size() && std::isdigit((unsigned char)text[pos]))
      ++pos;
    try {
      return SymExpr(int64_t(std::stoll(text.substr(start, pos - start))));
    } catch (const std::out_of_range &) {
      error("integer out of range");
    }
  }

  /// A size or loop symbol, or "%name": an integer value of the kernel.
  SymExpr parseName() {
    size_t start = pos;
    if (text[pos] == '%')
      ++pos;
    while (pos < text.size() &&
           (std::isalnum((unsigned char)text[pos]) || text[pos] == '_'))
      ++pos;
    return SymExpr::symbol(text.substr(start, pos - start));
  }
};

} // namespace

SymExpr parseSymExpr(const std::string &text) {
  return SymExprParser(text).parseAll();
}

} // namespace dynafuse

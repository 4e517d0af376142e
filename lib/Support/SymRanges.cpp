//===- SymRanges.cpp - Simplifying SymExpr in the ranges of its variables -===//
//
// Index expressions of loop nests: with each variable's range (a constant or
// symbolic extent), x // D and x % D simplify where 0 <= x < D is provable,
// by constant ranges or symbolically (SymExpr.h: simplifyInRanges, symRange).
//
//===----------------------------------------------------------------------===//
#include "SymPolynomial.h"

#include "dynafuse/Support/Error.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace dynafuse {

//===----------------------------------------------------------------------===//
// Range-based simplification
//===----------------------------------------------------------------------===//

std::vector<int64_t>
evaluateAll(const std::vector<SymExpr> &exprs,
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
bool atomUpperBound(const SymExpr &atom, const Bounds &bounds, SymExpr &upper) {
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
    upper =
        simplifyDivisionBy(numeratorUpper, atom.operands()[1], true, bounds);
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

} // namespace dynafuse

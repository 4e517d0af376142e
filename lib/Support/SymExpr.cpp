//===- SymExpr.cpp - Symbolic integer expressions -------------------------===//
//
// Nodes, their canonical text, and the arithmetic that builds them through
// the polynomial view (SymPolynomial.h): sums and products are normalized,
// constant divisions folded. Range-based simplification is SymRanges.cpp,
// parsing SymExprParser.cpp.
//
//===----------------------------------------------------------------------===//
#include "SymPolynomial.h"

#include "dynafuse/Support/Error.h"

#include <algorithm>
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

} // namespace dynafuse

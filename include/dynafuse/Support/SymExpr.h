//===- SymExpr.h - Symbolic integer expressions -----------------*- C++ -*-===//
//
// Sizes, strides and index expressions are symbolic integers built from
// constants, named symbols (sizes "s0", loop variables "i0"), +, *, floor
// division and modulo. Every SymExpr is kept in a canonical form: a sum of
// terms, each a constant coefficient times a sorted product of atoms (symbols,
// floordiv and mod nodes). Two equal polynomials therefore print identically
// and compare equal; constants fold as the expression is built.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_SYMEXPR_H
#define DYNAFUSE_SUPPORT_SYMEXPR_H

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace dynafuse {

class SymExpr {
public:
  enum class Kind { Constant, Symbol, Add, Mul, FloorDiv, Mod };

  SymExpr() : SymExpr(int64_t(0)) {}
  SymExpr(int64_t value); // NOLINT: constants convert implicitly.
  SymExpr(int value) : SymExpr(int64_t(value)) {} // NOLINT
  static SymExpr symbol(const std::string &name);

  Kind kind() const;
  bool isConstant() const { return kind() == Kind::Constant; }
  bool isSymbol() const { return kind() == Kind::Symbol; }
  int64_t constant() const;
  const std::string &symbolName() const;
  const std::vector<SymExpr> &operands() const;

  /// Canonical text, parseable by parseSymExpr.
  const std::string &str() const;
  bool operator==(const SymExpr &other) const { return str() == other.str(); }
  bool operator!=(const SymExpr &other) const { return !(*this == other); }
  bool operator<(const SymExpr &other) const { return str() < other.str(); }

  /// Evaluates with Python's floor semantics; throws on an unknown symbol or
  /// a division by zero.
  int64_t evaluate(const std::map<std::string, int64_t> &bindings) const;
  SymExpr substitute(const std::map<std::string, SymExpr> &replacements) const;
  void collectSymbols(std::set<std::string> &symbols) const;

  friend SymExpr operator+(const SymExpr &lhs, const SymExpr &rhs);
  friend SymExpr operator-(const SymExpr &lhs, const SymExpr &rhs);
  friend SymExpr operator*(const SymExpr &lhs, const SymExpr &rhs);
  friend SymExpr floorDiv(const SymExpr &lhs, const SymExpr &rhs);
  friend SymExpr mod(const SymExpr &lhs, const SymExpr &rhs);

  struct Node;

private:
  explicit SymExpr(std::shared_ptr<const Node> node) : node(std::move(node)) {}
  static SymExpr make(Kind kind, std::vector<SymExpr> operands);
  friend struct SymExprBuilder;
  std::shared_ptr<const Node> node;
};

SymExpr floorDiv(const SymExpr &lhs, const SymExpr &rhs);
SymExpr mod(const SymExpr &lhs, const SymExpr &rhs);

/// Whether every expression is a constant (static sizes or strides).
bool allConstant(const std::vector<SymExpr> &exprs);
/// Each expression evaluated with bindings (sizes or strides of a run).
std::vector<int64_t> evaluateAll(const std::vector<SymExpr> &exprs,
                                 const std::map<std::string, int64_t> &bindings);

/// Python semantics of // and % on int64.
int64_t floorDivInt(int64_t lhs, int64_t rhs);
int64_t modInt(int64_t lhs, int64_t rhs);

/// Variable ranges for simplification: name -> extent (values in [0, extent)).
using SymRanges = std::map<std::string, int64_t>;

/// The closed range [lo, hi] expr can take, when computable from ranges.
bool symRange(const SymExpr &expr, const SymRanges &ranges, int64_t &lo,
              int64_t &hi);
/// Symbolic extents of variables whose extent is not a constant (a loop
/// `for i2 in 0..s1`): name -> extent, values in [0, extent).
using SymExtents = std::map<std::string, SymExpr>;

/// Simplifies floordiv and mod using variable ranges: (a*K + b) // K is a and
/// (a*K + b) % K is b when b stays in [0, K). K may be a constant or a
/// monomial of size symbols (64*s1); symbolic extents bound the variables
/// in the proof that b < K (size symbols count as >= 0).
SymExpr simplifyInRanges(const SymExpr &expr, const SymRanges &ranges,
                         const SymExtents &extents = {});

/// Whether name is a size symbol's ("s" and digits: s0, s12), the names
/// symbolic tensor sizes take (loop variables are "i0", "r1").
bool isSizeSymbolName(const std::string &name);

/// Whether expr >= 0 for every value >= 2 of its size symbols (the sizes
/// capture keeps symbolic): every coefficient is non-negative once each
/// symbol is written 2 + t. False for other symbols and for divisions.
bool provablyNonNegative(const SymExpr &expr);

/// Parses "s0*4 + i1", "(i0 // 3) % s1", ... Throws Error on bad syntax.
SymExpr parseSymExpr(const std::string &text);

} // namespace dynafuse

#endif

//===- OpRegistry.h - What each graph op accepts and produces ---*- C++ -*-===//
//
// One table entry per op: its kind, operand count, attributes and the type
// rule that computes result dtypes (PyTorch's promotion, with Python numbers
// as weak operands) and shapes (broadcasting). The lowering of each op lives
// in Lowering/; the torch callables that map to it live in
// python/dynafuse/ops.py.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_OPREGISTRY_H
#define DYNAFUSE_GRAPH_OPREGISTRY_H

#include "dynafuse/Graph/Graph.h"

#include <optional>
#include <string>
#include <vector>

namespace dynafuse {

enum class OpKind { Pointwise };

/// How a pointwise op derives its result dtype from the promoted operand
/// dtype.
enum class TypeRule {
  Promote,        ///< result = promoted operands (add, maximum, where)
  PromoteToFloat, ///< integers become the default float (div, exp)
  FloatOnly,      ///< floating inputs only (gelu)
  NumericOnly,    ///< like Promote, but bool is rejected (neg, relu)
  Compare,        ///< bool result (lt, eq)
  Cast,           ///< the "dtype" attribute
};

struct OpInfo {
  std::string name;
  OpKind kind = OpKind::Pointwise;
  int arity = 1;
  TypeRule rule = TypeRule::Promote;
  /// Attribute names the op accepts.
  std::vector<std::string> attributes;
  /// For where: the first operand is a bool condition outside promotion.
  bool conditionFirst = false;
  /// For pow: the last operand must be a scalar.
  bool scalarLast = false;
};

const OpInfo *lookupOp(const std::string &name);
std::vector<std::string> registeredOpNames();

/// Result types of node, or an Error naming the op and the problem.
std::vector<TensorType> inferResultTypes(const Node &node);

/// The dtype PyTorch computes a pointwise node in (before its type rule):
/// tensor operands promote fully, scalars only by category.
DType promotedOperandType(const Node &node);

/// Broadcasts sizes right-aligned; throws when they are incompatible.
std::vector<SymExpr> broadcastShapes(const std::vector<SymExpr> &lhs,
                                     const std::vector<SymExpr> &rhs,
                                     const Location &where);

} // namespace dynafuse

#endif

//===- Graph.h - The tensor graph IR ----------------------------*- C++ -*-===//
//
// An FX-like SSA graph: inputs, op nodes and outputs. A node names an op from
// the registry (OpRegistry.h), takes operands (tensor values or scalar
// literals, which promote like Python numbers), carries attributes and defines
// one or more result values. Nodes are kept in a valid topological order.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_GRAPH_H
#define DYNAFUSE_GRAPH_GRAPH_H

#include "dynafuse/Graph/OpId.h"
#include "dynafuse/Graph/TensorType.h"
#include "dynafuse/Support/Error.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace dynafuse {

class Node;
struct OpInfo;

/// A Python number used as an operand ("weak" in type promotion).
struct Scalar {
  enum class Kind { Bool, Int, Float };
  Kind kind = Kind::Int;
  int64_t intValue = 0;
  double floatValue = 0;

  static Scalar ofBool(bool value);
  static Scalar ofInt(int64_t value);
  static Scalar ofFloat(double value);
  double asDouble() const;
  /// The dtype PyTorch gives a wrapped Python number (float -> f32).
  DType dtype() const;
  std::string str() const;
};

class Value {
public:
  Value(std::string name, TensorType type, Node *producer)
      : name(std::move(name)), type(std::move(type)), producer(producer) {}
  std::string name;
  TensorType type;
  /// Null for graph inputs.
  Node *producer;
};

struct Operand {
  Value *value = nullptr;
  Scalar scalar;

  Operand(Value *value) : value(value) {}    // NOLINT
  Operand(Scalar scalar) : scalar(scalar) {} // NOLINT
  bool isValue() const { return value != nullptr; }
};

/// Sizes an op takes (reshape's shape, slice's bounds, full's shape) may be
/// symbolic: a SymExpr, or a list of them. Nodes keep them canonical: a
/// symbolic attribute whose values are all constants is an int64_t or a
/// list of int64_t (so static graphs print and compare as before).
using Attribute = std::variant<bool, int64_t, double, std::string, DType,
                               std::vector<int64_t>, SymExpr,
                               std::vector<SymExpr>>;
std::string attributeStr(const Attribute &attribute);
/// The canonical spelling of attribute (see Attribute).
Attribute canonicalAttribute(Attribute attribute);
/// Adds the size symbols a symbolic attribute names to symbols.
void collectSymbols(const Attribute &attribute, std::set<std::string> &symbols);

class Node {
public:
  Op op = Op::Add;
  /// The registry entry of op, resolved when the node is added to a graph
  /// (Graph::addNode, the parser, capture); null for an unknown op or a
  /// node built outside a graph (use opInfoOf).
  const OpInfo *info = nullptr;
  std::vector<Operand> operands;
  std::map<std::string, Attribute> attributes;
  std::vector<Value *> results;
  /// Where the node came from: user code (file:line) or IR text.
  Location location;
  /// Inside an activation-checkpointed region (torch.utils.checkpoint):
  /// the backward recomputes its results rather than the forward saving
  /// them (autodiff's partition). Printed as `recompute` after the types.
  bool recompute = false;

  const Attribute *attribute(const std::string &name) const;
  std::string stringAttr(const std::string &name,
                         const std::string &fallback) const;
  int64_t intAttr(const std::string &name, int64_t fallback) const;
  Value *result() const { return results.at(0); }
};

class Graph {
public:
  explicit Graph(std::string name = "main") : name(std::move(name)) {}
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;

  std::string name;
  std::vector<Value *> inputs;
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<Value *> outputs;

  Value *addInput(const std::string &name, TensorType type);
  /// Appends a node; result types are inferred through the op registry
  /// unless given. Throws Error when the op rejects its operands.
  Node *addNode(Op op, std::vector<Operand> operands,
                std::map<std::string, Attribute> attributes = {},
                Location location = {});
  Node *addNodeWithTypes(Op op, std::vector<Operand> operands,
                         std::map<std::string, Attribute> attributes,
                         const std::vector<TensorType> &resultTypes,
                         const std::vector<std::string> &resultNames,
                         Location location = {});
  /// A name not used by any value yet ("0", "1", ...).
  std::string freshName();
  Value *findValue(const std::string &name) const;
  /// Exchanges everything with other (passes that rebuild a graph).
  void swapContents(Graph &other);
  /// A deep copy: every input, node (all of its fields) and output, with
  /// operands and results pointing at the copy's own values.
  std::unique_ptr<Graph> clone() const;

private:
  /// Gives node (op resolved, attributes canonical) its results and
  /// appends it.
  Node *appendNode(std::unique_ptr<Node> node,
                   const std::vector<TensorType> &resultTypes,
                   const std::vector<std::string> &resultNames);

  std::vector<std::unique_ptr<Value>> values;
  std::map<std::string, Value *> valuesByName;
  int nextName = 0;
};

} // namespace dynafuse

#endif

//===- Graph.cpp - The tensor graph IR ------------------------------------===//
#include "dynafuse/Graph/Graph.h"

#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Support/TextCursor.h"

namespace dynafuse {

Scalar Scalar::ofBool(bool value) {
  Scalar scalar;
  scalar.kind = Kind::Bool;
  scalar.intValue = value;
  return scalar;
}

Scalar Scalar::ofInt(int64_t value) {
  Scalar scalar;
  scalar.kind = Kind::Int;
  scalar.intValue = value;
  return scalar;
}

Scalar Scalar::ofFloat(double value) {
  Scalar scalar;
  scalar.kind = Kind::Float;
  scalar.floatValue = value;
  return scalar;
}

double Scalar::asDouble() const {
  return kind == Kind::Float ? floatValue : double(intValue);
}

DType Scalar::dtype() const {
  switch (kind) {
  case Kind::Bool:
    return DType::Bool;
  case Kind::Int:
    return DType::I64;
  case Kind::Float:
    return DType::F32;
  }
  return DType::F32;
}

std::string Scalar::str() const {
  switch (kind) {
  case Kind::Bool:
    return intValue ? "true" : "false";
  case Kind::Int:
    return std::to_string(intValue);
  case Kind::Float:
    return formatFloatLiteral(floatValue);
  }
  return "";
}

std::string attributeStr(const Attribute &attribute) {
  if (auto *flag = std::get_if<bool>(&attribute))
    return *flag ? "true" : "false";
  if (auto *integer = std::get_if<int64_t>(&attribute))
    return std::to_string(*integer);
  if (auto *number = std::get_if<double>(&attribute))
    return formatFloatLiteral(*number);
  if (auto *text = std::get_if<std::string>(&attribute)) {
    std::string quoted = "\"";
    for (char c : *text)
      quoted +=
          c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
    return quoted + "\"";
  }
  if (auto *type = std::get_if<DType>(&attribute))
    return dtypeName(*type);
  if (auto *expr = std::get_if<SymExpr>(&attribute))
    return expr->isSymbol() || expr->isConstant() ? expr->str()
                                                  : "(" + expr->str() + ")";
  std::string out = "[";
  if (auto *exprs = std::get_if<std::vector<SymExpr>>(&attribute)) {
    for (size_t i = 0; i < exprs->size(); ++i)
      out += (i ? ", " : "") + (*exprs)[i].str();
    return out + "]";
  }
  const auto &list = std::get<std::vector<int64_t>>(attribute);
  for (size_t i = 0; i < list.size(); ++i)
    out += (i ? ", " : "") + std::to_string(list[i]);
  return out + "]";
}

void collectSymbols(const Attribute &attribute,
                    std::set<std::string> &symbols) {
  if (const auto *expr = std::get_if<SymExpr>(&attribute))
    expr->collectSymbols(symbols);
  if (const auto *exprs = std::get_if<std::vector<SymExpr>>(&attribute))
    for (const SymExpr &expr : *exprs)
      expr.collectSymbols(symbols);
}

Attribute canonicalAttribute(Attribute attribute) {
  if (auto *expr = std::get_if<SymExpr>(&attribute))
    if (expr->isConstant())
      return expr->constant();
  if (auto *exprs = std::get_if<std::vector<SymExpr>>(&attribute)) {
    if (!allConstant(*exprs))
      return attribute;
    std::vector<int64_t> values;
    for (const SymExpr &expr : *exprs)
      values.push_back(expr.constant());
    return values;
  }
  return attribute;
}

const Attribute *Node::attribute(const std::string &name) const {
  auto found = attributes.find(name);
  return found == attributes.end() ? nullptr : &found->second;
}

std::string Node::stringAttr(const std::string &name,
                             const std::string &fallback) const {
  const Attribute *found = attribute(name);
  if (!found)
    return fallback;
  if (auto *text = std::get_if<std::string>(found))
    return *text;
  fail("attribute '" + name + "' of '" + opName(op) + "' must be a string",
       location);
}

int64_t Node::intAttr(const std::string &name, int64_t fallback) const {
  const Attribute *found = attribute(name);
  if (!found)
    return fallback;
  if (auto *integer = std::get_if<int64_t>(found))
    return *integer;
  fail("attribute '" + name + "' of '" + opName(op) + "' must be an integer",
       location);
}

namespace {

/// A node of op with its op info resolved once and the op's canonical
/// attribute spelling applied, where it has one; no results yet.
std::unique_ptr<Node> makeNode(Op op, std::vector<Operand> operands,
                               std::map<std::string, Attribute> attributes,
                               Location location) {
  auto node = std::make_unique<Node>();
  node->op = op;
  node->info = lookupOp(op);
  for (auto &entry : attributes)
    entry.second = canonicalAttribute(std::move(entry.second));
  if (node->info && node->info->canonicalAttributes)
    node->info->canonicalAttributes(attributes);
  node->operands = std::move(operands);
  node->attributes = std::move(attributes);
  node->location = location;
  return node;
}

} // namespace

Value *Graph::addInput(const std::string &name, TensorType type) {
  if (valuesByName.count(name))
    fail("duplicate value name '%" + name + "'");
  values.push_back(std::make_unique<Value>(name, std::move(type), nullptr));
  Value *input = values.back().get();
  valuesByName[name] = input;
  inputs.push_back(input);
  return input;
}

Node *Graph::addNode(Op op, std::vector<Operand> operands,
                     std::map<std::string, Attribute> attributes,
                     Location location) {
  std::unique_ptr<Node> node =
      makeNode(op, std::move(operands), std::move(attributes), location);
  std::vector<TensorType> types = inferResultTypes(*node);
  std::vector<std::string> names;
  for (size_t i = 0; i < types.size(); ++i)
    names.push_back(freshName());
  return appendNode(std::move(node), types, names);
}

Node *Graph::addNodeWithTypes(Op op, std::vector<Operand> operands,
                              std::map<std::string, Attribute> attributes,
                              const std::vector<TensorType> &resultTypes,
                              const std::vector<std::string> &resultNames,
                              Location location) {
  return appendNode(
      makeNode(op, std::move(operands), std::move(attributes), location),
      resultTypes, resultNames);
}

Node *Graph::appendNode(std::unique_ptr<Node> node,
                        const std::vector<TensorType> &resultTypes,
                        const std::vector<std::string> &resultNames) {
  const Location &location = node->location;
  for (size_t i = 0; i < resultTypes.size(); ++i) {
    const std::string &name = resultNames.at(i);
    if (valuesByName.count(name))
      fail("duplicate value name '%" + name + "'", location);
    values.push_back(std::make_unique<Value>(name, resultTypes[i], node.get()));
    valuesByName[name] = values.back().get();
    node->results.push_back(values.back().get());
  }
  nodes.push_back(std::move(node));
  return nodes.back().get();
}

std::string Graph::freshName() {
  while (valuesByName.count(std::to_string(nextName)))
    ++nextName;
  return std::to_string(nextName++);
}

void Graph::swapContents(Graph &other) {
  std::swap(name, other.name);
  std::swap(inputs, other.inputs);
  std::swap(nodes, other.nodes);
  std::swap(outputs, other.outputs);
  std::swap(values, other.values);
  std::swap(valuesByName, other.valuesByName);
  std::swap(nextName, other.nextName);
}

std::unique_ptr<Graph> Graph::clone() const {
  auto copy = std::make_unique<Graph>(name);
  std::map<const Value *, Value *> remap;
  auto copyValue = [&](const Value *value, Node *producer) {
    copy->values.push_back(std::make_unique<Value>(*value));
    Value *cloned = copy->values.back().get();
    cloned->producer = producer;
    copy->valuesByName[cloned->name] = cloned;
    remap[value] = cloned;
    return cloned;
  };
  for (const Value *input : inputs)
    copy->inputs.push_back(copyValue(input, nullptr));
  // Node's copy constructor carries every field; only the value pointers
  // are redirected to the copy's values.
  for (const auto &node : nodes) {
    auto cloned = std::make_unique<Node>(*node);
    for (Operand &operand : cloned->operands)
      if (operand.isValue())
        operand.value = remap.at(operand.value);
    for (Value *&result : cloned->results)
      result = copyValue(result, cloned.get());
    copy->nodes.push_back(std::move(cloned));
  }
  for (const Value *output : outputs)
    copy->outputs.push_back(remap.at(output));
  return copy;
}

Value *Graph::findValue(const std::string &name) const {
  auto found = valuesByName.find(name);
  return found == valuesByName.end() ? nullptr : found->second;
}

} // namespace dynafuse

//===- OpRegistry.cpp - What each graph op accepts and produces -----------===//
#include "dynafuse/Graph/OpRegistry.h"

#include <algorithm>

namespace dynafuse {
namespace {

std::vector<OpInfo> buildTable() {
  auto unary = [](const std::string &name, TypeRule rule) {
    OpInfo info;
    info.name = name;
    info.rule = rule;
    return info;
  };
  auto binary = [](const std::string &name, TypeRule rule) {
    OpInfo info;
    info.name = name;
    info.arity = 2;
    info.rule = rule;
    return info;
  };
  std::vector<OpInfo> table;
  for (const char *name : {"add", "mul", "maximum", "minimum"})
    table.push_back(binary(name, TypeRule::Promote));
  table.push_back(binary("sub", TypeRule::NumericOnly));
  table.push_back(binary("div", TypeRule::PromoteToFloat));
  for (const char *name : {"eq", "ne", "lt", "le", "gt", "ge"})
    table.push_back(binary(name, TypeRule::Compare));
  for (const char *name : {"exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt"})
    table.push_back(unary(name, TypeRule::PromoteToFloat));
  for (const char *name : {"neg", "relu", "abs"})
    table.push_back(unary(name, TypeRule::NumericOnly));
  OpInfo gelu = unary("gelu", TypeRule::FloatOnly);
  gelu.attributes = {"approximate"};
  table.push_back(gelu);
  OpInfo cast = unary("cast", TypeRule::Cast);
  cast.attributes = {"dtype"};
  table.push_back(cast);
  OpInfo pow = binary("pow", TypeRule::Promote);
  pow.scalarLast = true;
  table.push_back(pow);
  OpInfo where;
  where.name = "where";
  where.arity = 3;
  where.conditionFirst = true;
  table.push_back(where);
  return table;
}

const std::vector<OpInfo> &opTable() {
  static const std::vector<OpInfo> table = buildTable();
  return table;
}

[[noreturn]] void opError(const Node &node, const std::string &message) {
  fail("op '" + node.op + "': " + message, node.location);
}

/// Promotes within one PyTorch promotion group (dim tensors, 0-dim tensors or
/// wrapped numbers).
void promoteInto(std::optional<DType> &state, DType type) {
  state = state ? promoteTypes(*state, type) : type;
}

/// PyTorch's combine_categories(higher, lower).
std::optional<DType> combineCategories(std::optional<DType> higher,
                                       std::optional<DType> lower) {
  if (!higher)
    return lower;
  if (!lower)
    return higher;
  if (isFloating(*higher))
    return higher;
  if (*higher == DType::Bool || isFloating(*lower))
    return promoteTypes(*higher, *lower);
  return higher;
}

void checkAttributes(const Node &node, const OpInfo &info) {
  for (auto &entry : node.attributes)
    if (std::find(info.attributes.begin(), info.attributes.end(),
                  entry.first) == info.attributes.end())
      opError(node, "unknown attribute '" + entry.first + "'");
}

DType applyTypeRule(const Node &node, const OpInfo &info, DType promoted) {
  switch (info.rule) {
  case TypeRule::Promote:
    return promoted;
  case TypeRule::PromoteToFloat:
    return isFloating(promoted) ? promoted : DType::F32;
  case TypeRule::FloatOnly:
    if (!isFloating(promoted))
      opError(node,
              std::string("not implemented for dtype ") + dtypeName(promoted));
    return promoted;
  case TypeRule::NumericOnly:
    if (promoted == DType::Bool)
      opError(node, "not supported for bool tensors");
    return promoted;
  case TypeRule::Compare:
    return DType::Bool;
  case TypeRule::Cast: {
    const Attribute *target = node.attribute("dtype");
    if (!target || !std::holds_alternative<DType>(*target))
      opError(node, "needs a 'dtype' attribute naming a dtype");
    return std::get<DType>(*target);
  }
  }
  return promoted;
}

void checkOperands(const Node &node, const OpInfo &info) {
  if (int(node.operands.size()) != info.arity)
    opError(node, "expects " + std::to_string(info.arity) + " operands, got " +
                      std::to_string(node.operands.size()));
  bool anyTensor = false;
  for (const Operand &operand : node.operands)
    anyTensor |= operand.isValue();
  if (!anyTensor)
    opError(node, "needs at least one tensor operand");
  if (info.scalarLast && node.operands.back().isValue())
    opError(node, "the exponent must be a scalar");
  if (info.scalarLast &&
      node.operands.back().scalar.kind == Scalar::Kind::Int &&
      node.operands.back().scalar.intValue < 0 &&
      isIntegral(node.operands[0].value->type.dtype))
    opError(node, "integers to negative integer powers are not allowed");
  if (info.conditionFirst) {
    const Operand &condition = node.operands[0];
    if (!condition.isValue() || condition.value->type.dtype != DType::Bool)
      opError(node, "the condition must be a bool tensor");
  }
  const std::string approximate = node.stringAttr("approximate", "none");
  if (approximate != "none" && approximate != "tanh")
    opError(node, "approximate must be \"none\" or \"tanh\"");
}

} // namespace

const OpInfo *lookupOp(const std::string &name) {
  for (const OpInfo &info : opTable())
    if (info.name == name)
      return &info;
  return nullptr;
}

std::vector<std::string> registeredOpNames() {
  std::vector<std::string> names;
  for (const OpInfo &info : opTable())
    names.push_back(info.name);
  return names;
}

std::vector<SymExpr> broadcastShapes(const std::vector<SymExpr> &lhs,
                                     const std::vector<SymExpr> &rhs,
                                     const Location &where) {
  size_t rank = std::max(lhs.size(), rhs.size());
  std::vector<SymExpr> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    SymExpr left =
        i < rank - lhs.size() ? SymExpr(1) : lhs[i - (rank - lhs.size())];
    SymExpr right =
        i < rank - rhs.size() ? SymExpr(1) : rhs[i - (rank - rhs.size())];
    if (left == right || right == SymExpr(1)) {
      result[i] = left;
      continue;
    }
    if (left == SymExpr(1)) {
      result[i] = right;
      continue;
    }
    fail("cannot broadcast size " + left.str() + " against " + right.str() +
             " in dimension " + std::to_string(i),
         where);
  }
  return result;
}

DType promotedOperandType(const Node &node) {
  const OpInfo *info = lookupOp(node.op);
  size_t first = info && info->conditionFirst ? 1 : 0;
  std::optional<DType> dims, zeroDims, wrapped;
  for (size_t i = first; i < node.operands.size(); ++i) {
    const Operand &operand = node.operands[i];
    if (!operand.isValue())
      promoteInto(wrapped, operand.scalar.dtype());
    else if (operand.value->type.rank() > 0)
      promoteInto(dims, operand.value->type.dtype);
    else
      promoteInto(zeroDims, operand.value->type.dtype);
  }
  std::optional<DType> result =
      combineCategories(dims, combineCategories(zeroDims, wrapped));
  return result ? *result : DType::F32;
}

std::vector<TensorType> inferResultTypes(const Node &node) {
  const OpInfo *info = lookupOp(node.op);
  if (!info)
    fail("unknown op '" + node.op + "'", node.location);
  checkAttributes(node, *info);
  checkOperands(node, *info);
  TensorType result;
  bool first = true;
  for (const Operand &operand : node.operands) {
    if (!operand.isValue())
      continue;
    const TensorType &type = operand.value->type;
    if (first) {
      result.sizes = type.sizes;
      result.device = type.device;
      first = false;
      continue;
    }
    if (type.device != result.device)
      opError(node, "operands are on different devices (" + result.device +
                        " and " + type.device + ")");
    result.sizes = broadcastShapes(result.sizes, type.sizes, node.location);
  }
  result.dtype = applyTypeRule(node, *info, promotedOperandType(node));
  return {result};
}

} // namespace dynafuse

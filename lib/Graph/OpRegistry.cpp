//===- OpRegistry.cpp - What each graph op accepts and produces -----------===//
#include "dynafuse/Graph/OpRegistry.h"

#include "dynafuse/Graph/ViewRules.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>

namespace dynafuse {
namespace {

std::vector<OpInfo> buildTable() {
  std::vector<OpInfo> table;
  addPointwiseOps(table);
  addReductionOps(table);
  addViewOps(table);
  addExternOps(table);
  addCompositeOps(table);
  for (const OpInfo &info : table) {
    // A view op says how its elements are computed, and one that remaps
    // indices says how, and whether it has a strided form (ViewRules.h): no
    // view op can silently miss one.
    bool remaps = info.view && info.view->form == ViewForm::Remap;
    if ((info.kind == OpKind::View && !info.view) ||
        (remaps && !info.view->remap))
      fail("op table: view op '" + opName(info.op) + "' lacks its view rule");
  }
  return table;
}

} // namespace

Value *emit(Graph &graph, const Node &origin, Op op,
            std::vector<Operand> operands,
            std::map<std::string, Attribute> attributes) {
  Node *node = graph.addNode(op, std::move(operands), std::move(attributes),
                             origin.location);
  node->recompute = origin.recompute; // a decomposition's pieces stay in
                                      // their checkpointed region
  return node->result();
}

namespace {

const std::vector<OpInfo> &opTable() {
  static const std::vector<OpInfo> table = buildTable();
  return table;
}

/// Each op's entry in opTable(), by opIndex; null where none was registered.
const std::array<const OpInfo *, opCount> &entriesByOp() {
  static const std::array<const OpInfo *, opCount> entries = [] {
    std::array<const OpInfo *, opCount> byOp{};
    for (const OpInfo &info : opTable()) {
      if (byOp[opIndex(info.op)])
        fail("op table: op '" + opName(info.op) + "' is registered twice");
      byOp[opIndex(info.op)] = &info;
    }
    return byOp;
  }();
  return entries;
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
    // Eager's sub refuses a bool operand (a Python bool too: it becomes a
    // bool tensor) whatever the other is.
    if (node.op == Op::Sub)
      for (const Operand &operand : node.operands)
        if (operand.isValue() ? operand.value->type.dtype == DType::Bool
                              : operand.scalar.kind == Scalar::Kind::Bool)
          opError(node, "subtraction with a bool is not supported");
    return promoted;
  case TypeRule::IntegralOnly:
    if (isFloating(promoted))
      opError(node,
              std::string("not implemented for dtype ") + dtypeName(promoted));
    return promoted;
  case TypeRule::BoolToI64:
    return promoted == DType::Bool ? DType::I64 : promoted;
  case TypeRule::FirstOperand:
    return operandType(node, 0).dtype;
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
  int expected = info.arity;
  for (const std::string &name : info.optionalOperands)
    expected -= boolAttr(node, "has_" + name, true) ? 0 : 1;
  bool countOk = info.arity < 0 ? !node.operands.empty()
                                : int(node.operands.size()) == expected;
  if (!countOk)
    opError(node, "expects " +
                      (info.arity < 0 ? std::string("one or more")
                                      : std::to_string(expected)) +
                      " operands, got " + std::to_string(node.operands.size()));
  bool anyTensor = false;
  for (const Operand &operand : node.operands)
    anyTensor |= operand.isValue();
  if (!anyTensor && info.arity != 0)
    opError(node, "needs at least one tensor operand");
  if (info.kind != OpKind::Pointwise) {
    for (const Operand &operand : node.operands)
      if (!operand.isValue())
        opError(node, "operands must be tensors");
    return;
  }
  // Eager has no pow of two bools; integers to a negative tensor power are
  // 0 (or 1, -1): only a scalar exponent raises.
  if (info.scalarLast && node.operands.back().isValue() &&
      promotedOperandType(node) == DType::Bool)
    opError(node, "pow is not implemented for bool");
  if (info.scalarLast && !node.operands.back().isValue() &&
      node.operands.front().isValue() &&
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
  if (info.verify)
    info.verify(node);
}

} // namespace

OpInfo shapedOp(Op op, OpKind kind, int arity,
                std::vector<std::string> attributes, ShapeRule infer) {
  OpInfo info;
  info.op = op;
  info.kind = kind;
  info.arity = arity;
  info.attributes = std::move(attributes);
  info.infer = std::move(infer);
  return info;
}

void opError(const Node &node, const std::string &message) {
  fail("op '" + opName(node.op) + "': " + message, node.location);
}

bool boolAttr(const Node &node, const std::string &name, bool fallback) {
  const Attribute *found = node.attribute(name);
  if (!found)
    return fallback;
  if (auto *flag = std::get_if<bool>(found))
    return *flag;
  opError(node, "attribute '" + name + "' must be true or false");
}

double floatAttr(const Node &node, const std::string &name, double fallback) {
  const Attribute *found = node.attribute(name);
  if (!found)
    return fallback;
  if (auto *number = std::get_if<double>(found))
    return *number;
  if (auto *integer = std::get_if<int64_t>(found))
    return double(*integer);
  if (auto *flag = std::get_if<bool>(found))
    return *flag ? 1.0 : 0.0;
  opError(node, "attribute '" + name + "' must be a number");
}

std::vector<int64_t> intListAttr(const Node &node, const std::string &name,
                                 std::vector<int64_t> fallback) {
  const Attribute *found = node.attribute(name);
  if (!found)
    return fallback;
  if (auto *list = std::get_if<std::vector<int64_t>>(found))
    return *list;
  if (auto *integer = std::get_if<int64_t>(found))
    return {*integer};
  opError(node, "attribute '" + name + "' must be a list of integers");
}

std::optional<SymExpr> sizeOfAttribute(const Attribute &attribute) {
  if (auto *integer = std::get_if<int64_t>(&attribute))
    return SymExpr(*integer);
  if (auto *expr = std::get_if<SymExpr>(&attribute))
    return *expr;
  return std::nullopt;
}

std::optional<std::vector<SymExpr>>
sizesOfAttribute(const Attribute &attribute) {
  if (auto *exprs = std::get_if<std::vector<SymExpr>>(&attribute))
    return *exprs;
  if (auto *values = std::get_if<std::vector<int64_t>>(&attribute))
    return std::vector<SymExpr>(values->begin(), values->end());
  return std::nullopt;
}

SymExpr symAttr(const Node &node, const std::string &name, SymExpr fallback) {
  const Attribute *found = node.attribute(name);
  if (!found)
    return fallback;
  if (std::optional<SymExpr> size = sizeOfAttribute(*found))
    return *size;
  opError(node, "attribute '" + name + "' must be an integer or a size");
}

std::vector<SymExpr> symListAttr(const Node &node, const std::string &name,
                                 std::vector<SymExpr> fallback) {
  const Attribute *found = node.attribute(name);
  if (!found)
    return fallback;
  if (auto *exprs = std::get_if<std::vector<SymExpr>>(found))
    return *exprs;
  if (auto *expr = std::get_if<SymExpr>(found))
    return {*expr};
  std::vector<int64_t> values = intListAttr(node, name, {});
  return std::vector<SymExpr>(values.begin(), values.end());
}

int64_t normalizeDim(const Node &node, int64_t dim, size_t rank) {
  int64_t extent = std::max<int64_t>(int64_t(rank), 1);
  if (dim < -extent || dim >= extent)
    opError(node, "dimension " + std::to_string(dim) +
                      " is out of range for a tensor of rank " +
                      std::to_string(rank));
  return dim < 0 ? dim + extent : dim;
}

const TensorType &operandType(const Node &node, size_t i) {
  if (i >= node.operands.size() || !node.operands[i].isValue())
    opError(node, "operand " + std::to_string(i) + " must be a tensor");
  return node.operands[i].value->type;
}

std::vector<TensorType> inferSameShape(const Node &node) {
  return {likeFirstOperand(node, operandType(node, 0).sizes)};
}

TensorType likeFirstOperand(const Node &node, std::vector<SymExpr> sizes) {
  TensorType result;
  result.dtype = operandType(node, 0).dtype;
  result.device = operandType(node, 0).device;
  result.sizes = std::move(sizes);
  return result;
}

int optionalOperandIndex(const Node &node, const std::string &name) {
  const OpInfo *info = opInfoOf(node);
  assert(info && "optionalOperandIndex on an unknown op");
  const std::vector<std::string> &optional = info->optionalOperands;
  int index = info->arity - int(optional.size());
  for (const std::string &candidate : optional) {
    bool absent = !boolAttr(node, "has_" + candidate, true);
    if (candidate == name)
      return absent ? -1 : index;
    index += absent ? 0 : 1;
  }
  assert(false && "not an optional operand of this op");
  return -1;
}

const OpInfo *lookupOp(Op op) { return entriesByOp().at(opIndex(op)); }

const OpInfo *opInfoOf(const Node &node) {
  return node.info ? node.info : lookupOp(node.op);
}

std::vector<std::string> registeredOpNames() {
  std::vector<std::string> names;
  for (const OpInfo &info : opTable())
    names.push_back(opName(info.op));
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
  const OpInfo *info = opInfoOf(node);
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
  const OpInfo *info = opInfoOf(node);
  if (!info)
    fail("unknown op '" + opName(node.op) + "'", node.location);
  checkAttributes(node, *info);
  checkOperands(node, *info);
  if (info->infer)
    return info->infer(node);
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

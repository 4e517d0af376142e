//===- PointwiseRules.cpp - Per-op lowering to scalar instructions --------===//
#include "dynafuse/Lowering/PointwiseRules.h"

#include "dynafuse/Graph/OpRegistry.h"

#include <cmath>
#include <map>

namespace dynafuse {

int ScalarBuilder::append(Instr instr) {
  return builder.append(std::move(instr));
}

int ScalarBuilder::constant(DType type, double value) {
  Instr instr;
  instr.op = ScalarOp::Const;
  instr.type = type;
  instr.floatValue = value;
  instr.intValue = int64_t(value);
  if (type == DType::Bool)
    instr.intValue = value != 0;
  return append(instr);
}

int ScalarBuilder::unary(ScalarOp op, int arg) {
  Instr instr;
  instr.op = op;
  instr.type = typeOf(arg);
  instr.args = {arg};
  return append(instr);
}

int ScalarBuilder::binary(ScalarOp op, int lhs, int rhs) {
  Instr instr;
  instr.op = op;
  instr.type = isComparison(op) ? DType::Bool : typeOf(lhs);
  instr.args = {lhs, rhs};
  return append(instr);
}

int ScalarBuilder::select(int condition, int onTrue, int onFalse) {
  Instr instr;
  instr.op = ScalarOp::Select;
  instr.type = typeOf(onTrue);
  instr.args = {condition, onTrue, onFalse};
  return append(instr);
}

int ScalarBuilder::cast(int arg, DType type) {
  if (typeOf(arg) == type)
    return arg;
  Instr instr;
  instr.op = ScalarOp::Cast;
  instr.type = type;
  instr.args = {arg};
  return append(instr);
}

int ScalarBuilder::load(int buffer, std::vector<SymExpr> index) {
  Instr instr;
  instr.op = ScalarOp::Load;
  instr.type = computeType(kernel.params[buffer].type.dtype);
  instr.buffer = buffer;
  instr.index = std::move(index);
  return append(instr);
}

void ScalarBuilder::store(int buffer, std::vector<SymExpr> index, int value) {
  Instr instr;
  instr.op = ScalarOp::Store;
  instr.buffer = buffer;
  instr.index = std::move(index);
  instr.args = {value};
  append(instr);
}

int PointwiseContext::raw(size_t i) const {
  if (elements[i] >= 0)
    return elements[i];
  return builder.constant(type, node.operands[i].scalar.asDouble());
}

int PointwiseContext::operand(size_t i) const {
  return builder.cast(raw(i), type);
}

namespace {

PointwiseRule binaryRule(ScalarOp op) {
  return [op](PointwiseContext &c) {
    return c.builder.binary(op, c.operand(0), c.operand(1));
  };
}

PointwiseRule unaryRule(ScalarOp op) {
  return
      [op](PointwiseContext &c) { return c.builder.unary(op, c.operand(0)); };
}

/// Booleans: add is logical or, mul logical and (as in PyTorch).
PointwiseRule arithmeticRule(ScalarOp op, ScalarOp onBool) {
  return [op, onBool](PointwiseContext &c) {
    return c.builder.binary(c.type == DType::Bool ? onBool : op, c.operand(0),
                            c.operand(1));
  };
}

int geluRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  int half = b.binary(ScalarOp::Mul, x, b.constant(c.type, 0.5));
  int inner;
  if (c.node.stringAttr("approximate", "none") == "tanh") {
    int cube = b.binary(ScalarOp::Mul, b.binary(ScalarOp::Mul, x, x), x);
    int poly =
        b.binary(ScalarOp::Add, x,
                 b.binary(ScalarOp::Mul, cube, b.constant(c.type, 0.044715)));
    inner = b.unary(ScalarOp::Tanh,
                    b.binary(ScalarOp::Mul, poly,
                             b.constant(c.type, std::sqrt(2.0 / M_PI))));
  } else {
    inner = b.unary(ScalarOp::Erf,
                    b.binary(ScalarOp::Mul, x, b.constant(c.type, M_SQRT1_2)));
  }
  int onePlus = b.binary(ScalarOp::Add, b.constant(c.type, 1.0), inner);
  return b.binary(ScalarOp::Mul, half, onePlus);
}

/// pow with a scalar exponent; the exponents PyTorch special-cases are
/// computed the way PyTorch computes them.
int powRule(PointwiseContext &c) {
  ScalarBuilder &b = c.builder;
  int x = c.operand(0);
  double exponent = c.node.operands[1].scalar.asDouble();
  if (isFloating(c.type)) {
    if (exponent == 1.0)
      return x;
    if (exponent == 2.0)
      return b.binary(ScalarOp::Mul, x, x);
    if (exponent == 3.0)
      return b.binary(ScalarOp::Mul, b.binary(ScalarOp::Mul, x, x), x);
    if (exponent == 0.5)
      return b.unary(ScalarOp::Sqrt, x);
    if (exponent == -0.5)
      return b.unary(ScalarOp::Rsqrt, x);
    if (exponent == -1.0)
      return b.binary(ScalarOp::Div, b.constant(c.type, 1.0), x);
  }
  return b.binary(ScalarOp::Pow, x, b.constant(c.type, exponent));
}

int reluRule(PointwiseContext &c) {
  return c.builder.binary(ScalarOp::Max, c.operand(0),
                          c.builder.constant(c.type, 0));
}

int castRule(PointwiseContext &c) { return c.builder.cast(c.raw(0), c.type); }

int whereRule(PointwiseContext &c) {
  int condition = c.builder.cast(c.raw(0), DType::Bool);
  return c.builder.select(condition, c.operand(1), c.operand(2));
}

std::map<std::string, PointwiseRule> buildRules() {
  std::map<std::string, PointwiseRule> rules;
  rules["add"] = arithmeticRule(ScalarOp::Add, ScalarOp::Or);
  rules["mul"] = arithmeticRule(ScalarOp::Mul, ScalarOp::And);
  rules["maximum"] = arithmeticRule(ScalarOp::Max, ScalarOp::Or);
  rules["minimum"] = arithmeticRule(ScalarOp::Min, ScalarOp::And);
  rules["sub"] = binaryRule(ScalarOp::Sub);
  rules["div"] = binaryRule(ScalarOp::Div);
  const std::pair<const char *, ScalarOp> comparisons[] = {
      {"eq", ScalarOp::Eq}, {"ne", ScalarOp::Ne}, {"lt", ScalarOp::Lt},
      {"le", ScalarOp::Le}, {"gt", ScalarOp::Gt}, {"ge", ScalarOp::Ge}};
  for (auto &entry : comparisons)
    rules[entry.first] = binaryRule(entry.second);
  const std::pair<const char *, ScalarOp> unaries[] = {
      {"exp", ScalarOp::Exp},   {"log", ScalarOp::Log},
      {"tanh", ScalarOp::Tanh}, {"sigmoid", ScalarOp::Sigmoid},
      {"sqrt", ScalarOp::Sqrt}, {"rsqrt", ScalarOp::Rsqrt},
      {"neg", ScalarOp::Neg},   {"abs", ScalarOp::Abs}};
  for (auto &entry : unaries)
    rules[entry.first] = unaryRule(entry.second);
  rules["relu"] = reluRule;
  rules["gelu"] = geluRule;
  rules["pow"] = powRule;
  rules["cast"] = castRule;
  rules["where"] = whereRule;
  return rules;
}

} // namespace

const PointwiseRule *findPointwiseRule(const std::string &op) {
  static const std::map<std::string, PointwiseRule> rules = buildRules();
  auto found = rules.find(op);
  return found == rules.end() ? nullptr : &found->second;
}

DType operationType(const Node &node) {
  const OpInfo *info = lookupOp(node.op);
  if (info && info->rule == TypeRule::Compare)
    return computeType(promotedOperandType(node));
  return computeType(node.result()->type.dtype);
}

} // namespace dynafuse

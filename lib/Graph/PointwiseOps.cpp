//===- PointwiseOps.cpp - The pointwise ops of the graph IR ---------------===//
//
// Elementwise ops: operands broadcast, dtypes follow the op's TypeRule. Each
// one needs a lowering rule in Lowering/PointwiseRules.cpp.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
namespace {

/// Activation functions: floating inputs only, constants as attributes.
void addActivations(std::vector<OpInfo> &table) {
  auto activation = [&table](const std::string &name,
                             std::vector<std::string> attributes) {
    OpInfo info;
    info.name = name;
    info.rule = TypeRule::FloatOnly;
    info.attributes = std::move(attributes);
    table.push_back(info);
  };
  activation("gelu", {"approximate"});
  activation("leaky_relu", {"negative_slope"});
  activation("elu", {"alpha"});
  activation("softplus", {"beta", "threshold"});
  for (const char *name : {"silu", "hardswish", "hardsigmoid", "mish"})
    activation(name, {});
  // hardtanh (and relu6) is a clamp with constant bounds: integers allowed.
  OpInfo hardtanh;
  hardtanh.name = "hardtanh";
  hardtanh.rule = TypeRule::NumericOnly;
  hardtanh.attributes = {"min_val", "max_val"};
  hardtanh.verify = [](const Node &node) {
    if (floatAttr(node, "min_val", -1.0) > floatAttr(node, "max_val", 1.0))
      opError(node, "min_val cannot be greater than max_val");
  };
  table.push_back(hardtanh);
}

} // namespace

void addPointwiseOps(std::vector<OpInfo> &table) {
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
  for (const char *name : {"add", "mul", "maximum", "minimum"})
    table.push_back(binary(name, TypeRule::Promote));
  table.push_back(binary("sub", TypeRule::NumericOnly));
  table.push_back(binary("div", TypeRule::PromoteToFloat));
  // div with rounding_mode "floor" (x // y) and "trunc": in the operands'
  // dtype, integers included.
  for (const char *name : {"div_floor", "div_trunc"})
    table.push_back(binary(name, TypeRule::NumericOnly));
  for (const char *name : {"eq", "ne", "lt", "le", "gt", "ge"})
    table.push_back(binary(name, TypeRule::Compare));
  for (const char *name :
       {"exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "erf", "exp2",
        "log1p", "expm1", "sin", "cos", "reciprocal", "log2", "log10"})
    table.push_back(unary(name, TypeRule::PromoteToFloat));
  // floor, ceil, round and trunc keep integer dtypes (the identity there).
  for (const char *name :
       {"neg", "relu", "abs", "floor", "ceil", "round", "trunc"})
    table.push_back(unary(name, TypeRule::NumericOnly));
  table.push_back(unary("sign", TypeRule::Promote));
  table.push_back(unary("square", TypeRule::BoolToI64));
  for (const char *name : {"fmod", "remainder"})
    table.push_back(binary(name, TypeRule::NumericOnly));
  for (const char *name : {"bitwise_and", "bitwise_or", "bitwise_xor"})
    table.push_back(binary(name, TypeRule::IntegralOnly));
  table.push_back(unary("bitwise_not", TypeRule::IntegralOnly));
  for (const char *name : {"logical_and", "logical_or", "logical_xor"})
    table.push_back(binary(name, TypeRule::Compare));
  table.push_back(unary("logical_not", TypeRule::Compare));
  addActivations(table);
  // Bools clamp too (False < True), to bool or, beside numbers, to the
  // promoted type.
  OpInfo clamp = unary("clamp", TypeRule::Promote);
  clamp.arity = 3;
  clamp.optionalOperands = {"min", "max"};
  clamp.attributes = {"has_min", "has_max"};
  clamp.verify = [](const Node &node) {
    if (!boolAttr(node, "has_min", true) && !boolAttr(node, "has_max", true))
      opError(node, "at least one of min and max must be given");
    if (!node.operands[0].isValue())
      opError(node, "the input must be a tensor");
    // Eager's clamp_min and clamp_max of a bool tensor take bools; its
    // clamp and its scalar bounds do not.
    if (promotedOperandType(node) == DType::Bool &&
        ((boolAttr(node, "has_min", true) && boolAttr(node, "has_max", true)) ||
         !node.operands.back().isValue()))
      opError(node, "clamp of bools is implemented for one tensor bound only");
  };
  table.push_back(clamp);
  OpInfo maskedFill;
  maskedFill.name = "masked_fill";
  maskedFill.arity = 3;
  maskedFill.rule = TypeRule::FirstOperand;
  maskedFill.verify = [](const Node &node) {
    operandType(node, 0);
    if (operandType(node, 1).dtype != DType::Bool)
      opError(node, "the mask must be a bool tensor");
    const Operand &value = node.operands[2];
    if (value.isValue() && value.value->type.rank() != 0)
      opError(node, "the fill value must be a number or a 0-dim tensor");
  };
  table.push_back(maskedFill);
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
  for (OpInfo &info : table)
    for (const char *name :
         {"rsqrt", "sqrt", "div", "div_floor", "div_trunc", "exp", "log", "tanh", "erf", "sigmoid", "pow",
          "exp2", "log1p", "expm1", "sin", "cos", "reciprocal"})
      info.costlyMath |= info.name == name;
}

} // namespace dynafuse

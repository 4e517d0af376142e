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
  auto activation = [&table](Op name, std::vector<std::string> attributes) {
    OpInfo info;
    info.op = name;
    info.rule = TypeRule::FloatOnly;
    info.attributes = std::move(attributes);
    table.push_back(info);
  };
  activation(Op::Gelu, {"approximate"});
  activation(Op::LeakyRelu, {"negative_slope"});
  activation(Op::Elu, {"alpha"});
  activation(Op::Softplus, {"beta", "threshold"});
  for (Op name : {Op::Silu, Op::Hardswish, Op::Hardsigmoid, Op::Mish})
    activation(name, {});
  // hardtanh (and relu6) is a clamp with constant bounds: integers allowed.
  OpInfo hardtanh;
  hardtanh.op = Op::Hardtanh;
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
  auto unary = [](Op name, TypeRule rule) {
    OpInfo info;
    info.op = name;
    info.rule = rule;
    return info;
  };
  auto binary = [](Op name, TypeRule rule) {
    OpInfo info;
    info.op = name;
    info.arity = 2;
    info.rule = rule;
    return info;
  };
  for (Op name : {Op::Add, Op::Mul, Op::Maximum, Op::Minimum})
    table.push_back(binary(name, TypeRule::Promote));
  table.push_back(binary(Op::Sub, TypeRule::NumericOnly));
  table.push_back(binary(Op::Div, TypeRule::PromoteToFloat));
  // div with rounding_mode "floor" (x // y) and "trunc": in the operands'
  // dtype, integers included.
  for (Op name : {Op::DivFloor, Op::DivTrunc})
    table.push_back(binary(name, TypeRule::NumericOnly));
  for (Op name : {Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge})
    table.push_back(binary(name, TypeRule::Compare));
  for (Op name : {Op::Exp, Op::Log, Op::Tanh, Op::Sigmoid, Op::Sqrt, Op::Rsqrt,
                  Op::Erf, Op::Exp2, Op::Log1p, Op::Expm1, Op::Sin, Op::Cos,
                  Op::Reciprocal, Op::Log2, Op::Log10})
    table.push_back(unary(name, TypeRule::PromoteToFloat));
  // floor, ceil, round and trunc keep integer dtypes (the identity there).
  for (Op name :
       {Op::Neg, Op::Relu, Op::Abs, Op::Floor, Op::Ceil, Op::Round, Op::Trunc})
    table.push_back(unary(name, TypeRule::NumericOnly));
  table.push_back(unary(Op::Sign, TypeRule::Promote));
  table.push_back(unary(Op::Square, TypeRule::BoolToI64));
  for (Op name : {Op::Fmod, Op::Remainder})
    table.push_back(binary(name, TypeRule::NumericOnly));
  for (Op name : {Op::BitwiseAnd, Op::BitwiseOr, Op::BitwiseXor})
    table.push_back(binary(name, TypeRule::IntegralOnly));
  table.push_back(unary(Op::BitwiseNot, TypeRule::IntegralOnly));
  for (Op name : {Op::LogicalAnd, Op::LogicalOr, Op::LogicalXor})
    table.push_back(binary(name, TypeRule::Compare));
  table.push_back(unary(Op::LogicalNot, TypeRule::Compare));
  addActivations(table);
  // Bools clamp too (False < True), to bool or, beside numbers, to the
  // promoted type.
  OpInfo clamp = unary(Op::Clamp, TypeRule::Promote);
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
  maskedFill.op = Op::MaskedFill;
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
  OpInfo cast = unary(Op::Cast, TypeRule::Cast);
  cast.attributes = {"dtype"};
  table.push_back(cast);
  OpInfo pow = binary(Op::Pow, TypeRule::Promote);
  pow.scalarLast = true;
  table.push_back(pow);
  OpInfo where;
  where.op = Op::Where;
  where.arity = 3;
  where.conditionFirst = true;
  table.push_back(where);
  for (OpInfo &info : table)
    for (Op name :
         {Op::Rsqrt, Op::Sqrt, Op::Div, Op::DivFloor, Op::DivTrunc, Op::Exp,
          Op::Log, Op::Tanh, Op::Erf, Op::Sigmoid, Op::Pow, Op::Exp2, Op::Log1p,
          Op::Expm1, Op::Sin, Op::Cos, Op::Reciprocal})
      info.costlyMath |= info.op == name;
}

} // namespace dynafuse

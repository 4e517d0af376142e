//===- PointwiseOps.cpp - The pointwise ops of the graph IR ---------------===//
//
// Elementwise ops: operands broadcast, dtypes follow the op's TypeRule. Each
// one needs a lowering rule in Lowering/PointwiseRules.cpp.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {

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
}

} // namespace dynafuse

//===- ReductionDerivatives.cpp - Rules of reductions ---------------------===//
//
// sum spreads its gradient back over the reduced dims; amax and amin give
// it to the elements equal to the extreme, split evenly between ties as
// eager does. prod, max_dim and min_dim have no rule yet.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/Derivatives.h"

#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
namespace {

using Grads = std::vector<Value *>;

DerivativeInfo sumRule() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(1, nullptr);
    Value *x = node.operands[0].value;
    if (!grads[0] || !isDifferentiable(x->type.dtype))
      return result;
    Value *spread = b.expandReduced(grads[0], x->type, reducedDims(node),
                                    boolAttr(node, "keepdim", false));
    result[0] = b.sumTo(spread, x->type);
    return result;
  };
  return info;
}

DerivativeInfo extremeRule() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(1, nullptr);
    Value *x = node.operands[0].value;
    if (!grads[0] || !isDifferentiable(x->type.dtype))
      return result;
    std::vector<int64_t> dims = reducedDims(node);
    bool keepdim = boolAttr(node, "keepdim", false);
    Value *extreme = b.expandReduced(node.result(), x->type, dims, keepdim);
    Value *hits = b.emit("eq", {x, extreme});
    Value *count = b.emit("sum", {b.emit("cast", {hits}, {{"dtype", x->type.dtype}})},
                          {{"dims", dims}, {"keepdim", true}});
    Value *share = b.emit("div", {b.expandReduced(grads[0], x->type, dims, keepdim),
                                  count});
    result[0] = b.emit("where", {hits, share, Scalar::ofFloat(0)});
    return result;
  };
  return info;
}

} // namespace

void addReductionDerivatives(std::map<std::string, DerivativeInfo> &table) {
  table["sum"] = sumRule();
  table["amax"] = extremeRule();
  table["amin"] = extremeRule();
}

} // namespace dynafuse

//===- CompositeDerivatives.cpp - Composites with rules of their own ------===//
//
// softmax and log_softmax read only their result in the backward (as
// eager's _softmax_backward_data does): differentiating their
// decompositions would save the max, the exponentials and the sum.
// layer_norm and rms_norm read their input and weight and recompute the
// statistics in the backward (eager saves the mean and rstd, a row each;
// the decomposition would save the centered and normalized inputs, two
// tensors of the input's size).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/Derivatives.h"

#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
namespace {

using Grads = std::vector<Value *>;

/// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g), the
/// sums over dim kept.
DerivativeInfo softmaxRule(bool logarithmic) {
  DerivativeInfo info;
  info.rule = [logarithmic](GradBuilder &b, const Node &node,
                            const Grads &grads) {
    Grads result(1, nullptr);
    Value *x = node.operands[0].value;
    Value *g = grads[0];
    if (!g || !isDifferentiable(x->type.dtype))
      return result;
    Value *y = node.result();
    int64_t dim = normalizeDim(node, node.intAttr("dim", -1), y->type.rank());
    std::map<std::string, Attribute> overDim = {
        {"dims", std::vector<int64_t>{dim}}, {"keepdim", true}};
    if (logarithmic) {
      Value *total = b.emit("sum", {g}, overDim);
      result[0] = b.sumTo(
          b.emit("sub", {g, b.emit("mul", {b.emit("exp", {y}), total})}),
          x->type);
    } else {
      Value *dot = b.emit("sum", {b.emit("mul", {g, y})}, overDim);
      result[0] =
          b.sumTo(b.emit("mul", {y, b.emit("sub", {g, dot})}), x->type);
    }
    return result;
  };
  return info;
}

/// The mean of x over dims (kept), dividing by a count that may be
/// symbolic (a 0-dim f32 full, as the decompositions make it).
Value *meanOver(GradBuilder &b, Value *x, const std::vector<int64_t> &dims) {
  SymExpr count = 1;
  for (int64_t dim : dims)
    count = count * x->type.sizes[size_t(dim)];
  Value *sum = b.emit("sum", {x}, {{"dims", dims}, {"keepdim", true}});
  if (count.isConstant())
    return b.emit("div", {sum, Scalar::ofFloat(double(count.constant()))});
  Value *divisor = b.emit("full", {},
                          {{"shape", std::vector<int64_t>{}},
                           {"value", count},
                           {"dtype", DType::F32}});
  return b.emit("div", {sum, divisor});
}

/// layer_norm (centered) and rms_norm: gradients of x, weight and bias
/// from xhat = (x - mean) * rstd (rms: x * rstd), recomputed here.
DerivativeInfo normRule(bool centered) {
  DerivativeInfo info;
  info.rule = [centered](GradBuilder &b, const Node &node,
                         const Grads &grads) {
    Grads result(node.operands.size(), nullptr);
    Value *g = grads[0];
    Value *x = node.operands[0].value;
    if (!g)
      return result;
    size_t normalized = symListAttr(node, "normalized_shape", {}).size();
    std::vector<int64_t> dims;
    for (size_t k = x->type.rank() - normalized; k < x->type.rank(); ++k)
      dims.push_back(int64_t(k));
    size_t next = 1;
    Value *weight = nullptr;
    int weightIndex = -1, biasIndex = -1;
    if (boolAttr(node, "has_weight", false) && next < node.operands.size()) {
      weightIndex = int(next);
      weight = node.operands[next++].value;
    }
    if (centered && boolAttr(node, "has_bias", false) &&
        next < node.operands.size())
      biasIndex = int(next++);
    double eps = floatAttr(node, "eps", centered ? 1e-5 : 1.1920928955078125e-07);
    Value *xc = centered ? b.emit("sub", {x, meanOver(b, x, dims)}) : x;
    Value *variance = meanOver(b, b.emit("mul", {xc, xc}), dims);
    Value *rstd =
        b.emit("rsqrt", {b.emit("add", {variance, Scalar::ofFloat(eps)})});
    Value *xhat = b.emit("mul", {xc, rstd});
    if (weightIndex >= 0 && isDifferentiable(weight->type.dtype))
      result[size_t(weightIndex)] =
          b.sumTo(b.emit("mul", {g, xhat}), weight->type);
    if (biasIndex >= 0)
      result[size_t(biasIndex)] =
          b.sumTo(g, node.operands[size_t(biasIndex)].value->type);
    Value *gxhat = weight ? b.emit("mul", {g, weight}) : g;
    Value *projection =
        b.emit("mul", {xhat, meanOver(b, b.emit("mul", {gxhat, xhat}), dims)});
    Value *inner = b.emit("sub", {gxhat, projection});
    if (centered)
      inner = b.emit("sub", {inner, meanOver(b, gxhat, dims)});
    result[0] = b.sumTo(b.emit("mul", {rstd, inner}), x->type);
    return result;
  };
  return info;
}

} // namespace

void addCompositeDerivatives(std::map<std::string, DerivativeInfo> &table) {
  table["softmax"] = softmaxRule(false);
  table["log_softmax"] = softmaxRule(true);
  table["layer_norm"] = normRule(true);
  table["rms_norm"] = normRule(false);
}

} // namespace dynafuse

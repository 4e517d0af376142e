//===- CompositeDerivatives.cpp - Composites with rules of their own ------===//
//
// softmax and log_softmax read only their result in the backward (as
// eager's _softmax_backward_data does): differentiating their
// decompositions would save the max, the exponentials and the sum.
// layer_norm and rms_norm read their input and weight and recompute the
// statistics in the backward (eager saves the mean and rstd, a row each;
// the decomposition would save the centered and normalized inputs, two
// tensors of the input's size). batch_norm_train reads its input and the
// batch statistics it returned ([C] each), as eager's
// native_batch_norm_backward does: two per-channel sums of the gradient,
// then one pointwise pass.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/Derivatives.h"

#include "dynafuse/Graph/OpRegistry.h"

#include <cmath>

namespace dynafuse {
namespace {

using Grads = std::vector<Value *>;

/// A rule for a composite whose operand 0 alone takes a gradient: x's from
/// the result's (g).
DerivativeInfo firstOperandRule(
    std::function<Value *(GradBuilder &, const Node &, Value *g, Value *x)>
        gradient) {
  DerivativeInfo info;
  info.rule = [gradient](GradBuilder &b, const Node &node,
                         const Grads &grads) {
    Grads result(1, nullptr);
    Value *x = node.operands[0].value;
    if (grads[0] && isDifferentiable(x->type.dtype))
      result[0] = gradient(b, node, grads[0], x);
    return result;
  };
  return info;
}

/// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g), the
/// sums over dim kept.
DerivativeInfo softmaxRule(bool logarithmic) {
  return firstOperandRule([logarithmic](GradBuilder &b, const Node &node,
                                        Value *g, Value *x) {
    Value *y = node.result();
    int64_t dim = normalizeDim(node, node.intAttr("dim", -1), y->type.rank());
    std::map<std::string, Attribute> overDim = {
        {"dims", std::vector<int64_t>{dim}}, {"keepdim", true}};
    if (logarithmic) {
      Value *total = b.emit(Op::Sum, {g}, overDim);
      return b.sumTo(
          b.emit(Op::Sub, {g, b.emit(Op::Mul, {b.emit(Op::Exp, {y}), total})}),
          x->type);
    }
    Value *dot = b.emit(Op::Sum, {b.emit(Op::Mul, {g, y})}, overDim);
    return b.sumTo(b.emit(Op::Mul, {y, b.emit(Op::Sub, {g, dot})}), x->type);
  });
}

/// A sum over dims of x (whose sizes are `sizes`) divided by their element
/// count less `correction` (var's), which may be symbolic (a 0-dim f32
/// full, as the decompositions make it; then the correction must be an
/// integer).
Value *divideByCount(GradBuilder &b, Value *sum,
                     const std::vector<SymExpr> &sizes,
                     const std::vector<int64_t> &dims,
                     double correction = 0) {
  SymExpr count = 1;
  for (int64_t dim : dims)
    count = count * sizes[size_t(dim)];
  if (count.isConstant())
    return b.emit(
        Op::Div, {sum, Scalar::ofFloat(double(count.constant()) - correction)});
  if (correction != std::floor(correction))
    throw Error("a gradient divided by a symbolic count less a correction "
                "that is not an integer needs a static count");
  Value *divisor =
      b.emit(Op::Full, {},
             {{"shape", std::vector<int64_t>{}},
              {"value", correction != 0 ? count - int64_t(correction) : count},
              {"dtype", DType::F32}});
  return b.emit(Op::Div, {sum, divisor});
}

Value *sumOver(GradBuilder &b, Value *x, const std::vector<int64_t> &dims) {
  return b.emit(Op::Sum, {x}, {{"dims", dims}, {"keepdim", true}});
}

/// The mean of x over dims (kept).
Value *meanOver(GradBuilder &b, Value *x, const std::vector<int64_t> &dims) {
  return divideByCount(b, sumOver(b, x, dims), x->type.sizes, dims);
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
    double eps =
        floatAttr(node, "eps", centered ? 1e-5 : computeEpsilon(x->type.dtype));
    Value *xc = centered ? b.emit(Op::Sub, {x, meanOver(b, x, dims)}) : x;
    Value *variance = meanOver(b, b.emit(Op::Mul, {xc, xc}), dims);
    Value *rstd =
        b.emit(Op::Rsqrt, {b.emit(Op::Add, {variance, Scalar::ofFloat(eps)})});
    Value *xhat = b.emit(Op::Mul, {xc, rstd});
    if (weightIndex >= 0 && isDifferentiable(weight->type.dtype))
      result[size_t(weightIndex)] =
          b.sumTo(b.emit(Op::Mul, {g, xhat}), weight->type);
    if (biasIndex >= 0)
      result[size_t(biasIndex)] =
          b.sumTo(g, node.operands[size_t(biasIndex)].value->type);
    Value *gxhat = weight ? b.emit(Op::Mul, {g, weight}) : g;
    Value *projection = b.emit(
        Op::Mul, {xhat, meanOver(b, b.emit(Op::Mul, {gxhat, xhat}), dims)});
    Value *inner = b.emit(Op::Sub, {gxhat, projection});
    if (centered)
      inner = b.emit(Op::Sub, {inner, meanOver(b, gxhat, dims)});
    result[0] = b.sumTo(b.emit(Op::Mul, {rstd, inner}), x->type);
    return result;
  };
  return info;
}

/// batch_norm_train(x[, weight][, bias]) -> (y, mean, var): with
/// xhat = (x - mean) * rstd and per-channel sums over every dim but 1,
///   dbias = sum(g), dweight = sum(g * xhat),
///   dx = weight * rstd * (g - sum(g) / n - xhat * sum(g * xhat) / n).
/// The statistics reach the running averages through detach, so only y
/// carries a gradient.
DerivativeInfo batchNormTrainRule() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(node.operands.size(), nullptr);
    if (grads[1] || grads[2])
      throw Error("gradients through the batch statistics (results 1 "
                  "and 2) are not supported");
    Value *g = grads[0];
    if (!g)
      return result;
    Value *x = node.operands[0].value;
    std::vector<int64_t> dims = batchNormDims(node);
    std::vector<SymExpr> broadcast(x->type.rank(), SymExpr(1));
    broadcast[1] = x->type.sizes[1];
    auto perChannel = [&](Value *value) {
      return b.emit(Op::Reshape, {value}, {{"shape", broadcast}});
    };
    auto channels = [&](Value *value, const TensorType &type) {
      return b.sumTo(b.emit(Op::Reshape, {value}, {{"shape", type.sizes}}),
                     type);
    };
    double eps = floatAttr(node, "eps", 1e-5);
    Value *rstd = b.emit(
        Op::Rsqrt,
        {b.emit(Op::Add, {perChannel(node.results[2]), Scalar::ofFloat(eps)})});
    Value *xhat = b.emit(
        Op::Mul, {b.emit(Op::Sub, {x, perChannel(node.results[1])}), rstd});
    Value *sumG = sumOver(b, g, dims);
    Value *sumGXhat = sumOver(b, b.emit(Op::Mul, {g, xhat}), dims);
    size_t next = 1;
    Value *weight = nullptr;
    if (boolAttr(node, "has_weight", false)) {
      weight = node.operands[next].value;
      if (isDifferentiable(weight->type.dtype))
        result[next] = channels(sumGXhat, weight->type);
      ++next;
    }
    if (boolAttr(node, "has_bias", false))
      result[next] = channels(sumG, node.operands[next].value->type);
    if (!isDifferentiable(x->type.dtype))
      return result;
    Value *scale = weight ? b.emit(Op::Mul, {perChannel(weight), rstd}) : rstd;
    Value *centeredG =
        b.emit(Op::Sub, {g, divideByCount(b, sumG, x->type.sizes, dims)});
    Value *projection = b.emit(
        Op::Mul, {xhat, divideByCount(b, sumGXhat, x->type.sizes, dims)});
    result[0] = b.sumTo(
        b.emit(Op::Mul, {scale, b.emit(Op::Sub, {centeredG, projection})}),
        x->type);
    return result;
  };
  return info;
}

/// var and std, as eager's var_backward: 2 / (N - correction) * g *
/// (x - mean(x)), the mean recomputed here. Through the decomposition the
/// mean's own term, zero in exact arithmetic, made every element NaN where
/// x holds an inf. std first takes g / (2 * std), 0 where std is 0
/// (std_backward).
DerivativeInfo varianceRule(bool squareRoot) {
  return firstOperandRule([squareRoot](GradBuilder &b, const Node &node,
                                       Value *g, Value *x) {
    std::vector<int64_t> dims = reducedDims(node);
    bool keepdim = boolAttr(node, "keepdim", false);
    double correction = floatAttr(node, "correction", 1.0);
    if (squareRoot) {
      Value *y = node.result();
      g = b.emit(
          Op::Where,
          {b.emit(Op::Eq, {y, Scalar::ofFloat(0)}), Scalar::ofFloat(0),
           b.emit(Op::Div, {g, b.emit(Op::Mul, {y, Scalar::ofFloat(2)})})});
    }
    Value *twice = b.emit(Op::Mul, {g, Scalar::ofFloat(2)});
    Value *scaled =
        divideByCount(b, twice, x->type.sizes, dims, correction);
    if (scaled->type.dtype != twice->type.dtype) // a symbolic count's f32
      scaled = b.emit(Op::Cast, {scaled}, {{"dtype", twice->type.dtype}});
    Value *centered = b.emit(Op::Sub, {x, meanOver(b, x, dims)});
    return b.sumTo(
        b.emit(Op::Mul,
               {b.expandReduced(scaled, x->type, dims, keepdim), centered}),
        x->type);
  });
}

} // namespace

/// The entries: from include/dynafuse/Ops/CompositeOps.py.
void addCompositeDerivatives(std::map<Op, DerivativeInfo> &table) {
#include "dynafuse/Ops/CompositeDerivatives.inc"
}

} // namespace dynafuse

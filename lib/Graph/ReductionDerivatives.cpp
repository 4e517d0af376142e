//===- ReductionDerivatives.cpp - Rules of reductions ---------------------===//
//
// sum spreads its gradient back over the reduced dims; amax and amin give
// it to the elements equal to the extreme, split evenly between ties as
// eager does; max_dim and min_dim give it to the element their index names
// (eager's value_selecting_reduction_backward). prod has no rule yet.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/Derivatives.h"

#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
namespace {

using Grads = std::vector<Value *>;

/// A rule for a reduction of operand x over dims: x's gradient from the
/// result's (g) and the reduction's result (y).
/// (A node marked "whole", max()/min() of the whole tensor, takes
/// `whole`'s gradient when given.)
using ReductionGradient =
    std::function<Value *(GradBuilder &, const std::vector<int64_t> &dims,
                          bool keepdim, Value *g, Value *x, Value *y)>;
DerivativeInfo reductionRule(ReductionGradient gradient,
                             ReductionGradient whole = nullptr) {
  DerivativeInfo info;
  info.rule = [gradient, whole](GradBuilder &b, const Node &node,
                                const Grads &grads) {
    Grads result(1, nullptr);
    Value *x = node.operands[0].value;
    const ReductionGradient &rule =
        whole && boolAttr(node, "whole", false) ? whole : gradient;
    if (grads[0] && isDifferentiable(x->type.dtype))
      result[0] = rule(b, reducedDims(node), boolAttr(node, "keepdim", false),
                       grads[0], x, node.result());
    return result;
  };
  return info;
}

Value *sumGradient(GradBuilder &b, const std::vector<int64_t> &dims,
                   bool keepdim, Value *g, Value *x, Value *) {
  return b.sumTo(b.expandReduced(g, x->type, dims, keepdim), x->type);
}

/// g spread back over the reduced dims and divided by how many elements
/// the bool mask `hits` holds in each reduced slice.
Value *sharedAmong(GradBuilder &b, Value *hits, const std::vector<int64_t> &dims,
                   bool keepdim, Value *g, Value *x) {
  Value *count =
      b.emit(Op::Sum, {b.emit(Op::Cast, {hits}, {{"dtype", x->type.dtype}})},
             {{"dims", dims}, {"keepdim", true}});
  return b.emit(Op::Div, {b.expandReduced(g, x->type, dims, keepdim), count});
}

/// amax / amin: the gradient shared by the elements equal to the result,
/// as eager's scale_grad_by_count, (g / count) * hits: where the result is
/// NaN nothing equals it, and 0 * (g / 0) makes the whole slice NaN.
Value *extremeGradient(GradBuilder &b, const std::vector<int64_t> &dims,
                       bool keepdim, Value *g, Value *x, Value *y) {
  Value *hits = b.emit(Op::Eq, {x, b.expandReduced(y, x->type, dims, keepdim)});
  return b.emit(Op::Mul,
                {sharedAmong(b, hits, dims, keepdim, g, x),
                 b.emit(Op::Cast, {hits}, {{"dtype", x->type.dtype}})});
}

/// max() / min() of the whole tensor (amax/amin marked "whole"), as
/// eager's evenly_distribute_backward: g / count at the elements equal to
/// the result, or at the NaNs when the result is NaN; 0 elsewhere.
Value *wholeExtremeGradient(GradBuilder &b, const std::vector<int64_t> &dims,
                            bool keepdim, Value *g, Value *x, Value *y) {
  Value *extreme = b.expandReduced(y, x->type, dims, keepdim);
  Value *hits =
      b.emit(Op::Where, {b.emit(Op::Ne, {extreme, extreme}),
                         b.emit(Op::Ne, {x, x}), b.emit(Op::Eq, {x, extreme})});
  return b.emit(Op::Where, {hits, sharedAmong(b, hits, dims, keepdim, g, x),
                            Scalar::ofFloat(0)});
}

/// max_dim / min_dim -> (values, indices): the values' gradient placed at
/// the indices along dim.
DerivativeInfo selectingRule() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(1, nullptr);
    Value *x = node.operands[0].value;
    if (!grads[0] || !isDifferentiable(x->type.dtype))
      return result;
    if (x->type.rank() == 0) {
      result[0] = grads[0];
      return result;
    }
    size_t dim = size_t(normalizeDim(node, node.intAttr("dim", 0), x->type.rank()));
    Value *g = grads[0], *index = node.results[1];
    if (!boolAttr(node, "keepdim", false)) {
      g = b.emit(Op::Unsqueeze, {g}, {{"dim", int64_t(dim)}});
      index = b.emit(Op::Unsqueeze, {index}, {{"dim", int64_t(dim)}});
    }
    result[0] = b.placeAlong(g, index, x->type, dim);
    return result;
  };
  return info;
}

} // namespace

/// The entries: from include/dynafuse/Ops/ReductionOps.py.
void addReductionDerivatives(std::map<Op, DerivativeInfo> &table) {
#include "dynafuse/Ops/ReductionDerivatives.inc"
}

} // namespace dynafuse

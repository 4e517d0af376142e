//===- PointwiseDerivatives.cpp - Rules of pointwise ops ------------------===//
//
// Each rule writes the eager backward formula (derivatives.yaml's) in graph
// ops; gradients of broadcast operands are summed back to their shape
// (GradBuilder::sumTo). Ops whose derivative is zero almost everywhere
// (floor, sign, ...) give no gradient, as a zero one.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/Derivatives.h"

#include "dynafuse/Graph/OpRegistry.h"

#include <cmath>

namespace dynafuse {
namespace {

using Grads = std::vector<Value *>;

Scalar number(double value) { return Scalar::ofFloat(value); }

/// An operand's gradient when the operand is a tensor, else null.
Value *toOperand(GradBuilder &b, const Node &node, size_t i, Value *g) {
  const Operand &operand = node.operands.at(i);
  if (!operand.isValue() || !g || !isDifferentiable(operand.value->type.dtype))
    return nullptr;
  return b.sumTo(g, operand.value->type);
}

/// g where an operand neither lost nor tied, half of g where it tied, 0 where
/// it lost (eager's maximum/minimum rule: NaNs neither lose nor tie).
Value *tieSplit(GradBuilder &b, Value *g, Value *lost, Value *tied) {
  Value *half = b.emit(Op::Mul, {g, number(0.5)});
  return b.emit(Op::Where,
                {lost, number(0), b.emit(Op::Where, {tied, half, g})});
}

/// A rule for a unary op: the input's gradient from (g, x, y).
DerivativeInfo unary(std::function<Value *(GradBuilder &, const Node &,
                                           Value *g, Operand x, Value *y)>
                         gradient) {
  DerivativeInfo info;
  info.rule = [gradient](GradBuilder &b, const Node &node, const Grads &grads) {
    Value *g = grads.at(0);
    if (!g)
      return Grads(node.operands.size(), nullptr);
    Grads result(node.operands.size(), nullptr);
    result[0] = toOperand(
        b, node, 0, gradient(b, node, g, node.operands[0], node.result()));
    return result;
  };
  return info;
}

/// A rule for a binary op: both operands' gradients from (g, a, b, y).
DerivativeInfo binary(
    std::function<Value *(GradBuilder &, Value *g, Operand a, Operand c,
                          Value *y)>
        first,
    std::function<Value *(GradBuilder &, Value *g, Operand a, Operand c,
                          Value *y)>
        second) {
  DerivativeInfo info;
  info.rule = [first, second](GradBuilder &b, const Node &node,
                              const Grads &grads) {
    Value *g = grads.at(0);
    Grads result(2, nullptr);
    if (!g)
      return result;
    const Operand &lhs = node.operands[0], &rhs = node.operands[1];
    if (lhs.isValue())
      result[0] = toOperand(b, node, 0, first(b, g, lhs, rhs, node.result()));
    if (rhs.isValue())
      result[1] = toOperand(b, node, 1, second(b, g, lhs, rhs, node.result()));
    return result;
  };
  return info;
}

/// floor, sign, ...: a zero gradient, as a tensor of zeros (eager's
/// SignBackward gives zeros_like(grad)), so the operand still gets one and
/// the result requires grad as in eager.
DerivativeInfo zeroGradient() {
  DerivativeInfo info;
  info.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(node.operands.size(), nullptr);
    if (grads.at(0))
      result[0] = b.emit(Op::FullLike, {grads[0]}, {{"value", 0.0}});
    return result;
  };
  return info;
}

/// where(condition, g, 0): g where the condition holds.
Value *masked(GradBuilder &b, Value *condition, Value *g) {
  return b.emit(Op::Where, {condition, g, number(0)});
}

/// maximum / minimum, as eager's: the operand that loses (by `loses`) gets
/// nothing, ties split the gradient in half, and where either is NaN both
/// get it.
DerivativeInfo extremeDerivative(Op loses) {
  auto pick = [loses](GradBuilder &b, Value *g, Operand a, Operand c, Value *,
                      bool first) {
    return tieSplit(b, g, first ? b.emit(loses, {a, c}) : b.emit(loses, {c, a}),
                    b.emit(Op::Eq, {a, c}));
  };
  return binary([pick](GradBuilder &b, Value *g, Operand a, Operand c,
                       Value *y) { return pick(b, g, a, c, y, true); },
                [pick](GradBuilder &b, Value *g, Operand a, Operand c,
                       Value *y) { return pick(b, g, a, c, y, false); });
}

/// pow with a scalar exponent c: g * c * x^(c-1).
DerivativeInfo powDerivative() {
  return unary([](GradBuilder &b, const Node &node, Value *g, Operand x,
                  Value *) -> Value * {
    Scalar exponent = node.operands.at(1).scalar;
    double c = exponent.asDouble();
    if (c == 0)
      return nullptr;
    Value *power =
        c == 2 ? x.value
               : b.emit(Op::Pow, {x, exponent.kind == Scalar::Kind::Float
                                         ? Scalar::ofFloat(c - 1)
                                         : Scalar::ofInt(int64_t(c) - 1)});
    return b.emit(Op::Mul, {b.emit(Op::Mul, {g, power}), number(c)});
  });
}

/// gelu: g * (Phi(x) + x * phi(x)); tanh approximation: its own slope.
DerivativeInfo geluDerivative() {
  return unary([](GradBuilder &b, const Node &node, Value *g, Operand x,
                  Value *) {
    if (node.stringAttr("approximate", "none") == "tanh") {
      const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
      Value *x2 = b.emit(Op::Mul, {x, x});
      Value *inner =
          b.emit(Op::Mul,
                 {b.emit(Op::Mul,
                         {x, b.emit(Op::Add, {b.emit(Op::Mul, {x2, number(c)}),
                                              number(1)})}),
                  number(k)});
      Value *t = b.emit(Op::Tanh, {inner});
      Value *left =
          b.emit(Op::Mul, {b.emit(Op::Add, {t, number(1)}), number(0.5)});
      Value *sech2 = b.emit(Op::Sub, {number(1), b.emit(Op::Mul, {t, t})});
      Value *innerSlope = b.emit(
          Op::Mul,
          {b.emit(Op::Add, {b.emit(Op::Mul, {x2, number(3 * c)}), number(1)}),
           number(k)});
      Value *right = b.emit(
          Op::Mul, {b.emit(Op::Mul, {b.emit(Op::Mul, {x, sech2}), innerSlope}),
                    number(0.5)});
      return b.emit(Op::Mul, {g, b.emit(Op::Add, {left, right})});
    }
    Value *cdf = b.emit(
        Op::Mul,
        {b.emit(Op::Add,
                {b.emit(Op::Erf, {b.emit(Op::Mul, {x, number(M_SQRT1_2)})}),
                 number(1)}),
         number(0.5)});
    Value *pdf = b.emit(
        Op::Mul,
        {b.emit(Op::Exp,
                {b.emit(Op::Mul, {b.emit(Op::Mul, {x, x}), number(-0.5)})}),
         number(1.0 / std::sqrt(2 * M_PI))});
    return b.emit(Op::Mul,
                  {g, b.emit(Op::Add, {cdf, b.emit(Op::Mul, {x, pdf})})});
  });
}

DerivativeInfo leakyReluDerivative() {
  return unary(
      [](GradBuilder &b, const Node &node, Value *g, Operand x, Value *) {
        double slope = 0.01;
        if (const Attribute *value = node.attribute("negative_slope"))
          if (const double *given = std::get_if<double>(value))
            slope = *given;
        Value *positive = b.emit(Op::Gt, {x, number(0)});
        return b.emit(Op::Where,
                      {positive, g, b.emit(Op::Mul, {g, number(slope)})});
      });
}

DerivativeInfo hardtanhDerivative() {
  return unary([](GradBuilder &b, const Node &node, Value *g, Operand x,
                  Value *) {
    auto bound = [&](const char *name, double fallback) {
      const Attribute *value = node.attribute(name);
      if (value && std::get_if<double>(value))
        return std::get<double>(*value);
      if (value && std::get_if<int64_t>(value))
        return double(std::get<int64_t>(*value));
      return fallback;
    };
    // Eager's hardtanh_backward: zero where x <= min or x >= max (so a
    // NaN passes the gradient).
    Value *inside =
        b.emit(Op::LogicalNot,
               {b.emit(Op::LogicalOr,
                       {b.emit(Op::Le, {x, number(bound("min_val", -1))}),
                        b.emit(Op::Ge, {x, number(bound("max_val", 1))})})});
    return masked(b, inside, g);
  });
}

/// where(c, a, b): the gradient goes to the operand each element was taken
/// from.
DerivativeInfo whereDerivative() {
  DerivativeInfo where;
  where.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(3, nullptr);
    Value *g = grads.at(0);
    if (!g)
      return result;
    Value *condition = node.operands[0].value;
    result[1] = toOperand(b, node, 1, masked(b, condition, g));
    if (node.operands[2].isValue())
      result[2] =
          toOperand(b, node, 2, b.emit(Op::Where, {condition, number(0), g}));
    return result;
  };
  return where;
}

/// masked_fill(x, mask, value): x's gradient where the mask is off, the
/// sum of the rest to value.
DerivativeInfo maskedFillDerivative() {
  DerivativeInfo maskedFill;
  maskedFill.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(3, nullptr);
    Value *g = grads.at(0);
    if (!g)
      return result;
    Value *mask = node.operands[1].value;
    result[0] = toOperand(b, node, 0, b.emit(Op::Where, {mask, number(0), g}));
    if (node.operands[2].isValue() &&
        isDifferentiable(node.operands[2].value->type.dtype))
      result[2] = b.sumTo(b.emit(Op::Sum, {masked(b, mask, g)}),
                          node.operands[2].value->type);
    return result;
  };
  return maskedFill;
}

/// clamp(x, min, max), as eager's ClampBackward (checked against it on
/// every order of x and its bounds, NaNs and ties included).
DerivativeInfo clampDerivative() {
  DerivativeInfo clamp;
  clamp.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(node.operands.size(), nullptr);
    Value *g = grads.at(0);
    if (!g)
      return result;
    Operand x = node.operands[0];
    int minIndex = optionalOperandIndex(node, "min");
    int maxIndex = optionalOperandIndex(node, "max");
    auto isTensor = [&](int i) {
      return i >= 0 && node.operands[size_t(i)].isValue();
    };
    auto give = [&](int i, Value *grad) {
      result[size_t(i)] = toOperand(b, node, size_t(i), grad);
    };
    if (!isTensor(minIndex) && !isTensor(maxIndex)) {
      // Number bounds: x passes only strictly inside (not at a bound, not
      // a NaN).
      Value *inside = nullptr;
      if (minIndex >= 0)
        inside = b.emit(Op::Gt, {x, node.operands[size_t(minIndex)]});
      if (maxIndex >= 0) {
        Value *below = b.emit(Op::Lt, {x, node.operands[size_t(maxIndex)]});
        inside = inside ? b.emit(Op::LogicalAnd, {inside, below}) : below;
      }
      give(0, inside ? masked(b, inside, g) : g);
      return result;
    }
    auto either = [&](Value *lhs, Value *rhs) {
      return b.emit(Op::LogicalOr, {lhs, rhs});
    };
    auto both = [&](Value *lhs, Value *rhs) {
      return b.emit(Op::LogicalAnd, {lhs, rhs});
    };
    if (minIndex < 0 || maxIndex < 0) {
      // One tensor bound: eager's maximum(x, min) or minimum(x, max).
      int bound = minIndex >= 0 ? minIndex : maxIndex;
      Operand limit = node.operands[size_t(bound)];
      Op loses = minIndex >= 0 ? Op::Lt : Op::Gt;
      Value *tied = b.emit(Op::Eq, {x, limit});
      give(0, tieSplit(b, g, b.emit(loses, {x, limit}), tied));
      give(bound, tieSplit(b, g, b.emit(loses, {limit, x}), tied));
      return result;
    }
    // Two bounds: x passes between them (a NaN x always), a bound takes
    // what lies beyond it, max all of it when max < min; a tie with one
    // bound of an ordered pair splits in half.
    Operand lo = node.operands[size_t(minIndex)];
    Operand hi = node.operands[size_t(maxIndex)];
    Value *ordered = b.emit(Op::Lt, {lo, hi});
    Value *notInverted = b.emit(Op::Le, {lo, hi});
    Value *inverted = b.emit(Op::Lt, {hi, lo});
    Value *atMin = both(b.emit(Op::Eq, {x, lo}), ordered);
    Value *atMax = both(b.emit(Op::Eq, {x, hi}), ordered);
    Value *xIsNumber = b.emit(Op::Eq, {x, x});
    Value *outside = either(
        inverted, either(b.emit(Op::Lt, {x, lo}), b.emit(Op::Gt, {x, hi})));
    give(0, tieSplit(b, g, both(xIsNumber, outside), either(atMin, atMax)));
    Value *half = b.emit(Op::Mul, {g, number(0.5)});
    auto zeroOr = [&](Value *full, Value *tied) {
      return b.emit(Op::Where,
                    {full, g, b.emit(Op::Where, {tied, half, number(0)})});
    };
    if (isTensor(minIndex))
      give(minIndex, zeroOr(both(b.emit(Op::Lt, {x, lo}), notInverted), atMin));
    if (isTensor(maxIndex))
      give(maxIndex,
           zeroOr(either(inverted, both(b.emit(Op::Gt, {x, hi}), notInverted)),
                  atMax));
    return result;
  };
  return clamp;
}

} // namespace

void addPointwiseDerivatives(std::map<Op, DerivativeInfo> &table) {
#include "dynafuse/Ops/PointwiseDerivatives.inc"
}

} // namespace dynafuse

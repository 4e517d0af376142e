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
  Value *half = b.emit("mul", {g, number(0.5)});
  return b.emit("where", {lost, number(0), b.emit("where", {tied, half, g})});
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
      result[0] = b.emit("full_like", {grads[0]}, {{"value", 0.0}});
    return result;
  };
  return info;
}

/// where(condition, g, 0): g where the condition holds.
Value *masked(GradBuilder &b, Value *condition, Value *g) {
  return b.emit("where", {condition, g, number(0)});
}

void addArithmetic(std::map<std::string, DerivativeInfo> &table) {
  auto identity = [](GradBuilder &, Value *g, Operand, Operand, Value *) {
    return g;
  };
  auto negated = [](GradBuilder &b, Value *g, Operand, Operand, Value *) {
    return b.emit("neg", {g});
  };
  table["add"] = binary(identity, identity);
  table["sub"] = binary(identity, negated);
  table["mul"] = binary(
      [](GradBuilder &b, Value *g, Operand, Operand c, Value *) {
        return b.emit("mul", {g, c});
      },
      [](GradBuilder &b, Value *g, Operand a, Operand, Value *) {
        return b.emit("mul", {g, a});
      });
  table["div"] = binary(
      [](GradBuilder &b, Value *g, Operand, Operand c, Value *) {
        return b.emit("div", {g, c});
      },
      // -g * a / c^2, as -g * y / c.
      [](GradBuilder &b, Value *g, Operand, Operand c, Value *y) {
        return b.emit("neg", {b.emit("div", {b.emit("mul", {g, y}), c})});
      });
  table["neg"] = unary([](GradBuilder &b, const Node &, Value *g, Operand,
                          Value *) { return b.emit("neg", {g}); });
  // pow with a scalar exponent c: g * c * x^(c-1).
  table["pow"] = unary([](GradBuilder &b, const Node &node, Value *g,
                          Operand x, Value *) -> Value * {
    Scalar exponent = node.operands.at(1).scalar;
    double c = exponent.asDouble();
    if (c == 0)
      return nullptr;
    Value *power =
        c == 2 ? x.value
               : b.emit("pow", {x, exponent.kind == Scalar::Kind::Float
                                       ? Scalar::ofFloat(c - 1)
                                       : Scalar::ofInt(int64_t(c) - 1)});
    return b.emit("mul", {b.emit("mul", {g, power}), number(c)});
  });
  table["square"] = unary(
      [](GradBuilder &b, const Node &, Value *g, Operand x, Value *) {
        return b.emit("mul", {b.emit("mul", {g, x}), number(2)});
      });
  table["abs"] = unary([](GradBuilder &b, const Node &, Value *g, Operand x,
                          Value *) {
    return b.emit("mul", {g, b.emit("sign", {x})});
  });
  table["cast"] = unary([](GradBuilder &, const Node &, Value *g, Operand,
                           Value *) { return g; }); // sumTo casts back
  for (const char *op : {"floor", "ceil", "round", "trunc", "sign"})
    table[op] = zeroGradient();
  // Rounded division: zero gradients for both operands, as eager's.
  auto zeros = [](GradBuilder &b, Value *g, Operand, Operand, Value *) {
    return b.emit("full_like", {g}, {{"value", 0.0}});
  };
  table["div_floor"] = binary(zeros, zeros);
  table["div_trunc"] = binary(zeros, zeros);
  // fmod / remainder: a - trunc|floor(a / b) * b.
  table["fmod"] = binary(identity, [](GradBuilder &b, Value *g, Operand a,
                                      Operand c, Value *) {
    return b.emit("neg",
                  {b.emit("mul", {g, b.emit("trunc", {b.emit("div", {a, c})})})});
  });
  table["remainder"] = binary(identity, [](GradBuilder &b, Value *g, Operand a,
                                           Operand c, Value *) {
    return b.emit("neg",
                  {b.emit("mul", {g, b.emit("floor", {b.emit("div", {a, c})})})});
  });
  // maximum / minimum, as eager's: the operand that loses gets nothing, ties
  // split the gradient in half, and where either is NaN both get it.
  auto extreme = [](const char *loses) {
    return [loses](GradBuilder &b, Value *g, Operand a, Operand c, Value *,
                   bool first) {
      return tieSplit(b, g, first ? b.emit(loses, {a, c}) : b.emit(loses, {c, a}),
                      b.emit("eq", {a, c}));
    };
  };
  for (auto [op, loses] : {std::pair{"maximum", "lt"}, {"minimum", "gt"}}) {
    auto pick = extreme(loses);
    table[op] = binary(
        [pick](GradBuilder &b, Value *g, Operand a, Operand c, Value *y) {
          return pick(b, g, a, c, y, true);
        },
        [pick](GradBuilder &b, Value *g, Operand a, Operand c, Value *y) {
          return pick(b, g, a, c, y, false);
        });
  }
}

void addTranscendental(std::map<std::string, DerivativeInfo> &table) {
  auto rule = [&table](const char *op, auto gradient) {
    table[op] = unary(gradient);
  };
  rule("exp", [](GradBuilder &b, const Node &, Value *g, Operand, Value *y) {
    return b.emit("mul", {g, y});
  });
  rule("exp2", [](GradBuilder &b, const Node &, Value *g, Operand, Value *y) {
    return b.emit("mul", {b.emit("mul", {g, y}), number(std::log(2.0))});
  });
  rule("expm1", [](GradBuilder &b, const Node &, Value *g, Operand, Value *y) {
    return b.emit("mul", {g, b.emit("add", {y, number(1)})});
  });
  rule("log", [](GradBuilder &b, const Node &, Value *g, Operand x, Value *) {
    return b.emit("div", {g, x});
  });
  rule("log2", [](GradBuilder &b, const Node &, Value *g, Operand x, Value *) {
    return b.emit("div", {g, b.emit("mul", {x, number(std::log(2.0))})});
  });
  rule("log10", [](GradBuilder &b, const Node &, Value *g, Operand x, Value *) {
    return b.emit("div", {g, b.emit("mul", {x, number(std::log(10.0))})});
  });
  rule("log1p", [](GradBuilder &b, const Node &, Value *g, Operand x, Value *) {
    return b.emit("div", {g, b.emit("add", {x, number(1)})});
  });
  rule("sqrt", [](GradBuilder &b, const Node &, Value *g, Operand, Value *y) {
    return b.emit("div", {g, b.emit("mul", {y, number(2)})});
  });
  // rsqrt: -0.5 * g * y^3.
  rule("rsqrt", [](GradBuilder &b, const Node &, Value *g, Operand, Value *y) {
    Value *cube = b.emit("mul", {b.emit("mul", {y, y}), y});
    return b.emit("mul", {b.emit("mul", {g, cube}), number(-0.5)});
  });
  rule("reciprocal",
       [](GradBuilder &b, const Node &, Value *g, Operand, Value *y) {
         return b.emit("neg", {b.emit("mul", {g, b.emit("mul", {y, y})})});
       });
  rule("sin", [](GradBuilder &b, const Node &, Value *g, Operand x, Value *) {
    return b.emit("mul", {g, b.emit("cos", {x})});
  });
  rule("cos", [](GradBuilder &b, const Node &, Value *g, Operand x, Value *) {
    return b.emit("neg", {b.emit("mul", {g, b.emit("sin", {x})})});
  });
  rule("tanh", [](GradBuilder &b, const Node &, Value *g, Operand, Value *y) {
    Value *slope = b.emit("sub", {number(1), b.emit("mul", {y, y})});
    return b.emit("mul", {g, slope});
  });
  rule("sigmoid",
       [](GradBuilder &b, const Node &, Value *g, Operand, Value *y) {
         Value *slope = b.emit("mul", {y, b.emit("sub", {number(1), y})});
         return b.emit("mul", {g, slope});
       });
  // erf: g * 2/sqrt(pi) * exp(-x^2).
  rule("erf", [](GradBuilder &b, const Node &, Value *g, Operand x, Value *) {
    Value *bell = b.emit("exp", {b.emit("neg", {b.emit("mul", {x, x})})});
    return b.emit("mul",
                  {b.emit("mul", {g, bell}), number(2.0 / std::sqrt(M_PI))});
  });
}

void addActivationDerivatives(std::map<std::string, DerivativeInfo> &table) {
  // Eager's threshold_backward: zero where y <= 0, g elsewhere (NaN too).
  table["relu"] = unary(
      [](GradBuilder &b, const Node &, Value *g, Operand, Value *y) {
        return b.emit("where", {b.emit("le", {y, number(0)}), number(0), g});
      });
  // gelu: g * (Phi(x) + x * phi(x)); tanh approximation: its own slope.
  table["gelu"] = unary([](GradBuilder &b, const Node &node, Value *g,
                           Operand x, Value *) {
    if (node.stringAttr("approximate", "none") == "tanh") {
      const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
      Value *x2 = b.emit("mul", {x, x});
      Value *inner = b.emit(
          "mul", {b.emit("mul", {x, b.emit("add", {b.emit("mul", {x2, number(c)}),
                                                   number(1)})}),
                  number(k)});
      Value *t = b.emit("tanh", {inner});
      Value *left = b.emit("mul", {b.emit("add", {t, number(1)}), number(0.5)});
      Value *sech2 = b.emit("sub", {number(1), b.emit("mul", {t, t})});
      Value *innerSlope = b.emit(
          "mul", {b.emit("add", {b.emit("mul", {x2, number(3 * c)}), number(1)}),
                  number(k)});
      Value *right = b.emit(
          "mul", {b.emit("mul", {b.emit("mul", {x, sech2}), innerSlope}),
                  number(0.5)});
      return b.emit("mul", {g, b.emit("add", {left, right})});
    }
    Value *cdf = b.emit(
        "mul", {b.emit("add", {b.emit("erf", {b.emit("mul", {x, number(M_SQRT1_2)})}),
                               number(1)}),
                number(0.5)});
    Value *pdf = b.emit(
        "mul", {b.emit("exp", {b.emit("mul", {b.emit("mul", {x, x}), number(-0.5)})}),
                number(1.0 / std::sqrt(2 * M_PI))});
    return b.emit("mul", {g, b.emit("add", {cdf, b.emit("mul", {x, pdf})})});
  });
  // silu: g * s * (1 + x * (1 - s)), s = sigmoid(x).
  table["silu"] = unary([](GradBuilder &b, const Node &, Value *g, Operand x,
                           Value *) {
    Value *s = b.emit("sigmoid", {x});
    Value *slope = b.emit(
        "mul", {s, b.emit("add", {b.emit("mul", {x, b.emit("sub", {number(1), s})}),
                                  number(1)})});
    return b.emit("mul", {g, slope});
  });
  table["leaky_relu"] = unary([](GradBuilder &b, const Node &node, Value *g,
                                 Operand x, Value *) {
    double slope = 0.01;
    if (const Attribute *value = node.attribute("negative_slope"))
      if (const double *given = std::get_if<double>(value))
        slope = *given;
    Value *positive = b.emit("gt", {x, number(0)});
    return b.emit("where", {positive, g, b.emit("mul", {g, number(slope)})});
  });
  // elu: alpha * exp(x) unless x > 0; a NaN x takes that branch and gives
  // NaN, as eager's vectorized elu_backward does (its scalar tail passes g).
  table["elu"] = unary([](GradBuilder &b, const Node &node, Value *g,
                          Operand x, Value *) {
    Value *negative = b.emit(
        "mul", {b.emit("mul", {g, b.emit("exp", {x})}),
                number(floatAttr(node, "alpha", 1.0))});
    return b.emit("where", {b.emit("gt", {x, number(0)}), g, negative});
  });
  // softplus: g * z / (z + 1), z = exp(x * beta); g past the threshold.
  table["softplus"] = unary([](GradBuilder &b, const Node &node, Value *g,
                               Operand x, Value *) {
    Value *scaled = b.emit("mul", {x, number(floatAttr(node, "beta", 1.0))});
    Value *z = b.emit("exp", {scaled});
    Value *smooth = b.emit(
        "div", {b.emit("mul", {g, z}), b.emit("add", {z, number(1)})});
    Value *linear = b.emit(
        "gt", {scaled, number(floatAttr(node, "threshold", 20.0))});
    return b.emit("where", {linear, g, smooth});
  });
  // mish: g * (t + x * sigmoid(x) * (1 - t^2)), t = tanh(softplus(x)).
  table["mish"] = unary([](GradBuilder &b, const Node &, Value *g, Operand x,
                           Value *) {
    Value *t = b.emit("tanh", {b.emit("log1p", {b.emit("exp", {x})})});
    Value *slope = b.emit(
        "add",
        {t, b.emit("mul",
                   {b.emit("mul", {x, b.emit("sigmoid", {x})}),
                    b.emit("sub", {number(1), b.emit("mul", {t, t})})})});
    return b.emit("mul", {g, slope});
  });
  // hardsigmoid: g / 6 strictly inside (-3, 3).
  table["hardsigmoid"] = unary([](GradBuilder &b, const Node &, Value *g,
                                  Operand x, Value *) {
    Value *inside = b.emit("logical_and", {b.emit("gt", {x, number(-3)}),
                                           b.emit("lt", {x, number(3)})});
    return masked(b, inside, b.emit("div", {g, number(6)}));
  });
  // hardswish: 0 below -3, g * (x / 3 + 0.5) up to 3, g above.
  table["hardswish"] = unary([](GradBuilder &b, const Node &, Value *g,
                                Operand x, Value *) {
    Value *ramp = b.emit(
        "mul", {g, b.emit("add", {b.emit("div", {x, number(3)}), number(0.5)})});
    Value *upper = b.emit("where", {b.emit("le", {x, number(3)}), ramp, g});
    return b.emit("where", {b.emit("lt", {x, number(-3)}), number(0), upper});
  });
  table["hardtanh"] = unary([](GradBuilder &b, const Node &node, Value *g,
                               Operand x, Value *) {
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
    Value *inside = b.emit(
        "logical_not",
        {b.emit("logical_or",
                {b.emit("le", {x, number(bound("min_val", -1))}),
                 b.emit("ge", {x, number(bound("max_val", 1))})})});
    return masked(b, inside, g);
  });
}

/// where(c, a, b) and masked_fill(x, mask, value): the gradient goes to the
/// operand each element was taken from; clamp passes it where x was inside
/// its bounds.
void addSelection(std::map<std::string, DerivativeInfo> &table) {
  DerivativeInfo where;
  where.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(3, nullptr);
    Value *g = grads.at(0);
    if (!g)
      return result;
    Value *condition = node.operands[0].value;
    result[1] = toOperand(b, node, 1, masked(b, condition, g));
    if (node.operands[2].isValue())
      result[2] = toOperand(
          b, node, 2, b.emit("where", {condition, number(0), g}));
    return result;
  };
  table["where"] = where;
  DerivativeInfo maskedFill;
  maskedFill.rule = [](GradBuilder &b, const Node &node, const Grads &grads) {
    Grads result(3, nullptr);
    Value *g = grads.at(0);
    if (!g)
      return result;
    Value *mask = node.operands[1].value;
    result[0] = toOperand(b, node, 0, b.emit("where", {mask, number(0), g}));
    if (node.operands[2].isValue() &&
        isDifferentiable(node.operands[2].value->type.dtype))
      result[2] = b.sumTo(b.emit("sum", {masked(b, mask, g)}),
                          node.operands[2].value->type);
    return result;
  };
  table["masked_fill"] = maskedFill;
  // clamp(x, min, max), as eager's ClampBackward (checked against it on
  // every order of x and its bounds, NaNs and ties included).
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
        inside = b.emit("gt", {x, node.operands[size_t(minIndex)]});
      if (maxIndex >= 0) {
        Value *below = b.emit("lt", {x, node.operands[size_t(maxIndex)]});
        inside = inside ? b.emit("logical_and", {inside, below}) : below;
      }
      give(0, inside ? masked(b, inside, g) : g);
      return result;
    }
    auto either = [&](Value *lhs, Value *rhs) {
      return b.emit("logical_or", {lhs, rhs});
    };
    auto both = [&](Value *lhs, Value *rhs) {
      return b.emit("logical_and", {lhs, rhs});
    };
    if (minIndex < 0 || maxIndex < 0) {
      // One tensor bound: eager's maximum(x, min) or minimum(x, max).
      int bound = minIndex >= 0 ? minIndex : maxIndex;
      Operand limit = node.operands[size_t(bound)];
      const char *loses = minIndex >= 0 ? "lt" : "gt";
      Value *tied = b.emit("eq", {x, limit});
      give(0, tieSplit(b, g, b.emit(loses, {x, limit}), tied));
      give(bound, tieSplit(b, g, b.emit(loses, {limit, x}), tied));
      return result;
    }
    // Two bounds: x passes between them (a NaN x always), a bound takes
    // what lies beyond it, max all of it when max < min; a tie with one
    // bound of an ordered pair splits in half.
    Operand lo = node.operands[size_t(minIndex)];
    Operand hi = node.operands[size_t(maxIndex)];
    Value *ordered = b.emit("lt", {lo, hi});
    Value *notInverted = b.emit("le", {lo, hi});
    Value *inverted = b.emit("lt", {hi, lo});
    Value *atMin = both(b.emit("eq", {x, lo}), ordered);
    Value *atMax = both(b.emit("eq", {x, hi}), ordered);
    Value *xIsNumber = b.emit("eq", {x, x});
    Value *outside = either(inverted, either(b.emit("lt", {x, lo}),
                                             b.emit("gt", {x, hi})));
    give(0, tieSplit(b, g, both(xIsNumber, outside), either(atMin, atMax)));
    Value *half = b.emit("mul", {g, number(0.5)});
    auto zeroOr = [&](Value *full, Value *tied) {
      return b.emit("where", {full, g, b.emit("where", {tied, half, number(0)})});
    };
    if (isTensor(minIndex))
      give(minIndex,
           zeroOr(both(b.emit("lt", {x, lo}), notInverted), atMin));
    if (isTensor(maxIndex))
      give(maxIndex,
           zeroOr(either(inverted, both(b.emit("gt", {x, hi}), notInverted)),
                  atMax));
    return result;
  };
  table["clamp"] = clamp;
}

} // namespace

void addPointwiseDerivatives(std::map<std::string, DerivativeInfo> &table) {
  addArithmetic(table);
  addTranscendental(table);
  addActivationDerivatives(table);
  addSelection(table);
}

} // namespace dynafuse

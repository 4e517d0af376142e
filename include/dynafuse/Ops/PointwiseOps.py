# PointwiseOps.py - The definitions of the pointwise ops.
#
# One op(...) per op, holding every facet of it that C++ needs; the op
# generator (tools/dynafuse-opgen) writes each layer's table from them:
#   rule, arity, attributes, optional_operands, condition_first,
#   scalar_last, costly, verify
#       the registry entry (OpRegistry.h's OpInfo): its TypeRule, operand
#       count, attribute names, checks (a function of PointwiseOps.cpp);
#   lowering
#       its scalar semantics: a PointwiseRule expression of
#       Lowering/PointwiseRules.cpp (unaryRule(ScalarOp::Exp), geluRule);
#   derivative
#       a formula in graph ops of g (the result's gradient), x (operand 0),
#       y (the result) and, for two operands, other (operand 1): a pair for
#       two operands; "zero" (a zero gradient), "none" (not
#       differentiable) or rule("...") (a DerivativeInfo expression of
#       Graph/PointwiseDerivatives.cpp). In a formula, f(a, b, k=v) is the
#       graph op f with attribute k, + - * / are add, sub, mul, div, a
#       number is a constant, attr("name", default) a float attribute of
#       the node and cpp("...") a C++ double;
#   aten
#       its ATen fallback (graph replay, Torch/TorchGraphReplay.cpp): an
#       expression of the operands' tensors t and the node, or
#       replay("...") naming a ReplayRule there.
# The torch callables that bind to an op are python/dynafuse/ops/pointwise.py.

UNARY_FLOAT = dict(rule="PromoteToFloat", costly=True)

# Arithmetic.
op("add", arity=2, rule="Promote",
   lowering="arithmeticRule(ScalarOp::Add, ScalarOp::Or)",
   derivative=("g", "g"), aten="at::add(t[0], t[1])")
op("mul", arity=2, rule="Promote",
   lowering="arithmeticRule(ScalarOp::Mul, ScalarOp::And)",
   derivative=("g * other", "g * x"), aten="at::mul(t[0], t[1])")
op("maximum", arity=2, rule="Promote",
   lowering="arithmeticRule(ScalarOp::Max, ScalarOp::Or)",
   derivative=rule("extremeDerivative(Op::Lt)"),
   aten="at::maximum(t[0], t[1])")
op("minimum", arity=2, rule="Promote",
   lowering="arithmeticRule(ScalarOp::Min, ScalarOp::And)",
   derivative=rule("extremeDerivative(Op::Gt)"),
   aten="at::minimum(t[0], t[1])")
op("sub", arity=2, rule="NumericOnly", lowering="binaryRule(ScalarOp::Sub)",
   derivative=("g", "-g"), aten="at::sub(t[0], t[1])")
# -g * x / other^2, as -g * y / other.
op("div", arity=2, rule="PromoteToFloat", costly=True,
   lowering="binaryRule(ScalarOp::Div)",
   derivative=("g / other", "-(g * y / other)"), aten="at::div(t[0], t[1])")
# div with rounding_mode "floor" (x // y) and "trunc": in the operands'
# dtype, integers included; zero gradients for both operands, as eager's.
op("div_floor", arity=2, rule="NumericOnly", costly=True,
   lowering="divFloorRule",
   derivative=("full_like(g, value=0.0)", "full_like(g, value=0.0)"),
   aten='at::div(t[0], t[1], "floor")')
op("div_trunc", arity=2, rule="NumericOnly", costly=True,
   lowering="divTruncRule",
   derivative=("full_like(g, value=0.0)", "full_like(g, value=0.0)"),
   aten='at::div(t[0], t[1], "trunc")')

# Comparisons: bool results, no gradient.
for name, scalar in [("eq", "Eq"), ("ne", "Ne"), ("lt", "Lt"), ("le", "Le"),
                     ("gt", "Gt"), ("ge", "Ge")]:
    op(name, arity=2, rule="Compare", lowering=f"binaryRule(ScalarOp::{scalar})",
       derivative="none", aten=f"at::{name}(t[0], t[1])")

# Exponentials, logarithms, roots and trigonometry: integers become the
# default float.
op("exp", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Exp)",
   derivative="g * y", aten="at::exp(t[0])")
op("log", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Log)",
   derivative="g / x", aten="at::log(t[0])")
op("tanh", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Tanh)",
   derivative="slope = 1 - y * y; g * slope", aten="at::tanh(t[0])")
op("sigmoid", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Sigmoid)",
   derivative="slope = y * (1 - y); g * slope", aten="at::sigmoid(t[0])")
op("sqrt", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Sqrt)",
   derivative="g / (y * 2)", aten="at::sqrt(t[0])")
# rsqrt: -0.5 * g * y^3.
op("rsqrt", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Rsqrt)",
   derivative="cube = y * y * y; g * cube * -0.5", aten="at::rsqrt(t[0])")
# erf: g * 2/sqrt(pi) * exp(-x^2).
op("erf", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Erf)",
   derivative='bell = exp(-(x * x)); g * bell * cpp("2.0 / std::sqrt(M_PI)")',
   aten="at::erf(t[0])")
op("exp2", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Exp2)",
   derivative='g * y * cpp("std::log(2.0)")', aten="at::exp2(t[0])")
op("log1p", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Log1p)",
   derivative="g / (x + 1)", aten="at::log1p(t[0])")
op("expm1", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Expm1)",
   derivative="g * (y + 1)", aten="at::expm1(t[0])")
op("sin", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Sin)",
   derivative="g * cos(x)", aten="at::sin(t[0])")
op("cos", **UNARY_FLOAT, lowering="unaryRule(ScalarOp::Cos)",
   derivative="-(g * sin(x))", aten="at::cos(t[0])")
op("reciprocal", **UNARY_FLOAT, lowering="reciprocalRule",
   derivative="-(g * (y * y))", aten="at::reciprocal(t[0])")
op("log2", rule="PromoteToFloat", lowering="logBaseRule(2.0)",
   derivative='g / (x * cpp("std::log(2.0)"))', aten="at::log2(t[0])")
op("log10", rule="PromoteToFloat", lowering="logBaseRule(10.0)",
   derivative='g / (x * cpp("std::log(10.0)"))', aten="at::log10(t[0])")

# Sign and rounding; floor, ceil, round and trunc keep integer dtypes (the
# identity there). Their gradient is zero almost everywhere.
op("neg", rule="NumericOnly", lowering="unaryRule(ScalarOp::Neg)",
   derivative="-g", aten="at::neg(t[0])")
# Eager's threshold_backward: zero where y <= 0, g elsewhere (NaN too).
op("relu", rule="NumericOnly", lowering="reluRule",
   derivative="where(le(y, 0), 0, g)", aten="at::relu(t[0])")
op("abs", rule="NumericOnly", lowering="unaryRule(ScalarOp::Abs)",
   derivative="g * sign(x)", aten="at::abs(t[0])")
for name, scalar in [("floor", "Floor"), ("ceil", "Ceil"), ("round", "Round"),
                     ("trunc", "Trunc")]:
    op(name, rule="NumericOnly", lowering=f"roundingRule(ScalarOp::{scalar})",
       derivative="zero", aten=f"at::{name}(t[0])")
op("sign", rule="Promote", lowering="signRule", derivative="zero",
   aten="at::sign(t[0])")
op("square", rule="BoolToI64", lowering="squareRule", derivative="g * x * 2",
   aten="at::square(t[0])")
# fmod / remainder: x - trunc|floor(x / other) * other. remainder's gradient
# for other divides as eager's does, with floor rounding (div_floor: nan for
# an infinite x, where floor(x / other) is inf).
op("fmod", arity=2, rule="NumericOnly", lowering="binaryRule(ScalarOp::Fmod)",
   derivative=("g", "-(g * trunc(x / other))"), aten="at::fmod(t[0], t[1])")
op("remainder", arity=2, rule="NumericOnly",
   lowering="binaryRule(ScalarOp::Remainder)",
   derivative=("g", "-(g * div_floor(x, other))"),
   aten="at::remainder(t[0], t[1])")

# Bitwise (integers and bools) and logical ops: no gradient.
for name, scalar in [("bitwise_and", "BitAnd"), ("bitwise_or", "BitOr"),
                     ("bitwise_xor", "BitXor")]:
    op(name, arity=2, rule="IntegralOnly",
       lowering=f"binaryRule(ScalarOp::{scalar})", derivative="none",
       aten=f"at::{name}(t[0], t[1])")
op("bitwise_not", rule="IntegralOnly", lowering="unaryRule(ScalarOp::BitNot)",
   derivative="none", aten="at::bitwise_not(t[0])")
for name, scalar in [("logical_and", "And"), ("logical_or", "Or"),
                     ("logical_xor", "Xor")]:
    op(name, arity=2, rule="Compare",
       lowering=f"logicalRule(ScalarOp::{scalar})", derivative="none",
       aten=f"at::{name}(t[0], t[1])")
op("logical_not", rule="Compare", lowering="logicalNotRule", derivative="none",
   aten="at::logical_not(t[0])")

# Activation functions: floating inputs only, constants as attributes; the
# ones computed with exp, erf or tanh are costly math (recomputed per
# element of a broadcasting consumer, they are realized: RealizationPolicy).
# gelu: g * (Phi(x) + x * phi(x)); tanh approximation: its own slope.
op("gelu", rule="FloatOnly", costly=True, attributes=["approximate"],
   lowering="geluRule", derivative=rule("geluDerivative()"),
   aten='at::gelu(t[0], node.stringAttr("approximate", "none"))')
op("leaky_relu", rule="FloatOnly", attributes=["negative_slope"],
   lowering="leakyReluRule", derivative=rule("leakyReluDerivative()"),
   aten='at::leaky_relu(t[0], floatAttr(node, "negative_slope", 0.01))')
# elu: alpha * exp(x) unless x > 0; a NaN x takes that branch and gives
# NaN, as eager's vectorized elu_backward does (its scalar tail passes g).
op("elu", rule="FloatOnly", costly=True, attributes=["alpha"],
   lowering="eluRule", derivative='negative = g * exp(x) * attr("alpha", 1.0); '
              'where(gt(x, 0), g, negative)',
   aten='at::elu(t[0], floatAttr(node, "alpha", 1.0))')
# softplus: g * z / (z + 1), z = exp(x * beta); g past the threshold.
op("softplus", rule="FloatOnly", costly=True,
   attributes=["beta", "threshold"], lowering="softplusRule",
   derivative='scaled = x * attr("beta", 1.0); z = exp(scaled); '
              'smooth = g * z / (z + 1); '
              'linear = gt(scaled, attr("threshold", 20.0)); '
              'where(linear, g, smooth)',
   aten='at::softplus(t[0], floatAttr(node, "beta", 1.0), '
        'floatAttr(node, "threshold", 20.0))')
# silu: g * s * (1 + x * (1 - s)), s = sigmoid(x).
op("silu", rule="FloatOnly", costly=True, lowering="siluRule",
   derivative="s = sigmoid(x); slope = s * (x * (1 - s) + 1); g * slope",
   aten="at::silu(t[0])")
# hardswish: 0 below -3, g * (x / 3 + 0.5) up to 3, g above.
op("hardswish", rule="FloatOnly", lowering="hardswishRule",
   derivative="ramp = g * (x / 3 + 0.5); upper = where(le(x, 3), ramp, g); "
              "where(lt(x, -3), 0, upper)",
   aten="at::hardswish(t[0])")
# hardsigmoid: g / 6 strictly inside (-3, 3).
op("hardsigmoid", rule="FloatOnly", lowering="hardsigmoidRule",
   derivative="inside = logical_and(gt(x, -3), lt(x, 3)); "
              "where(inside, g / 6, 0)",
   aten="at::hardsigmoid(t[0])")
# mish: g * (t + x * sigmoid(x) * (1 - t^2)), t = tanh(softplus(x)).
op("mish", rule="FloatOnly", costly=True, lowering="mishRule",
   derivative="t = tanh(log1p(exp(x))); "
              "slope = t + x * sigmoid(x) * (1 - t * t); g * slope",
   aten="at::mish(t[0])")
# hardtanh (and relu6) is a clamp with constant bounds: integers allowed.
op("hardtanh", rule="NumericOnly", attributes=["min_val", "max_val"],
   verify="verifyHardtanh", lowering="hardtanhRule",
   derivative=rule("hardtanhDerivative()"),
   aten='at::hardtanh(t[0], floatAttr(node, "min_val", -1.0), '
        'floatAttr(node, "max_val", 1.0))')

# Selection, casts and powers.
# Bools clamp too (False < True), to bool or, beside numbers, to the
# promoted type.
op("clamp", arity=3, rule="Promote", attributes=["has_min", "has_max"],
   optional_operands=["min", "max"], verify="verifyClamp",
   lowering="clampRule", derivative=rule("clampDerivative()"),
   aten='at::clamp(t[0], optionalTensor(node, t, "min"), '
        'optionalTensor(node, t, "max"))')
op("masked_fill", arity=3, rule="FirstOperand", verify="verifyMaskedFill",
   lowering="maskedFillRule", derivative=rule("maskedFillDerivative()"),
   aten="at::masked_fill(t[0], t[1], t[2])")
op("cast", rule="Cast", attributes=["dtype"], lowering="castRule",
   derivative="g", aten=replay("castReplay"))  # sumTo casts back
op("pow", arity=2, rule="Promote", scalar_last=True, costly=True,
   lowering="powRule", derivative=rule("powDerivative()"),
   aten="at::pow(t[0], t[1])")
op("where", arity=3, rule="Promote", condition_first=True,
   lowering="whereRule", derivative=rule("whereDerivative()"),
   aten="at::where(t[0], t[1], t[2])")

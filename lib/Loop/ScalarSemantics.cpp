//===- ScalarSemantics.cpp - What each scalar instruction computes --------===//
#include "dynafuse/Loop/ScalarSemantics.h"

#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/HalfFloat.h"
#include "dynafuse/Support/IndexErrors.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace dynafuse {
namespace {

template <typename T> T readRaw(const char *address) {
  T value;
  std::memcpy(&value, address, sizeof(T));
  return value;
}

template <typename T> void writeRaw(char *address, T value) {
  std::memcpy(address, &value, sizeof(T));
}

/// Rounds a double result to the precision of type.
double roundTo(DType type, double value) {
  return type == DType::F32 ? double(float(value)) : value;
}

int64_t wrapInt(DType type, int64_t value) {
  if (type == DType::I32)
    return int32_t(uint32_t(value));
  if (type == DType::Bool)
    return value != 0;
  return value;
}

template <typename T> T applyFloatMath(ScalarOp op, T x) {
  switch (op) {
  case ScalarOp::Exp:
    return std::exp(x);
  case ScalarOp::Log:
    return std::log(x);
  case ScalarOp::Tanh:
    return std::tanh(x);
  case ScalarOp::Erf:
    return std::erf(x);
  case ScalarOp::Sqrt:
    return std::sqrt(x);
  case ScalarOp::Rsqrt:
    return T(1) / std::sqrt(x);
  case ScalarOp::Sigmoid:
    return T(1) / (T(1) + std::exp(-x));
  case ScalarOp::Exp2:
    return std::exp2(x);
  case ScalarOp::Log1p:
    return std::log1p(x);
  case ScalarOp::Expm1:
    return std::expm1(x);
  case ScalarOp::Sin:
    return std::sin(x);
  case ScalarOp::Cos:
    return std::cos(x);
  case ScalarOp::Floor:
    return std::floor(x);
  case ScalarOp::Ceil:
    return std::ceil(x);
  case ScalarOp::Round:
    return std::nearbyint(x); // Ties to even, as torch.round.
  case ScalarOp::Trunc:
    return std::trunc(x);
  case ScalarOp::RoundF16:
    return dynafuse_f16_to_f32(dynafuse_f32_to_f16(float(x)));
  case ScalarOp::RoundBF16:
    return dynafuse_bf16_to_f32(dynafuse_f32_to_bf16(float(x)));
  default:
    fail(std::string("'") + scalarOpName(op) + "' is not float math");
  }
}

/// Comparisons behave the same on every type (NaN compares unequal).
template <typename T> int64_t compareValues(ScalarOp op, T a, T b) {
  switch (op) {
  case ScalarOp::Eq:
    return a == b;
  case ScalarOp::Ne:
    return a != b;
  case ScalarOp::Lt:
    return a < b;
  case ScalarOp::Le:
    return a <= b;
  case ScalarOp::Gt:
    return a > b;
  default:
    return a >= b;
  }
}

template <typename T> T floatRemainder(T a, T b) {
  T result = std::fmod(a, b);
  if (result != 0 && ((result < 0) != (b < 0)))
    result += b;
  return result;
}

template <typename T> T floatArithmetic(ScalarOp op, T a, T b) {
  switch (op) {
  case ScalarOp::Add:
    return a + b;
  case ScalarOp::Sub:
    return a - b;
  case ScalarOp::Mul:
    return a * b;
  case ScalarOp::Div:
    return a / b;
  case ScalarOp::Max:
    return (std::isnan(a) || std::isnan(b)) ? NAN : (a > b ? a : b);
  case ScalarOp::Min:
    return (std::isnan(a) || std::isnan(b)) ? NAN : (a < b ? a : b);
  case ScalarOp::Pow:
    return std::pow(a, b);
  case ScalarOp::Fmod:
    return std::fmod(a, b);
  case ScalarOp::Remainder:
    return floatRemainder(a, b);
  default:
    fail(std::string("op '") + scalarOpName(op) + "' is not defined on floats");
  }
}

ScalarValue floatBinary(ScalarOp op, DType type, double a, double b) {
  ScalarValue result;
  if (isComparison(op)) {
    result.i = compareValues(op, a, b);
    return result;
  }
  result.f = type == DType::F32
                 ? double(floatArithmetic(op, float(a), float(b)))
                 : floatArithmetic(op, a, b);
  return result;
}

int64_t intArithmetic(ScalarOp op, int64_t a, int64_t b) {
  uint64_t ua = uint64_t(a), ub = uint64_t(b);
  bool badDivisor = b == 0 || (b == -1 && a == INT64_MIN);
  switch (op) {
  case ScalarOp::Add:
    return int64_t(ua + ub);
  case ScalarOp::Sub:
    return int64_t(ua - ub);
  case ScalarOp::Mul:
    return int64_t(ua * ub);
  case ScalarOp::Div:
    return badDivisor ? 0 : a / b;
  case ScalarOp::Fmod:
    return badDivisor ? 0 : a % b;
  case ScalarOp::Remainder:
    return badDivisor ? 0 : a - floorDivInt(a, b) * b;
  case ScalarOp::Max:
    return a > b ? a : b;
  case ScalarOp::Min:
    return a < b ? a : b;
  case ScalarOp::Pow:
    return truncateToInt64(std::pow(double(a), double(b)));
  case ScalarOp::And:
    return a && b;
  case ScalarOp::Or:
    return a || b;
  case ScalarOp::Xor:
    return (a != 0) != (b != 0);
  case ScalarOp::BitAnd:
    return a & b;
  case ScalarOp::BitOr:
    return a | b;
  case ScalarOp::BitXor:
    return a ^ b;
  default:
    fail(std::string("op '") + scalarOpName(op) +
         "' is not defined on integers");
  }
}

} // namespace

ScalarValue loadElement(DType type, const char *address) {
  ScalarValue value;
  switch (type) {
  case DType::Bool:
    value.i = readRaw<uint8_t>(address) != 0;
    break;
  case DType::I32:
    value.i = readRaw<int32_t>(address);
    break;
  case DType::I64:
    value.i = readRaw<int64_t>(address);
    break;
  case DType::F16:
    value.f = dynafuse_f16_to_f32(readRaw<uint16_t>(address));
    break;
  case DType::BF16:
    value.f = dynafuse_bf16_to_f32(readRaw<uint16_t>(address));
    break;
  case DType::F32:
    value.f = readRaw<float>(address);
    break;
  case DType::F64:
    value.f = readRaw<double>(address);
    break;
  }
  return value;
}

void storeElement(DType type, char *address, ScalarValue value) {
  switch (type) {
  case DType::Bool:
    writeRaw<uint8_t>(address, value.i != 0);
    break;
  case DType::I32:
    writeRaw<int32_t>(address, int32_t(value.i));
    break;
  case DType::I64:
    writeRaw<int64_t>(address, value.i);
    break;
  case DType::F16:
    writeRaw<uint16_t>(address, dynafuse_f32_to_f16(float(value.f)));
    break;
  case DType::BF16:
    writeRaw<uint16_t>(address, dynafuse_f32_to_bf16(float(value.f)));
    break;
  case DType::F32:
    writeRaw<float>(address, float(value.f));
    break;
  case DType::F64:
    writeRaw<double>(address, value.f);
    break;
  }
}

void fillRandomElements(DType type, char *data, int64_t count,
                        std::mt19937 &rng) {
  std::uniform_real_distribution<double> real(-2, 2);
  std::uniform_int_distribution<int64_t> integer(0, 3);
  for (int64_t k = 0; k < count; ++k) {
    ScalarValue value;
    value.f = real(rng);
    // Integers 1..3 (no zero divisor: integer division by zero is an
    // error every backend reports); bools both ways.
    value.i = type == DType::Bool ? integer(rng) % 2 : integer(rng) % 3 + 1;
    storeElement(type, data + k * dtypeSize(type), value);
  }
}

int64_t truncateToInt64(double value) {
  if (!(value >= -0x1p63 && value < 0x1p63))
    return INT64_MIN;
  return int64_t(value);
}

ScalarValue constantValue(const Instr &instr) {
  ScalarValue value;
  value.f = roundTo(instr.type, instr.floatValue);
  value.i = wrapInt(instr.type, instr.intValue);
  return value;
}

ScalarValue evalCast(DType from, DType to, ScalarValue value) {
  ScalarValue result;
  if (to == DType::Bool) {
    result.i = isFloating(from) ? value.f != 0 : value.i != 0;
    return result;
  }
  if (isFloating(to)) {
    result.f = roundTo(to, isFloating(from) ? value.f : double(value.i));
    return result;
  }
  result.i = wrapInt(to, isFloating(from) ? truncateToInt64(value.f) : value.i);
  return result;
}

ScalarValue evalUnary(ScalarOp op, DType type, ScalarValue x) {
  ScalarValue result;
  if (op == ScalarOp::Not) {
    result.i = !x.i;
    return result;
  }
  if (op == ScalarOp::BitNot) {
    result.i = type == DType::Bool ? !x.i : wrapInt(type, ~x.i);
    return result;
  }
  if (isFloating(type)) {
    if (op == ScalarOp::Neg)
      result.f = -x.f;
    else if (op == ScalarOp::Abs)
      result.f = std::fabs(x.f);
    else
      result.f = type == DType::F32 ? double(applyFloatMath(op, float(x.f)))
                                    : applyFloatMath(op, x.f);
    return result;
  }
  if (op == ScalarOp::Neg)
    result.i = wrapInt(type, int64_t(0 - uint64_t(x.i)));
  else if (op == ScalarOp::Abs)
    result.i = wrapInt(type, x.i < 0 ? int64_t(0 - uint64_t(x.i)) : x.i);
  else
    fail(std::string("op '") + scalarOpName(op) + "' needs a float operand");
  return result;
}

ScalarValue evalBinary(ScalarOp op, DType type, ScalarValue a, ScalarValue b) {
  if (isFloating(type))
    return floatBinary(op, type, a.f, b.f);
  ScalarValue result;
  if (isComparison(op)) {
    result.i = compareValues(op, a.i, b.i);
    return result;
  }
  // An integer (not bool) division by zero is reported, as the code
  // generators do: eager raises ZeroDivisionError.
  if (type != DType::Bool && b.i == 0 &&
      (op == ScalarOp::Div || op == ScalarOp::Fmod ||
       op == ScalarOp::Remainder))
    dynafuse_division_error(a.i, b.i);
  result.i = wrapInt(type, intArithmetic(op, a.i, b.i));
  return result;
}

ReduceState reduceIdentity(ReduceKind kind, DType type) {
  ReduceState state;
  bool floating = isFloating(type);
  double inf = std::numeric_limits<double>::infinity();
  int64_t lowest = type == DType::I32 ? INT32_MIN : INT64_MIN;
  int64_t highest = type == DType::I32 ? INT32_MAX : INT64_MAX;
  switch (kind) {
  case ReduceKind::Sum:
  case ReduceKind::Any:
    break;
  case ReduceKind::Prod:
  case ReduceKind::All:
    state.value.f = 1;
    state.value.i = 1;
    break;
  case ReduceKind::Max:
  case ReduceKind::ArgMax:
    state.value.f = -inf;
    state.value.i = type == DType::Bool ? 0 : lowest;
    break;
  case ReduceKind::Min:
  case ReduceKind::ArgMin:
    state.value.f = inf;
    state.value.i = type == DType::Bool ? 1 : highest;
    break;
  }
  if (!floating)
    state.value.f = 0;
  return state;
}

namespace {
/// Whether candidate replaces best in argmax (greater) or argmin: strictly
/// better, or the first NaN.
bool argBetter(bool greater, DType type, ScalarValue candidate,
               ScalarValue best) {
  if (!isFloating(type))
    return greater ? candidate.i > best.i : candidate.i < best.i;
  if (std::isnan(best.f))
    return false;
  if (std::isnan(candidate.f))
    return true;
  return greater ? candidate.f > best.f : candidate.f < best.f;
}
} // namespace

void reduceCombine(ReduceKind kind, DType type, ReduceState &state,
                   ScalarValue value, ScalarValue position) {
  switch (kind) {
  case ReduceKind::Sum:
    if (isFloating(type)) {
      state.value.f += value.f; // in f64 (reduceFinish rounds)
      return;
    }
    state.value = evalBinary(ScalarOp::Add, type, state.value, value);
    return;
  case ReduceKind::Prod:
    state.value = evalBinary(ScalarOp::Mul, type, state.value, value);
    return;
  case ReduceKind::Max:
    state.value = evalBinary(type == DType::Bool ? ScalarOp::Or : ScalarOp::Max,
                             type, state.value, value);
    return;
  case ReduceKind::Min:
    state.value =
        evalBinary(type == DType::Bool ? ScalarOp::And : ScalarOp::Min, type,
                   state.value, value);
    return;
  case ReduceKind::Any:
    state.value.i = state.value.i || value.i;
    return;
  case ReduceKind::All:
    state.value.i = state.value.i && value.i;
    return;
  case ReduceKind::ArgMax:
  case ReduceKind::ArgMin:
    if (argBetter(kind == ReduceKind::ArgMax, type, value, state.value)) {
      state.value = value;
      state.position = position;
    }
    return;
  }
}

void reduceFinish(ReduceKind kind, DType type, ReduceState &state) {
  if (kind == ReduceKind::Sum && isFloating(type))
    state.value.f = roundTo(type, state.value.f);
}

} // namespace dynafuse

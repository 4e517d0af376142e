//===- CUDAScalarText.cpp - Scalar types, values and ops as CUDA C --------===//
#include "CUDAScalarText.h"

#include "dynafuse/Support/Error.h"

#include <cmath>
#include <cstdio>

namespace dynafuse {
namespace cudatext {

const char *valueType(DType type) {
  switch (type) {
  case DType::Bool:
    return "bool";
  case DType::I32:
    return "int";
  case DType::I64:
    return "long long";
  case DType::F64:
    return "double";
  default:
    return "float";
  }
}

/// Accumulator type of a reduce: bool does not shuffle, so int.
const char *accType(DType type) {
  return type == DType::Bool ? "int" : valueType(type);
}

const char *storageType(DType type) {
  switch (type) {
  case DType::Bool:
    return "unsigned char";
  case DType::F16:
    return "__half";
  case DType::BF16:
    return "__nv_bfloat16";
  default:
    return valueType(type);
  }
}

namespace {

std::string floatLiteral(DType type, double value) {
  bool f32 = type != DType::F64;
  if (std::isnan(value))
    return f32 ? "__int_as_float(0x7fc00000)"
               : "__longlong_as_double(0x7ff8000000000000LL)";
  if (std::isinf(value)) {
    std::string text = f32 ? "__int_as_float(0x7f800000)"
                           : "__longlong_as_double(0x7ff0000000000000LL)";
    return value < 0 ? "(-" + text + ")" : text;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%a",
                f32 ? double(float(value)) : value);
  return std::string("(") + buffer + (f32 ? "f)" : ")");
}

} // namespace

std::string intLiteral(int64_t value) {
  if (value == INT64_MIN)
    return "((long long)0x8000000000000000ULL)";
  return "(" + std::to_string(value) + "LL)";
}

std::string literal(DType type, ScalarValue value) {
  if (isFloating(type))
    return floatLiteral(type, value.f);
  if (type == DType::Bool)
    return value.i ? "true" : "false";
  return std::string("((") + valueType(type) + ")" + intLiteral(value.i) + ")";
}

/// The result of 64-bit integer arithmetic `text` as a value of `type`.
std::string wrapInt(DType type, const std::string &text) {
  if (type == DType::Bool)
    return "((" + text + ") != 0)";
  return std::string("((") + valueType(type) + ")(" + text + "))";
}

std::string sanitize(const std::string &name) {
  std::string out;
  for (char c : name)
    out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

std::string cast(DType from, DType to, const std::string &x) {
  if (to == DType::Bool)
    return "(" + x + " != 0)";
  if (isFloating(to)) {
    std::string target = valueType(to);
    return isFloating(from) ? "((" + target + ")" + x + ")"
                            : "((" + target + ")(double)" + x + ")";
  }
  return wrapInt(to, "(long long)" + x);
}

namespace {

std::string floatMath(ScalarOp op, bool f32, const std::string &x) {
  std::string s = f32 ? "f" : "";
  std::string one = f32 ? "1.0f" : "1.0";
  switch (op) {
  case ScalarOp::Exp:
    return "exp" + s + "(" + x + ")";
  case ScalarOp::Log:
    return "log" + s + "(" + x + ")";
  case ScalarOp::Tanh:
    return "tanh" + s + "(" + x + ")";
  case ScalarOp::Erf:
    return "erf" + s + "(" + x + ")";
  case ScalarOp::Sqrt:
    return "sqrt" + s + "(" + x + ")";
  case ScalarOp::Rsqrt:
    return "(" + one + " / sqrt" + s + "(" + x + "))";
  case ScalarOp::Sigmoid:
    return "(" + one + " / (" + one + " + exp" + s + "(-" + x + ")))";
  case ScalarOp::Exp2:
    return "exp2" + s + "(" + x + ")";
  case ScalarOp::Log1p:
    return "log1p" + s + "(" + x + ")";
  case ScalarOp::Expm1:
    return "expm1" + s + "(" + x + ")";
  case ScalarOp::Sin:
    return "sin" + s + "(" + x + ")";
  case ScalarOp::Cos:
    return "cos" + s + "(" + x + ")";
  case ScalarOp::Floor:
    return "floor" + s + "(" + x + ")";
  case ScalarOp::Ceil:
    return "ceil" + s + "(" + x + ")";
  case ScalarOp::Round:
    return "rint" + s + "(" + x + ")";
  case ScalarOp::Trunc:
    return "trunc" + s + "(" + x + ")";
  case ScalarOp::RoundF16:
    return "__half2float(__float2half_rn(" + x + "))";
  case ScalarOp::RoundBF16:
    return "__bfloat162float(__float2bfloat16_rn(" + x + "))";
  default:
    fail(std::string("CUDA backend: '") + scalarOpName(op) +
         "' is not float math");
  }
}

} // namespace

std::string unary(ScalarOp op, DType type, const std::string &x) {
  if (op == ScalarOp::Not)
    return "(!" + x + ")";
  if (op == ScalarOp::BitNot)
    return type == DType::Bool ? "(!" + x + ")"
                               : wrapInt(type, "~(long long)" + x);
  if (isFloating(type)) {
    bool f32 = type != DType::F64;
    if (op == ScalarOp::Neg)
      return "(-" + x + ")";
    if (op == ScalarOp::Abs)
      return std::string(f32 ? "fabsf(" : "fabs(") + x + ")";
    return floatMath(op, f32, x);
  }
  if (op == ScalarOp::Neg)
    return wrapInt(type, "df_ineg(" + x + ")");
  if (op == ScalarOp::Abs)
    return wrapInt(type, "df_iabs(" + x + ")");
  fail(std::string("CUDA backend: '") + scalarOpName(op) +
       "' needs a float operand");
}

namespace {

std::string comparison(ScalarOp op) {
  switch (op) {
  case ScalarOp::Eq:
    return " == ";
  case ScalarOp::Ne:
    return " != ";
  case ScalarOp::Lt:
    return " < ";
  case ScalarOp::Le:
    return " <= ";
  case ScalarOp::Gt:
    return " > ";
  default:
    return " >= ";
  }
}

} // namespace

std::string binary(ScalarOp op, DType type, const std::string &a,
                          const std::string &b) {
  if (isComparison(op))
    return "(" + a + comparison(op) + b + ")";
  if (isFloating(type)) {
    bool f32 = type != DType::F64;
    switch (op) {
    case ScalarOp::Add:
      return "(" + a + " + " + b + ")";
    case ScalarOp::Sub:
      return "(" + a + " - " + b + ")";
    case ScalarOp::Mul:
      return "(" + a + " * " + b + ")";
    case ScalarOp::Div:
      return "(" + a + " / " + b + ")";
    case ScalarOp::Max:
      return "df_max(" + a + ", " + b + ")";
    case ScalarOp::Min:
      return "df_min(" + a + ", " + b + ")";
    case ScalarOp::Pow:
      return std::string(f32 ? "powf(" : "pow(") + a + ", " + b + ")";
    case ScalarOp::Fmod:
      return std::string(f32 ? "fmodf(" : "fmod(") + a + ", " + b + ")";
    case ScalarOp::Remainder:
      return "df_frem(" + a + ", " + b + ")";
    default:
      fail(std::string("CUDA backend: '") + scalarOpName(op) +
           "' is not defined on floats");
    }
  }
  std::string la = "(long long)" + a, lb = "(long long)" + b;
  switch (op) {
  case ScalarOp::Add:
    return wrapInt(type, "df_iadd(" + la + ", " + lb + ")");
  case ScalarOp::Sub:
    return wrapInt(type, "df_isub(" + la + ", " + lb + ")");
  case ScalarOp::Mul:
    return wrapInt(type, "df_imul(" + la + ", " + lb + ")");
  case ScalarOp::Div:
    return wrapInt(type, "df_idiv(" + la + ", " + lb + ")");
  case ScalarOp::Fmod:
    return wrapInt(type, "df_ifmod(" + la + ", " + lb + ")");
  case ScalarOp::Remainder:
    return wrapInt(type, "df_mod(" + la + ", " + lb + ")");
  case ScalarOp::Pow:
    return wrapInt(type, "df_ipow(" + la + ", " + lb + ")");
  case ScalarOp::Max:
    return wrapInt(type, "max(" + la + ", " + lb + ")");
  case ScalarOp::Min:
    return wrapInt(type, "min(" + la + ", " + lb + ")");
  case ScalarOp::And:
    return wrapInt(type, "(" + a + " && " + b + ")");
  case ScalarOp::Or:
    return wrapInt(type, "(" + a + " || " + b + ")");
  case ScalarOp::Xor:
    return wrapInt(type, "((" + a + " != 0) != (" + b + " != 0))");
  case ScalarOp::BitAnd:
    return wrapInt(type, "(" + la + " & " + lb + ")");
  case ScalarOp::BitOr:
    return wrapInt(type, "(" + la + " | " + lb + ")");
  case ScalarOp::BitXor:
    return wrapInt(type, "(" + la + " ^ " + lb + ")");
  default:
    fail(std::string("CUDA backend: '") + scalarOpName(op) +
         "' is not defined on integers");
  }
}

std::string combiner(ReduceKind kind, DType type, const std::string &a,
                     const std::string &b) {
  bool floating = isFloating(type);
  bool boolean = type == DType::Bool;
  switch (kind) {
  case ReduceKind::Sum:
    return floating ? "(" + a + " + " + b + ")"
                    : wrapInt(boolean ? DType::I32 : type,
                              boolean ? "(" + a + " + " + b + ") != 0"
                                      : "df_iadd(" + a + ", " + b + ")");
  case ReduceKind::Prod:
    return floating ? "(" + a + " * " + b + ")"
                    : wrapInt(boolean ? DType::I32 : type,
                              boolean ? "(" + a + " * " + b + ") != 0"
                                      : "df_imul(" + a + ", " + b + ")");
  case ReduceKind::Max:
    if (boolean)
      return "((int)(" + a + " || " + b + "))";
    return floating ? "df_max(" + a + ", " + b + ")"
                    : "max(" + a + ", " + b + ")";
  case ReduceKind::Min:
    if (boolean)
      return "((int)(" + a + " && " + b + "))";
    return floating ? "df_min(" + a + ", " + b + ")"
                    : "min(" + a + ", " + b + ")";
  case ReduceKind::Any:
    return "((int)(" + a + " || " + b + "))";
  case ReduceKind::All:
    return "((int)(" + a + " && " + b + "))";
  default:
    fail("CUDA backend: not a plain reduce kind");
  }
}

} // namespace cudatext
} // namespace dynafuse

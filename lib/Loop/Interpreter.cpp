//===- Interpreter.cpp - Reference execution of loop IR -------------------===//
#include "dynafuse/Loop/Interpreter.h"

#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/HalfFloat.h"

#include <cmath>
#include <cstring>
#include <map>

namespace dynafuse {
namespace {

/// A scalar: floats live in f (f32 values rounded to float), integers and
/// bools in i.
struct Scalar64 {
  double f = 0;
  int64_t i = 0;
};

template <typename T> T readRaw(const char *address) {
  T value;
  std::memcpy(&value, address, sizeof(T));
  return value;
}

template <typename T> void writeRaw(char *address, T value) {
  std::memcpy(address, &value, sizeof(T));
}

Scalar64 loadElement(DType type, const char *address) {
  Scalar64 value;
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

void storeElement(DType type, char *address, Scalar64 value) {
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

double floatMath(ScalarOp op, DType type, double x) {
  bool single = type == DType::F32;
  switch (op) {
  case ScalarOp::Exp:
    return single ? std::exp(float(x)) : std::exp(x);
  case ScalarOp::Log:
    return single ? std::log(float(x)) : std::log(x);
  case ScalarOp::Tanh:
    return single ? std::tanh(float(x)) : std::tanh(x);
  case ScalarOp::Erf:
    return single ? std::erf(float(x)) : std::erf(x);
  case ScalarOp::Sqrt:
    return single ? std::sqrt(float(x)) : std::sqrt(x);
  case ScalarOp::Rsqrt:
    return single ? 1.0f / std::sqrt(float(x)) : 1.0 / std::sqrt(x);
  case ScalarOp::Sigmoid:
    return single ? 1.0f / (1.0f + std::exp(-float(x)))
                  : 1.0 / (1.0 + std::exp(-x));
  default:
    fail("not a float math op");
  }
}

Scalar64 castValue(DType from, DType to, Scalar64 value) {
  Scalar64 result;
  if (to == DType::Bool) {
    result.i = isFloating(from) ? value.f != 0 : value.i != 0;
    return result;
  }
  if (isFloating(to)) {
    result.f = roundTo(to, isFloating(from) ? value.f : double(value.i));
    return result;
  }
  result.i = wrapInt(to, isFloating(from) ? int64_t(value.f) : value.i);
  return result;
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

Scalar64 floatBinary(ScalarOp op, DType type, double a, double b) {
  Scalar64 result;
  if (isComparison(op)) {
    result.i = compareValues(op, a, b);
    return result;
  }
  switch (op) {
  case ScalarOp::Add:
    result.f = a + b;
    break;
  case ScalarOp::Sub:
    result.f = a - b;
    break;
  case ScalarOp::Mul:
    result.f = a * b;
    break;
  case ScalarOp::Div:
    result.f = a / b;
    break;
  case ScalarOp::Max:
    result.f = (std::isnan(a) || std::isnan(b)) ? NAN : (a > b ? a : b);
    break;
  case ScalarOp::Min:
    result.f = (std::isnan(a) || std::isnan(b)) ? NAN : (a < b ? a : b);
    break;
  case ScalarOp::Pow:
    result.f = type == DType::F32 ? double(std::pow(float(a), float(b)))
                                  : std::pow(a, b);
    break;
  default:
    fail(std::string("op '") + scalarOpName(op) + "' is not defined on floats");
  }
  result.f = roundTo(type, result.f);
  return result;
}

Scalar64 intBinary(ScalarOp op, DType type, int64_t a, int64_t b) {
  Scalar64 result;
  if (isComparison(op)) {
    result.i = compareValues(op, a, b);
    return result;
  }
  uint64_t ua = uint64_t(a), ub = uint64_t(b);
  switch (op) {
  case ScalarOp::Add:
    result.i = int64_t(ua + ub);
    break;
  case ScalarOp::Sub:
    result.i = int64_t(ua - ub);
    break;
  case ScalarOp::Mul:
    result.i = int64_t(ua * ub);
    break;
  case ScalarOp::Div:
    result.i = (b == 0 || (b == -1 && a == INT64_MIN)) ? 0 : a / b;
    break;
  case ScalarOp::Max:
    result.i = a > b ? a : b;
    break;
  case ScalarOp::Min:
    result.i = a < b ? a : b;
    break;
  case ScalarOp::Pow:
    result.i = int64_t(std::pow(double(a), double(b)));
    break;
  case ScalarOp::And:
    result.i = a && b;
    break;
  case ScalarOp::Or:
    result.i = a || b;
    break;
  default:
    fail(std::string("op '") + scalarOpName(op) +
         "' is not defined on integers");
  }
  result.i = wrapInt(type, result.i);
  return result;
}

class KernelInterpreter {
public:
  KernelInterpreter(const Kernel &kernel, char *const *buffers,
                    const int64_t *symbols)
      : kernel(kernel), buffers(buffers), values(kernel.instrs.size()) {
    for (size_t j = 0; j < kernel.symbols.size(); ++j)
      bindings[kernel.symbols[j]] = symbols[j];
    for (const LoopBuffer &param : kernel.params) {
      std::vector<int64_t> strides;
      for (const SymExpr &stride : param.type.effectiveStrides())
        strides.push_back(stride.evaluate(bindings));
      paramStrides.push_back(strides);
    }
  }

  void run() { runBlock(kernel.body); }

private:
  const Kernel &kernel;
  char *const *buffers;
  std::vector<Scalar64> values;
  std::map<std::string, int64_t> bindings;
  std::vector<std::vector<int64_t>> paramStrides;

  void runBlock(const std::vector<Stmt> &block) {
    for (const Stmt &stmt : block) {
      if (stmt.kind == Stmt::Kind::Instr) {
        execute(kernel.instrs[stmt.instr], stmt.instr);
        continue;
      }
      int64_t extent = stmt.extent.evaluate(bindings);
      for (int64_t i = 0; i < extent; ++i) {
        bindings[stmt.var] = i;
        runBlock(stmt.body);
      }
      bindings.erase(stmt.var);
    }
  }

  char *address(const Instr &instr) {
    const LoopBuffer &param = kernel.params[instr.buffer];
    int64_t offset = 0;
    for (size_t k = 0; k < instr.index.size(); ++k)
      offset +=
          instr.index[k].evaluate(bindings) * paramStrides[instr.buffer][k];
    return buffers[instr.buffer] +
           offset * int64_t(dtypeSize(param.type.dtype));
  }

  Scalar64 arg(const Instr &instr, int i) { return values[instr.args[i]]; }
  DType argType(const Instr &instr, int i) {
    return kernel.instrs[instr.args[i]].type;
  }

  void execute(const Instr &instr, int id) {
    const DType bufferType =
        instr.buffer >= 0 ? kernel.params[instr.buffer].type.dtype : DType::F32;
    switch (instr.op) {
    case ScalarOp::Load:
      values[id] = loadElement(bufferType, address(instr));
      return;
    case ScalarOp::Store:
      storeElement(bufferType, address(instr), arg(instr, 0));
      return;
    case ScalarOp::Const:
      values[id].f = roundTo(instr.type, instr.floatValue);
      values[id].i = wrapInt(instr.type, instr.intValue);
      return;
    case ScalarOp::Cast:
      values[id] = castValue(argType(instr, 0), instr.type, arg(instr, 0));
      return;
    case ScalarOp::Select:
      values[id] = arg(instr, 0).i ? arg(instr, 1) : arg(instr, 2);
      return;
    default:
      break;
    }
    DType type = argType(instr, 0);
    if (scalarOpArity(instr.op) == 1) {
      values[id] = unary(instr.op, type, arg(instr, 0));
      return;
    }
    values[id] =
        isFloating(type)
            ? floatBinary(instr.op, type, arg(instr, 0).f, arg(instr, 1).f)
            : intBinary(instr.op, type, arg(instr, 0).i, arg(instr, 1).i);
  }

  Scalar64 unary(ScalarOp op, DType type, Scalar64 x) {
    Scalar64 result;
    if (op == ScalarOp::Not) {
      result.i = !x.i;
      return result;
    }
    if (isFloating(type)) {
      if (op == ScalarOp::Neg)
        result.f = -x.f;
      else if (op == ScalarOp::Abs)
        result.f = std::fabs(x.f);
      else
        result.f = roundTo(type, floatMath(op, type, x.f));
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
};

} // namespace

void interpretKernel(const Kernel &kernel, char *const *buffers,
                     const int64_t *symbols) {
  KernelInterpreter(kernel, buffers, symbols).run();
}

} // namespace dynafuse

//===- LLVMBackendTest.cpp - LLVM-compiled kernels against the interpreter ===//
//
// Each test parses one small kernel, runs it compiled by the LLVM backend and
// by the reference interpreter on the same random inputs, and compares every
// buffer element-wise (bit-exact for integers and bool, 1e-6 relative for
// f32 unless a test allows more, NaN where the interpreter has NaN) and the
// index errors both report.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"

#include "dynafuse/Loop/LoopInterpreter.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Support/HalfFloat.h"
#include "dynafuse/Support/IndexErrors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace dynafuse;

namespace {

/// Bytes of a parameter's storage: one past its largest reachable element.
size_t storageBytes(const LoopBuffer &param,
                    const std::map<std::string, int64_t> &bindings) {
  std::vector<SymExpr> strides = param.type.effectiveStrides();
  int64_t last = 0;
  for (size_t k = 0; k < param.type.rank(); ++k) {
    int64_t size = param.type.sizes[k].evaluate(bindings);
    if (size == 0)
      return 0;
    last += (size - 1) * std::abs(strides[k].evaluate(bindings));
  }
  return size_t(last + 1) * dtypeSize(param.type.dtype);
}

struct Data {
  std::mt19937 rng{1234};
  /// Probability of a NaN among floating values.
  double nanRate = 0;
  double low = -3, high = 3;
  /// Integers are drawn from [-intRange, intRange].
  int64_t intRange = 100;
  /// When nonzero, floats are rounded to multiples of it (ties, zeros).
  double quantum = 0;

  double nextFloat() {
    if (std::uniform_real_distribution<double>(0, 1)(rng) < nanRate)
      return std::numeric_limits<double>::quiet_NaN();
    double value = std::uniform_real_distribution<double>(low, high)(rng);
    return quantum ? std::round(value / quantum) * quantum : value;
  }

  void fill(DType type, std::vector<char> &bytes) {
    size_t size = dtypeSize(type);
    for (size_t offset = 0; offset + size <= bytes.size(); offset += size) {
      char *at = bytes.data() + offset;
      int64_t integer =
          std::uniform_int_distribution<int64_t>(-intRange, intRange)(rng);
      switch (type) {
      case DType::Bool: {
        uint8_t value = integer & 1;
        std::memcpy(at, &value, 1);
        break;
      }
      case DType::I32: {
        int32_t value = int32_t(integer);
        std::memcpy(at, &value, 4);
        break;
      }
      case DType::I64:
        std::memcpy(at, &integer, 8);
        break;
      case DType::F16: {
        uint16_t value = dynafuse_f32_to_f16(float(nextFloat()));
        std::memcpy(at, &value, 2);
        break;
      }
      case DType::BF16: {
        uint16_t value = dynafuse_f32_to_bf16(float(nextFloat()));
        std::memcpy(at, &value, 2);
        break;
      }
      case DType::F32: {
        float value = float(nextFloat());
        std::memcpy(at, &value, 4);
        break;
      }
      case DType::F64: {
        double value = nextFloat();
        std::memcpy(at, &value, 8);
        break;
      }
      }
    }
  }
};

double readFloat(DType type, const char *at) {
  uint16_t half;
  float single;
  double wide;
  switch (type) {
  case DType::F16:
    std::memcpy(&half, at, 2);
    return dynafuse_f16_to_f32(half);
  case DType::BF16:
    std::memcpy(&half, at, 2);
    return dynafuse_bf16_to_f32(half);
  case DType::F32:
    std::memcpy(&single, at, 4);
    return single;
  default:
    std::memcpy(&wide, at, 8);
    return wide;
  }
}

::testing::AssertionResult sameBuffer(const LoopBuffer &param,
                                      const std::vector<char> &expected,
                                      const std::vector<char> &actual,
                                      double f32Tolerance = 1e-6) {
  DType type = param.type.dtype;
  size_t size = dtypeSize(type);
  double tolerance = type == DType::F64 ? 1e-12 : f32Tolerance;
  for (size_t offset = 0; offset + size <= expected.size(); offset += size) {
    const char *want = expected.data() + offset;
    const char *got = actual.data() + offset;
    size_t element = offset / size;
    if (!isFloating(type)) {
      if (std::memcmp(want, got, size) != 0)
        return ::testing::AssertionFailure()
               << "%" << param.name << " differs at element " << element;
      continue;
    }
    double a = readFloat(type, want), b = readFloat(type, got);
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b))
        return ::testing::AssertionFailure()
               << "%" << param.name << "[" << element << "]: interpreter " << a
               << ", llvm " << b;
      continue;
    }
    if (a == b)
      continue;
    double scale = std::max(1.0, std::max(std::fabs(a), std::fabs(b)));
    if (std::fabs(a - b) > tolerance * scale)
      return ::testing::AssertionFailure()
             << "%" << param.name << "[" << element << "]: interpreter " << a
             << ", llvm " << b;
  }
  return ::testing::AssertionSuccess();
}

/// The index error reported since the last call, or "".
std::string takeReportedIndexError() {
  std::string message;
  takeIndexError(message);
  return message;
}

/// Compiles the single kernel of `text` with LLVM, runs it and the
/// interpreter on identical random buffers and compares all buffers and the
/// index errors reported. Float sums may be reassociated by LLVM: reductions
/// pass a looser f32 tolerance.
void checkAgainstLoopInterpreter(const std::string &text,
                             const std::vector<int64_t> &symbolValues = {},
                             Data data = Data(), double f32Tolerance = 1e-6) {
  LoopModule module = parseLoopModule(text, "test.loop");
  ASSERT_EQ(module.kernels.size(), 1u);
  const Kernel &kernel = module.kernels[0];
  ASSERT_EQ(kernel.symbols.size(), symbolValues.size());
  std::map<std::string, int64_t> bindings;
  for (size_t j = 0; j < kernel.symbols.size(); ++j)
    bindings[kernel.symbols[j]] = symbolValues[j];

  std::vector<std::vector<char>> expected, actual;
  for (const LoopBuffer &param : kernel.params) {
    std::vector<char> bytes(storageBytes(param, bindings) + 1);
    data.fill(param.type.dtype, bytes);
    expected.push_back(bytes);
    actual.push_back(bytes);
  }
  std::vector<char *> expectedPointers, actualPointers;
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    expectedPointers.push_back(expected[i].data());
    actualPointers.push_back(actual[i].data());
  }

  std::unique_ptr<Backend> backend = createLLVMBackend();
  std::vector<std::unique_ptr<KernelExecutable>> compiled =
      backend->compile(module, CompileOptions());
  ASSERT_EQ(compiled.size(), 1u);
  takeReportedIndexError();
  interpretLoopKernel(kernel, expectedPointers.data(), symbolValues.data());
  std::string expectedError = takeReportedIndexError();
  compiled[0]->run(actualPointers.data(), symbolValues.data());
  EXPECT_EQ(expectedError, takeReportedIndexError()) << "kernel:\n" << text;
  for (size_t i = 0; i < kernel.params.size(); ++i)
    EXPECT_TRUE(
        sameBuffer(kernel.params[i], expected[i], actual[i], f32Tolerance))
        << "kernel:\n"
        << text;
}

/// A kernel `out[i] = OP(x[i])` over 64 elements of `type`.
std::string unaryKernel(const std::string &op, const std::string &type) {
  std::ostringstream text;
  text << "kernel @k0(%x: " << type << "[64], %out: " << type << "[64]) {\n"
       << "  for i0 in 0..64 {\n"
       << "    %0 = load %x[i0] : " << type << "\n"
       << "    %1 = " << op << " %0 : " << type << "\n"
       << "    store %out[i0], %1\n"
       << "  }\n}\n";
  return text.str();
}

/// A kernel `out[i] = OP(x[i], y[i])`; `result` is the result type.
std::string binaryKernel(const std::string &op, const std::string &type,
                         const std::string &result) {
  std::ostringstream text;
  text << "kernel @k0(%x: " << type << "[64], %y: " << type
       << "[64], %out: " << result << "[64]) {\n"
       << "  for i0 in 0..64 {\n"
       << "    %0 = load %x[i0] : " << type << "\n"
       << "    %1 = load %y[i0] : " << type << "\n"
       << "    %2 = " << op << " %0, %1 : " << result << "\n"
       << "    store %out[i0], %2\n"
       << "  }\n}\n";
  return text.str();
}

TEST(LLVMBackend, F32UnaryMath) {
  for (const char *op : {"exp", "log", "tanh", "erf", "sigmoid", "sqrt",
                         "rsqrt", "neg", "abs"}) {
    SCOPED_TRACE(op);
    checkAgainstLoopInterpreter(unaryKernel(op, "f32"));
  }
}

TEST(LLVMBackend, F32BinaryMath) {
  for (const char *op : {"add", "sub", "mul", "div", "pow"}) {
    SCOPED_TRACE(op);
    Data positive;
    positive.low = 0.01;
    checkAgainstLoopInterpreter(binaryKernel(op, "f32", "f32"));
    checkAgainstLoopInterpreter(binaryKernel(op, "f32", "f32"), {}, positive);
  }
}

TEST(LLVMBackend, MaxMinPropagateNaN) {
  Data withNaN;
  withNaN.nanRate = 0.3;
  for (const char *type : {"f32", "f64"})
    for (const char *op : {"max", "min"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstLoopInterpreter(binaryKernel(op, type, type), {}, withNaN);
    }
}

TEST(LLVMBackend, F64Math) {
  for (const char *op : {"exp", "log", "tanh", "erf", "sigmoid", "sqrt",
                         "rsqrt", "neg", "abs"}) {
    SCOPED_TRACE(op);
    checkAgainstLoopInterpreter(unaryKernel(op, "f64"));
  }
  for (const char *op : {"add", "sub", "mul", "div", "pow"}) {
    SCOPED_TRACE(op);
    checkAgainstLoopInterpreter(binaryKernel(op, "f64", "f64"));
  }
}

TEST(LLVMBackend, IntegerArithmetic) {
  Data small;
  small.intRange = 3; // Zero divisors and small powers.
  for (const char *type : {"i32", "i64"}) {
    for (const char *op : {"add", "sub", "mul", "div", "max", "min", "pow"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstLoopInterpreter(binaryKernel(op, type, type));
      checkAgainstLoopInterpreter(binaryKernel(op, type, type), {}, small);
    }
    for (const char *op : {"neg", "abs"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstLoopInterpreter(unaryKernel(op, type));
    }
  }
}

TEST(LLVMBackend, IntegerDivisionEdgeCases) {
  // MIN / -1 and x / 0 must not trap and must match the interpreter.
  const char *text = R"(
kernel @k0(%x: i64[4], %y: i64[4], %out: i64[4], %x32: i32[4], %y32: i32[4], %out32: i32[4]) {
  for i0 in 0..4 {
    %0 = load %x[i0] : i64
    %1 = load %y[i0] : i64
    %2 = div %0, %1 : i64
    store %out[i0], %2
    %3 = load %x32[i0] : i32
    %4 = load %y32[i0] : i32
    %5 = div %3, %4 : i32
    store %out32[i0], %5
  }
}
)";
  LoopModule module = parseLoopModule(text);
  int64_t x[4] = {INT64_MIN, 7, -7, 5}, y[4] = {-1, 0, 2, -1};
  int32_t x32[4] = {INT32_MIN, 7, -7, 5}, y32[4] = {-1, 0, 2, -1};
  int64_t out[2][4];
  int32_t out32[2][4];
  std::vector<std::unique_ptr<KernelExecutable>> compiled =
      createLLVMBackend()->compile(module, CompileOptions());
  for (int run = 0; run < 2; ++run) {
    char *buffers[] = {reinterpret_cast<char *>(x),
                       reinterpret_cast<char *>(y),
                       reinterpret_cast<char *>(out[run]),
                       reinterpret_cast<char *>(x32),
                       reinterpret_cast<char *>(y32),
                       reinterpret_cast<char *>(out32[run])};
    if (run == 0)
      interpretLoopKernel(module.kernels[0], buffers, nullptr);
    else
      compiled[0]->run(buffers, nullptr);
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[0][i], out[1][i]) << i;
    EXPECT_EQ(out32[0][i], out32[1][i]) << i;
  }
  EXPECT_EQ(out[1][1], 0);
  EXPECT_EQ(out[1][2], -3); // Truncating, like C++.
  EXPECT_EQ(out[1][3], -5);
  EXPECT_EQ(out32[1][0], INT32_MIN);
}

TEST(LLVMBackend, Casts) {
  const char *types[] = {"bool", "i32", "i64", "f32", "f64"};
  Data wide;
  wide.low = -1e10; // Out of i32 range: float -> i32 wraps through i64.
  wide.high = 1e10;
  wide.intRange = int64_t(1) << 62; // i64 -> f32 rounds through f64.
  for (const char *from : types)
    for (const char *to : types) {
      std::ostringstream text;
      text << "kernel @k0(%x: " << from << "[64], %out: " << to << "[64]) {\n"
           << "  for i0 in 0..64 {\n"
           << "    %0 = load %x[i0] : " << from << "\n"
           << "    %1 = cast %0 : " << to << "\n"
           << "    store %out[i0], %1\n"
           << "  }\n}\n";
      SCOPED_TRACE(std::string(from) + " -> " + to);
      checkAgainstLoopInterpreter(text.str());
      checkAgainstLoopInterpreter(text.str(), {}, wide);
    }
}

TEST(LLVMBackend, CompareAndSelect) {
  Data withNaN;
  withNaN.nanRate = 0.2;
  withNaN.intRange = 2; // Many equal pairs.
  for (const char *type : {"f32", "f64", "i32", "i64", "bool"})
    for (const char *op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstLoopInterpreter(binaryKernel(op, type, "bool"), {}, withNaN);
    }
  for (const char *op :
       {"and", "or", "add", "sub", "mul", "div", "max", "min", "pow"}) {
    SCOPED_TRACE(std::string(op) + " bool");
    checkAgainstLoopInterpreter(binaryKernel(op, "bool", "bool"));
  }
  checkAgainstLoopInterpreter(unaryKernel("not", "bool"));
  checkAgainstLoopInterpreter(R"(
kernel @k0(%x: f32[64], %y: f32[64], %out: f32[64], %mask: bool[64]) {
  %zero = const 0.0 : f32
  for i0 in 0..64 {
    %0 = load %x[i0] : f32
    %1 = load %y[i0] : f32
    %2 = gt %0, %zero : bool
    %3 = load %mask[i0] : bool
    %4 = and %2, %3 : bool
    %5 = not %4 : bool
    %6 = select %5, %0, %1 : f32
    store %out[i0], %6
    store %mask[i0], %5
  }
}
)",
                          {}, withNaN);
}

TEST(LLVMBackend, Constants) {
  checkAgainstLoopInterpreter(R"(
kernel @k0(%a: f32[1], %b: f64[1], %c: i32[1], %d: i64[1], %e: bool[2]) {
  %0 = const 0.1 : f32
  store %a[0], %0
  %1 = const 0.1 : f64
  store %b[0], %1
  %2 = const -7 : i32
  store %c[0], %2
  %3 = const 123456789012 : i64
  store %d[0], %3
  %4 = const true : bool
  store %e[0], %4
  %5 = const false : bool
  store %e[1], %5
}
)");
}

TEST(LLVMBackend, HalfAndBFloat16) {
  for (const char *type : {"f16", "bf16"}) {
    std::ostringstream text;
    text << "kernel @k0(%x: " << type << "[64], %y: " << type
         << "[64], %out: " << type << "[64], %wide: f32[64]) {\n"
         << "  for i0 in 0..64 {\n"
         << "    %0 = load %x[i0] : f32\n"
         << "    %1 = load %y[i0] : f32\n"
         << "    %2 = mul %0, %1 : f32\n"
         << "    %3 = exp %2 : f32\n"
         << "    store %out[i0], %3\n"
         << "    store %wide[i0], %2\n"
         << "  }\n}\n";
    SCOPED_TRACE(type);
    Data withNaN;
    withNaN.nanRate = 0.05;
    withNaN.low = -12; // exp overflows f16 to inf.
    withNaN.high = 12;
    checkAgainstLoopInterpreter(text.str(), {}, withNaN);
  }
}

TEST(LLVMBackend, TransposedInputAndBroadcast) {
  // out[i, j] = xT[i, j] + b[j] where xT is a column-major view and b is
  // broadcast along i with stride 0.
  checkAgainstLoopInterpreter(R"(
kernel @k0(%x: f32[5, 7]{1, 5}, %b: f32[5, 7]{0, 1}, %out: f32[5, 7]) {
  for i0 in 0..5 {
    for i1 in 0..7 {
      %0 = load %x[i0, i1] : f32
      %1 = load %b[i0, i1] : f32
      %2 = add %0, %1 : f32
      store %out[i0, i1], %2
    }
  }
}
)");
  // A broadcast index: the second operand ignores i0.
  checkAgainstLoopInterpreter(R"(
kernel @k0(%x: f32[5, 7], %b: f32[7], %out: f32[7, 5]) {
  for i0 in 0..5 {
    for i1 in 0..7 {
      %0 = load %x[i0, i1] : f32
      %1 = load %b[i1] : f32
      %2 = sub %0, %1 : f32
      store %out[i1, i0], %2
    }
  }
}
)");
}

TEST(LLVMBackend, SymbolicSizesAndFloorIndexing) {
  const char *text = R"(
kernel @k0[s0, s1](%x: f32[s0, s1], %out: f32[s0, s1], %flat: i64[s0 * s1]) {
  for i0 in 0..s0 {
    for i1 in 0..s1 {
      %0 = load %x[(i0 * s1 + i1) // s1, (i0 * s1 + i1) % s1] : f32
      %1 = tanh %0 : f32
      store %out[i0, i1], %1
    }
  }
  %c = const 1 : i64
  for i2 in 0..s0 * s1 {
    %2 = load %flat[(i2 + s1) % (s0 * s1)] : i64
    %3 = add %2, %c : i64
    store %flat[i2], %3
  }
}
)";
  checkAgainstLoopInterpreter(text, {3, 17});
  checkAgainstLoopInterpreter(text, {1, 1});
  checkAgainstLoopInterpreter(text, {0, 5}); // Empty loops.
}

TEST(LLVMBackend, FloorDivisionMatchesPython) {
  // Negative numerators, positive and negative (symbolic) divisors,
  // observed through reads of a table holding its own indices.
  const char *table = R"(
kernel @k0[s0](%tbl: i64[16], %q: i64[16], %r: i64[16], %qs: i64[16], %rs: i64[16]) {
  for i0 in 0..16 {
    %0 = load %tbl[(i0 - 8) // 3 + 3] : i64
    store %q[i0], %0
    %1 = load %tbl[(i0 - 8) % 3] : i64
    store %r[i0], %1
    %2 = load %tbl[(i0 - 8) // s0 + 8] : i64
    store %qs[i0], %2
    %3 = load %tbl[(i0 - 8) % s0 + 2] : i64
    store %rs[i0], %3
  }
}
)";
  LoopModule module = parseLoopModule(table);
  int64_t tbl[16], q[16], r[16], qs[16], rs[16];
  for (int i = 0; i < 16; ++i)
    tbl[i] = i;
  char *buffers[] = {reinterpret_cast<char *>(tbl), reinterpret_cast<char *>(q),
                     reinterpret_cast<char *>(r), reinterpret_cast<char *>(qs),
                     reinterpret_cast<char *>(rs)};
  int64_t symbols[] = {-3};
  auto compiled = createLLVMBackend()->compile(module, CompileOptions());
  compiled[0]->run(buffers, symbols);
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(q[i], floorDivInt(i - 8, 3) + 3) << i;
    EXPECT_EQ(r[i], modInt(i - 8, 3)) << i;
    EXPECT_EQ(qs[i], floorDivInt(i - 8, -3) + 8) << i;
    EXPECT_EQ(rs[i], modInt(i - 8, -3) + 2) << i;
  }
}

TEST(LLVMBackend, ReductionThroughBuffer) {
  checkAgainstLoopInterpreter(R"(
kernel @k0[s0](%x: f32[s0, 33], %out: f32[s0]) {
  for i0 in 0..s0 {
    %z = const 0.0 : f32
    store %out[i0], %z
    for i1 in 0..33 {
      %0 = load %out[i0] : f32
      %1 = load %x[i0, i1] : f32
      %2 = add %0, %1 : f32
      store %out[i0], %2
    }
  }
}
)",
                          {9});
}

TEST(LLVMBackend, ZeroFillAndCopyLoops) {
  // LLVM may turn these into memset/memcpy calls, which the JIT must
  // resolve.
  checkAgainstLoopInterpreter(R"(
kernel @k0[s0](%x: f32[s0], %out: f32[s0], %zero: f64[s0, 3]) {
  %z = const 0.0 : f64
  for i0 in 0..s0 {
    %0 = load %x[i0] : f32
    store %out[i0], %0
    for i1 in 0..3 {
      store %zero[i0, i1], %z
    }
  }
}
)",
                          {1000});
}

TEST(LLVMBackend, ConcurrentCompiles) {
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &failures] {
      for (int round = 0; round < 5; ++round) {
        std::string factor = std::to_string(t + 1) + ".0";
        LoopModule module = parseLoopModule(
            "kernel @k0(%x: f32[8]) {\n  %c = const " + factor +
            " : f32\n  for i0 in 0..8 {\n    %0 = load %x[i0] : f32\n"
            "    %1 = mul %0, %c : f32\n    store %x[i0], %1\n  }\n}\n");
        auto compiled = createLLVMBackend()->compile(module, CompileOptions());
        float x[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        char *buffers[] = {reinterpret_cast<char *>(x)};
        compiled[0]->run(buffers, nullptr);
        failures[t] += x[7] != float(t + 1);
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  for (int t = 0; t < 4; ++t)
    EXPECT_EQ(failures[t], 0) << t;
}

TEST(LLVMBackend, HandComputedExpectation) {
  LoopModule module = parseLoopModule(R"(
kernel @k0[s0](%x: f32[s0], %out: f32[s0]) {
  %c = const 2.0 : f32
  for i0 in 0..s0 {
    %0 = load %x[i0] : f32
    %1 = mul %0, %c : f32
    %2 = exp %1 : f32
    store %out[i0], %2
  }
}
)");
  std::vector<float> x = {0.0f, 0.5f, -1.0f}, out(3, -1.0f);
  char *buffers[] = {reinterpret_cast<char *>(x.data()),
                     reinterpret_cast<char *>(out.data())};
  int64_t symbols[] = {3};
  auto compiled = createLLVMBackend()->compile(module, CompileOptions());
  compiled[0]->run(buffers, symbols);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(out[i], std::exp(x[i] * 2.0f)) << i;
}

TEST(LLVMBackend, SameKernelNameInTwoModules) {
  auto compileScale = [](const std::string &factor) {
    std::string text = "kernel @k0(%x: f32[4]) {\n  %c = const " + factor +
                       " : f32\n  for i0 in 0..4 {\n"
                       "    %0 = load %x[i0] : f32\n"
                       "    %1 = mul %0, %c : f32\n"
                       "    store %x[i0], %1\n  }\n}\n";
    return createLLVMBackend()->compile(parseLoopModule(text),
                                        CompileOptions());
  };
  auto twice = compileScale("2.0");
  auto thrice = compileScale("3.0");
  float x[4] = {1, 2, 3, 4};
  char *buffers[] = {reinterpret_cast<char *>(x)};
  twice[0]->run(buffers, nullptr);
  thrice[0]->run(buffers, nullptr);
  EXPECT_EQ(x[3], 24.0f);
  // Code is released with its executables; compiling again still works.
  twice.clear();
  auto again = compileScale("2.0");
  again[0]->run(buffers, nullptr);
  EXPECT_EQ(x[0], 12.0f);
}

TEST(LLVMBackend, SeveralKernelsAndReservedNames) {
  LoopModule module = parseLoopModule(R"(
kernel @expf(%x: f32[4]) {
  for i0 in 0..4 {
    %0 = load %x[i0] : f32
    %1 = exp %0 : f32
    store %x[i0], %1
  }
}
kernel @second(%x: f32[4]) {
  for i0 in 0..4 {
    %0 = load %x[i0] : f32
    %1 = neg %0 : f32
    store %x[i0], %1
  }
}
)");
  auto compiled = createLLVMBackend()->compile(module, CompileOptions());
  ASSERT_EQ(compiled.size(), 2u);
  float x[4] = {0, 0, 0, 0};
  char *buffers[] = {reinterpret_cast<char *>(x)};
  compiled[0]->run(buffers, nullptr);
  compiled[1]->run(buffers, nullptr);
  EXPECT_EQ(x[2], -1.0f);
}

TEST(LLVMBackend, TextualOutputsAndDumps) {
  // f64 math calls libm (f32 math is inline, see LLVMVectorMathTest.cpp).
  LoopModule module = parseLoopModule(unaryKernel("exp", "f64"));
  std::string ir = emitLLVMIR(module, /*optimized=*/false);
  EXPECT_NE(ir.find("define void @k0(ptr"), std::string::npos) << ir;
  EXPECT_NE(ir.find("@exp("), std::string::npos) << ir;
  std::string optimized = emitLLVMIR(module, /*optimized=*/true);
  EXPECT_NE(optimized.find("define void @k0(ptr"), std::string::npos);
  std::string assembly = emitAssembly(module);
  EXPECT_NE(assembly.find("k0:"), std::string::npos) << assembly;

  std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("dynafuse-llvm-test-" + std::to_string(getpid()));
  CompileOptions options;
  options.dumpDir = dir.string();
  options.dumpName = "unary";
  createLLVMBackend()->compile(module, options);
  EXPECT_TRUE(std::filesystem::exists(dir / "unary.ll"));
  EXPECT_TRUE(std::filesystem::exists(dir / "unary.s"));
  std::filesystem::remove_all(dir);
}

//===--- Reductions -------------------------------------------------------===//

/// `out[i] = reduce KIND over x[i, r]` for a row of `columns` values;
/// argmax/argmin also store the position.
std::string rowReduceKernel(const std::string &kind, const std::string &type,
                            const std::string &columns = "33") {
  bool arg = kind == "argmax" || kind == "argmin";
  std::ostringstream text;
  text << "kernel @k0[s0](%x: " << type << "[s0, " << columns
       << "], %out: " << type << "[s0], %pos: i64[s0]) {\n"
       << "  for i0 in 0..s0 {\n";
  if (arg)
    text << "    %0, %1 = reduce " << kind << " (r0 in 0.." << columns
         << ") {\n"
         << "      %2 = load %x[i0, r0] : " << type << "\n"
         << "      %3 = index r0 : i64\n"
         << "      yield %2, %3\n"
         << "    } : " << type << ", i64\n"
         << "    store %pos[i0], %1\n";
  else
    text << "    %0 = reduce " << kind << " (r0 in 0.." << columns << ") {\n"
         << "      %2 = load %x[i0, r0] : " << type << "\n"
         << "      yield %2\n"
         << "    } : " << type << "\n";
  text << "    store %out[i0], %0\n"
       << "  }\n}\n";
  return text.str();
}

TEST(LLVMBackend, ReduceFloatKinds) {
  Data withNaN;
  withNaN.nanRate = 0.03;
  Data ties; // Small integers: many equal values, exact sums.
  ties.quantum = 1;
  Data nearOne; // Products that neither overflow nor vanish.
  nearOne.low = 0.9;
  nearOne.high = 1.1;
  for (const char *type : {"f32", "f64"})
    for (const char *kind : {"sum", "prod", "max", "min", "argmax", "argmin"}) {
      SCOPED_TRACE(std::string(kind) + " " + type);
      std::string text = rowReduceKernel(kind, type);
      checkAgainstLoopInterpreter(text, {9}, Data(), 1e-5);
      checkAgainstLoopInterpreter(text, {9}, withNaN, 1e-5);
      checkAgainstLoopInterpreter(text, {9}, ties, 1e-5);
      checkAgainstLoopInterpreter(text, {9}, nearOne, 1e-5);
    }
}

TEST(LLVMBackend, ReduceArgExtremesTiesAndNaN) {
  // Hand-checked: the first extreme wins, a NaN is the extreme, and the
  // first NaN wins.
  const char *text = R"(
kernel @k0(%x: f32[4, 5], %max: f32[4], %amax: i64[4], %amin: i64[4]) {
  for i0 in 0..4 {
    %0, %1 = reduce argmax (r0 in 0..5) {
      %2 = load %x[i0, r0] : f32
      %3 = index r0 : i64
      yield %2, %3
    } : f32, i64
    store %max[i0], %0
    store %amax[i0], %1
    %4, %5 = reduce argmin (r0 in 0..5) {
      %6 = load %x[i0, r0] : f32
      %7 = index r0 : i64
      yield %6, %7
    } : f32, i64
    store %amin[i0], %5
  }
}
)";
  float nan = std::numeric_limits<float>::quiet_NaN();
  float x[4][5] = {{1, 3, 2, 3, 1},
                   {2, nan, 5, nan, -1},
                   {-7, -7, -7, -7, -7},
                   {0, 1, -1, 1, nan}};
  float max[4];
  int64_t amax[4], amin[4];
  char *buffers[] = {reinterpret_cast<char *>(x), reinterpret_cast<char *>(max),
                     reinterpret_cast<char *>(amax),
                     reinterpret_cast<char *>(amin)};
  LoopModule module = parseLoopModule(text);
  createLLVMBackend()->compile(module, CompileOptions())[0]->run(buffers,
                                                                 nullptr);
  EXPECT_EQ(amax[0], 1);
  EXPECT_EQ(amin[0], 0);
  EXPECT_TRUE(std::isnan(max[1]));
  EXPECT_EQ(amax[1], 1);
  EXPECT_EQ(amin[1], 1);
  EXPECT_EQ(max[2], -7);
  EXPECT_EQ(amax[2], 0);
  EXPECT_EQ(amin[2], 0);
  EXPECT_EQ(amax[3], 4);
  EXPECT_EQ(amin[3], 4);
  checkAgainstLoopInterpreter(text);
}

TEST(LLVMBackend, ReduceIntegerKinds) {
  Data small;
  small.intRange = 3;
  for (const char *type : {"i32", "i64"})
    for (const char *kind : {"sum", "prod", "max", "min", "argmax", "argmin"}) {
      SCOPED_TRACE(std::string(kind) + " " + type);
      checkAgainstLoopInterpreter(rowReduceKernel(kind, type), {9});
      checkAgainstLoopInterpreter(rowReduceKernel(kind, type), {9}, small);
    }
}

TEST(LLVMBackend, ReduceAnyAll) {
  const char *text = R"(
kernel @k0[s0](%x: f32[s0, 6], %any: bool[s0], %all: bool[s0], %b: bool[s0, 6], %bany: bool[s0]) {
  for i0 in 0..s0 {
    %0 = reduce any (r0 in 0..6) {
      %1 = load %x[i0, r0] : f32
      %2 = const 2.0 : f32
      %3 = gt %1, %2 : bool
      yield %3
    } : bool
    store %any[i0], %0
    %4 = reduce all (r0 in 0..6) {
      %5 = load %x[i0, r0] : f32
      %6 = const -2.0 : f32
      %7 = gt %5, %6 : bool
      yield %7
    } : bool
    store %all[i0], %4
    %8 = reduce any (r0 in 0..6) {
      %9 = load %b[i0, r0] : bool
      yield %9
    } : bool
    store %bany[i0], %8
  }
}
)";
  checkAgainstLoopInterpreter(text, {40});
}

TEST(LLVMBackend, ReduceEmptyDomainGivesIdentity) {
  for (const char *type : {"f32", "f64", "i32", "i64"})
    for (const char *kind : {"sum", "prod", "max", "min", "argmax", "argmin"}) {
      SCOPED_TRACE(std::string(kind) + " " + type);
      checkAgainstLoopInterpreter(rowReduceKernel(kind, type, "0"), {3});
    }
  const char *logical = R"(
kernel @k0[s0](%b: bool[4, s0], %any: bool[4], %all: bool[4]) {
  for i0 in 0..4 {
    %0 = reduce any (r0 in 0..s0) {
      %1 = load %b[i0, r0] : bool
      yield %1
    } : bool
    store %any[i0], %0
    %2 = reduce all (r0 in 0..s0) {
      %3 = load %b[i0, r0] : bool
      yield %3
    } : bool
    store %all[i0], %2
  }
}
)";
  checkAgainstLoopInterpreter(logical, {0});
  checkAgainstLoopInterpreter(logical, {5});
}

TEST(LLVMBackend, ReduceOverSeveralVariables) {
  // An inner extent of 0 empties the whole domain.
  const char *text = R"(
kernel @k0[s0, s1](%x: f32[3, s0, s1], %sum: f32[3], %max: f32[3], %pos: i64[3]) {
  for i0 in 0..3 {
    %0 = reduce sum (r0 in 0..s0, r1 in 0..s1) {
      %1 = load %x[i0, r0, r1] : f32
      yield %1
    } : f32
    store %sum[i0], %0
    %2, %3 = reduce argmax (r0 in 0..s0, r1 in 0..s1) {
      %4 = load %x[i0, r0, r1] : f32
      %5 = index r0 * s1 + r1 : i64
      yield %4, %5
    } : f32, i64
    store %max[i0], %2
    store %pos[i0], %3
  }
}
)";
  Data ties;
  ties.quantum = 0.5;
  Data withNaN;
  withNaN.nanRate = 0.02;
  for (std::vector<int64_t> sizes :
       {std::vector<int64_t>{4, 5}, {1, 17}, {6, 0}, {0, 3}}) {
    SCOPED_TRACE(std::to_string(sizes[0]) + "x" + std::to_string(sizes[1]));
    checkAgainstLoopInterpreter(text, sizes, Data(), 1e-5);
    checkAgainstLoopInterpreter(text, sizes, ties, 1e-5);
    checkAgainstLoopInterpreter(text, sizes, withNaN, 1e-5);
  }
}

TEST(LLVMBackend, SoftmaxRowsWithEpilogue) {
  const char *text = R"(
kernel @softmax[s0](%x: f32[s0, 64], %out: f32[s0, 64]) {
  for i0 in 0..s0 {
    %0 = reduce max (r0 in 0..64) {
      %1 = load %x[i0, r0] : f32
      yield %1
    } : f32
    %2 = reduce sum (r0 in 0..64) {
      %3 = load %x[i0, r0] : f32
      %4 = sub %3, %0 : f32
      %5 = exp %4 : f32
      yield %5
    } : f32
    for i1 in 0..64 {
      %6 = load %x[i0, i1] : f32
      %7 = sub %6, %0 : f32
      %8 = exp %7 : f32
      %9 = div %8, %2 : f32
      store %out[i0, i1], %9
    }
  }
}
)";
  Data wide;
  wide.low = -20;
  wide.high = 20;
  checkAgainstLoopInterpreter(text, {13}, Data(), 1e-5);
  checkAgainstLoopInterpreter(text, {13}, wide, 1e-5);
}

TEST(LLVMBackend, ReduceOverColumns) {
  // The reduced dimension is the non-contiguous one, of a row-major and of
  // a column-major input.
  const char *text = R"(
kernel @k0[s0](%x: f32[s0, 7], %xt: f64[s0, 7]{1, s0}, %sum: f32[7], %min: f64[7], %pos: i64[7]) {
  for i0 in 0..7 {
    %0 = reduce sum (r0 in 0..s0) {
      %1 = load %x[r0, i0] : f32
      yield %1
    } : f32
    store %sum[i0], %0
    %2 = reduce min (r0 in 0..s0) {
      %3 = load %xt[r0, i0] : f64
      yield %3
    } : f64
    store %min[i0], %2
    %4, %5 = reduce argmin (r0 in 0..s0) {
      %6 = load %xt[r0, i0] : f64
      %7 = index r0 : i64
      yield %6, %7
    } : f64, i64
    store %pos[i0], %5
  }
}
)";
  Data withNaN;
  withNaN.nanRate = 0.02;
  checkAgainstLoopInterpreter(text, {50}, Data(), 1e-5);
  checkAgainstLoopInterpreter(text, {50}, withNaN, 1e-5);
  checkAgainstLoopInterpreter(text, {0});
}

TEST(LLVMBackend, ReduceUsesOuterReduction) {
  // A reduction nested in another one's body (variance-like).
  checkAgainstLoopInterpreter(R"(
kernel @k0[s0](%x: f32[s0, 8, 5], %out: f32[s0]) {
  for i0 in 0..s0 {
    %0 = reduce sum (r0 in 0..8) {
      %1 = reduce max (r1 in 0..5) {
        %2 = load %x[i0, r0, r1] : f32
        yield %2
      } : f32
      %3 = mul %1, %1 : f32
      yield %3
    } : f32
    store %out[i0], %0
  }
}
)",
                          {6}, Data(), 1e-5);
}

//===--- Index values, masks, indirect indices ----------------------------===//

TEST(LLVMBackend, IndexValues) {
  checkAgainstLoopInterpreter(R"(
kernel @k0[s0](%out: i64[s0, 7], %f: f32[s0, 7]) {
  for i0 in 0..s0 {
    for i1 in 0..7 {
      %0 = index (i0 * 7 + i1 - 20) // 3 + s0 : i64
      store %out[i0, i1], %0
      %1 = index (i1 - 3) % 4 : i64
      %2 = cast %1 : f32
      store %f[i0, i1], %2
    }
  }
}
)",
                          {5});
}

TEST(LLVMBackend, MaskedLoadSkipsMaskedOffAddresses) {
  // Masked-off addresses are far outside every buffer: reading them would
  // fault.
  checkAgainstLoopInterpreter(R"(
kernel @k0(%x: f32[16], %h: f16[16], %b: bool[16], %out: f32[32], %hout: f32[32], %bout: bool[32]) {
  for i0 in 0..32 {
    %0 = index i0 : i64
    %1 = const 16 : i64
    %2 = lt %0, %1 : bool
    %3 = load %x[i0 + (i0 // 16) * 1000000000000] mask %2 : f32
    store %out[i0], %3
    %4 = load %h[i0 + (i0 // 16) * 1000000000000] mask %2 : f32
    store %hout[i0], %4
    %5 = load %b[i0 + (i0 // 16) * 1000000000000] mask %2 : bool
    store %bout[i0], %5
  }
}
)");
}

TEST(LLVMBackend, IndirectGatherAndScatterInRange) {
  // Indices are made in range with Python's remainder; i32 indices are
  // sign-extended.
  const char *text = R"(
kernel @k0[s0](%ids: i64[s0], %ids32: i32[s0], %table: f32[10, 4], %out: f32[s0, 4], %out32: f32[s0, 4], %scatter: f32[10]) {
  for i0 in 0..s0 {
    %0 = load %ids[i0] : i64
    %1 = const 10 : i64
    %2 = remainder %0, %1 : i64
    %3 = load %ids32[i0] : i32
    %4 = const 10 : i32
    %5 = remainder %3, %4 : i32
    for i1 in 0..4 {
      %6 = load %table[%2, i1] : f32
      store %out[i0, i1], %6
      %7 = load %table[%5, 3 - i1] : f32
      store %out32[i0, i1], %7
    }
    %8 = cast %0 : f32
    store %scatter[9 - %5], %8
  }
}
)";
  checkAgainstLoopInterpreter(text, {25});
  checkAgainstLoopInterpreter(text, {0});
}

TEST(LLVMBackend, IndirectIndexOutOfRangeReportsError) {
  // Raw ids in [-100, 100] against 10 rows: loads give 0, stores are
  // skipped, and the first bad index is reported as by the interpreter.
  const char *text = R"(
kernel @k0[s0](%ids: i64[s0], %ids32: i32[s0], %table: f32[10, 4], %out: f32[s0, 4], %scatter: f32[10], %masked: f32[s0]) {
  for i0 in 0..s0 {
    %0 = load %ids[i0] : i64
    %1 = load %ids32[i0] : i32
    for i1 in 0..4 {
      %2 = load %table[%0, i1] : f32
      store %out[i0, i1], %2
    }
    %3 = cast %0 : f32
    store %scatter[%1], %3
    %4 = const 0 : i32
    %5 = lt %1, %4 : bool
    %6 = load %table[%1 + 5, %0 // 100] mask %5 : f32
    store %masked[i0], %6
  }
}
)";
  checkAgainstLoopInterpreter(text, {40});

  LoopModule module = parseLoopModule(text);
  int64_t ids[2] = {3, -12};
  int32_t ids32[2] = {11, 2};
  float table[40], out[8], scatter[10], masked[2];
  for (int i = 0; i < 40; ++i)
    table[i] = float(i);
  char *buffers[] = {
      reinterpret_cast<char *>(ids),     reinterpret_cast<char *>(ids32),
      reinterpret_cast<char *>(table),   reinterpret_cast<char *>(out),
      reinterpret_cast<char *>(scatter), reinterpret_cast<char *>(masked)};
  int64_t size = 2;
  std::unique_ptr<KernelExecutable> compiled =
      std::move(createLLVMBackend()->compile(module, CompileOptions())[0]);
  takeReportedIndexError();
  compiled->run(buffers, &size);
  // i0 = 0 stores to %scatter[11] first.
  EXPECT_EQ(takeReportedIndexError(),
            "index 11 is out of bounds for dimension of size 10");
  EXPECT_EQ(out[0], 12);
  EXPECT_EQ(out[4], 0);
  EXPECT_EQ(masked[1], 0); // ids32[1] = 2 is not negative: masked off.
  EXPECT_EQ(takeReportedIndexError(), "");
  ids32[0] = 1;
  compiled->run(buffers, &size);
  EXPECT_EQ(takeReportedIndexError(),
            "index -12 is out of bounds for dimension of size 10");
}

//===--- More scalar ops --------------------------------------------------===//

TEST(LLVMBackend, MoreFloatMath) {
  Data halves; // Rounding ties, integers and negative zeros.
  halves.quantum = 0.5;
  Data wide;
  wide.low = -1e4;
  wide.high = 1e4;
  for (const char *type : {"f32", "f64"})
    for (const char *op : {"exp2", "log1p", "expm1", "sin", "cos", "floor",
                           "ceil", "round", "trunc"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstLoopInterpreter(unaryKernel(op, type));
      checkAgainstLoopInterpreter(unaryKernel(op, type), {}, halves);
      checkAgainstLoopInterpreter(unaryKernel(op, type), {}, wide);
    }
}

TEST(LLVMBackend, RoundHalfToEven) {
  LoopModule module = parseLoopModule(unaryKernel("round", "f32"));
  float x[64] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 2.6f, -2.4f};
  float out[64];
  char *buffers[] = {reinterpret_cast<char *>(x),
                     reinterpret_cast<char *>(out)};
  createLLVMBackend()->compile(module, CompileOptions())[0]->run(buffers,
                                                                 nullptr);
  float want[8] = {0, 2, 2, -0.0f, -2, -2, 3, -2};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(out[i], want[i]) << i;
  EXPECT_TRUE(std::signbit(out[3]));
}

TEST(LLVMBackend, FloatModulo) {
  Data small; // Zero divisors, exact multiples, negative operands.
  small.quantum = 1;
  Data withNaN;
  withNaN.nanRate = 0.1;
  for (const char *type : {"f32", "f64"})
    for (const char *op : {"fmod", "remainder"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstLoopInterpreter(binaryKernel(op, type, type));
      checkAgainstLoopInterpreter(binaryKernel(op, type, type), {}, small);
      checkAgainstLoopInterpreter(binaryKernel(op, type, type), {}, withNaN);
    }
}

TEST(LLVMBackend, IntegerModuloAndBitwise) {
  Data small;
  small.intRange = 3; // Zero divisors and negative operands.
  for (const char *type : {"i32", "i64", "bool"}) {
    for (const char *op : {"fmod", "remainder", "bitand", "bitor", "bitxor"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstLoopInterpreter(binaryKernel(op, type, type));
      checkAgainstLoopInterpreter(binaryKernel(op, type, type), {}, small);
    }
    SCOPED_TRACE(std::string("bitnot ") + type);
    checkAgainstLoopInterpreter(unaryKernel("bitnot", type));
  }
  checkAgainstLoopInterpreter(binaryKernel("xor", "bool", "bool"));
}

TEST(LLVMBackend, IntegerModuloEdgeCases) {
  const char *text = R"(
kernel @k0(%x: i64[6], %y: i64[6], %f: i64[6], %r: i64[6], %x32: i32[6], %y32: i32[6], %f32: i32[6], %r32: i32[6]) {
  for i0 in 0..6 {
    %0 = load %x[i0] : i64
    %1 = load %y[i0] : i64
    %2 = fmod %0, %1 : i64
    store %f[i0], %2
    %3 = remainder %0, %1 : i64
    store %r[i0], %3
    %4 = load %x32[i0] : i32
    %5 = load %y32[i0] : i32
    %6 = fmod %4, %5 : i32
    store %f32[i0], %6
    %7 = remainder %4, %5 : i32
    store %r32[i0], %7
  }
}
)";
  LoopModule module = parseLoopModule(text);
  int64_t x[6] = {INT64_MIN, 7, -7, 7, -7, INT64_MIN};
  int64_t y[6] = {-1, 0, 3, -3, -3, 3};
  int32_t x32[6] = {INT32_MIN, 7, -7, 7, -7, INT32_MIN};
  int32_t y32[6] = {-1, 0, 3, -3, -3, 3};
  int64_t f[2][6], r[2][6];
  int32_t f32[2][6], r32[2][6];
  std::vector<std::unique_ptr<KernelExecutable>> compiled =
      createLLVMBackend()->compile(module, CompileOptions());
  for (int run = 0; run < 2; ++run) {
    char *buffers[] = {
        reinterpret_cast<char *>(x),        reinterpret_cast<char *>(y),
        reinterpret_cast<char *>(f[run]),   reinterpret_cast<char *>(r[run]),
        reinterpret_cast<char *>(x32),      reinterpret_cast<char *>(y32),
        reinterpret_cast<char *>(f32[run]), reinterpret_cast<char *>(r32[run])};
    if (run == 0)
      interpretLoopKernel(module.kernels[0], buffers, nullptr);
    else
      compiled[0]->run(buffers, nullptr);
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(f[0][i], f[1][i]) << i;
    EXPECT_EQ(r[0][i], r[1][i]) << i;
    EXPECT_EQ(f32[0][i], f32[1][i]) << i;
    EXPECT_EQ(r32[0][i], r32[1][i]) << i;
  }
  int64_t wantF[6] = {0, 0, -1, 1, -1, -2}, wantR[6] = {0, 0, 2, -2, -1, 1};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(f[1][i], wantF[i]) << i;
    EXPECT_EQ(r[1][i], wantR[i]) << i;
    EXPECT_EQ(f32[1][i], wantF[i]) << i;
    EXPECT_EQ(r32[1][i], wantR[i]) << i;
  }
}

TEST(LLVMBackend, EveryConstructPrintsAsIRAndAssembly) {
  LoopModule module = parseLoopModule(R"(
kernel @k0[s0](%x: f32[s0, 8], %ids: i32[s0], %out: f32[s0], %pos: i64[s0]) {
  for i0 in 0..s0 {
    %0 = load %ids[i0] : i32
    %1 = const 0 : i32
    %2 = ge %0, %1 : bool
    %3 = load %x[%0, i0 % 8] mask %2 : f32
    %4, %5 = reduce argmin (r0 in 0..8) {
      %6 = load %x[i0, r0] : f32
      %7 = index r0 : i64
      yield %6, %7
    } : f32, i64
    %8 = reduce sum (r0 in 0..8) {
      %9 = load %x[i0, r0] : f32
      %10 = round %9 : f32
      %11 = remainder %10, %3 : f32
      yield %11
    } : f32
    store %out[i0], %8
    store %pos[i0], %5
  }
}
)");
  std::string ir = emitLLVMIR(module, /*optimized=*/false);
  EXPECT_NE(ir.find("@dynafuse_index_error("), std::string::npos) << ir;
  EXPECT_NE(ir.find("fadd reassoc float"), std::string::npos) << ir;
  EXPECT_NE(ir.find("llvm.roundeven.f32"), std::string::npos) << ir;
  std::string optimized = emitLLVMIR(module, /*optimized=*/true);
  EXPECT_NE(optimized.find("@dynafuse_index_error("), std::string::npos)
      << optimized;
  std::string assembly = emitAssembly(module);
  EXPECT_NE(assembly.find("dynafuse_index_error"), std::string::npos)
      << assembly;
}

TEST(LLVMBackend, RegistersUnderItsName) {
  registerLLVMBackend();
  std::unique_ptr<Backend> backend = createBackend("llvm");
  EXPECT_EQ(backend->name(), "llvm");
}

} // namespace

//===- LLVMBackendTest.cpp - LLVM-compiled kernels against the interpreter ===//
//
// Each test parses one small kernel, runs it compiled by the LLVM backend and
// by the reference interpreter on the same random inputs, and compares every
// buffer element-wise (bit-exact for integers and bool, 1e-6 relative for
// f32, NaN where the interpreter has NaN).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"

#include "dynafuse/Loop/Interpreter.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Support/HalfFloat.h"

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

  double nextFloat() {
    if (std::uniform_real_distribution<double>(0, 1)(rng) < nanRate)
      return std::numeric_limits<double>::quiet_NaN();
    return std::uniform_real_distribution<double>(low, high)(rng);
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
                                      const std::vector<char> &actual) {
  DType type = param.type.dtype;
  size_t size = dtypeSize(type);
  double tolerance = type == DType::F64 ? 1e-12 : 1e-6;
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

/// Compiles the single kernel of `text` with LLVM, runs it and the
/// interpreter on identical random buffers and compares all buffers.
void checkAgainstInterpreter(const std::string &text,
                             const std::vector<int64_t> &symbolValues = {},
                             Data data = Data()) {
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
  interpretKernel(kernel, expectedPointers.data(), symbolValues.data());
  compiled[0]->run(actualPointers.data(), symbolValues.data());
  for (size_t i = 0; i < kernel.params.size(); ++i)
    EXPECT_TRUE(sameBuffer(kernel.params[i], expected[i], actual[i]))
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
    checkAgainstInterpreter(unaryKernel(op, "f32"));
  }
}

TEST(LLVMBackend, F32BinaryMath) {
  for (const char *op : {"add", "sub", "mul", "div", "pow"}) {
    SCOPED_TRACE(op);
    Data positive;
    positive.low = 0.01;
    checkAgainstInterpreter(binaryKernel(op, "f32", "f32"));
    checkAgainstInterpreter(binaryKernel(op, "f32", "f32"), {}, positive);
  }
}

TEST(LLVMBackend, MaxMinPropagateNaN) {
  Data withNaN;
  withNaN.nanRate = 0.3;
  for (const char *type : {"f32", "f64"})
    for (const char *op : {"max", "min"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstInterpreter(binaryKernel(op, type, type), {}, withNaN);
    }
}

TEST(LLVMBackend, F64Math) {
  for (const char *op : {"exp", "log", "tanh", "erf", "sigmoid", "sqrt",
                         "rsqrt", "neg", "abs"}) {
    SCOPED_TRACE(op);
    checkAgainstInterpreter(unaryKernel(op, "f64"));
  }
  for (const char *op : {"add", "sub", "mul", "div", "pow"}) {
    SCOPED_TRACE(op);
    checkAgainstInterpreter(binaryKernel(op, "f64", "f64"));
  }
}

TEST(LLVMBackend, IntegerArithmetic) {
  Data small;
  small.intRange = 3; // Zero divisors and small powers.
  for (const char *type : {"i32", "i64"}) {
    for (const char *op : {"add", "sub", "mul", "div", "max", "min", "pow"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstInterpreter(binaryKernel(op, type, type));
      checkAgainstInterpreter(binaryKernel(op, type, type), {}, small);
    }
    for (const char *op : {"neg", "abs"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstInterpreter(unaryKernel(op, type));
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
      interpretKernel(module.kernels[0], buffers, nullptr);
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
      checkAgainstInterpreter(text.str());
      checkAgainstInterpreter(text.str(), {}, wide);
    }
}

TEST(LLVMBackend, CompareAndSelect) {
  Data withNaN;
  withNaN.nanRate = 0.2;
  withNaN.intRange = 2; // Many equal pairs.
  for (const char *type : {"f32", "f64", "i32", "i64", "bool"})
    for (const char *op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      SCOPED_TRACE(std::string(op) + " " + type);
      checkAgainstInterpreter(binaryKernel(op, type, "bool"), {}, withNaN);
    }
  for (const char *op :
       {"and", "or", "add", "sub", "mul", "div", "max", "min", "pow"}) {
    SCOPED_TRACE(std::string(op) + " bool");
    checkAgainstInterpreter(binaryKernel(op, "bool", "bool"));
  }
  checkAgainstInterpreter(unaryKernel("not", "bool"));
  checkAgainstInterpreter(R"(
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
  checkAgainstInterpreter(R"(
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
    checkAgainstInterpreter(text.str(), {}, withNaN);
  }
}

TEST(LLVMBackend, TransposedInputAndBroadcast) {
  // out[i, j] = xT[i, j] + b[j] where xT is a column-major view and b is
  // broadcast along i with stride 0.
  checkAgainstInterpreter(R"(
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
  checkAgainstInterpreter(R"(
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
  checkAgainstInterpreter(text, {3, 17});
  checkAgainstInterpreter(text, {1, 1});
  checkAgainstInterpreter(text, {0, 5}); // Empty loops.
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
  checkAgainstInterpreter(R"(
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
  checkAgainstInterpreter(R"(
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
  LoopModule module = parseLoopModule(unaryKernel("exp", "f32"));
  std::string ir = emitLLVMIR(module, /*optimized=*/false);
  EXPECT_NE(ir.find("define void @k0(ptr"), std::string::npos) << ir;
  EXPECT_NE(ir.find("@expf("), std::string::npos) << ir;
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

TEST(LLVMBackend, RegistersUnderItsName) {
  registerLLVMBackend();
  std::unique_ptr<Backend> backend = createBackend("llvm");
  EXPECT_EQ(backend->name(), "llvm");
}

} // namespace

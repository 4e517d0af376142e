//===- LLVMScalarOpsTest.cpp - Scalar instructions compiled by LLVM -------===//
//
// LLVM-compiled kernels against the reference interpreter (the harness and
// what it compares are in LLVMTestHarness.h).
//
//===----------------------------------------------------------------------===//
#include "LLVMTestHarness.h"

#include <cmath>
#include <limits>

using namespace dynafuse;
using namespace dynafuse::llvmtest;

namespace {

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

TEST(LLVMBackend, RoundToHalfPrecisionInRegisters) {
  // round_f16 / round_bf16 keep an f32 but round it to the nearest f16 /
  // bf16 (ties to even, NaN stays NaN), as a store and load would.
  for (const char *op : {"round_f16", "round_bf16"}) {
    SCOPED_TRACE(op);
    checkAgainstLoopInterpreter(unaryKernel(op, "f32"));
  }
  LoopModule module = parseLoopModule(unaryKernel("round_bf16", "f32"));
  float x[64] = {823543.0f, 1.0f, 257.0f, 259.0f, -0.0f, 1e-40f};
  x[6] = std::numeric_limits<float>::quiet_NaN();
  x[7] = std::numeric_limits<float>::infinity();
  float out[64];
  char *buffers[] = {reinterpret_cast<char *>(x),
                     reinterpret_cast<char *>(out)};
  createLLVMBackend()->compile(module, CompileOptions())[0]->run(buffers,
                                                                 nullptr);
  EXPECT_EQ(out[0], 823296.0f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], 256.0f); // 257 ties to even
  EXPECT_EQ(out[3], 260.0f);
  EXPECT_TRUE(out[4] == 0.0f && std::signbit(out[4]));
  EXPECT_TRUE(std::isnan(out[6]));
  EXPECT_EQ(out[7], x[7]);
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

} // namespace

namespace {

TEST(LLVMBackend, CounterRandomMatchesTheInterpreter) {
  // Any i64 keys and counters (negative ones too): bit-identical numbers.
  for (const char *type : {"f32", "f64"}) {
    SCOPED_TRACE(type);
    checkAgainstLoopInterpreter(binaryKernel("random", "i64", type));
  }
}

} // namespace

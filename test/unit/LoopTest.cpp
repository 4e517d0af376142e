//===- LoopTest.cpp - Loop IR, lowering, interpreter, executor ------------===//
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Loop/LoopInterpreter.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Lowering/LowerGraph.h"
#include "dynafuse/Runtime/Executor.h"
#include "dynafuse/Support/HalfFloat.h"

#include "dynafuse/Loop/ScalarSemantics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace dynafuse;

namespace {
const char *chainGraph = R"(graph @chain(%x: f32[s0, 5]{1, s0}, %w: f32[5]) {
  %0 = mul %x, %w : f32[s0, 5]
  %1 = sigmoid %0 : f32[s0, 5]
  %2 = gt %1, 0.5 : bool[s0, 5]
  return %1, %2
})";
} // namespace

TEST(Lowering, ChainIsOneKernelWithSymbolicSizes) {
  LoopModule module = lowerGraph(*parseGraph(chainGraph));
  verifyLoopModule(module);
  ASSERT_EQ(module.kernels.size(), 1u);
  EXPECT_EQ(module.kernels[0].symbols, std::vector<std::string>{"s0"});
  EXPECT_EQ(module.outputs.size(), 2u);
  std::string text = printLoopModule(module);
  EXPECT_EQ(printLoopModule(parseLoopModule(text)), text);
}

TEST(Executor, InterpreterMatchesHandComputation) {
  registerBuiltinBackends();
  LoopModule module = lowerGraph(*parseGraph(chainGraph));
  std::unique_ptr<Backend> backend = createBackend("interp");
  CompiledModule compiled(module, *backend, CompileOptions{});
  const int64_t rows = 3, cols = 5;
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  std::vector<float> x(rows * cols), w(cols);
  for (float &v : x)
    v = dist(rng);
  for (float &v : w)
    v = dist(rng);
  // x is column-major: strides {1, rows}.
  std::vector<TensorArg> inputs = {
      {reinterpret_cast<char *>(x.data()), {rows, cols}, {1, rows}},
      {reinterpret_cast<char *>(w.data()), {cols}, {1}}};
  HostContext context;
  std::vector<TensorArg> results = compiled.run(inputs, context);
  ASSERT_EQ(results.size(), 2u);
  // Results follow the input's column-major layout, as eager's do.
  const TensorArg &outArg = results[0];
  const TensorArg &flagArg = results[1];
  ASSERT_EQ(outArg.strides, (std::vector<int64_t>{1, rows}));
  auto *out = reinterpret_cast<float *>(outArg.data);
  auto *flags = reinterpret_cast<uint8_t *>(flagArg.data);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      float expected = 1.0f / (1.0f + std::exp(-(x[j * rows + i] * w[j])));
      EXPECT_NEAR(out[i * outArg.strides[0] + j * outArg.strides[1]],
                  expected, 1e-6);
      EXPECT_EQ(flags[i * flagArg.strides[0] + j * flagArg.strides[1]],
                expected > 0.5f);
    }
  }
}

TEST(Executor, MismatchedInputsAreReported) {
  registerBuiltinBackends();
  LoopModule module = lowerGraph(*parseGraph(chainGraph));
  std::unique_ptr<Backend> backend = createBackend("interp");
  CompiledModule compiled(module, *backend, CompileOptions{});
  std::vector<float> x(6), w(4);
  std::vector<TensorArg> inputs = {
      {reinterpret_cast<char *>(x.data()), {2, 3}, {1, 2}},
      {reinterpret_cast<char *>(w.data()), {4}, {1}}};
  HostContext context;
  EXPECT_THROW(compiled.run(inputs, context), Error);
  EXPECT_THROW(createBackend("no-such-backend"), Error);
}

TEST(HalfFloat, RoundTripsAndRoundsToNearestEven) {
  for (float value : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f,
                      5.9604645e-08f, 3.14159f}) {
    float half = dynafuse_f16_to_f32(dynafuse_f32_to_f16(value));
    EXPECT_NEAR(half, value, std::fabs(value) * 1e-3 + 1e-7) << value;
  }
  EXPECT_TRUE(std::isinf(dynafuse_f16_to_f32(dynafuse_f32_to_f16(70000.0f))));
  EXPECT_TRUE(std::isnan(dynafuse_f16_to_f32(dynafuse_f32_to_f16(NAN))));
  // 1 + 2^-11 is halfway between two halves: ties to even (1.0).
  EXPECT_EQ(dynafuse_f16_to_f32(dynafuse_f32_to_f16(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(dynafuse_bf16_to_f32(dynafuse_f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_TRUE(std::isnan(dynafuse_bf16_to_f32(dynafuse_f32_to_bf16(NAN))));
}

TEST(CounterRandom, UniformAndIndependentOfNeighbours) {
  // 2^16 consecutive counters of one key: every decile holds 10% (within
  // 4 sigma), and neighbours are uncorrelated.
  const int n = 1 << 16;
  std::vector<int> deciles(10, 0);
  double sum = 0, product = 0, previous = counterRandom(12345, -1);
  for (int i = 0; i < n; ++i) {
    double u = counterRandom(12345, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++deciles[size_t(u * 10)];
    sum += u;
    product += (u - 0.5) * (previous - 0.5);
    previous = u;
  }
  double sigma = std::sqrt(n * 0.1 * 0.9);
  for (int count : deciles)
    EXPECT_NEAR(count, n / 10.0, 4 * sigma);
  EXPECT_NEAR(sum / n, 0.5, 4 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(product / n, 0.0, 4 * (1.0 / 12) / std::sqrt(double(n)));
  // Another key: another sequence.
  EXPECT_NE(counterRandom(12345, 7), counterRandom(12346, 7));
}

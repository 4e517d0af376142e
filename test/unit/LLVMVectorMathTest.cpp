//===- LLVMVectorMathTest.cpp - Inline f32 math and vectorized loops ------===//
//
// The f32 transcendentals of the LLVM backend are inline polynomials
// (lib/Codegen/LLVM/VectorMath.cpp). Each is run compiled over special
// values (NaN, +-inf, +-0, subnormals, overflow and underflow edges), dense
// sweeps and random values, at sizes that leave vector tails (0, 1, 7, 33,
// 4099), and compared with the interpreter (libm): NaN exactly where it has
// NaN, infinities exactly, otherwise |a - b| <= 1e-6 + 2e-6 |a| (torch's
// own test tolerance for f32 is rtol 1.3e-6 / atol 1e-5). Reductions: max
// and min propagate NaN wherever it sits in a vectorized row; ranged runs
// of the outer loop match whole runs.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"

#include "dynafuse/Loop/LoopInterpreter.h"
#include "dynafuse/Loop/LoopText.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

using namespace dynafuse;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string unaryLoop(const std::string &op) {
  return "kernel @k0[s0](%x: f32[s0], %out: f32[s0]) {\n"
         "  for i0 in 0..s0 {\n"
         "    %0 = load %x[i0] : f32\n"
         "    %1 = " +
         op +
         " %0 : f32\n"
         "    store %out[i0], %1\n"
         "  }\n}\n";
}

std::string powLoop() {
  return "kernel @k0[s0](%x: f32[s0], %y: f32[s0], %out: f32[s0]) {\n"
         "  for i0 in 0..s0 {\n"
         "    %0 = load %x[i0] : f32\n"
         "    %1 = load %y[i0] : f32\n"
         "    %2 = pow %0, %1 : f32\n"
         "    store %out[i0], %2\n"
         "  }\n}\n";
}

std::vector<float> testValues(float low, float high, size_t count) {
  std::vector<float> values = {
      kNaN,   -kNaN,  kInf,    -kInf,   0.0f,
      -0.0f,  1e-45f, -1e-45f, 1e-40f,  1.17549435e-38f,
      1e-30f, 1e-8f,  -1e-8f,  1.0f,    -1.0f,
      0.5f,   -0.5f,  0.625f,  -0.625f, 88.72f,
      88.73f, -87.3f, -103.9f, -104.0f, -110.0f,
      4.0f,   -4.0f,  10.0f,   -10.0f,  1e10f,
      3.4e38f};
  for (size_t i = 0; i < count / 2; ++i)
    values.push_back(low + (high - low) * float(i) / float(count / 2));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(low, high);
  while (values.size() < count)
    values.push_back(uniform(rng));
  return values;
}

::testing::AssertionResult close(float want, float got, float x) {
  bool ok;
  if (std::isnan(want) || std::isnan(got))
    ok = std::isnan(want) && std::isnan(got);
  else if (std::isinf(want) || std::isinf(got))
    ok = want == got;
  else
    ok = std::fabs(double(want) - got) <= 1e-6 + 2e-6 * std::fabs(want);
  if (ok)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "at x = " << x << ": libm " << want << ", llvm " << got;
}

/// Runs `text` (inputs then %out) compiled and interpreted on `inputs`.
void compare(const std::string &text, std::vector<std::vector<float>> inputs) {
  LoopModule module = parseLoopModule(text);
  auto compiled = createLLVMBackend()->compile(module, CompileOptions());
  int64_t n = int64_t(inputs[0].size());
  std::vector<float> want(n + 1, -7.0f), got(n + 1, -7.0f);
  std::vector<char *> wantBuffers, gotBuffers;
  for (auto &input : inputs) {
    wantBuffers.push_back(reinterpret_cast<char *>(input.data()));
    gotBuffers.push_back(reinterpret_cast<char *>(input.data()));
  }
  wantBuffers.push_back(reinterpret_cast<char *>(want.data()));
  gotBuffers.push_back(reinterpret_cast<char *>(got.data()));
  int64_t symbols[] = {n};
  interpretLoopKernel(module.kernels[0], wantBuffers.data(), symbols);
  compiled[0]->run(gotBuffers.data(), symbols);
  int failures = 0;
  for (int64_t i = 0; i < n && failures < 5; ++i) {
    auto result = close(want[i], got[i], inputs[0][i]);
    if (!result) {
      ADD_FAILURE() << result.message()
                    << (inputs.size() > 1
                            ? ", y = " + std::to_string(inputs[1][i])
                            : "");
      ++failures;
    }
  }
  EXPECT_EQ(got[n], -7.0f) << "wrote past the end";
}

struct Range {
  const char *op;
  float low, high;
};

} // namespace

TEST(LLVMVectorMath, UnaryMatchesLibm) {
  for (Range range :
       {Range{"exp", -110, 90}, Range{"exp", -2, 2}, Range{"exp2", -160, 130},
        Range{"log", 0, 100}, Range{"log", 0, 2}, Range{"log", -1, 1e30f},
        Range{"tanh", -12, 12}, Range{"tanh", -1, 1}, Range{"erf", -6, 6},
        Range{"erf", -0.1f, 0.1f}, Range{"sigmoid", -100, 100},
        Range{"expm1", -3, 3}, Range{"expm1", -0.6f, 0.6f},
        Range{"log1p", -1, 3}, Range{"log1p", -1e-3f, 1e-3f},
        Range{"sin", -100, 100}, Range{"cos", -100, 100},
        Range{"sin", -1e6f, 1e6f}, Range{"cos", -4, 4}}) {
    SCOPED_TRACE(std::string(range.op) + " on [" + std::to_string(range.low) +
                 ", " + std::to_string(range.high) + "]");
    std::vector<float> values = testValues(range.low, range.high, 20000);
    bool periodic = std::string(range.op) == "sin" || range.op[0] == 'c';
    if (periodic) // Accurate for |x| < 1e9 only (no Payne-Hanek reduction).
      for (float &value : values)
        if (std::fabs(value) > 1e9f && std::isfinite(value))
          value = 1e9f;
    compare(unaryLoop(range.op), {values});
  }
}

TEST(LLVMVectorMath, PowMatchesLibmIncludingSpecialCases) {
  std::vector<float> specials = {0.0f, -0.0f, 1.0f,  -1.0f, 2.0f, -2.0f,
                                 0.5f, -0.5f, 3.0f,  -3.0f, kInf, -kInf,
                                 kNaN, 1e-3f, 1e30f, 0.25f, 7.0f, -7.5f};
  std::vector<float> x, y;
  for (float a : specials)
    for (float b : specials) {
      x.push_back(a);
      y.push_back(b);
    }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> base(-10, 10), exponent(-20, 20);
  for (int i = 0; i < 5000; ++i) {
    x.push_back(base(rng));
    y.push_back(i % 2 ? std::round(exponent(rng)) : exponent(rng));
  }
  compare(powLoop(), {x, y});
}

TEST(LLVMVectorMath, TailsAndEmpty) {
  for (size_t n : {0, 1, 7, 15, 16, 17, 33, 4099}) {
    SCOPED_TRACE(n);
    std::vector<float> values = testValues(-5, 5, 31 + n);
    values.resize(n);
    for (const char *op : {"exp", "tanh", "erf", "log"})
      compare(unaryLoop(op), {values});
  }
}

TEST(LLVMVectorMath, MaxMinReductionsPropagateNaNAnywhere) {
  for (const char *kind : {"max", "min"}) {
    std::ostringstream text;
    text << "kernel @k0[s0, s1](%x: f32[s0, s1], %out: f32[s0]) {\n"
         << "  for i0 in 0..s0 {\n"
         << "    %0 = reduce " << kind << " (r0 in 0..s1) {\n"
         << "      %1 = load %x[i0, r0] : f32\n"
         << "      yield %1\n"
         << "    } : f32\n"
         << "    store %out[i0], %0\n"
         << "  }\n}\n";
    LoopModule module = parseLoopModule(text.str());
    auto compiled = createLLVMBackend()->compile(module, CompileOptions());
    const int64_t rows = 40, columns = 67;
    std::vector<float> x(rows * columns);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uniform(-50, 50);
    for (float &value : x)
      value = uniform(rng);
    // Row r has a NaN at column r (rows past the width have none); row 39
    // has infinities only.
    for (int64_t r = 0; r < columns && r < rows - 1; ++r)
      x[r * columns + r] = kNaN;
    for (int64_t c = 0; c < columns; ++c)
      x[39 * columns + c] = c % 2 ? kInf : -kInf;
    std::vector<float> want(rows), got(rows);
    char *wantBuffers[] = {reinterpret_cast<char *>(x.data()),
                           reinterpret_cast<char *>(want.data())};
    char *gotBuffers[] = {reinterpret_cast<char *>(x.data()),
                          reinterpret_cast<char *>(got.data())};
    int64_t symbols[] = {rows, columns};
    interpretLoopKernel(module.kernels[0], wantBuffers, symbols);
    compiled[0]->run(gotBuffers, symbols);
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_TRUE(close(want[r], got[r], float(r))) << kind << " row " << r;
    EXPECT_TRUE(std::isnan(got[5]));
    EXPECT_EQ(got[39], std::string(kind) == "max" ? kInf : -kInf);
  }
}

TEST(LLVMVectorMath, RangesOfTheOuterLoopCoverTheWholeRun) {
  LoopModule module = parseLoopModule(
      "kernel @k0[s0, s1](%x: f32[s0, s1], %out: f32[s0, s1]) {\n"
      "  for i0 in 0..s0 {\n"
      "    for i1 in 0..s1 {\n"
      "      %0 = load %x[i0, i1] : f32\n"
      "      %1 = exp %0 : f32\n"
      "      store %out[i0, i1], %1\n"
      "    }\n  }\n}\n");
  auto compiled = createLLVMBackend()->compile(module, CompileOptions());
  ASSERT_TRUE(compiled[0]->supportsRange());
  std::vector<float> x = testValues(-3, 3, 13 * 29), whole(x.size()),
                     pieces(x.size(), -1.0f);
  char *wholeBuffers[] = {reinterpret_cast<char *>(x.data()),
                          reinterpret_cast<char *>(whole.data())};
  char *pieceBuffers[] = {reinterpret_cast<char *>(x.data()),
                          reinterpret_cast<char *>(pieces.data())};
  int64_t symbols[] = {13, 29};
  compiled[0]->run(wholeBuffers, symbols);
  for (int64_t begin : {0, 1, 5, 12})
    compiled[0]->runRange(pieceBuffers, symbols, begin,
                          begin == 0   ? 1
                          : begin == 1 ? 5
                          : begin == 5 ? 12
                                       : 13);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_TRUE(std::memcmp(&whole[i], &pieces[i], 4) == 0) << i;
}

TEST(LLVMVectorMath, ExpFlushesSubnormalResultsToZero) {
  // Subnormal results cost a microcode assist per lane on x86; exp returns
  // 0 below FLT_MIN instead (softmax exponentiates -inf for masked items).
  LoopModule module = parseLoopModule(unaryLoop("exp"));
  auto compiled = createLLVMBackend()->compile(module, CompileOptions());
  float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-inf,   -1e30f, -104.0f, -100.0f, -88.0f, -87.3f,
                          -50.0f, 0.0f,   1.0f,    -inf,    -90.0f, -87.0f,
                          2.0f,   -inf,   -95.0f,  -86.0f,  3.0f};
  std::vector<float> out(x.size(), -7.0f);
  char *buffers[] = {reinterpret_cast<char *>(x.data()),
                     reinterpret_cast<char *>(out.data())};
  int64_t symbols[] = {int64_t(x.size())};
  compiled[0]->run(buffers, symbols);
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < -87.34f) {
      EXPECT_EQ(out[i], 0.0f) << "exp(" << x[i] << ")";
      continue;
    }
    EXPECT_GE(out[i], std::numeric_limits<float>::min())
        << "exp(" << x[i] << ")";
    EXPECT_NEAR(out[i], std::exp(x[i]), 2e-6 * std::exp(x[i]));
  }
}

TEST(LLVMVectorMath, ErfWithinItsDocumentedBound) {
  // One branch-free formula (VectorMath.cpp): absolute error <= 8.6e-8 and
  // relative <= 3.1e-7 against double-precision erf, tiny inputs included.
  LoopModule module = parseLoopModule(unaryLoop("erf"));
  auto compiled = createLLVMBackend()->compile(module, CompileOptions());
  std::vector<float> x;
  for (int i = -600000; i <= 600000; ++i)
    x.push_back(float(i) * 1e-5f);
  for (float tiny = 1e-38f; tiny < 1.0f; tiny *= 1.37f) {
    x.push_back(tiny);
    x.push_back(-tiny);
  }
  std::vector<float> out(x.size(), -7.0f);
  char *buffers[] = {reinterpret_cast<char *>(x.data()),
                     reinterpret_cast<char *>(out.data())};
  int64_t symbols[] = {int64_t(x.size())};
  compiled[0]->run(buffers, symbols);
  double worstAbsolute = 0, worstRelative = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double want = std::erf(double(x[i])), error = std::fabs(out[i] - want);
    worstAbsolute = std::max(worstAbsolute, error);
    if (want != 0)
      worstRelative = std::max(worstRelative, error / std::fabs(want));
  }
  EXPECT_LE(worstAbsolute, 1e-7);
  EXPECT_LE(worstRelative, 3.5e-7);
}

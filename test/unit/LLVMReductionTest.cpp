//===- LLVMReductionTest.cpp - Reductions compiled by LLVM ----------------===//
//
// LLVM-compiled kernels against the reference interpreter (the harness and
// what it compares are in LLVMTestHarness.h).
//
//===----------------------------------------------------------------------===//
#include "LLVMTestHarness.h"

#include <limits>

using namespace dynafuse;
using namespace dynafuse::llvmtest;

namespace {

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

} // namespace

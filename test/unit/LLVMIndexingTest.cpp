//===- LLVMIndexingTest.cpp - Layouts, masks and indirect indices ---------===//
//
// LLVM-compiled kernels against the reference interpreter (the harness and
// what it compares are in LLVMTestHarness.h).
//
//===----------------------------------------------------------------------===//
#include "LLVMTestHarness.h"

using namespace dynafuse;
using namespace dynafuse::llvmtest;

namespace {

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

} // namespace

//===- LLVMBackendTest.cpp - Modules, concurrency, dumps, registration ----===//
//
// LLVM-compiled kernels against the reference interpreter (the harness and
// what it compares are in LLVMTestHarness.h).
//
//===----------------------------------------------------------------------===//
#include "LLVMTestHarness.h"

#include <filesystem>
#include <thread>
#include <unistd.h>

using namespace dynafuse;
using namespace dynafuse::llvmtest;

namespace {

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
  EXPECT_NE(ir.find("fadd reassoc double"), std::string::npos) << ir;
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

//===- MLIRBackendTest.cpp - The MLIR export and backend ------------------===//
//
// Kernels compiled by MLIR's pipeline against hand-computed results and the
// reference interpreter; the export's errors; registration and dumps.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/MLIR/MLIRBackend.h"
#include "dynafuse/Loop/LoopInterpreter.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/IndexErrors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>
#include <unistd.h>

using namespace dynafuse;

namespace {

TEST(MLIRBackend, HandComputedExpectationWithSymbolicSize) {
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
  auto compiled = createMLIRBackend()->compile(module, CompileOptions());
  ASSERT_EQ(compiled.size(), 1u);
  compiled[0]->run(buffers, symbols);
  for (int i = 0; i < 3; ++i)
    EXPECT_FLOAT_EQ(out[i], std::exp(2.0f * x[i])) << i;
}

// Symbolic strides come from the call's symbols through the memref
// descriptor: a transposed read of a 3x4 buffer.
TEST(MLIRBackend, SymbolicStridesMatchTheInterpreter) {
  LoopModule module = parseLoopModule(R"(
kernel @t[s0, s1](%x: f32[s1, s0]{1, s1}, %out: f32[s1, s0]) {
  for i0 in 0..s1 {
    for i1 in 0..s0 {
      %0 = load %x[i0, i1] : f32
      store %out[i0, i1], %0
    }
  }
}
)");
  std::vector<float> x(12);
  for (int i = 0; i < 12; ++i)
    x[i] = float(i);
  std::vector<float> viaMLIR(12, -1), viaInterpreter(12, -2);
  int64_t symbols[] = {3, 4};
  char *mlirBuffers[] = {reinterpret_cast<char *>(x.data()),
                         reinterpret_cast<char *>(viaMLIR.data())};
  char *interpBuffers[] = {reinterpret_cast<char *>(x.data()),
                           reinterpret_cast<char *>(viaInterpreter.data())};
  createMLIRBackend()->compile(module, CompileOptions())[0]->run(mlirBuffers,
                                                                 symbols);
  interpretLoopKernel(module.kernels[0], interpBuffers, symbols);
  EXPECT_EQ(viaMLIR, viaInterpreter);
  EXPECT_EQ(viaMLIR[1], 4.0f); // out[0, 1] = x[0 * 1 + 1 * s1]
}

TEST(MLIRBackend, OutOfBoundsGatherReportsAndReadsZero) {
  LoopModule module = parseLoopModule(R"(
kernel @gather(%ids: i64[3], %table: f32[4], %out: f32[3]) {
  for i0 in 0..3 {
    %0 = load %ids[i0] : i64
    %1 = load %table[%0] : f32
    store %out[i0], %1
  }
}
)");
  int64_t ids[] = {2, 7, -1};
  float table[] = {10, 11, 12, 13}, out[] = {-1, -1, -1};
  char *buffers[] = {reinterpret_cast<char *>(ids),
                     reinterpret_cast<char *>(table),
                     reinterpret_cast<char *>(out)};
  std::string ignored, message;
  takeIndexError(ignored);
  createMLIRBackend()->compile(module, CompileOptions())[0]->run(buffers,
                                                                 nullptr);
  ASSERT_TRUE(takeIndexError(message));
  EXPECT_NE(message.find("7"), std::string::npos) << message;
  EXPECT_EQ(out[0], 12.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
}

TEST(MLIRBackend, ExportNamesTheKernelOfABadIndirectIndex) {
  // %0 is a float: it cannot index. The parser's verifier lets the kernel
  // through only when built by hand, so build it by hand.
  LoopModule module;
  Kernel kernel;
  kernel.name = "bad";
  TensorType vector;
  vector.dtype = DType::F32;
  vector.sizes = {SymExpr(4)};
  kernel.params = {{"x", vector}};
  Instr load;
  load.op = ScalarOp::Load;
  load.type = DType::F32;
  load.name = "0";
  load.buffer = 0;
  load.index = {SymExpr(0)};
  kernel.addInstr(load);
  Instr again = load;
  again.name = "1";
  again.index = {SymExpr::symbol("%0")};
  kernel.addInstr(again);
  kernel.body = {Stmt::instruction(0), Stmt::instruction(1)};
  module.kernels.push_back(kernel);
  try {
    exportMLIR(module);
    FAIL() << "a float index was exported";
  } catch (const Error &error) {
    std::string message = error.what();
    EXPECT_NE(message.find("kernel @bad"), std::string::npos) << message;
    EXPECT_NE(message.find("'%0'"), std::string::npos) << message;
  }
}

// A splittable kernel has a range variant: ranges of its outer loop, run in
// any order, give what one whole run gives.
TEST(MLIRBackend, RangesOfTheOuterLoopCoverTheWholeRun) {
  LoopModule module = parseLoopModule(R"(
kernel @rows[s0](%x: f32[s0, 5], %out: f32[s0]) {
  for i0 in 0..s0 {
    %0 = reduce sum (r0 in 0..5) {
      %1 = load %x[i0, r0] : f32
      yield %1
    } : f32
    store %out[i0], %0
  }
}
)");
  std::vector<float> x(7 * 5), whole(7, -1), ranged(7, -2);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i % 11) - 3;
  int64_t symbols[] = {7};
  auto compiled = createMLIRBackend()->compile(module, CompileOptions());
  ASSERT_TRUE(compiled[0]->supportsRange());
  char *wholeBuffers[] = {reinterpret_cast<char *>(x.data()),
                          reinterpret_cast<char *>(whole.data())};
  char *rangedBuffers[] = {reinterpret_cast<char *>(x.data()),
                           reinterpret_cast<char *>(ranged.data())};
  compiled[0]->run(wholeBuffers, symbols);
  compiled[0]->runRange(rangedBuffers, symbols, 4, 7);
  EXPECT_EQ(ranged[3], -2.0f); // not yet written
  compiled[0]->runRange(rangedBuffers, symbols, 0, 4);
  EXPECT_EQ(whole, ranged);
  EXPECT_EQ(whole[1], x[5] + x[6] + x[7] + x[8] + x[9]);
}

TEST(MLIRBackend, ConcurrentCompilesAndRuns) {
  std::vector<std::thread> threads;
  std::vector<int> failures(3, 0);
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([t, &failures] {
      std::string factor = std::to_string(t + 2) + ".0";
      LoopModule module = parseLoopModule(
          "kernel @k0(%x: f32[8]) {\n  %c = const " + factor +
          " : f32\n  for i0 in 0..8 {\n    %0 = load %x[i0] : f32\n"
          "    %1 = mul %0, %c : f32\n    store %x[i0], %1\n  }\n}\n");
      auto compiled = createMLIRBackend()->compile(module, CompileOptions());
      float x[8] = {1, 1, 1, 1, 1, 1, 1, 1};
      char *buffers[] = {reinterpret_cast<char *>(x)};
      compiled[0]->run(buffers, nullptr);
      failures[t] += x[7] != float(t + 2);
    });
  for (std::thread &thread : threads)
    thread.join();
  for (int t = 0; t < 3; ++t)
    EXPECT_EQ(failures[t], 0) << t;
}

TEST(MLIRBackend, RegistersAndDumpsBothStages) {
  registerMLIRBackend();
  std::unique_ptr<Backend> backend = createBackend("mlir");
  EXPECT_EQ(backend->name(), "mlir");
  LoopModule module = parseLoopModule(
      "kernel @k0(%x: f32[4]) {\n  for i0 in 0..4 {\n"
      "    %0 = load %x[i0] : f32\n    %1 = tanh %0 : f32\n"
      "    store %x[i0], %1\n  }\n}\n");
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("dynafuse-mlir-dump-" + std::to_string(getpid()));
  CompileOptions options;
  options.dumpDir = dir.string();
  options.dumpName = "kernels";
  backend->compile(module, options);
  EXPECT_TRUE(std::filesystem::exists(dir / "kernels.mlir"));
  EXPECT_TRUE(std::filesystem::exists(dir / "kernels.llvm.mlir"));
  std::filesystem::remove_all(dir);
}

} // namespace

//===- LLVMGuardPagesTest.cpp - Guard pages catch JIT overreads -----------===//
//
// The purpose of the allocator's guard-page mode: a compiled kernel that
// reads one element past the end of an exactly sized buffer faults at once,
// which ASan cannot arrange for JIT code.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Runtime/CachingAllocator.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>

using namespace dynafuse;

namespace {

/// out[i] = x[i] + x[i + SHIFT] over 1000 elements of a 1001-element x.
std::string shiftedSumKernel(int shift) {
  return "kernel @k0(%x: f32[1001], %out: f32[1000]) {\n"
         "  for i0 in 0..1000 {\n"
         "    %0 = load %x[i0] : f32\n"
         "    %1 = load %x[i0 + " +
         std::to_string(shift) +
         "] : f32\n"
         "    %2 = add %0, %1 : f32\n"
         "    store %out[i0], %2\n"
         "  }\n}\n";
}

void runShiftedSum(int shift) {
  CachingAllocator::Options options;
  options.guardPages = true;
  CachingAllocator allocator(options);
  auto *x = static_cast<float *>(allocator.allocate(1001 * sizeof(float)));
  auto *out = static_cast<float *>(allocator.allocate(1000 * sizeof(float)));
  for (int i = 0; i < 1001; ++i)
    x[i] = float(i);
  LoopModule module = parseLoopModule(shiftedSumKernel(shift), "shifted");
  std::unique_ptr<Backend> backend = createLLVMBackend();
  auto kernels = backend->compile(module, CompileOptions());
  char *buffers[] = {reinterpret_cast<char *>(x),
                     reinterpret_cast<char *>(out)};
  kernels[0]->run(buffers, nullptr);
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(out[i], float(2 * i + shift));
  allocator.release(x);
  allocator.release(out);
}

} // namespace

TEST(LLVMGuardPages, InBoundsKernelRuns) { runShiftedSum(1); }

TEST(LLVMGuardPagesDeathTest, KernelReadingPastTheEndFaults) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(runShiftedSum(2), ::testing::KilledBySignal(SIGSEGV), "");
}

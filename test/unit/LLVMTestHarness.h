//===- LLVMTestHarness.h - LLVM-compiled kernels against the interpreter -===//
//
// Shared by the LLVM backend tests (LLVMBackendTest.cpp and the
// LLVM*Test.cpp files beside it): each test parses one small kernel, runs it
// compiled by the LLVM backend and by the reference interpreter on the same
// random inputs, and compares every buffer element-wise (bit-exact for
// integers and bool, 1e-6 relative for f32 unless a test allows more, NaN
// where the interpreter has NaN) and the index errors both report.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_TEST_UNIT_LLVMTESTHARNESS_H
#define DYNAFUSE_TEST_UNIT_LLVMTESTHARNESS_H

#include "dynafuse/Codegen/LLVM/LLVMBackend.h"

#include "dynafuse/Loop/LoopInterpreter.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Support/HalfFloat.h"
#include "dynafuse/Support/IndexErrors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

namespace dynafuse {
namespace llvmtest {

/// Bytes of a parameter's storage: one past its largest reachable element.
inline size_t storageBytes(const LoopBuffer &param,
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

inline double readFloat(DType type, const char *at) {
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

inline ::testing::AssertionResult sameBuffer(const LoopBuffer &param,
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
inline std::string takeReportedIndexError() {
  std::string message;
  takeIndexError(message);
  return message;
}

/// Compiles the single kernel of `text` with LLVM, runs it and the
/// interpreter on identical random buffers and compares all buffers and the
/// index errors reported. Float sums may be reassociated by LLVM: reductions
/// pass a looser f32 tolerance.
inline void checkAgainstLoopInterpreter(const std::string &text,
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
inline std::string unaryKernel(const std::string &op, const std::string &type) {
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
inline std::string binaryKernel(const std::string &op, const std::string &type,
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

} // namespace llvmtest
} // namespace dynafuse

#endif

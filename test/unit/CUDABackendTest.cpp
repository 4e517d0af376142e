//===- CUDABackendTest.cpp - CUDA C emission, NVRTC and the cuda backend --===//
//
// Without NVRTC the compile tests skip; without a driver and device the
// run tests check the Error and skip the comparison. On a GPU machine
// every run test compares the cuda backend with the interpreter on random
// buffers (benchmarks/gpu/check.sh runs them).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Codegen/CUDA/CUDABackend.h"

#include "dynafuse/Loop/LoopInterpreter.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Loop/ScalarSemantics.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/HalfFloat.h"
#include "dynafuse/Support/Options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>

using namespace dynafuse;

namespace {

/// The test's boundary, as a tool's main(): the disk cache (cubins prepared
/// for a GPU machine without NVRTC, benchmarks/gpu/check.sh) and the NVRTC
/// path come from the environment.
const CodegenOptions &environmentCodegen() {
  static const CodegenOptions codegen =
      readOptions([](const char *name) { return std::getenv(name); }).codegen;
  return codegen;
}

CompileOptions environmentCompileOptions() {
  CompileOptions options;
  options.codegen = environmentCodegen();
  return options;
}

const char *softmaxText = R"(
kernel @softmax[s0](%x: f32[s0, 300], %out: f32[s0, 300]) {
  for i0 in 0..s0 {
    %0 = reduce max (r0 in 0..300) {
      %1 = load %x[i0, r0] : f32
      yield %1
    } : f32
    %2 = reduce sum (r0 in 0..300) {
      %3 = load %x[i0, r0] : f32
      %4 = sub %3, %0 : f32
      %5 = exp %4 : f32
      yield %5
    } : f32
    for i1 in 0..300 {
      %6 = load %x[i0, i1] : f32
      %7 = sub %6, %0 : f32
      %8 = exp %7 : f32
      %9 = div %8, %2 : f32
      store %out[i0, i1], %9
    }
  }
}
)";

const char *argmaxText = R"(
kernel @argmax(%x: f32[5, 700], %v: f32[5], %pos: i64[5]) {
  for i0 in 0..5 {
    %0, %1 = reduce argmax (r0 in 0..700) {
      %2 = load %x[i0, r0] : f32
      %3 = index r0 : i64
      yield %2, %3
    } : f32, i64
    store %v[i0], %0
    store %pos[i0], %1
  }
}
)";

const char *pointwiseText = R"(
kernel @pw[s0](%x: f16[s0, 33], %y: i32[33], %out: bf16[s0, 33], %r: i32[s0, 33]) {
  for i0 in 0..s0 {
    for i1 in 0..33 {
      %0 = load %x[i0, i1] : f32
      %1 = load %y[i1] : i32
      %2 = cast %1 : f32
      %3 = max %0, %2 : f32
      %4 = tanh %3 : f32
      store %out[i0, i1], %4
      %5 = const 7 : i32
      %6 = remainder %1, %5 : i32
      %7 = div %1, %6 : i32
      store %r[i0, i1], %7
    }
  }
}
)";

/// Reductions nested inside a row's inner loop: the serial fallback.
const char *nestedText = R"(
kernel @nested(%x: f32[4, 6, 9], %out: f32[4, 6]) {
  for i0 in 0..4 {
    for i1 in 0..6 {
      %0 = reduce sum (r0 in 0..9) {
        %1 = load %x[i0, i1, r0] : f32
        yield %1
      } : f32
      store %out[i0, i1], %0
    }
  }
}
)";

const char *allText = R"(
kernel @all(%x: i32[1000], %any: bool[], %prod: i64[]) {
  %0 = reduce all (r0 in 0..1000) {
    %1 = load %x[r0] : i32
    %2 = const 0 : i32
    %3 = ne %1, %2 : bool
    yield %3
  } : bool
  store %any[], %0
  %4 = reduce prod (r0 in 0..1000) {
    %5 = load %x[r0] : i32
    %6 = cast %5 : i64
    yield %6
  } : i64
  store %prod[], %4
}
)";

const char *gatherText = R"(
kernel @gather(%table: f32[10, 4], %ids: i32[3], %out: f32[3, 4]) {
  for i0 in 0..3 {
    %0 = load %ids[i0] : i32
    for i1 in 0..4 {
      %1 = load %table[%0, i1] : f32
      store %out[i0, i1], %1
    }
  }
}
)";

CUDAKernelInfo infoOf(const char *text) {
  LoopModule module = parseLoopModule(text, "test.loop");
  std::vector<CUDAKernelInfo> infos;
  emitCUDA(module, &infos);
  return infos.at(0);
}

TEST(CUDAEmitter, KernelShapes) {
  CUDAKernelInfo softmax = infoOf(softmaxText);
  EXPECT_EQ(softmax.shape, CUDAKernelShape::BlockReduce);
  EXPECT_EQ(softmax.work.str(), "s0");
  CUDAKernelInfo pointwise = infoOf(pointwiseText);
  EXPECT_EQ(pointwise.shape, CUDAKernelShape::Pointwise);
  EXPECT_EQ(pointwise.work.str(), SymExpr(SymExpr::symbol("s0") * 33).str());
  EXPECT_EQ(infoOf(nestedText).shape, CUDAKernelShape::Serial);
  CUDAKernelInfo all = infoOf(allText);
  EXPECT_EQ(all.shape, CUDAKernelShape::BlockReduce);
  EXPECT_EQ(all.work.str(), "1");
}

TEST(CUDAEmitter, OneGlobalFunctionPerKernel) {
  std::string text = std::string(softmaxText) + argmaxText;
  std::string source = emitCUDA(parseLoopModule(text, "test.loop"));
  size_t count = 0;
  for (size_t at = source.find("__global__"); at != std::string::npos;
       at = source.find("__global__", at + 1))
    ++count;
  EXPECT_EQ(count, 2u);
}

class NVRTCTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!nvrtcAvailable(&why, environmentCodegen()))
      GTEST_SKIP() << why;
  }
};

TEST_F(NVRTCTest, CompilesKernelsToPTX) {
  for (const char *text : {softmaxText, argmaxText, pointwiseText, nestedText,
                           allText, gatherText}) {
    LoopModule module = parseLoopModule(text, "test.loop");
    std::string ptx =
        compileCUDAToPTX(emitCUDA(module), "compute_90", environmentCodegen());
    EXPECT_NE(ptx.find(".target sm_90"), std::string::npos);
    EXPECT_NE(ptx.find(".entry " + module.kernels[0].name + "("),
              std::string::npos)
        << module.kernels[0].name;
  }
}

TEST_F(NVRTCTest, BlockReductionsUseShuffles) {
  std::string ptx =
      compileCUDAToPTX(emitCUDA(parseLoopModule(softmaxText, "t.loop")),
                       "compute_90", environmentCodegen());
  EXPECT_NE(ptx.find("shfl.sync.down"), std::string::npos);
}

TEST_F(NVRTCTest, CompileErrorsCarryTheLog) {
  try {
    compileCUDAToPTX("__global__ void broken( { }", "compute_90",
                     environmentCodegen());
    FAIL() << "expected an Error";
  } catch (const Error &error) {
    EXPECT_NE(std::string(error.what()).find("NVRTC failed"), std::string::npos)
        << error.what();
  }
}

const char *deviceResidentText = R"(
kernel @gelu[s0](%x: f32[s0, 1000]@cuda:0, %w: f32[1000]@cuda:0, %out: f32[s0, 1000]@cuda:0) {
  for i0 in 0..s0 {
    for i1 in 0..1000 {
      %0 = load %x[i0, i1] : f32
      %1 = load %w[i1] : f32
      %2 = mul %0, %1 : f32
      %3 = erf %2 : f32
      store %out[i0, i1], %3
    }
  }
}
)";

/// sm_90 cubins of the kernels the device tests run: checks cubin output
/// and, with DYNAFUSE_CACHE_DIR set (environmentCodegen), prepares them for a
/// GPU machine without NVRTC (benchmarks/gpu/check.sh --prepare).
TEST_F(NVRTCTest, CubinsForTheDeviceTests) {
  for (const char *text : {softmaxText, argmaxText, pointwiseText, nestedText,
                           allText, deviceResidentText}) {
    std::string cubin =
        compileCUDAToCubin(emitCUDA(parseLoopModule(text, "test.loop")),
                           "sm_90", environmentCodegen());
    ASSERT_GT(cubin.size(), 4u);
    EXPECT_EQ(cubin.substr(0, 4), "\x7f"
                                  "ELF");
  }
}

// --- Running: the cuda backend against the interpreter -----------------------

size_t spanBytes(const LoopBuffer &param,
                 const std::map<std::string, int64_t> &bindings) {
  std::vector<SymExpr> strides = param.type.effectiveStrides();
  int64_t span = 1;
  for (size_t k = 0; k < param.type.rank(); ++k) {
    int64_t size = param.type.sizes[k].evaluate(bindings);
    if (size == 0)
      return 0;
    span += (size - 1) * strides[k].evaluate(bindings);
  }
  return size_t(span) * dtypeSize(param.type.dtype);
}

void fillRandom(DType type, std::vector<char> &bytes, std::mt19937 &rng) {
  size_t size = dtypeSize(type);
  std::uniform_real_distribution<float> real(-3, 3);
  std::uniform_int_distribution<int> integer(-9, 9);
  for (size_t at = 0; at + size <= bytes.size(); at += size) {
    float f = real(rng);
    int64_t i = integer(rng);
    uint16_t half =
        type == DType::F16 ? dynafuse_f32_to_f16(f) : dynafuse_f32_to_bf16(f);
    uint8_t flag = i & 1;
    int32_t narrow = int32_t(i);
    double wide = f;
    switch (type) {
    case DType::Bool:
      std::memcpy(&bytes[at], &flag, 1);
      break;
    case DType::I32:
      std::memcpy(&bytes[at], &narrow, 4);
      break;
    case DType::I64:
      std::memcpy(&bytes[at], &i, 8);
      break;
    case DType::F16:
    case DType::BF16:
      std::memcpy(&bytes[at], &half, 2);
      break;
    case DType::F32:
      std::memcpy(&bytes[at], &f, 4);
      break;
    case DType::F64:
      std::memcpy(&bytes[at], &wide, 8);
      break;
    }
  }
}

/// Runs the single kernel of `text` with the cuda backend and the
/// interpreter; skips when there is no device (after checking the Error).
void checkOnDevice(const char *text, std::vector<int64_t> symbols = {}) {
  LoopModule module = parseLoopModule(text, "test.loop");
  const Kernel &kernel = module.kernels[0];
  std::map<std::string, int64_t> bindings;
  for (size_t j = 0; j < kernel.symbols.size(); ++j)
    bindings[kernel.symbols[j]] = symbols[j];
  std::mt19937 rng(42);
  std::vector<std::vector<char>> expected, actual;
  std::vector<char *> expectedPointers, actualPointers;
  for (const LoopBuffer &param : kernel.params) {
    std::vector<char> bytes(spanBytes(param, bindings));
    fillRandom(param.type.dtype, bytes, rng);
    expected.push_back(bytes);
    actual.push_back(bytes);
  }
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    expectedPointers.push_back(expected[i].data());
    actualPointers.push_back(actual[i].data());
  }
  std::unique_ptr<Backend> backend = createCUDABackend();
  std::vector<std::unique_ptr<KernelExecutable>> executables;
  try {
    executables = backend->compile(module, environmentCompileOptions());
    executables[0]->run(actualPointers.data(), symbols.data());
  } catch (const Error &error) {
    // Only a missing device, driver or NVRTC skips; any other Error fails.
    std::string message = error.what();
    bool unavailable =
        message.rfind("CUDA backend: device unavailable: ", 0) == 0 ||
        message.find("cannot load NVRTC") != std::string::npos;
    ASSERT_TRUE(unavailable) << message;
    GTEST_SKIP() << message;
  }
  interpretLoopKernel(kernel, expectedPointers.data(), symbols.data());
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    DType type = kernel.params[i].type.dtype;
    size_t size = dtypeSize(type);
    for (size_t at = 0; at + size <= expected[i].size(); at += size) {
      if (!isFloating(type)) {
        ASSERT_EQ(std::memcmp(&expected[i][at], &actual[i][at], size), 0)
            << "%" << kernel.params[i].name << " element " << at / size;
        continue;
      }
      ScalarValue a = loadElement(type, &expected[i][at]);
      ScalarValue b = loadElement(type, &actual[i][at]);
      double tolerance = type == DType::F32 ? 1e-5 : 1e-2;
      ASSERT_NEAR(a.f, b.f, tolerance * std::max(1.0, std::fabs(a.f)))
          << "%" << kernel.params[i].name << " element " << at / size;
    }
  }
}

bool deviceUnavailable(const Error &error) {
  std::string message = error.what();
  return message.rfind("CUDA backend: device unavailable: ", 0) == 0 ||
         message.find("cannot load NVRTC") != std::string::npos;
}

TEST(CUDABackend, DeviceResidentRunMatchesInterpreter) {
  // Parameters typed on cuda:0 (as captured from CUDA tensors): run()
  // takes device addresses and queues the kernel without staging.
  LoopModule module = parseLoopModule(deviceResidentText, "test.loop");
  const Kernel &kernel = module.kernels[0];
  int64_t symbols[] = {33};
  std::map<std::string, int64_t> bindings = {{"s0", 33}};
  std::mt19937 rng(3);
  std::vector<std::vector<char>> host;
  for (const LoopBuffer &param : kernel.params) {
    host.emplace_back(spanBytes(param, bindings));
    fillRandom(param.type.dtype, host.back(), rng);
  }
  std::vector<std::unique_ptr<CUDADeviceBuffer>> device;
  std::vector<char *> addresses;
  std::vector<std::unique_ptr<KernelExecutable>> executables;
  try {
    executables =
        createCUDABackend()->compile(module, environmentCompileOptions());
    for (std::vector<char> &bytes : host) {
      device.push_back(std::make_unique<CUDADeviceBuffer>(bytes.size()));
      device.back()->copyFrom(bytes.data());
      addresses.push_back(device.back()->address());
    }
    executables[0]->run(addresses.data(), symbols);
  } catch (const Error &error) {
    ASSERT_TRUE(deviceUnavailable(error)) << error.what();
    GTEST_SKIP() << error.what();
  }
  std::vector<char> got(host[2].size());
  device[2]->copyTo(got.data()); // synchronous: waits for the kernel
  std::vector<char *> pointers = {host[0].data(), host[1].data(),
                                  host[2].data()};
  interpretLoopKernel(kernel, pointers.data(), symbols);
  for (size_t at = 0; at < got.size(); at += 4) {
    ScalarValue want = loadElement(DType::F32, &host[2][at]);
    ScalarValue have = loadElement(DType::F32, &got[at]);
    ASSERT_NEAR(want.f, have.f, 1e-6) << "element " << at / 4;
  }
}

TEST(CUDABackend, BandwidthBenchmark) {
  // Without a device: the Error says so. With one: a time and the bytes
  // the parameters span (x and out 33x1000 f32, w 1000 f32).
  LoopModule module = parseLoopModule(deviceResidentText, "test.loop");
  std::vector<CUDAKernelBandwidth> rows;
  try {
    rows = benchmarkCUDAKernels(module, {{"s0", 33}}, 5, environmentCodegen());
  } catch (const Error &error) {
    ASSERT_TRUE(deviceUnavailable(error)) << error.what();
    GTEST_SKIP() << error.what();
  }
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].bytes, (33 * 1000 * 2 + 1000) * 4);
  EXPECT_GT(rows[0].seconds, 0);
  EXPECT_GT(rows[0].copySeconds, 0);
}

TEST(CUDABackend, RegisteredAsCuda) {
  registerCUDABackend();
  EXPECT_EQ(createBackend("cuda")->name(), "cuda");
}

TEST(CUDABackend, Softmax) { checkOnDevice(softmaxText, {37}); }
TEST(CUDABackend, Argmax) { checkOnDevice(argmaxText); }
TEST(CUDABackend, PointwiseHalfAndIntegers) {
  checkOnDevice(pointwiseText, {300});
}
TEST(CUDABackend, NestedReduceFallsBackToSerial) { checkOnDevice(nestedText); }
TEST(CUDABackend, WholeBufferAllAndProd) { checkOnDevice(allText); }

} // namespace

//===- dynafuse-run.cpp - Run a module with a backend, check it -----------===//
//
// dynafuse-run FILE [--backend=NAME] [--reference=interp]
//              [--sizes=s0=37,s1=5] [--seed=N] [--rtol=1e-4] [--atol=1e-5]
//              [--prepare=sm_90] [--bench=ITERATIONS]
//
// Lowers a .graph (or reads a .loop module), fills its inputs with random
// values (symbolic sizes default to 17), runs it with --backend and with
// --reference on identical copies in host memory (the cuda backend copies
// each kernel's buffers to the device and back) and compares every output.
// Prints "PASS" or the first mismatch (exit 1); errors exit 1 as well.
// Under DYNAFUSE_GUARD_PAGES the inputs, like every buffer, end at an
// inaccessible page, so reading past one faults.
// --prepare=ARCH only compiles each module's CUDA cubin into the disk
// cache, so a GPU machine without NVRTC can run them.
// --bench=N (cuda) times each kernel on device buffers instead: one line
// per kernel with its bytes (parameters read or written once), time per
// launch, GB/s, and the fraction of a device-to-device copy's GB/s.
// benchmarks/gpu/check.sh runs it over a suite of modules.
//
//===----------------------------------------------------------------------===//
#include "ElementCompare.h"
#include "ToolInput.h"
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Loop/ScalarSemantics.h"
#include "dynafuse/Runtime/CompileGraph.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/IndexErrors.h"
#include "dynafuse/Support/Logging.h"
#include "dynafuse/Support/Options.h"
#include "dynafuse/Support/ThreadPool.h"

#include "dynafuse/Codegen/Backends.h"
#ifdef DYNAFUSE_HAVE_CUDA
#include "dynafuse/Codegen/CUDA/CUDABackend.h"
#endif

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>

using namespace dynafuse;

namespace {

struct Options {
  std::string input;
  std::string backend = "interp";
  std::string reference = "interp";
  std::map<std::string, int64_t> sizes;
  unsigned seed = 1;
  double rtol = 1e-4, atol = 1e-5;
  /// --prepare=sm_90: only compile the CUDA cubins into the disk cache.
  std::string prepareArch;
  /// --bench=N: time N launches of each kernel on the device.
  int benchIterations = 0;
  /// Everything the environment sets, read once in main().
  dynafuse::Options settings;
};

[[noreturn]] void usage(const std::string &problem) {
  std::cerr << "dynafuse-run: " << problem << "\n"
            << "usage: dynafuse-run FILE [--backend=NAME] [--reference=NAME] "
               "[--sizes=s0=37,...] [--seed=N] [--rtol=X] [--atol=X] "
               "[--prepare=ARCH] [--bench=N]\n";
  std::exit(2);
}

Options parseOptions(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char *prefix) { return arg.substr(strlen(prefix)); };
    if (arg.rfind("--backend=", 0) == 0)
      options.backend = value("--backend=");
    else if (arg.rfind("--reference=", 0) == 0)
      options.reference = value("--reference=");
    else if (arg.rfind("--prepare=", 0) == 0)
      options.prepareArch = value("--prepare=");
    else if (arg.rfind("--bench=", 0) == 0)
      options.benchIterations = std::stoi(value("--bench="));
    else if (arg.rfind("--seed=", 0) == 0)
      options.seed = unsigned(std::stoul(value("--seed=")));
    else if (arg.rfind("--rtol=", 0) == 0)
      options.rtol = std::stod(value("--rtol="));
    else if (arg.rfind("--atol=", 0) == 0)
      options.atol = std::stod(value("--atol="));
    else if (arg.rfind("--sizes=", 0) == 0) {
      std::string bad = tools::parseSizeList(value("--sizes="), options.sizes);
      if (!bad.empty())
        usage("bad --sizes entry '" + bad + "'");
    } else if (arg.rfind("--", 0) == 0)
      usage("unknown option '" + arg + "'");
    else
      options.input = arg;
  }
  if (options.input.empty())
    usage("no input file");
  return options;
}

/// The file's text split at "// -----" lines (as --split-input-file),
/// each chunk keeping its line numbers.
std::vector<std::string> readChunks(const std::string &path) {
  std::optional<std::string> text = tools::readTextFile(path);
  if (!text)
    fail("cannot open '" + path + "'");
  return tools::splitInputChunks(*text);
}

LoopModule readModule(const std::string &text, const std::string &path) {
  if (tools::firstKeyword(text) == "graph")
    return std::move(
        compileGraph(*parseGraph(text, path), GraphCompileOptions())
            .loopModule);
  LoopModule module = parseLoopModule(text, path);
  if (!module.hasProgram)
    fail("'" + path + "' holds no module program to run");
  return module;
}

struct Inputs {
  std::vector<std::vector<char>> storage;
  /// Under DYNAFUSE_GUARD_PAGES: exactly sized copies ending at a guard page.
  std::vector<std::unique_ptr<char, ReleaseToGlobalAllocator>> guarded;
  std::vector<TensorArg> args;
};

Inputs makeInputs(const LoopModule &module, const Options &options) {
  std::map<std::string, int64_t> bindings = options.sizes;
  for (const std::string &symbol : module.symbols)
    bindings.emplace(symbol, 17);
  std::mt19937 rng(options.seed);
  Inputs inputs;
  for (const LoopBuffer &input : module.inputs) {
    TensorArg arg;
    arg.dtype = input.type.dtype;
    for (const SymExpr &size : input.type.sizes)
      arg.sizes.push_back(size.evaluate(bindings));
    int64_t count = 1;
    for (const SymExpr &stride : input.type.effectiveStrides())
      arg.strides.push_back(stride.evaluate(bindings));
    for (size_t k = 0; k < arg.sizes.size(); ++k)
      count += arg.sizes[k] ? (arg.sizes[k] - 1) * arg.strides[k] : 0;
    std::vector<char> bytes(size_t(count) * dtypeSize(arg.dtype) + 1);
    fillRandomElements(arg.dtype, bytes.data(), count, rng);
    inputs.storage.push_back(std::move(bytes));
    inputs.args.push_back(arg);
  }
  for (size_t i = 0; i < inputs.args.size(); ++i) {
    inputs.args[i].data = inputs.storage[i].data();
    if (!CachingAllocator::globalUsesGuardPages())
      continue;
    // The byte of slack goes: reading past the end must fault.
    size_t bytes = inputs.storage[i].size() - 1;
    inputs.guarded.emplace_back(
        static_cast<char *>(CachingAllocator::global().allocate(bytes)));
    std::memcpy(inputs.guarded.back().get(), inputs.args[i].data, bytes);
    inputs.args[i].data = inputs.guarded.back().get();
  }
  return inputs;
}

/// Runs `module` with `backendName` on a fresh copy of the inputs; returns
/// each output's elements as ScalarValues (row-major).
std::vector<std::vector<ScalarValue>> runWith(const LoopModule &module,
                                              const std::string &backendName,
                                              const Options &options) {
  GraphCompileOptions compileOptions;
  compileOptions.backendName = backendName;
  compileOptions.backendOptions = compileOptionsFrom(options.settings);
  CompiledGraph compiled = compileLoopModule(module, compileOptions);
  Inputs inputs = makeInputs(module, options);
  HostContext context;
  std::vector<TensorArg> outputTensors =
      compiled.compiled->run(inputs.args, context);
  std::string indexError;
  if (takeIndexError(indexError))
    fail(backendName + ": " + indexError);
  std::vector<std::vector<ScalarValue>> outputs;
  for (const TensorArg &tensor : outputTensors) {
    std::vector<ScalarValue> values;
    int64_t count = 1;
    for (int64_t size : tensor.sizes)
      count *= size;
    for (int64_t flat = 0; flat < count; ++flat) {
      int64_t rest = flat, offset = 0;
      for (size_t k = tensor.sizes.size(); k-- > 0;) {
        offset += (rest % tensor.sizes[k]) * tensor.strides[k];
        rest /= tensor.sizes[k];
      }
      values.push_back(loadElement(
          tensor.dtype, tensor.data + offset * dtypeSize(tensor.dtype)));
    }
    outputs.push_back(std::move(values));
  }
  return outputs;
}

int benchModule(const LoopModule &module, const std::string &where,
                const Options &options) {
#ifdef DYNAFUSE_HAVE_CUDA
  std::map<std::string, int64_t> bindings = options.sizes;
  for (const std::string &symbol : module.symbols)
    bindings.emplace(symbol, 17);
  for (const CUDAKernelBandwidth &row :
       benchmarkCUDAKernels(module, bindings, options.benchIterations,
                            options.settings.codegen)) {
    double gbs = double(row.bytes) / row.seconds / 1e9;
    double copyGbs = double(row.bytes) / row.copySeconds / 1e9;
    char line[256];
    std::snprintf(line, sizeof line,
                  "BENCH %s @%s: %.1f MB, %.1f us, %.0f GB/s, copy %.0f GB/s, "
                  "%.0f%% of copy\n",
                  where.c_str(), row.kernel.c_str(), row.bytes / 1e6,
                  row.seconds * 1e6, gbs, copyGbs, 100 * gbs / copyGbs);
    std::cout << line;
  }
  return 0;
#else
  fail("--bench needs a build with the CUDA backend");
#endif
}

int runModule(const LoopModule &module, const std::string &where,
              const Options &options) {
  if (options.benchIterations > 0)
    return benchModule(module, where, options);
  if (!options.prepareArch.empty()) {
#ifdef DYNAFUSE_HAVE_CUDA
    compileCUDAToCubin(emitCUDA(module), options.prepareArch,
                       options.settings.codegen);
    std::cout << "PREPARED " << where << " (" << options.prepareArch << ")\n";
    return 0;
#else
    fail("--prepare needs a build with the CUDA backend");
#endif
  }
  auto want = runWith(module, options.reference, options);
  auto got = runWith(module, options.backend, options);
  for (size_t o = 0; o < module.outputs.size(); ++o) {
    DType type = module.findBuffer(module.outputs[o])->dtype;
    for (size_t k = 0; k < want[o].size(); ++k) {
      if (tools::elementsClose(type, want[o][k], got[o][k], options.rtol, options.atol))
        continue;
      std::cout << "FAIL " << where << ": output %" << module.outputs[o]
                << " element " << k << ": " << options.reference << " "
                << (isFloating(type) ? std::to_string(want[o][k].f)
                                     : std::to_string(want[o][k].i))
                << ", " << options.backend << " "
                << (isFloating(type) ? std::to_string(got[o][k].f)
                                     : std::to_string(got[o][k].i))
                << "\n";
      return 1;
    }
  }
  std::cout << "PASS " << where << " (" << options.backend << " vs "
            << options.reference << ", " << module.outputs.size()
            << " outputs, " << module.kernels.size() << " kernels)\n";
  return 0;
}

int run(const Options &options) {
  registerAllBackends();
  int failures = 0;
  std::vector<std::string> chunks = readChunks(options.input);
  for (size_t c = 0; c < chunks.size(); ++c) {
    std::string where =
        options.input + (chunks.size() > 1 ? "#" + std::to_string(c) : "");
    try {
      failures +=
          runModule(readModule(chunks[c], options.input), where, options);
    } catch (const Error &error) {
      std::string message = error.what();
      // Extern ops (matmul, conv) need ATen: not this tool's business.
      bool needsTorch =
          message.find("needs the torch bridge") != std::string::npos;
      std::cout << (needsTorch ? "SKIP " : "ERROR ") << where << ": " << message
                << "\n";
      failures += needsTorch ? 0 : 1;
    }
  }
  return failures ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  auto options = parseOptions(argc, argv);
  // The tool's boundary: the only place it reads the environment; the
  // process-wide pieces are configured from it before their first use.
  options.settings =
      readOptions([](const char *name) { return std::getenv(name); });
  setLogTopics(options.settings.logChannels);
  configureThreadPool(options.settings.numThreads);
  CachingAllocator::configureGlobal(options.settings);
  try {
    return run(options);
  } catch (const Error &error) {
    std::cout << "ERROR " << options.input << ": " << error.what() << "\n";
    return 1;
  }
}

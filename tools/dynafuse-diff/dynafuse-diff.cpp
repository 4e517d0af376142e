//===- dynafuse-diff.cpp - Differential testing of the CPU backends -------===//
//
// dynafuse-diff FILE... [--backends=interp,llvm,mlir] [--seed=N]
//               [--sizes=s0=7,...] [--rtol=1e-4] [--atol=1e-5]
//               [--replay-dir=DIR] [--mlir-opt=PATH]
//
// Every "// -----" chunk of every FILE (.graph lowered as the compiler
// does, .loop read as is) has each kernel run by every backend on the same
// random inputs: each parameter gets storage of its own, filled from a
// generator seeded by --seed and the kernel's name; symbols default to 7.
// A backend that runs ranges of a splittable kernel's outer loop (as the
// executor does over threads) also runs it in three ranges ("llvm/ranges").
// After each run every parameter is compared element by element with the
// first backend's (floats within rtol/atol, NaN equal to NaN, integers
// exactly), and so is whether an index error was reported. With MLIR built,
// each module's export is also checked by MLIR's verifier in process and,
// with --mlir-opt, by that tool reading the printed text. --inputs=edge
// (or random,edge: both, one after the other) fills inputs with the values where implementations part ways (NaN,
// infinities, signed zeros, huge and subnormal floats, MIN/MAX/-1/0
// integers) instead of plain random ones. Each parameter sits between
// guard bytes; a run that writes outside its elements fails.
//
// A disagreement prints "FAIL FILE#CHUNK @KERNEL: ..." and, with
// --replay-dir, writes DIR/NAME.@KERNEL.loop: the kernel alone, with a
// comment saying which backends disagreed and the command that replays it
// (the same seed and sizes give the same inputs). A chunk that does not
// parse or lower (the corpus's invalid-input tests) is a SKIP; a backend
// that cannot compile a kernel the interpreter runs is an ERROR. The last
// line counts modules, kernels and outcomes; the exit status is 1 when
// anything failed or fewer than --min-kernels kernels were compared.
//
//===----------------------------------------------------------------------===//
#include "ElementCompare.h"
#include "ToolInput.h"
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Loop/ScalarSemantics.h"
#include "dynafuse/Runtime/CompileGraph.h"
#include "dynafuse/Runtime/Executor.h"
#include "dynafuse/Runtime/Parallel.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/IndexErrors.h"
#include "dynafuse/Support/Options.h"

#include "dynafuse/Codegen/Backends.h"
#ifdef DYNAFUSE_HAVE_MLIR
#include "dynafuse/Codegen/MLIR/MLIRBackend.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <set>
#include <random>

#include <unistd.h>

using namespace dynafuse;

namespace {

struct DiffOptions {
  std::vector<std::string> inputs;
  std::vector<std::string> backends;
  unsigned seed = 1;
  std::map<std::string, int64_t> sizes;
  double rtol = 1e-4, atol = 1e-5;
  std::string replayDir;
  std::string mlirOpt;
  /// Each kernel runs on each: "random" (floats in [-2, 2], integers in
  /// [0, 3]) and "edge" (NaN, infinities, signed zeros, huge and subnormal
  /// floats; MIN, MAX, -1, 0 and large integers).
  std::vector<std::string> inputKinds = {"random"};
  /// Fewer kernels compared than this is a failure (a corpus that stops
  /// parsing or lowering must not pass by shrinking).
  int minKernels = 0;
};

struct Tally {
  int modules = 0, kernels = 0, passed = 0, failed = 0, errors = 0,
      skipped = 0, skippedKernels = 0, exportsVerified = 0;
};

[[noreturn]] void usage(const std::string &problem) {
  std::cerr << "dynafuse-diff: " << problem << "\n"
            << "usage: dynafuse-diff FILE... [--backends=a,b,c] [--seed=N] "
               "[--sizes=s0=7,...] [--rtol=X] [--atol=X] [--replay-dir=DIR] "
               "[--mlir-opt=PATH] [--inputs=random,edge] [--min-kernels=N]\n";
  std::exit(2);
}

DiffOptions parseOptions(int argc, char **argv) {
  DiffOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char *prefix) { return arg.substr(strlen(prefix)); };
    if (arg.rfind("--backends=", 0) == 0)
      options.backends = tools::splitList(value("--backends="));
    else if (arg.rfind("--seed=", 0) == 0)
      options.seed = unsigned(std::stoul(value("--seed=")));
    else if (arg.rfind("--rtol=", 0) == 0)
      options.rtol = std::stod(value("--rtol="));
    else if (arg.rfind("--atol=", 0) == 0)
      options.atol = std::stod(value("--atol="));
    else if (arg.rfind("--replay-dir=", 0) == 0)
      options.replayDir = value("--replay-dir=");
    else if (arg.rfind("--mlir-opt=", 0) == 0)
      options.mlirOpt = value("--mlir-opt=");
    else if (arg.rfind("--inputs=", 0) == 0)
      options.inputKinds = tools::splitList(value("--inputs="));
    else if (arg.rfind("--min-kernels=", 0) == 0)
      options.minKernels = std::stoi(value("--min-kernels="));
    else if (arg.rfind("--sizes=", 0) == 0) {
      std::string bad = tools::parseSizeList(value("--sizes="), options.sizes);
      if (!bad.empty())
        usage("bad --sizes entry '" + bad + "'");
    } else if (arg.rfind("--", 0) == 0)
      usage("unknown option '" + arg + "'");
    else
      options.inputs.push_back(arg);
  }
  if (options.inputs.empty())
    usage("no input file");
  if (options.backends.empty()) {
    options.backends = {"interp"};
#ifdef DYNAFUSE_HAVE_LLVM
    options.backends.push_back("llvm");
#endif
#ifdef DYNAFUSE_HAVE_MLIR
    options.backends.push_back("mlir");
#endif
  }
  if (options.backends.size() < 2)
    usage("--backends needs at least two backends to compare");
  std::set<std::string> distinct(options.backends.begin(), options.backends.end());
  if (distinct.size() != options.backends.size())
    usage("--backends lists a backend twice (it would be compared with itself)");
  for (const std::string &kind : options.inputKinds)
    if (kind != "random" && kind != "edge")
      usage("--inputs takes 'random', 'edge' or both ('random,edge')");
  return options;
}

/// The loop module a chunk holds; nullopt (with the reason) when it does
/// not parse or lower.
std::optional<LoopModule> readModule(const std::string &text,
                                     const std::string &path,
                                     std::string &reason) {
  try {
    std::string keyword = tools::firstKeyword(text);
    if (keyword == "graph")
      return std::move(
          compileGraph(*parseGraph(text, path), GraphCompileOptions())
              .loopModule);
    if (keyword != "module" && keyword != "kernel") {
      reason = "no graph, module or kernel";
      return std::nullopt;
    }
    return parseLoopModule(text, path);
  } catch (const Error &error) {
    reason = error.what();
    return std::nullopt;
  }
}

/// Whether every unmasked access with direct indices provably stays inside
/// its parameter for these sizes (IR tests may index past a buffer: a
/// kernel that can is skipped, as running it would corrupt memory). Masked
/// loads are trusted to their mask; indirect dimensions are checked at run
/// time by every backend.
std::map<std::string, SymExpr>
constantsOf(const std::map<std::string, int64_t> &bindings) {
  std::map<std::string, SymExpr> constants;
  for (const auto &[name, value] : bindings)
    constants[name] = SymExpr(value);
  return constants;
}

bool accessesStayInBounds(const Kernel &kernel,
                          const std::map<std::string, int64_t> &bindings,
                          std::string &reason) {
  std::map<std::string, SymExpr> constants = constantsOf(bindings);
  SymRanges ranges;
  // An extent may use enclosing loop variables (a triangular loop): the
  // largest value it takes bounds the variable.
  auto extentBound = [&](const SymExpr &extent) -> int64_t {
    int64_t lo = 0, hi = 0;
    SymExpr bound = extent.substitute(constants);
    if (bound.isConstant())
      return bound.constant();
    if (!symRange(bound, ranges, lo, hi))
      return std::numeric_limits<int64_t>::max() / 4; // proves nothing
    return hi;
  };
  std::function<bool(const std::vector<Stmt> &)> walk =
      [&](const std::vector<Stmt> &block) -> bool {
    for (const Stmt &stmt : block) {
      if (stmt.kind == Stmt::Kind::For) {
        ranges[stmt.var] = extentBound(stmt.extent);
        if (ranges[stmt.var] <= 0)
          continue; // The body never runs.
        if (!walk(stmt.body))
          return false;
        continue;
      }
      if (stmt.kind == Stmt::Kind::Reduce) {
        bool empty = false;
        for (size_t k = 0; k < stmt.vars.size(); ++k) {
          ranges[stmt.vars[k]] = extentBound(stmt.extents[k]);
          empty = empty || ranges[stmt.vars[k]] <= 0;
        }
        if (!empty && !walk(stmt.body))
          return false;
        continue;
      }
      const Instr &instr = kernel.instrs[stmt.instr];
      bool access = instr.op == ScalarOp::Store ||
                    (instr.op == ScalarOp::Load && instr.args.empty());
      if (!access)
        continue;
      const LoopBuffer &param = kernel.params[instr.buffer];
      for (size_t d = 0; d < instr.index.size(); ++d) {
        if (isIndirectIndex(instr.index[d]))
          continue;
        int64_t size = param.type.sizes[d].substitute(constants).evaluate({});
        int64_t lo = 0, hi = 0;
        bool known = symRange(instr.index[d].substitute(constants), ranges, lo, hi);
        if (known && lo > hi)
          break; // An enclosing loop is empty: the access never runs.
        if (!known || lo < 0 || hi >= size) {
          reason = "%" + param.name + " dim " + std::to_string(d) +
                   " index " + instr.index[d].str() + " may leave [0, " +
                   std::to_string(size) + ")";
          return false;
        }
      }
    }
    return true;
  };
  return walk(kernel.body);
}

/// One parameter's storage: every element its strides reach, between two
/// guard zones of kGuardBytes filled with kGuardByte, checked after each
/// run (a write past either end is a failure).
constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0xA5;
struct ParamStorage {
  std::vector<int64_t> sizes, strides;
  std::vector<char> bytes; // guard, elements, guard
  size_t elementBytes = 0;
  char *data() { return bytes.data() + kGuardBytes; }
  const char *data() const { return bytes.data() + kGuardBytes; }
  bool guardsIntact() const {
    for (size_t k = 0; k < kGuardBytes; ++k)
      if ((unsigned char)bytes[k] != kGuardByte ||
          (unsigned char)bytes[kGuardBytes + elementBytes + k] != kGuardByte)
        return false;
    return true;
  }
};

/// --inputs=edge: the values where implementations part ways. The huge
/// floats have one sign each and magnitudes far apart, so no two cancel:
/// a sum's result must not hang on the order of its terms, which differs
/// between the interpreter and the LLVM backend's vectorized sums (and
/// between vector widths).
void fillEdgeElements(DType type, char *data, int64_t count, std::mt19937 &rng) {
  static const double floats[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e30,
                                  0.25, 1e-40, -1e-40, 0.5, -0.5, 1.5,
                                  -2.5, 65504.0, -3e38, 3.0};
  std::uniform_int_distribution<int> pick(0, 31);
  std::normal_distribution<double> normal(0, 10);
  std::uniform_int_distribution<int64_t> small(-100, 100);
  int64_t lowest = type == DType::I32 ? INT32_MIN : INT64_MIN;
  int64_t highest = type == DType::I32 ? INT32_MAX : INT64_MAX;
  int64_t ints[] = {lowest, lowest + 1, highest, -1, 0, 1, 2, -2};
  for (int64_t k = 0; k < count; ++k) {
    int choice = pick(rng);
    ScalarValue value;
    value.f = choice < 16 ? floats[choice] : normal(rng);
    value.i = choice < 8 ? ints[choice] : small(rng);
    if (type == DType::Bool)
      value.i = choice & 1;
    storeElement(type, data + k * dtypeSize(type), value);
  }
}

std::vector<ParamStorage> randomParams(const Kernel &kernel,
                                       const std::map<std::string, int64_t> &bindings,
                                       const DiffOptions &options,
                                       const std::string &kind) {
  std::mt19937 rng(options.seed ^
                   unsigned(std::hash<std::string>()(kernel.name)));
  std::vector<ParamStorage> params;
  for (const LoopBuffer &param : kernel.params) {
    ParamStorage storage;
    storage.sizes = evaluateAll(param.type.sizes, bindings);
    storage.strides = evaluateAll(param.type.effectiveStrides(), bindings);
    int64_t count = stridedElementSpan(storage.sizes, storage.strides);
    storage.elementBytes = size_t(count) * dtypeSize(param.type.dtype);
    storage.bytes.assign(storage.elementBytes + 2 * kGuardBytes,
                         char(kGuardByte));
    if (kind == "edge")
      fillEdgeElements(param.type.dtype, storage.data(), count, rng);
    else
      fillRandomElements(param.type.dtype, storage.data(), count, rng);
    params.push_back(std::move(storage));
  }
  return params;
}

std::string valueText(DType type, ScalarValue value) {
  if (!isFloating(type))
    return std::to_string(value.i);
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", value.f);
  return text;
}

/// "" when the two runs agree, else what differs first.
std::string compareRuns(const Kernel &kernel,
                        const std::vector<ParamStorage> &want,
                        const std::vector<ParamStorage> &got,
                        const DiffOptions &options) {
  for (size_t p = 0; p < kernel.params.size(); ++p) {
    DType type = kernel.params[p].type.dtype;
    size_t width = dtypeSize(type);
    if (!got[p].guardsIntact())
      return "%" + kernel.params[p].name + ": written outside its elements";
    size_t count = want[p].elementBytes / width;
    for (size_t k = 0; k < count; ++k) {
      ScalarValue a = loadElement(type, want[p].data() + k * width);
      ScalarValue b = loadElement(type, got[p].data() + k * width);
      if (!tools::elementsClose(type, a, b, options.rtol, options.atol))
        return "%" + kernel.params[p].name + " element " + std::to_string(k) +
               ": " + valueText(type, a) + " vs " + valueText(type, b);
    }
  }
  return "";
}

std::string joined(const std::vector<std::string> &items) {
  std::string text;
  for (const std::string &item : items)
    text += (text.empty() ? "" : ",") + item;
  return text;
}

void writeReplay(const Kernel &kernel, const std::string &where,
                 const std::string &message, const DiffOptions &options,
                 const std::map<std::string, int64_t> &bindings,
                 const std::string &kind) {
  std::filesystem::create_directories(options.replayDir);
  std::string stem = std::filesystem::path(where).filename().string();
  for (char &c : stem)
    if (c == '#')
      c = '.';
  std::string path =
      (std::filesystem::path(options.replayDir) / (stem + ".@" + kernel.name + ".loop"))
          .string();
  LoopModule alone;
  alone.kernels.push_back(kernel);
  std::string sizes;
  for (const auto &[name, value] : bindings)
    sizes += (sizes.empty() ? "" : ",") + name + "=" + std::to_string(value);
  std::ofstream file(path);
  file << "// dynafuse-diff replay: kernel @" << kernel.name << " of " << where
       << "\n// " << message << "\n// Replay: dynafuse-diff " << path
       << " --backends=" << joined(options.backends)
       << " --inputs=" << kind
       << " --seed=" << options.seed << " --rtol=" << options.rtol
       << " --atol=" << options.atol
       << (sizes.empty() ? "" : " --sizes=" + sizes) << "\n"
       << printLoopModule(alone);
  std::cout << "  replay: " << path << "\n";
}

#ifdef DYNAFUSE_HAVE_MLIR
/// The printed export, read back by mlir-opt; "" when it verifies.
std::string verifyWithMlirOpt(const std::string &exported,
                              const DiffOptions &options) {
  std::filesystem::path temp =
      std::filesystem::temp_directory_path() /
      ("dynafuse-diff-" + std::to_string(::getpid()) + ".mlir");
  {
    std::ofstream file(temp);
    file << exported;
  }
  std::string command = options.mlirOpt + " " + temp.string() +
                        " -o /dev/null 2>&1";
  std::string output;
  if (FILE *pipe = ::popen(command.c_str(), "r")) {
    char buffer[512];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe))
      output.append(buffer, n);
    int status = ::pclose(pipe);
    std::filesystem::remove(temp);
    if (status != 0)
      return output.empty() ? "mlir-opt failed" : output;
    return "";
  }
  std::filesystem::remove(temp);
  return "cannot run " + options.mlirOpt;
}
#endif

void diffModule(const LoopModule &module, const std::string &where,
                const DiffOptions &options, Tally &tally) {
  ++tally.modules;
#ifdef DYNAFUSE_HAVE_MLIR
  // exportMLIR runs MLIR's verifier and throws when it fails.
  try {
    std::string exported = exportMLIR(module);
    if (!options.mlirOpt.empty()) {
      std::string problem = verifyWithMlirOpt(exported, options);
      if (!problem.empty()) {
        std::cout << "FAIL " << where << ": mlir-opt rejects the export:\n"
                  << problem;
        ++tally.failed;
        return;
      }
    }
    ++tally.exportsVerified;
  } catch (const Error &error) {
    std::cout << "FAIL " << where << ": " << error.what() << "\n";
    ++tally.failed;
    return;
  }
#endif
  // Every backend compiles the whole module once.
  std::vector<std::vector<std::unique_ptr<KernelExecutable>>> compiled;
  for (const std::string &name : options.backends) {
    try {
      compiled.push_back(createBackend(name)->compile(module, CompileOptions()));
    } catch (const Error &error) {
      std::cout << "ERROR " << where << ": backend " << name << ": "
                << error.what() << "\n";
      ++tally.errors;
      return;
    }
  }
  int agreed = 0, skippedHere = 0;
  for (size_t k = 0; k < module.kernels.size(); ++k) {
    const Kernel &kernel = module.kernels[k];
    std::map<std::string, int64_t> bindings;
    for (const std::string &symbol : kernel.symbols) {
      auto given = options.sizes.find(symbol);
      bindings[symbol] = given != options.sizes.end() ? given->second : 7;
    }
    std::vector<int64_t> symbols;
    for (const std::string &symbol : kernel.symbols)
      symbols.push_back(bindings[symbol]);
    std::string unsafe;
    bool inBounds = false;
    try {
      inBounds = accessesStayInBounds(kernel, bindings, unsafe);
    } catch (const Error &error) {
      unsafe = std::string("its bounds cannot be checked: ") + error.what();
    }
    if (!inBounds) {
      std::cout << "SKIP " << where << " @" << kernel.name << ": " << unsafe
                << "\n";
      ++tally.skippedKernels;
      ++skippedHere;
      continue;
    }
    ++tally.kernels;
    std::vector<ParamStorage> reference;
    bool referenceIndexError = false;
    std::string failure;
    // Each backend runs the whole kernel; one that can also run ranges of a
    // splittable kernel's outer loop (as the executor does over threads)
    // runs it again in three ranges, compared as "NAME/ranges".
    struct Run {
      size_t backend;
      bool ranges;
    };
    std::vector<Run> runs;
    const Stmt *outer = splittableLoop(kernel);
    for (size_t b = 0; b < options.backends.size(); ++b) {
      runs.push_back({b, false});
      if (outer && compiled[b][k]->supportsRange())
        runs.push_back({b, true});
    }
    std::string failedKind;
    for (const std::string &kind : options.inputKinds) {
      if (!failure.empty())
        break;
      failedKind = kind;
      std::string inputs =
          options.inputKinds.size() > 1 ? " [" + kind + " inputs]" : "";
      for (size_t r = 0; r < runs.size() && failure.empty(); ++r) {
        const KernelExecutable &executable = *compiled[runs[r].backend][k];
        std::string name = options.backends[runs[r].backend] +
                           (runs[r].ranges ? "/ranges" : "");
        std::vector<ParamStorage> params =
            randomParams(kernel, bindings, options, kind);
        std::vector<char *> buffers;
        for (ParamStorage &param : params)
          buffers.push_back(param.data());
        std::string ignored;
        takeIndexError(ignored);
        if (runs[r].ranges) {
          int64_t extent =
              outer->extent.substitute(constantsOf(bindings)).evaluate({});
          int64_t third = (extent + 2) / 3;
          for (int64_t begin = 0; begin < extent; begin += third)
            executable.runRange(buffers.data(), symbols.data(), begin,
                                std::min(extent, begin + third));
        } else {
          executable.run(buffers.data(), symbols.data());
        }
        std::string indexError;
        bool reported = takeIndexError(indexError);
        if (r == 0) {
          for (size_t p = 0; p < params.size(); ++p)
            if (!params[p].guardsIntact())
              failure = name + inputs + ": %" + kernel.params[p].name +
                        " written outside its elements";
          reference = std::move(params);
          referenceIndexError = reported;
          continue;
        }
        std::string label = name + " vs " + options.backends[0] + inputs;
        if (reported != referenceIndexError)
          failure = label + ": index error reported by " +
                    (reported ? name : options.backends[0]) + " only";
        else if (std::string difference =
                     compareRuns(kernel, reference, params, options);
                 !difference.empty())
          failure = label + ": " + difference;
      }
    }
    if (failure.empty()) {
      ++agreed;
      continue;
    }
    ++tally.failed;
    std::cout << "FAIL " << where << " @" << kernel.name << ": " << failure
              << "\n";
    if (!options.replayDir.empty())
      writeReplay(kernel, where, failure, options, bindings, failedKind);
  }
  tally.passed += agreed;
  if (agreed + skippedHere == int(module.kernels.size()))
    std::cout << "PASS " << where << ": " << agreed << " kernels agree ("
            << joined(options.backends) << ")\n";
}

} // namespace

int main(int argc, char **argv) {
  DiffOptions options = parseOptions(argc, argv);
  dynafuse::Options settings =
      readOptions([](const char *name) { return std::getenv(name); });
  (void)settings;
  registerAllBackends();
  Tally tally;
  for (const std::string &input : options.inputs) {
    std::optional<std::string> text = tools::readTextFile(input);
    if (!text) {
      std::cout << "ERROR " << input << ": cannot open\n";
      ++tally.errors;
      continue;
    }
    std::vector<std::string> chunks = tools::splitInputChunks(*text);
    for (size_t c = 0; c < chunks.size(); ++c) {
      std::string where =
          input + (chunks.size() > 1 ? "#" + std::to_string(c) : "");
      std::string reason;
      std::optional<LoopModule> module = readModule(chunks[c], input, reason);
      if (!module) {
        std::cout << "SKIP " << where << ": " << reason << "\n";
        ++tally.skipped;
        continue;
      }
      try {
        diffModule(*module, where, options, tally);
      } catch (const Error &error) {
        std::cout << "ERROR " << where << ": " << error.what() << "\n";
        ++tally.errors;
      }
    }
  }
  std::cout << "dynafuse-diff: " << tally.modules << " modules ("
            << tally.exportsVerified << " MLIR exports verified), "
            << tally.kernels << " kernels: " << tally.passed << " agree, "
            << tally.failed << " disagree, " << tally.errors << " errors, "
            << tally.skipped << " chunks and " << tally.skippedKernels
            << " kernels skipped (" << joined(options.backends)
            << ")\n";
  if (tally.kernels < options.minKernels) {
    std::cout << "dynafuse-diff: only " << tally.kernels
              << " kernels compared, fewer than --min-kernels="
              << options.minKernels << "\n";
    return 1;
  }
  return tally.failed || tally.errors ? 1 : 0;
}

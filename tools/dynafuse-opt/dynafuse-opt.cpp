//===- dynafuse-opt.cpp - Read, transform and print any IR stage ----------===//
//
// dynafuse-opt FILE [--passes=NAME,...]
//              [--emit=graph|loop|llvm|llvm-opt|asm|cuda|ptx|mlir|mlir-llvm]
//              [--print-ir-after-all] [--split-input-file]
//              [--grad-inputs=NAME,...]
// dynafuse-opt --list-passes
//
// Reads .graph or .loop text (by its first keyword), runs the named passes
// on it, then lowers as far as --emit asks and prints that stage. The
// passes are the pass registry's (Lowering/PassRegistry.h; --list-passes
// prints it, as docs/passes.md holds it). Any pass that works on text runs
// alone by name: graph passes on .graph input, loop passes on .loop input.
// Lowering's own passes work on in-memory state that has a printed form but
// no parser: `--passes=...,NAME` with one of them last lowers the graph
// and prints lowering's state after NAME (the converged realized set,
// buffer layouts, kernel grouping, or the loop module before the loop
// passes). --print-ir-after-all prints, to stderr, the IR after every pass,
// one "// -----// IR after NAME //----- //" section each: those given to
// --passes, then lowering's pipeline (the registry's passes in its order);
// a section is the input of the next pass. --emit=cuda prints the CUDA C of
// the kernels, --emit=ptx the PTX NVRTC makes of it (compute_90; builds
// with the CUDA backend). --emit=mlir prints the kernels as MLIR in
// upstream dialects (func, scf, memref, arith, math; verified),
// --emit=mlir-llvm the same
// after MLIR's own lowering to the LLVM dialect (builds with the MLIR
// backend). `--passes=...,autodiff` (last, with --emit=graph or loop)
// differentiates the graph with respect to --grad-inputs (names without
// %; default: every floating input) and prints the forward graph, the
// backward inputs' and outputs' meaning as comments, and the backward
// graph (or, with --emit=loop, both lowered). Errors are printed as
// "FILE:LINE:COL: error: MESSAGE" and give exit status 1.
//
//===----------------------------------------------------------------------===//
#include "ToolInput.h"
#include "dynafuse/Graph/Autodiff.h"
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Lowering/PassRegistry.h"
#include "dynafuse/Runtime/CompileGraph.h"
#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/Options.h"

#ifdef DYNAFUSE_HAVE_LLVM
#include "dynafuse/Codegen/LLVM/LLVMBackend.h"
#endif
#ifdef DYNAFUSE_HAVE_MLIR
#include "dynafuse/Codegen/MLIR/MLIRBackend.h"
#endif
#ifdef DYNAFUSE_HAVE_CUDA
#include "dynafuse/Codegen/CUDA/CUDABackend.h"
#endif

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>

using namespace dynafuse;

namespace {

struct Options {
  std::string input = "-";
  std::vector<std::string> passes;
  std::string emit;
  /// autodiff: the inputs to differentiate (empty: every floating one).
  std::vector<std::string> gradInputs;
  bool printAfterAll = false;
  bool splitInputFile = false;
  /// Disk cache, vector width, NVRTC: read from the environment in main().
  CodegenOptions codegen;
};

[[noreturn]] void usage(const std::string &problem) {
  std::cerr << "dynafuse-opt: " << problem << "\n"
            << "usage: dynafuse-opt FILE [--passes=p1,p2] "
               "[--emit=graph|loop|llvm|llvm-opt|asm|cuda|ptx|mlir|mlir-llvm] "
               "[--print-ir-after-all] "
               "[--split-input-file] [--list-passes]\n";
  std::exit(2);
}

Options parseOptions(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--passes=", 0) == 0)
      options.passes = tools::splitList(arg.substr(9));
    else if (arg.rfind("--emit=", 0) == 0)
      options.emit = arg.substr(7);
    else if (arg == "--print-ir-after-all")
      options.printAfterAll = true;
    else if (arg == "--split-input-file")
      options.splitInputFile = true;
    else if (arg.rfind("--grad-inputs=", 0) == 0)
      options.gradInputs = tools::splitList(arg.substr(14));
    else if (arg == "--list-passes") {
      std::cout << passTableMarkdown();
      std::exit(0);
    }
    else if (arg.rfind("--", 0) == 0)
      usage("unknown option '" + arg + "'");
    else
      options.input = arg;
  }
  const std::string stages[] = {"",    "graph", "loop", "llvm", "llvm-opt",
                                "asm", "cuda",  "ptx",  "mlir", "mlir-llvm"};
  if (std::find(std::begin(stages), std::end(stages), options.emit) ==
      std::end(stages))
    usage("unknown --emit stage '" + options.emit + "'");
  return options;
}

std::string joined(const std::vector<std::string> &names) {
  std::string text;
  for (const std::string &name : names)
    text += (text.empty() ? "" : ", ") + name;
  return text;
}

/// The passes of one input kind, by name.
std::string passNamesFor(PassInput input) {
  std::vector<std::string> names;
  for (const PassInfo &pass : passRegistry())
    if (pass.input == input)
      names.push_back(pass.name);
  return joined(names);
}

/// The error for a pass that cannot run on this input: it names every pass
/// --passes knows and the input each needs.
[[noreturn]] void cannotRun(const std::string &name, const char *input) {
  const PassInfo *pass = findPass(name);
  std::string problem =
      !pass ? "unknown pass '" + name + "'"
      : pass->input == PassInput::Lowering
          ? "'" + name + "' is a lowering pass, run on .graph input"
          : "'" + name + "' is a " + passInputName(pass->input) +
                " pass, not a " + input + " pass";
  fail(problem + " (graph passes, on .graph: " +
       passNamesFor(PassInput::Graph) +
       "; loop passes, on .loop: " + passNamesFor(PassInput::Loop) +
       "; lowering's, on .graph and last in the list: " +
       passNamesFor(PassInput::Lowering) + ")");
}

void printAfter(const std::string &pass, const std::string &text) {
  std::cerr << "// -----// IR after " << pass << " //----- //\n" << text;
}

std::string readInput(const std::string &path) {
  if (path == "-") {
    std::stringstream buffer;
    buffer << std::cin.rdbuf();
    return buffer.str();
  }
  std::optional<std::string> text = tools::readTextFile(path);
  if (!text)
    usage("cannot open '" + path + "'");
  return *text;
}

std::string emitFromLoop(const LoopModule &module, const std::string &emit,
                         const CodegenOptions &codegen) {
  if (emit.empty() || emit == "loop")
    return printLoopModule(module);
  if (emit == "mlir" || emit == "mlir-llvm") {
#ifdef DYNAFUSE_HAVE_MLIR
    return emit == "mlir" ? exportMLIR(module) : lowerMLIRToLLVMDialect(module);
#else
    fail("--emit=" + emit + " needs a build with the MLIR backend");
#endif
  }
  if (emit == "cuda" || emit == "ptx") {
#ifdef DYNAFUSE_HAVE_CUDA
    std::string source = emitCUDA(module);
    return emit == "cuda" ? source
                          : compileCUDAToPTX(source, "compute_90", codegen);
#else
    fail("--emit=" + emit + " needs a build with the CUDA backend");
#endif
  }
#ifdef DYNAFUSE_HAVE_LLVM
  if (emit == "llvm")
    return emitLLVMIR(module, /*optimized=*/false, codegen);
  if (emit == "llvm-opt")
    return emitLLVMIR(module, /*optimized=*/true, codegen);
  return emitAssembly(module, codegen);
#else
  fail("--emit=" + emit + " needs a build with the LLVM backend");
#endif
}

/// Lowers graph and returns lowering's state after its pass `pass`.
std::string lowerThrough(const Graph &graph, const std::string &pass,
                         const Options &options) {
  std::string after;
  GraphCompileOptions compileOptions;
  compileOptions.observer = [&](const std::string &name,
                                const std::string &text) {
    if (options.printAfterAll)
      printAfter(name, text);
    if (name == pass)
      after = text;
  };
  compileGraph(graph, compileOptions);
  return after;
}

/// --passes=...,autodiff: the forward and backward graphs of graph.
std::string differentiate(const Graph &graph, const Options &options) {
  std::vector<bool> requiresGrad;
  for (const Value *input : graph.inputs)
    requiresGrad.push_back(
        options.gradInputs.empty()
            ? isFloating(input->type.dtype)
            : std::find(options.gradInputs.begin(), options.gradInputs.end(),
                        input->name) != options.gradInputs.end());
  for (const std::string &name : options.gradInputs)
    if (!graph.findValue(name) ||
        std::find(graph.inputs.begin(), graph.inputs.end(),
                  graph.findValue(name)) == graph.inputs.end())
      fail("--grad-inputs: %" + name + " is not an input of @" + graph.name);
  TrainingGraphs pair = differentiateGraph(graph, requiresGrad);
  if (options.emit.empty() || options.emit == "graph")
    return printTrainingGraphs(pair);
  if (options.emit != "loop")
    fail("autodiff prints graphs or loop IR (--emit=graph or --emit=loop)");
  GraphCompileOptions compileOptions;
  std::string forward =
      printLoopModule(compileGraph(*pair.forward, compileOptions).module());
  std::string backward =
      printLoopModule(compileGraph(*pair.backward, compileOptions).module());
  return forward + "// -----\n" + backward;
}

std::string processGraph(const std::string &text, const Options &options) {
  std::unique_ptr<Graph> graph = parseGraph(text, options.input);
  for (size_t i = 0; i < options.passes.size(); ++i) {
    const std::string &pass = options.passes[i];
    if (pass == "autodiff") {
      if (i + 1 != options.passes.size())
        fail("'autodiff' prints two graphs: it must be the last pass");
      return differentiate(*graph, options);
    }
    const PassInfo *info = findPass(pass);
    if (info && info->input == PassInput::Lowering) {
      if (i + 1 != options.passes.size() || !options.emit.empty())
        fail("'" + pass + "' prints lowering's state: it must be the last "
             "pass, without --emit");
      return lowerThrough(*graph, pass, options);
    }
    if (!info || info->input != PassInput::Graph)
      cannotRun(pass, "graph");
    info->runOnGraph(*graph);
    verifyGraph(*graph);
    if (options.printAfterAll)
      printAfter(pass, printGraph(*graph));
  }
  if (options.emit.empty() || options.emit == "graph")
    return printGraph(*graph);
  GraphCompileOptions compileOptions;
  if (options.printAfterAll)
    compileOptions.observer = printAfter;
  CompiledGraph lowered = compileGraph(*graph, compileOptions);
  return emitFromLoop(lowered.module(), options.emit, options.codegen);
}

std::string process(const std::string &text, const Options &options) {
  std::string keyword = tools::firstKeyword(text);
  if (keyword == "graph")
    return processGraph(text, options);
  if (keyword != "module" && keyword != "kernel")
    fail("input must start with 'graph', 'module' or 'kernel'",
         Location{options.input, 1, 1});
  if (options.emit == "graph")
    fail("cannot emit graph IR from loop IR");
  LoopModule module = parseLoopModule(text, options.input);
  for (const std::string &pass : options.passes) {
    const PassInfo *info = findPass(pass);
    if (!info || info->input != PassInput::Loop)
      cannotRun(pass, "loop");
    info->runOnLoop(module);
    verifyLoopModule(module);
    if (options.printAfterAll)
      printAfter(pass, printLoopModule(module));
  }
  return emitFromLoop(module, options.emit, options.codegen);
}

} // namespace

int main(int argc, char **argv) {
  auto options = parseOptions(argc, argv);
  // The tool's boundary: the only place it reads the environment.
  options.codegen =
      readOptions([](const char *name) { return std::getenv(name); }).codegen;
  std::string text = readInput(options.input);
  std::vector<std::string> chunks = options.splitInputFile
                                        ? tools::splitInputChunks(text)
                                        : std::vector<std::string>{text};
  int status = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i)
      std::cout << "// -----\n";
    try {
      std::cout << process(chunks[i], options);
    } catch (const Error &error) {
      std::string where = error.location().str();
      std::cerr << (where.empty() ? options.input : where)
                << ": error: " << error.bareMessage() << "\n";
      status = 1;
    }
  }
  return status;
}

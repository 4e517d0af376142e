//===- CompileFrame.cpp - Capture and compile a frame into an entry -------===//
#include "CompileFrame.h"

#include "Dumps.h"
#include "dynafuse/Graph/Autodiff.h"
#include "dynafuse/Graph/Passes.h"
#include "dynafuse/Graph/SymbolicZeros.h"
#include "dynafuse/Loop/InPlaceUpdates.h"
#include "dynafuse/Runtime/CompileGraph.h"
#include "dynafuse/Support/Logging.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace dynafuse {
namespace {

/// One instance per registered backend, for the process (leaked).
Backend &backendNamed(const std::string &name) {
  static auto *backends = new std::map<std::string, std::unique_ptr<Backend>>();
  auto &slot = (*backends)[name];
  if (!slot)
    slot = createBackend(name);
  return *slot;
}

std::string sanitize(const std::string &name) {
  std::string clean;
  for (char c : name)
    clean += std::isalnum((unsigned char)c) ? c : '_';
  return clean;
}

/// The code's name and how many graphs this code object compiled before:
/// the same in every process that compiles the same code in the same
/// order, so kernel names, and with them the disk cache's keys (the IR
/// text), do not depend on what else the process compiled first.
std::string graphName(PyCodeObject *code, int compileIndex) {
  return sanitize(codeName(code)) + "_" + std::to_string(compileIndex);
}

CacheEntry::InputView inputViewOf(const LoopModule &module,
                                  const std::string &output) {
  CacheEntry::InputView view;
  const ProgramStep *step = module.definingStep(output);
  if (!step || step->kind != ProgramStep::Kind::View)
    return view;
  for (size_t i = 0; i < module.inputs.size(); ++i)
    if (module.inputs[i].name == step->source)
      view.input = int(i);
  if (view.input < 0)
    return view;
  view.sizes = step->type.sizes;
  view.strides = step->type.effectiveStrides();
  view.offset = step->offset;
  return view;
}

/// CPU backends run host memory, the cuda backend device memory of
/// cuda:0: a graph whose buffers live elsewhere cannot be compiled for the
/// requested backend (the frame then runs eagerly, with this reason).
void requireDevicesOf(const LoopModule &module, const std::string &backend) {
  bool cuda = backend == "cuda";
  auto check = [&](const TensorType &type, const std::string &name) {
    bool ok = cuda ? type.device == "cuda:0" || type.device == "cuda"
                   : type.device == "cpu";
    if (!ok)
      throw Unsupported(
          "backend '" + backend + "' cannot run %" + name + " on " +
              type.device +
              (cuda ? " (it runs tensors on cuda:0)"
                    : " (CPU backends run CPU tensors; use backend='cuda' "
                      "or 'auto')"),
          Location{});
  };
  for (const LoopBuffer &input : module.inputs)
    check(input.type, input.name);
  for (const ProgramStep &step : module.steps) {
    if (step.kind == ProgramStep::Kind::Alloc)
      check(step.type, step.result);
    for (size_t i = 0; i < step.types.size(); ++i)
      check(step.types[i], step.results.at(i));
  }
}

/// One graph lowered, its devices checked and compiled (a training entry
/// has two: forward and backward).
struct CompiledPart {
  std::unique_ptr<CompiledModule> module;
  std::vector<int> outputInput;
  std::vector<CacheEntry::InputView> outputViews;
  int kernels = 0, distinctKernels = 0, externCalls = 0;
};

/// The chain's two halves (CompileGraph.h), with the loop IR dumped into
/// `folder` and its devices checked in between, so a backend failure still
/// leaves kernels.loop to replay.
/// What compiling a graph for a frame's call needs, copied out of the call
/// (a backward variant compiles later, when autograd runs it).
struct PartTarget {
  CompileOptions compileOptions;
  std::string backend, registeredBackend;
  /// The code the graph came from (in the log).
  std::string where;
};

PartTarget partTargetOf(const CallOptions &options, DynafuseFrame *frame) {
  return {compileOptionsFrom(options.config->options), options.backend,
          options.registeredBackend, codeWhere(frame->code)};
}

/// `writeBacks`: an inference forward's, whose torch calls may then update
/// the caller's tensors in place (Loop/InPlaceUpdates.h); null elsewhere.
CompiledPart
compilePart(const Graph &graph, const std::string &folder,
            const PartTarget &target,
            const std::vector<std::pair<int, int>> *writeBacks = nullptr) {
  CompileOptions compileOptions = target.compileOptions;
  compileOptions.dumpDir = folder;
  GraphCompileOptions chain;
  LoopModule module = std::move(compileGraph(graph, chain).loopModule);
  if (writeBacks)
    markInPlaceUpdates(module, *writeBacks);
  dumpLoopModule(folder, module);
  logLine("compile", "compiled " + graph.name + " (" +
                         std::to_string(module.kernels.size()) +
                         " kernels) from " + target.where);
  CompiledPart part;
  for (const std::string &output : module.outputs) {
    int input = -1;
    for (size_t i = 0; i < module.inputs.size(); ++i)
      if (module.inputs[i].name == output)
        input = int(i);
    part.outputInput.push_back(input);
    part.outputViews.push_back(inputViewOf(module, output));
  }
  part.distinctKernels = int(module.kernels.size());
  for (const ProgramStep &step : module.steps) {
    part.kernels += step.kind == ProgramStep::Kind::Call;
    part.externCalls += step.kind == ProgramStep::Kind::Extern;
  }
  requireDevicesOf(module, target.backend);
  chain.backend = &backendNamed(target.registeredBackend);
  chain.backendOptions = compileOptions;
  ++compilerStats().backendCompiles;
  part.module = compileLoopModule(std::move(module), chain).compiled;
  return part;
}

/// A training entry's graphs: its forward and backward (Autodiff.h).
TrainingGraphs differentiateCaptured(const CapturedFrame &captured) {
  TrainingGraphs graphs;
  try {
    graphs = differentiateGraph(*captured.graph, captured.inputRequiresGrad);
  } catch (const Error &error) {
    throw Unsupported("compiled training: " + std::string(error.what()),
                      Location{});
  }
  for (const auto &[input, output] : captured.writeBacks)
    for (int tangent : graphs.tangentOutputs)
      if (tangent == output)
        throw Unsupported("an input is updated in place with a value that "
                          "requires grad (compiled training does not "
                          "support it yet)",
                          Location{});
  return graphs;
}

/// The backward half of a training entry, compiled; what was compiled goes
/// into info.
/// Why the forward cannot be replayed from its inputs after its run (empty
/// when it can): an input it updates in place holds its new value then, so
/// a replay reading it where gradients flow would differentiate another
/// function.
std::string
replayBlockedReason(const TrainingGraphs &graphs,
                    const std::vector<std::pair<int, int>> &writeBacks) {
  const Graph &forward = *graphs.forward;
  std::set<const Value *> reaching;
  for (int output : graphs.tangentOutputs)
    reaching.insert(forward.outputs.at(size_t(output)));
  for (auto node = forward.nodes.rbegin(); node != forward.nodes.rend();
       ++node) {
    bool reaches = false;
    for (const Value *result : (*node)->results)
      reaches |= reaching.count(result) != 0;
    if (reaches)
      for (const Operand &operand : (*node)->operands)
        if (operand.isValue())
          reaching.insert(operand.value);
  }
  for (const std::unique_ptr<Node> &node : forward.nodes)
    if (node->op == Op::CallTorch &&
        std::any_of(node->results.begin(), node->results.end(),
                    [&](const Value *v) { return reaching.count(v) != 0; }))
      return "the graph calls " +
             node->stringAttr("target", "a torch callable") +
             ", which an ATen replay cannot run";
  for (const auto &[input, output] : writeBacks)
    if (reaching.count(forward.inputs.at(size_t(input))))
      return "the graph updates its input '" +
             forward.inputs[size_t(input)]->name +
             "' in place, so its forward cannot be replayed after the run";
  return "";
}

std::shared_ptr<const BackwardProgram>
compileBackward(TrainingGraphs &graphs,
                const std::vector<std::pair<int, int>> &writeBacks,
                const std::vector<bool> &outputNotMade,
                const std::string &folder,
                const CallOptions &options, DynafuseFrame *frame,
                CompiledGraphInfo &info) {
  auto program = std::make_shared<BackwardProgram>();
  program->name = graphs.backward->name;
  program->inputs = graphs.backwardInputs;
  program->gradientOf = graphs.gradientOf;
  program->tangentOutputs = graphs.tangentOutputs;
  program->tangentsOfGradient = graphs.tangentsOfGradient;
  PartTarget target = partTargetOf(options, frame);
  bool allocationPlan = options.config->options.allocationPlan;
  auto compile = [target, allocationPlan](const Graph &graph,
                                          const std::string &folder,
                                          CompiledGraphInfo *info) {
    CompiledPart part = compilePart(graph, folder, target);
    if (info) {
      info->training = true;
      info->backwardKernels = part.distinctKernels;
      info->backwardExternCalls = part.externCalls;
    }
    auto compiled = std::make_unique<BackwardModule>();
    compiled->module = std::move(part.module);
    if (allocationPlan)
      compiled->allocationPlanner = std::make_unique<AllocationPlanner>();
    compiled->outputInput = part.outputInput;
    compiled->outputViews = part.outputViews;
    return compiled;
  };
  // The whole module has the tangents that never arrive as zeros.
  std::vector<bool> zeroInputs;
  for (const TrainingGraphs::BackwardInput &input : graphs.backwardInputs) {
    bool never = input.kind == TrainingGraphs::BackwardInput::Kind::Tangent &&
                 outputNotMade.at(size_t(input.index));
    zeroInputs.push_back(never);
    if (input.kind == TrainingGraphs::BackwardInput::Kind::Tangent)
      program->neverArrives.push_back(never);
  }
  std::unique_ptr<Graph> whole = withZeroInputs(*graphs.backward, zeroInputs);
  program->whole = std::move(*compile(*whole, folder, &info));
  program->graph = graphs.backward->clone();
  program->compile = [compile](const Graph &graph) {
    return compile(graph, "", nullptr);
  };
  for (const Value *input : graphs.forward->inputs)
    program->forwardInputTypes.push_back(input->type);
  program->replayBlocked = replayBlockedReason(graphs, writeBacks);
  if (program->replayBlocked.empty())
    program->replayableForward = graphs.forward->clone();
  return program;
}

/// Lowers, checks devices and compiles entry's captured graph into its
/// module (with a training entry, its forward and backward graphs), and
/// records what was compiled.
void compileCaptured(CacheEntry &entry, DynafuseFrame *frame,
                     const CallOptions &options) {
  const Graph &graph = *entry.captured.graph;
  if (graph.outputs.empty() && entry.captured.resume)
    return; // a break before any tensor work it hands on: nothing to run
  if (graph.nodes.empty()) {
    Unsupported nothing("the frame computes nothing on tensors",
                        Location{PyUnicode_AsUTF8(frame->code->co_filename),
                                 frame->code->co_firstlineno, 0});
    // Plain Python (often the rest of a frame after a break): it runs as it
    // is, not counted as a break or an eager frame.
    nothing.quiet = true;
    throw nothing;
  }
  std::string folder =
      dumpFolder(entry.captured, options.config->options.dumpDir);
  // CPU 16-bit GEMMs without a fast kernel here run in f32 (forward and,
  // from it, backward).
  computeHalfProductsInFloat32(*entry.captured.graph, slowHalfProductTypes());
  std::optional<TrainingGraphs> training;
  if (entry.captured.training()) {
    training = differentiateCaptured(entry.captured);
    // No output requires grad (everything that requires grad is read
    // under no_grad): an inference entry.
    if (training->tangentOutputs.empty())
      training.reset();
    else if (training->gradientOf.empty())
      // Outputs require grad, yet every gradient is a symbolic zero
      // (x ** 0): eager's outputs have a grad_fn and its inputs get zero
      // gradients, which an inference entry would lose.
      throw Unsupported("outputs require grad but no gradient reaches an "
                        "input (every path differentiates to zero)",
                        Location{});
  }
  // Inference convolutions and linear layers keep their weights packed.
  std::unique_ptr<Graph> marked;
  if (!training) {
    marked = graph.clone();
    std::optional<GemmLibrary> gemmLibrary =
        gemmLibraryFor(options.config->options.gemmLibrary);
    if (options.config->options.prepackWeights)
      markPrepackedWeights(*marked, options.config->options.foldBatchNorm,
                           gemmLibrary);
    entry.prepackedWeights = newPrepackedWeights(gemmLibrary);
  }
  CompiledPart forward =
      compilePart(training ? *training->forward : *marked, folder,
                  partTargetOf(options, frame),
                  training ? nullptr : &entry.captured.writeBacks);
  entry.outputInput = forward.outputInput;
  entry.outputViews = forward.outputViews;
  for (int output : entry.captured.outputsViewingUpdatedInputs)
    if (entry.outputViews.at(size_t(output)).input < 0)
      fail("output " + std::to_string(output) +
           " views an input updated in place but was not lowered to a view "
           "of it (it would hold the values before the update)");
  CompiledGraphInfo info;
  info.name = graph.name;
  info.where = codeWhere(frame->code);
  info.distinctKernels = forward.distinctKernels;
  info.kernels = forward.kernels;
  info.externCalls = forward.externCalls;
  info.ops = int(graph.nodes.size());
  for (const Guard &guard : entry.captured.guards)
    info.guards.push_back(guard.describe(entry.captured.sources));
  if (logEnabled("guards")) {
    std::string text = "guards of " + graph.name + ":";
    for (const std::string &guard : info.guards)
      text += "\n  " + guard;
    logLine("guards", text);
  }
  entry.module = std::move(forward.module);
  if (options.config->options.allocationPlan)
    entry.allocationPlanner = std::make_unique<AllocationPlanner>();
  if (training) {
    entry.backwardTorchCalls = sharedTorchCalls(entry.captured.torchCalls);
    std::string backwardFolder = dumpTraining(folder, *training);
    // Outputs that are inputs, views of inputs or views of other outputs
    // are not the backward node's: their gradients never reach it.
    std::vector<bool> notMade;
    for (size_t j = 0; j < entry.outputInput.size(); ++j)
      notMade.push_back(entry.outputInput[j] >= 0 ||
                        entry.outputViews[j].input >= 0 ||
                        entry.captured.outputsViewingOutputs.count(int(j)));
    entry.backward =
        compileBackward(*training, entry.captured.writeBacks, notMade,
                        backwardFolder, options, frame, info);
  }
  // For the sizes of the call captured.
  info.peakIntermediateBytes =
      entry.module->peakIntermediateBytes(entry.captured.sizeHints);
  compiledGraphs().push_back(info);
}

} // namespace

namespace {

ShapePolicy shapePolicyFor(const CallOptions &options,
                           const ShapeHistory &history) {
  ShapePolicy policy;
  policy.history = &history;
  switch (options.dynamic) {
  case CallOptions::DynamicShapes::Always:
    policy.mode = ShapePolicy::Mode::Dynamic;
    break;
  case CallOptions::DynamicShapes::Never:
    policy.mode = ShapePolicy::Mode::Static;
    break;
  case CallOptions::DynamicShapes::Automatic:
    policy.mode = options.config->options.automaticDynamicShapes
                      ? ShapePolicy::Mode::Automatic
                      : ShapePolicy::Mode::Static;
    break;
  }
  if (history.symbolicFailed)
    policy.mode = ShapePolicy::Mode::Static;
  policy.symbolicInts = !history.symbolicIntsFailed;
  return policy;
}

/// A symbolic capture failed: next time without int symbols where it had
/// some (true), else with static sizes.
bool giveUpSymbolicInts(ShapeHistory &history, PyCodeObject *code,
                        bool hadIntSymbols, const std::string &why) {
  if (!hadIntSymbols || history.symbolicIntsFailed)
    return false;
  history.symbolicIntsFailed = true;
  logLine("recompiles", "dynamic shapes: " + codeName(code) +
                            " with symbolic ints: " + why +
                            "; its ints are constants from now on");
  return true;
}

void giveUpSymbolicSizes(ShapeHistory &history, PyCodeObject *code,
                         const std::string &why) {
  history.symbolicFailed = true;
  logLine("recompiles", "dynamic shapes: " + codeName(code) +
                            " with symbolic sizes: " + why +
                            "; captured with static sizes from now on");
}

/// Captures frame under the code's shape policy; a capture with symbolic
/// sizes that breaks or fails is redone with static ones.
CapturedFrame captureWithShapes(DynafuseFrame *frame,
                                const CallOptions &options,
                                const std::string &name,
                                ShapeHistory &history) {
  bool allowResume =
      !options.fullgraph && options.config->options.resumeAfterBreaks;
  ShapePolicy policy = shapePolicyFor(options, history);
  while (policy.mode != ShapePolicy::Mode::Static) {
    std::string why;
    bool hadIntSymbols = false;
    try {
      CapturedFrame captured =
          captureFrame(frame, name, allowResume, policy);
      if (!captured.symbolic || !captured.resume) {
        history.record(captured.inputSizes);
        return captured;
      }
      why = "graph break at " + captured.resume->where.str() + ": " +
            captured.resume->reason;
      hadIntSymbols = captured.symbolicInts;
    } catch (Unsupported &error) {
      if (!error.withSymbolicSizes)
        throw;
      why = error.what();
      hadIntSymbols = error.withSymbolicInts;
    }
    if (giveUpSymbolicInts(history, frame->code, hadIntSymbols, why)) {
      policy.symbolicInts = false;
      continue;
    }
    giveUpSymbolicSizes(history, frame->code, why);
    policy.mode = ShapePolicy::Mode::Static;
  }
  CapturedFrame captured = captureFrame(frame, name, allowResume, policy);
  history.record(captured.inputSizes);
  return captured;
}

} // namespace

std::unique_ptr<CacheEntry> compileFrame(DynafuseFrame *frame,
                                         const CallOptions &options,
                                         int compileIndex,
                                         ShapeHistory &history) {
  auto entry = std::make_unique<CacheEntry>();
  entry->backend = options.backend;
  entry->captured = captureWithShapes(
      frame, options, graphName(frame->code, compileIndex), history);
  if (entry->captured.symbolic) {
    ++compilerStats().symbolicCaptures;
    if (logEnabled("recompiles") || logEnabled("guards"))
      logLine("recompiles", "dynamic shapes: " + codeName(frame->code) +
                                " captured with symbolic sizes");
  }
  const bool counted =
      !entry->captured.graph->outputs.empty() ||
      (!entry->captured.resume && !entry->captured.graph->nodes.empty());
  if (counted)
    ++compilerStats().captures;
  // A symbolic capture whose compile fails is redone below: it counts once.
  auto redo = [&](const std::string &why) {
    if (counted)
      --compilerStats().captures;
    --compilerStats().symbolicCaptures;
    if (!giveUpSymbolicInts(history, frame->code, entry->captured.symbolicInts,
                            why))
      giveUpSymbolicSizes(history, frame->code, why);
    return compileFrame(frame, options, compileIndex, history);
  };
  // Past capture, every stop happens under the capture's full guards.
  auto guardsOfCapture = [&] {
    auto guards = std::make_shared<BreakGuards>();
    guards->sources = entry->captured.sources;
    guards->guards = entry->captured.guards;
    guards->state = entry->captured.state;
    return guards;
  };
  try {
    if (ResumePoint *point = entry->captured.resume.get()) {
      prepareResumeCode(*point, frame->code, *options.config);
      std::string message = "graph break in " + codeName(frame->code) +
                            ": " + point->where.str() + ": " + point->reason;
      ++compilerStats().graphBreaks;
      graphBreakReasons().push_back(message);
      logLine("graph_breaks", message +
                                  "; the graph ends there and the frame "
                                  "resumes after it");
    }
    compileCaptured(*entry, frame, options);
  } catch (Unsupported &error) {
    if (entry->captured.symbolic)
      return redo(error.what());
    if (!error.guards)
      error.guards = guardsOfCapture();
    throw;
  } catch (const std::exception &error) {
    if (entry->captured.symbolic)
      return redo(error.what());
    throw CompileFailure(error.what(), guardsOfCapture());
  }
  return entry;
}

} // namespace dynafuse

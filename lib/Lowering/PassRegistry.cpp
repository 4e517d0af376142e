//===- PassRegistry.cpp - Every pass, once --------------------------------===//
#include "dynafuse/Lowering/PassRegistry.h"

#include "dynafuse/Graph/ConvolutionEpilogues.h"
#include "dynafuse/Graph/Passes.h"
#include "dynafuse/Loop/LoopPasses.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Lowering/LoweringPasses.h"

namespace dynafuse {
namespace {

PassInfo describe(const char *name, PassInput input, bool inPipeline,
                  const char *summary) {
  PassInfo pass;
  pass.name = name;
  pass.summary = summary;
  pass.input = input;
  pass.inPipeline = inPipeline;
  return pass;
}

PassInfo graphPass(const char *name, std::function<bool(Graph &)> run,
                   bool inPipeline, const char *summary) {
  PassInfo pass = describe(name, PassInput::Graph, inPipeline, summary);
  pass.runOnGraph = std::move(run);
  return pass;
}

PassInfo loweringPass(const char *name,
                      std::function<std::string(const LoweringState &)> print,
                      const char *summary) {
  PassInfo pass = describe(name, PassInput::Lowering, true, summary);
  pass.printState = std::move(print);
  return pass;
}

PassInfo loopPass(const char *name, std::function<void(LoopModule &)> run,
                  const char *summary) {
  PassInfo pass = describe(name, PassInput::Loop, true, summary);
  pass.runOnLoop = std::move(run);
  return pass;
}

/// A kernel rewrite applied to every kernel of a module.
std::function<void(LoopModule &)> eachKernel(void (*rewrite)(Kernel &)) {
  return [rewrite](LoopModule &module) {
    for (Kernel &kernel : module.kernels)
      rewrite(kernel);
  };
}

} // namespace

const std::vector<PassInfo> &passRegistry() {
  static const std::vector<PassInfo> passes = {
      graphPass(
          "decompose", [](Graph &graph) { return decomposeComposites(graph); },
          true, "composite ops replaced by their decompositions"),
      graphPass("matrix-vector-products", matrixVectorProductsAsReductions,
                true,
                "one-row float matmuls by a matrix (not weight_prepacked) as "
                "fused reductions over K"),
      graphPass("cse", eliminateCommonSubexpressions, true,
                "identical nodes merged (never two graph outputs into one)"),
      graphPass("dce", eliminateDeadCode, true,
                "nodes whose results are never used removed"),
      graphPass("fuse-conv-epilogues", fuseConvolutionEpilogues, false,
                "prepacked convolutions absorb their batch norm and "
                "activation (conv2d_bn; run by the torch runtime for "
                "inference graphs)"),
      graphPass(
          "half-products-in-f32",
          [](Graph &graph) {
            return computeHalfProductsInFloat32(graph,
                                                {DType::BF16, DType::F16});
          },
          false,
          "bf16/f16 GEMMs and convolutions computed in f32 from exact "
          "upcasts, rounded once (run by the torch runtime where ATen has "
          "no fast 16-bit kernels for the host)"),
      loweringPass("realize", printRealized, "the values that live in buffers"),
      loweringPass("layout", printLayouts,
                   "each buffer's loop order and strides"),
      loweringPass("schedule", printSchedule,
                   "realized values grouped into kernels, externs ordered"),
      loweringPass("share", printShared,
                   "values several kernels would recompute, realized"),
      loweringPass(
          "emit",
          [](const LoweringState &state) {
            return printLoopModule(state.module);
          },
          "the loop module: kernels and program"),
      loopPass("drop-empty-loops", eachKernel(dropEmptyLoops),
               "loops of no iteration removed, with what only they read"),
      loopPass("drop-unit-loops", eachKernel(dropUnitLoops),
               "loops of one iteration replaced by their body"),
      loopPass(
          "column-reductions", eachKernel(interchangeColumnReductions),
          "sums over an outer dim accumulate with the output loop innermost"),
      loopPass("reuse-reduction-elements", eachKernel(reuseReductionElements),
               "elements a sum computes stored for the next loop that "
               "recomputes them"),
      loopPass("split-regrouped-loops", eachKernel(splitRegroupedLoops),
               "loops indexed by divisions and remainders of their variable "
               "split in two"),
      loopPass(
          "plan-memory", planMemory,
          "intermediates reuse the storage of allocations no longer needed"),
      loopPass("merge-duplicate-kernels", mergeDuplicateKernels,
               "identical kernels compiled once"),
  };
  return passes;
}

const PassInfo *findPass(const std::string &name) {
  for (const PassInfo &pass : passRegistry())
    if (pass.name == name)
      return &pass;
  return nullptr;
}

const char *passInputName(PassInput input) {
  switch (input) {
  case PassInput::Graph:
    return "graph";
  case PassInput::Lowering:
    return "lowering";
  case PassInput::Loop:
    return "loop";
  }
  return "";
}

std::string passTableMarkdown() {
  std::string text = "| pass | input | in the pipeline | what it does |\n"
                     "| --- | --- | --- | --- |\n";
  for (const PassInfo &pass : passRegistry())
    text += "| `" + pass.name + "` | " + passInputName(pass.input) + " | " +
            (pass.inPipeline ? "yes" : "no") + " | " + pass.summary + " |\n";
  return text;
}

} // namespace dynafuse

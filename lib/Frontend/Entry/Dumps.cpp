//===- Dumps.cpp - The text of every stage of a compiled graph ------------===//
#include "Dumps.h"

#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Loop/LoopText.h"

#include <filesystem>
#include <fstream>
#include <map>

namespace dynafuse {
namespace {

void writeFile(const std::filesystem::path &path, const std::string &text) {
  std::ofstream(path) << text;
}

} // namespace

std::string dumpFolder(const CapturedFrame &captured,
                       const std::string &dumpDir) {
  if (dumpDir.empty())
    return "";
  // Two code objects may share a name (two lambdas): one folder each.
  static auto *used = new std::map<std::string, int>();
  int copies = (*used)[captured.graph->name]++;
  std::string folder =
      captured.graph->name + (copies ? "-" + std::to_string(copies + 1) : "");
  std::filesystem::path dir = std::filesystem::path(dumpDir) / folder;
  std::filesystem::create_directories(dir);
  writeFile(dir / "graph.graph", printGraph(*captured.graph));
  writeFile(dir / "replay.sh",
            "#!/bin/sh\n# Replays this graph's compilation stage by stage.\n"
            "cd \"$(dirname \"$0\")\"\n"
            "dynafuse-opt graph.graph --emit=loop --print-ir-after-all\n"
            "dynafuse-opt kernels.loop --emit=llvm\n");
  return dir.string();
}

std::string dumpTraining(const std::string &folder,
                         const TrainingGraphs &graphs) {
  if (folder.empty())
    return "";
  writeFile(std::filesystem::path(folder) / "training.graph",
            printTrainingGraphs(graphs));
  std::filesystem::path backward = std::filesystem::path(folder) / "backward";
  std::filesystem::create_directories(backward);
  writeFile(backward / "graph.graph", printGraph(*graphs.backward));
  std::string differentiated;
  for (int input : graphs.gradientOf)
    differentiated += (differentiated.empty() ? "" : ",") +
                      graphs.forward->inputs[size_t(input)]->name;
  std::ofstream(std::filesystem::path(folder) / "replay.sh", std::ios::app)
      << "# The forward and backward graphs (training.graph), and the\n"
         "# backward's stages.\n"
      << "dynafuse-opt graph.graph --passes=autodiff --grad-inputs="
      << differentiated << "\n"
      << "dynafuse-opt backward/graph.graph --emit=loop\n";
  return backward.string();
}

void dumpLoopModule(const std::string &folder, const LoopModule &module) {
  if (!folder.empty())
    writeFile(std::filesystem::path(folder) / "kernels.loop",
              printLoopModule(module));
}

} // namespace dynafuse

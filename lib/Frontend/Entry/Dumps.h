//===- Dumps.h - The text of every stage of a compiled graph ----*- C++ -*-===//
//
// With a dump folder configured (Options::dumpDir, DYNAFUSE_DUMP_DIR), each
// compiled graph gets a folder of its own holding graph.graph, kernels.loop,
// the backend's stages and replay.sh.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_DUMPS_H
#define DYNAFUSE_CAPTURE_DUMPS_H

#include "CapturedFrame.h"
#include "dynafuse/Graph/Autodiff.h"
#include "dynafuse/Loop/Kernel.h"

#include <string>

namespace dynafuse {

/// The folder under `dumpDir` that receives this graph's stages, created
/// with graph.graph and replay.sh in it ("" when `dumpDir` is "").
std::string dumpFolder(const CapturedFrame &captured,
                       const std::string &dumpDir);
/// Writes kernels.loop into `folder` (nothing when it is "").
void dumpLoopModule(const std::string &folder, const LoopModule &module);
/// A training entry's graphs: training.graph (forward and backward, as
/// dynafuse-opt --passes=autodiff prints them) in `folder`, and a folder
/// backward/ with the backward's graph.graph; returns that folder for the
/// backward's stages ("" when `folder` is "").
std::string dumpTraining(const std::string &folder,
                         const TrainingGraphs &graphs);

} // namespace dynafuse

#endif

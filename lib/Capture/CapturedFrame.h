//===- CapturedFrame.h - What capturing a frame produces --------*- C++ -*-===//
//
// captureFrame() runs the BytecodeTracer: it walks a frame's bytecode with its
// real arguments, recording tensor operations into a Graph and the facts it
// relied on as guards. It has no side effects: nothing the user wrote runs, so
// a fallback can run the frame eagerly afterwards. What it cannot handle raises
// Unsupported, naming the construct and the user's file:line.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_CAPTUREDFRAME_H
#define DYNAFUSE_CAPTURE_CAPTUREDFRAME_H

#include "Guards.h"
#include "TorchCall.h"
#include "dynafuse/Graph/Graph.h"

#include <memory>

namespace dynafuse {

/// The global state a capture reads: grad mode, whether the default dtype
/// is float32 (capture needs it), whether autocast or a torch function or
/// dispatch mode is active (capture refuses them).
struct GlobalState {
  bool gradMode = false;
  bool defaultFloat32 = true;
  bool autocast = false;
  bool torchModes = false;
  static GlobalState current();
  bool operator==(const GlobalState &other) const {
    return gradMode == other.gradMode &&
           defaultFloat32 == other.defaultFloat32 &&
           autocast == other.autocast && torchModes == other.torchModes;
  }
};

/// What a capture relied on up to the point where it stopped: the same
/// facts (guards holding, the same global state) lead to the same stop, so
/// they key the negative cache entry that runs such calls eagerly.
struct BreakGuards {
  std::vector<Source> sources;
  std::vector<Guard> guards;
  GlobalState state;
};

/// A graph break: the frame runs eagerly (or fullgraph=True raises).
class Unsupported : public Error {
public:
  using Error::Error;
  /// Attached as the break leaves the tracer (null for a refusal made
  /// before capture relied on anything).
  std::shared_ptr<const BreakGuards> guards;
};

/// How to rebuild the frame's return value from the graph's results.
struct OutputSpec {
  enum class Kind { GraphOutput, Input, Constant, Tuple, List, Dict };
  Kind kind = Kind::Constant;
  /// GraphOutput: index in graph.outputs; Input: index in graph.inputs.
  int index = 0;
  PyRef constant;
  std::vector<OutputSpec> items;
  /// Dict: the keys of items.
  std::vector<std::string> keys;
};

struct CapturedFrame {
  std::unique_ptr<Graph> graph;
  std::vector<Source> sources;
  std::vector<Guard> guards;
  /// Per graph input, the source it is fetched from.
  std::vector<int> inputSources;
  OutputSpec result;
  /// Inputs the frame updates in place: (graph input index, graph output
  /// index); each run copies the output into the input tensor, as eager
  /// would have written it.
  std::vector<std::pair<int, int>> writeBacks;
  /// The callables of the graph's call_torch nodes (attribute "call").
  std::vector<TorchCall> torchCalls;
  /// The global state capture ran under (and the graph depends on): an
  /// entry runs only when the current state is the same.
  GlobalState state;
};

CapturedFrame captureFrame(DynafuseFrame *frame, const std::string &graphName);

} // namespace dynafuse

#endif

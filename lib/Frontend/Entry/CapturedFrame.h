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

#include "Guards/Guards.h"
#include "Resume/ResumeCode.h"
#include "dynafuse/Torch/TorchBridge.h"
#include "dynafuse/Graph/Graph.h"

#include <memory>

namespace dynafuse {

/// The global state a capture reads: grad mode, whether the default dtype
/// is float32 (capture needs it), autocast's state (the graph casts as it
/// does), whether a torch function or dispatch mode is active (capture
/// refuses them).
struct GlobalState {
  bool gradMode = false;
  bool defaultFloat32 = true;
  AutocastState autocast;
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
  /// Raised by a capture that had made size symbols (it may succeed with
  /// static sizes).
  bool withSymbolicSizes = false;
  /// ... and had made a symbol of a Python int (it may succeed with the
  /// ints constant).
  bool withSymbolicInts = false;
  /// Attached as the break leaves the tracer (null for a refusal made
  /// before capture relied on anything).
  std::shared_ptr<const BreakGuards> guards;
  /// Not a break worth reporting (a resume function with no tensor work
  /// left): the frame runs eagerly without a log line or a count.
  bool quiet = false;
};

/// The traced code raised an exception made from constants (`raise
/// IndexError("...")`): a graph break like any other (eager raises it when
/// the code runs), which the iteration protocol catches where Python would
/// (IndexError ends an old-style __getitem__ loop).
class RaisedInCapture : public Unsupported {
public:
  RaisedInCapture(const std::string &message, const Location &where,
                  PyObject *exceptionType, PyRef exception = PyRef())
      : Unsupported(message, where), exceptionType(exceptionType),
        exception(std::move(exception)) {}
  PyObject *exceptionType; ///< a builtin exception class (immortal enough)
  /// The exception object when capture made one (what a handler sees).
  PyRef exception;
};

/// How to rebuild the frame's return value from the graph's results.
struct OutputSpec {
  /// Past the return value's kinds, what a graph break hands on (state
  /// rebuilt for the resume function): Source, an object fetched from its
  /// source at run time; Null, a NULL stack slot; Attribute, items[0]'s
  /// attribute keys[0] (a tensor's method); Method, function items[0] bound
  /// to items[1]; EnteredContext, the __exit__ of a fresh instance of the
  /// grad-mode context class `constant`, entered; NewObject, an instance of
  /// class `constant` made by its builtin base's __new__, its instance dict
  /// keys[i] = items[i] for i < attributeCount, its dict items (a dict
  /// subclass) the rest; SameObject, the list, dict or object with
  /// objectId `index` already built for this run; Size, the int `size`
  /// is in this run (a symbolic size, evaluated with the guards' symbols).
  enum class Kind {
    GraphOutput,
    Input,
    Constant,
    Tuple,
    List,
    Dict,
    Source,
    Null,
    Attribute,
    Method,
    EnteredContext,
    NewObject,
    SameObject,
    Size
  };
  Kind kind = Kind::Constant;
  /// GraphOutput: index in graph.outputs; Input: index in graph.inputs;
  /// Source: the source.
  int index = 0;
  /// Constant: the object; Tuple: what makes the named tuple from the
  /// tuple of its items (a collections.namedtuple class's _make, which
  /// runs no __new__ or __init__; a struct sequence's class, such as
  /// torch.return_types.max), or null.
  PyRef constant;
  std::vector<OutputSpec> items;
  /// Dict: the keys of items.
  std::vector<std::string> keys;
  /// List, Dict, NewObject made during capture: one id per object, so that
  /// an object referenced twice is built once per run (SameObject).
  int objectId = -1;
  size_t attributeCount = 0;
  SymExpr size;
};

/// A graph break the frame resumes after (decision 43): the graph computes
/// everything the frame holds at the break instruction; a run rebuilds that
/// state, runs the instruction natively (in a break stub) or takes the branch
/// it decides, and returns what the resume function for the rest of the code
/// returns.
struct ResumePoint {
  /// Why capture stopped, and where (the user's file:line).
  std::string reason;
  Location where;
  /// Byte offsets, in the traced code, of the break instruction and of the
  /// instruction after it.
  int offset = 0;
  int next = 0;
  /// The frame's line at the break instruction.
  int line = 0;
  /// The stack below the instruction's inputs, and its inputs, bottom first.
  std::vector<OutputSpec> stack;
  std::vector<OutputSpec> inputs;
  /// How a stub runs the instruction; none for a branch, whose condition
  /// is inputs[0].
  std::optional<BreakInstruction> instruction;
  /// Branches: where the jump goes, on which truth value, and whether the
  /// jump keeps the condition on the stack (3.11's JUMP_IF_*_OR_POP).
  int jumpTarget = -1;
  bool jumpWhenTrue = false;
  bool keepOnJump = false;
  /// Live local slots and their values; the others are passed as None.
  std::vector<std::pair<int, OutputSpec>> locals;
  /// Local slots unbound at the break that a path may still read (one that
  /// raises UnboundLocalError in eager): the resume function unbinds them.
  std::vector<int> unboundLocals;
  /// Stack slots holding with-block exits, innermost first: an exception
  /// raised by the instruction is passed to them, as the blocks' handlers
  /// would.
  std::vector<int> withExits;
  /// Made by the compile step: the stub, the resume code after the
  /// instruction (or the branch's fall-through) and at the jump target, and
  /// how many local slots the resume code's arguments start with.
  PyRef stub;
  PyRef resumeNext;
  PyRef resumeJump;
  int localCount = 0;
};

/// A store into an object or dict that existed before the frame (an
/// attribute of a config or registry object, an item of the frame's
/// **kwargs): each run repeats it after the graph, in capture order, before
/// the return value is handed back or the code after a break runs.
struct StoreEffect {
  bool item = false; ///< dict item (owner is a dict), else attribute
  int owner = -1;    ///< the owner's source
  std::string name;
  OutputSpec value; ///< a dict item removed (dict.pop): Kind::Null
};

/// A graph output that eager returns as a view of another output (`y = x *
/// 2; return y, y[1:]`): each run makes it from the other output's tensor
/// with the same view ops (through ATen), so the two share memory as in
/// eager. Steps: op, attributes, result sizes and piece of each view node.
struct OutputViewStep {
  Op op = Op::Add;
  std::map<std::string, Attribute> attributes;
  std::vector<SymExpr> sizes;
  size_t piece = 0;
};
struct OutputOfOutput {
  int base = -1;
  std::vector<OutputViewStep> steps;
};

struct CapturedFrame {
  std::unique_ptr<Graph> graph;
  std::vector<Source> sources;
  std::vector<Guard> guards;
  /// Per graph input, the source it is fetched from.
  std::vector<int> inputSources;
  /// Per graph input, whether gradients flow to it (it requires grad and
  /// the frame started in grad mode): any makes the entry a training one,
  /// compiled as a forward and a backward graph.
  std::vector<bool> inputRequiresGrad;
  bool training() const {
    for (bool flag : inputRequiresGrad)
      if (flag)
        return true;
    return false;
  }
  OutputSpec result;
  /// Inputs the frame updates in place: (graph input index, graph output
  /// index); each run copies the output into the input tensor, as eager
  /// would have written it.
  std::vector<std::pair<int, int>> writeBacks;
  /// Graph outputs that are views of an input updated in place, computed
  /// from the input's value before the update: valid only when the run
  /// returns them as views of the input object (after its write-back).
  std::vector<int> outputsViewingUpdatedInputs;
  /// Graph outputs made per run as views of other graph outputs.
  std::map<int, OutputOfOutput> outputsViewingOutputs;
  /// The callables of the graph's call_torch nodes (attribute "call").
  std::vector<TorchCall> torchCalls;
  /// The global state capture ran under (and the graph depends on): an
  /// entry runs only when the current state is the same.
  GlobalState state;
  /// Sources of with-block exits (of grad-mode contexts entered before the
  /// frame resumed) the frame leaves: a run calls each with (None, None,
  /// None) after the graph, as the frame's code would have.
  std::vector<int> exitCalls;
  std::vector<StoreEffect> stores;
  /// Set when capture stopped at a graph break it can resume after; the
  /// graph then ends there and `result` is unused.
  std::shared_ptr<ResumePoint> resume;
  /// The sizes of each tensor input, by its source's description: what
  /// automatic dynamic shapes compares later captures with.
  std::map<std::string, std::vector<int64_t>> inputSizes;
  /// Whether the graph has size symbols (ShapeEnv.h), and their values in
  /// the call captured.
  bool symbolic = false;
  /// Whether some of those symbols are Python ints (IntSymbol guards).
  bool symbolicInts = false;
  std::map<std::string, int64_t> sizeHints;
};

/// allowResume: a break resumes after itself (ResumePoint) where it can;
/// without (fullgraph=True), every break throws Unsupported. policy: which
/// tensor dims stay symbolic.
CapturedFrame captureFrame(DynafuseFrame *frame, const std::string &graphName,
                           bool allowResume, const ShapePolicy &policy);

} // namespace dynafuse

#endif

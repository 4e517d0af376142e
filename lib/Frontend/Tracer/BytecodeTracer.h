//===- BytecodeTracer.h - Symbolic execution of bytecode -------*- C++ -*-===//
//
// Internal to the capture layer: the tracer walks a frame's bytecode with
// its real arguments (the bytecode loop and the frame's symbolic stack and
// locals), records tensor operations into a graph, and hands sources and
// guards to its GuardBuilder. Values are Vars (Var.h). Its pieces: the
// GuardBuilder, the InputTable (tensor inputs, their in-place updates and
// aliasing), the OpBinder (call arguments to op operands) and the
// CallInliner (inlined calls, which re-enter the loop); its own members are
// split by concern across the Tracer*.cpp files (loop, branches, sources,
// values, module containers, operators, calls, super, builtins, torch
// calls).
// CapturedFrame.h is the entry point (captureFrame).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_BYTECODETRACER_H
#define DYNAFUSE_CAPTURE_BYTECODETRACER_H

#include "AutocastCasts.h"
#include "Bytecode.h"
#include "CallInliner.h"
#include "CheckpointRegions.h"
#include "Entry/CapturedFrame.h"
#include "Entry/InputTable.h"
#include "Guards/ObjectSources.h"
#include "Guards/ShapeEnv.h"
#include "ObjectKinds.h"
#include "OpBinder.h"
#include "OpTable.h"
#include "SymbolicShapes.h"
#include "TensorAliases.h"
#include "TracedCode.h"
#include "Values/PythonObjects.h"
#include "Values/ValueHandlers.h"
#include "Var.h"
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Torch/TorchBridge.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <opcode.h>
#include <set>

namespace dynafuse {
namespace capture {

class BytecodeTracer {
public:
  /// Binds call arguments for the tracer (operands, constants, refusals).
  friend class OpBinder;
  /// Inlines calls, re-entering the bytecode loop with the callee's code.
  friend class CallInliner;
  /// Applies torch.autocast's cast policy to calls (emits casts).
  friend class AutocastCasts;
  /// Traces torch.utils.checkpoint regions (marked for recomputation).
  friend class CheckpointRegions;
  /// Models instances of Python classes (NewObject vars) on the trace.
  friend class PythonObjects;
  /// Answer the bytecode's operations per kind of value (ValueHandlers.h).
  friend class ValueHandler;
  friend class TensorValues;
  friend class ConstantValues;
  friend class ObjectValues;
  friend class SequenceValues;
  friend class IteratorValues;
  friend class DictValues;
  friend class SizeValues;

  BytecodeTracer(DynafuseFrame *frame, const std::string &graphName,
                 bool allowResume, const ShapePolicy &shapePolicy);

  CapturedFrame run();

private:
  static constexpr int kReturned = -2;
  /// A frame-level instruction broke: capture ends before it.
  static constexpr int kBroke = -3;
  DynafuseFrame *frame;
  /// The code being traced: the frame's, or an inlined callee's.
  TracedCode current;
  /// Inlines calls (and knows how deeply they nest).
  CallInliner inliner{*this};
  AutocastCasts autocastCasts{*this};
  CheckpointRegions checkpoints{*this};
  VarPtr returned;
  /// Grad mode as the interpreted code sees it (with blocks change it), and
  /// the modes to restore on leaving them.
  bool gradMode = false;
  std::vector<bool> gradModeStack;
  /// The graph's random seed inputs, by device (RandomSeed sources), and
  /// the counter offset the next `uniform` starts at.
  std::map<std::string, Value *> randomSeeds;
  SymExpr randomOffset = 0;
  CapturedFrame result;
  int steps = 0;
  /// Sources and guards (the captured frame takes them at the end).
  GuardBuilder guardBuilder;
  ObjectSources objectSources{guardBuilder}; ///< objects by type or identity
  /// Tensor inputs by source and object, their in-place updates, and the
  /// values that are views or have views.
  InputTable inputs;

  //===--------------------------------------------------------------------===//
  // Symbolic sizes (TracerSizes.cpp; decisions in SymbolicShapes.cpp)
  //===--------------------------------------------------------------------===//
  /// Dims made symbolic, the symbols, their decisions (SymbolicShapes.h).
  SymbolicShapes symbolic;
  /// A size as a Var: a Constant when it is one, else a SymInt.
  VarPtr sizeVar(const SymExpr &size);
  /// The size a Constant int or SymInt var holds (else unsupported).
  SymExpr sizeOf(const VarPtr &var, const std::string &what);
  /// A SymInt var made the Constant int of its value (specialize, guarded).
  void specializeSize(const VarPtr &var);
  /// +, -, *, //, % with a SymInt (null: no SymInt; others specialize it).
  VarPtr sizeArithmetic(int kind, const VarPtr &lhs, const VarPtr &rhs);
  /// int(), min(), max() of sizes with a SymInt (or null: no SymInt, or
  /// another builtin, whose SymInt args become constants: specializeSize).
  VarPtr sizeBuiltin(PyObject *callable, const std::vector<VarPtr> &args);
  /// A slice of a tensor dim with a symbolic bound or on a symbolic dim
  /// (clamped as Python does), x[..., i] with i a SymInt: decisions guarded.
  VarPtr sliceSymbolic(const VarPtr &tensor, const VarPtr &start,
                       const VarPtr &stop, const VarPtr &step, int64_t dim);
  VarPtr selectSymbolic(const VarPtr &tensor, const VarPtr &index, int64_t d);
  int firstLine() const { return current.code->co_firstlineno; }

  /// Interprets the current code to its RETURN_VALUE. At frame level (the
  /// frame's own code, not an inlined callee) a break may end it early:
  /// then result.resume is set and it returns null.
  VarPtr runBody(bool frameLevel = false);
  /// Decodes the current code (instructions, offsets); checks its handlers.
  void loadCode();

  //===--------------------------------------------------------------------===//
  // Graph breaks the frame resumes after (TracerResume.cpp)
  //===--------------------------------------------------------------------===//
  bool allowResume;
  /// One frame-level instruction; when it breaks, what it changed is
  /// undone, the resume point recorded (breakAt) and kBroke returned.
  int stepOrBreak(size_t pc);
  /// A raise to its handler (TracerExceptions.cpp; `find`: only whether
  /// one catches it, -1 if not), and the handlers' ops.
  int raiseToHandler(size_t pc, const RaisedInCapture &raised, bool find);
  int exceptionStep(const Instruction &in);
  /// What a frame-level instruction changed before it broke, to undo:
  /// symbolic values it mutated (their state before), the input table.
  std::vector<std::pair<VarPtr, Var>> journal;
  std::unique_ptr<InputTable> inputsBefore;
  void willMutate(const VarPtr &var);
  void willUpdateInputs();
  void breakAt(size_t pc, const Unsupported &error); // or rethrows, why
  OutputSpec stateOf(const VarPtr &var);
  /// Whether callee cannot run in a stub (it reads its caller's frame:
  /// super() without arguments, locals(), eval()).
  bool needsItsCallersFrame(const VarPtr &callee) const;
  /// The with-block exits a break at `in` sits inside (stack slots,
  /// innermost first); throws when a handler is not a with block's.
  std::vector<int> withExitSlots(const Instruction &in);
  void checkHandlers();
  /// What the exception handler at instruction index `at` does.
  enum class Handler { WithCleanup, Reraise, User };
  Handler handlerAt(size_t at) const;
  Location here(int line) const { return Location{current.fileName, line, 0}; }

  [[noreturn]] void unsupported(const std::string &what, int line) const;
  [[noreturn]] void unsupported(const std::string &what) const;
  VarPtr pop();
  void push(VarPtr var) { current.stack.push_back(std::move(var)); }
  VarPtr peek(size_t depth);

  //===--------------------------------------------------------------------===//
  // Sources and guards
  //===--------------------------------------------------------------------===//

  /// Turns a concrete object read from a source into a symbolic value,
  /// guarding what the capture assumes about it.
  VarPtr classify(PyObject *object, int source);
  VarPtr classifyObject(PyObject *object, int source);

  /// Tuples and lists read from a source: type and length guarded, items
  /// classified one by one. A dict with string keys: its length and every
  /// value guarded. A set of constants: its members, in order, guarded.
  VarPtr tupleOfSource(PyObject *sequence, int source);
  VarPtr dictOfSource(PyObject *dict, int source);
  VarPtr setOfSource(PyObject *set, int source);

  VarPtr tensorInput(PyObject *object, int source);

  //===--------------------------------------------------------------------===//
  // Instructions
  //===--------------------------------------------------------------------===//

  /// The next instruction's index (-1: the following one) or kReturned.
  int step(const Instruction &in);

  int jumpTarget(int offset);

  /// Whether a condition var is None / truthy, decided at capture time.
  bool truthOf(const VarPtr &condition, bool noneTest);

  int conditionalJump(const Instruction &in);
  int forIter(const Instruction &in);

  VarPtr constant(PyObject *object);

  VarPtr loadLocal(int index);
  /// LOAD_FAST_AND_CLEAR: the local's value (Null when unbound), unbound.
  VarPtr takeLocal(int index);
  /// The cell in a cell or free slot (what LOAD_CLOSURE, and 3.13's LOAD_FAST
  /// of such a slot, push), or null.
  VarPtr closureSlot(int index);

  VarPtr loadGlobal(PyObject *name);
  /// os.environ.get(name[, fallback]) / os.environ[name], guarded.
  VarPtr environmentVariable(const VarPtr &name, const VarPtr &fallback);
  /// IMPORT_NAME of a module already imported (sys.modules has it): the
  /// module, guarded by identity; importing anew would run module code.
  VarPtr importModule(PyObject *name, const VarPtr &level,
                      const VarPtr &fromList);

  VarPtr loadDeref(int index);

  /// Attributes are read only where reading cannot run user code with
  /// effects: modules, and objects whose type defines no Python-level
  /// descriptor for the name.
  VarPtr loadAttr(const VarPtr &base, PyObject *name);
  void storeAttribute(const VarPtr &owner, PyObject *name, const VarPtr &value);

  /// The source a concrete object var was read from (recorded in the guard
  /// that protects it).
  int sourceOfObject(const VarPtr &var);
  /// The same, or -1 when the object has none.
  int knownSourceOf(const VarPtr &var);
  /// Modules are guarded by type; where capture relies on which instance
  /// one is (it is returned), this pins the instance.
  void guardObjectIdentity(const VarPtr &var);

  /// f-strings of constants (assert messages) are formatted at capture:
  /// conversion (0 none, 1 str, 2 repr, 3 ascii), then format(value, spec).
  VarPtr convertValue(const VarPtr &value, int conversion);
  VarPtr formatValue(const VarPtr &value, const VarPtr &spec);

  VarPtr buildString(int count);
  VarPtr buildMap(int count);
  VarPtr buildConstKeyMap(int count);
  void setDictItem(const VarPtr &dict, const VarPtr &key, const VarPtr &value);
  void mergeInto(const VarPtr &dict, const VarPtr &other);
  void callWithUnpacking(bool hasKeywords);
  VarPtr buildTuple(int count);
  /// SET_ADD into a set var made during capture: items are constants (or
  /// objects comparable at capture), kept once.
  void addToSet(const VarPtr &set, const VarPtr &item);
  bool sameSetMember(const VarPtr &a, const VarPtr &b);

  std::vector<VarPtr> itemsOf(const VarPtr &var);
  void unpack(const VarPtr &var, int count);
  /// UNPACK_EX: `before` items, a list of the rest, `after` items.
  void unpackStarred(const VarPtr &var, int before, int after);
  VarPtr subscript(const VarPtr &container, const VarPtr &index);
  /// container[index] = value, value sharing container's memory: whether
  /// the elements written and those read provably do not meet (their
  /// ranges in the root's memory are apart), so the functional copy is
  /// eager's.
  bool assignsFromDisjointMemory(const VarPtr &container, const VarPtr &index,
                                 const VarPtr &value);
  /// ModuleDict["name"], ModuleList[i], Sequential[i] through the guarded
  /// _modules dict.
  VarPtr moduleItem(const VarPtr &container, const VarPtr &index);
  /// ParameterList[i] / ParameterDict["name"] as guarded attribute reads.
  VarPtr parameterItem(const VarPtr &container, const VarPtr &index);
  /// dict.items() / keys() / values() of a dict var, as a list var.
  VarPtr dictMethod(const std::string &method, const VarPtr &dict);

  /// BUILD_SLICE of constants: a slice object, usable as an index.
  VarPtr buildSlice(int count);
  /// A slice of start, stop and step (null: absent): a constant slice
  /// object, or a SymSlice when a bound is a symbolic size.
  VarPtr makeSlice(const VarPtr &start, const VarPtr &stop,
                   const VarPtr &step);

  /// Basic indexing (ints, slices, None, Ellipsis) as select, slice and
  /// unsqueeze nodes.
  VarPtr indexTensor(VarPtr tensor, const VarPtr &index);

  VarPtr sliceTensor(const VarPtr &tensor, PyObject *slice, int64_t dim);
  /// Indexing with tensors (gathers; masks break the graph: their shape
  /// depends on the data), kept as a call_torch of Tensor.__getitem__.
  VarPtr advancedIndex(const VarPtr &tensor, const VarPtr &index);
  /// container[index] = value on a computed tensor: the graph computes the
  /// updated copy (dynafuse.functional.setitem) and every reference to
  /// container sees it.
  void storeSubscript(const VarPtr &container, const VarPtr &index,
                      const VarPtr &value);
  /// container with container[index] = value (dynafuse.functional.setitem).
  VarPtr functionalSetItem(const VarPtr &container, const VarPtr &index,
                           const VarPtr &value);

  //===--------------------------------------------------------------------===//
  // Views and in-place updates through them (TracerAliases.cpp)
  //===--------------------------------------------------------------------===//
  /// Which values share memory in eager, and their newest values.
  TensorAliases aliases;
  /// Alias sets an in-place update changed in the current frame-level
  /// instruction, as they were (restored when it breaks).
  std::vector<std::pair<std::shared_ptr<AliasSet>, AliasSet>> aliasJournal;
  /// Whether eager lays a value out row-major for certain (inputs by their
  /// strides, computed values by their operands'): whether a reshape views.
  std::map<const Value *, bool> contiguousInEager;
  bool eagerContiguous(const Value *value);
  /// A view of a value eager lays out row-major: its strides in eager.
  bool eagerViewStrides(const Value *value, std::vector<SymExpr> &strides);
  bool viewInRowMajorOrder(const Value *value);
  /// value, or, when an update of its memory made it stale, its view chain
  /// replayed on its base's newest value. Every graph operand and output
  /// is read through this.
  Value *latestValue(Value *value);
  Value *replayView(const ViewStep &step, Value *base, bool asIs = false);
  /// Records the views node made (called by emit).
  void trackViews(const Node &node);
  /// result shares memory with base in a way capture cannot follow (a torch
  /// call returned a view): in-place updates of either are refused.
  void aliasOfUnknownKind(Value *base, Value *result, const std::string &why);
  /// x.contiguous(): x itself where eager's surely is contiguous. x.clone():
  /// a copy in x's layout where eager's is (a permuted input), else dense.
  VarPtr cloneKeepingLayout(const VarPtr &tensor);
  VarPtr viewIfContiguous(const VarPtr &tensor);
  /// x.view(...) gives `reshaped` where eager's strides of x provably allow
  /// no view (eager raises there); false when they allow one or capture
  /// cannot tell. setWasCertain: whether tensor's alias set was certain
  /// before the reshape was emitted.
  bool provablyNoView(Value *tensor, const Value *reshaped,
                      bool setWasCertain);
  /// add/sub's alpha: the second operand scaled by it (checked as eager).
  void scaleByAlpha(Op op, OpBinder::Binding &bound, const std::string &what);
  /// flatten(start_dim, end_dim) over one dim: eager returns the tensor.
  bool flattensNothing(const OpBinder::Binding &bound);
  /// Breaks where eager records an op it cannot differentiate.
  void refuseWithoutDerivative(const std::vector<Operand> &operands,
                               const std::string &what);
  /// div's graph op for its rounding_mode (div, div_floor, div_trunc);
  /// takes the attribute out of bound.
  Op divisionOp(OpBinder::Binding &bound, const std::string &what);
  /// x.unflatten(dim, sizes): a reshape that always views.
  VarPtr unflatten(const OpBinder::Binding &bound, const std::string &what);
  /// Refuses an update whose operands share memory with what it writes.
  void refuseOverlappingOperands(const Value *target, const Value *updated);
  /// The base with its view (the chain's last step) replaced by updated.
  Value *scatterThroughChain(Value *root, const std::vector<ViewStep> &chain,
                             Value *updated);
  Value *scatterStep(Value *base, const ViewStep &step, Value *updated);
  Value *sliceOf(Value *base, int64_t dim, const SymExpr &start,
                 const SymExpr &end);
  /// base with [start, start + length) along dim replaced by piece.
  Value *spliceAlong(Value *base, int64_t dim, const SymExpr &start,
                     const SymExpr &length, Value *piece);
  Value *sliceScatter(Value *base, Value *updated, const SliceBounds &bounds);
  /// A returned view of an input updated in place: the view of the graph
  /// input itself (the run writes the update back into it), so the result
  /// shares the input's memory as in eager. Other values are unchanged.
  Value *viewOfUpdatedInput(Value *value);
  /// Outputs that are views of other outputs (the root of their alias set
  /// is one) are recorded to be made as views of them per run.
  void linkOutputViews();
  std::map<const Value *, Value *> viewsOfUpdatedInputs;
  /// Whether value is a view or has views (a graph break cannot pass it to
  /// resume code without losing the aliasing).
  bool isViewOrHasViews(Value *value);

  //===--------------------------------------------------------------------===//
  // Operators and calls
  //===--------------------------------------------------------------------===//

  Operand operandOf(const VarPtr &var, const std::string &what);

  /// A graph node of op, its operands read at their newest values.
  VarPtr emit(Op op, std::vector<Operand> operands,
              std::map<std::string, Attribute> attributes = {});
  /// The same, with the operands as given (a view of an input's value
  /// before an update, for an output that must alias the input object).
  VarPtr emitAsIs(Op op, std::vector<Operand> operands,
                  std::map<std::string, Attribute> attributes);

  bool bothConstantNumbers(const VarPtr &lhs, const VarPtr &rhs);
  VarPtr foldPython(PyObject *value);
  VarPtr binaryOp(int kind, const VarPtr &lhs, const VarPtr &rhs);
  VarPtr listArithmetic(int kind, const VarPtr &lhs, const VarPtr &rhs);

  /// A torch builtin x.op_(...) outside the op table: x.copy_(src) as src
  /// broadcast and cast, others as the out-of-place op, then an in-place
  /// update of x (TracerTorchCalls.cpp).
  VarPtr functionalInPlace(PyObject *callable, const std::string &what,
                           const std::vector<VarPtr> &args,
                           const Keywords &keywords);
  /// x.op_(...) / x += y: the graph computes a new value and every reference
  /// to x's Var sees it; through views, the base gets the update scattered
  /// back and every other view of it reads the base's new value; an input
  /// updated so is written back after the run (TracerAliases.cpp).
  /// overlapChecked: the caller has shown value's operands do not overlap
  /// what it writes (item assignment).
  VarPtr updateInPlace(const VarPtr &target, const VarPtr &value,
                       bool overlapChecked = false);
  /// Adds the write-back outputs once the frame has returned.
  void addWriteBacks();
  /// Outputs viewing an input are made as strided views of it, whose
  /// backward (as_strided's) shares a gradient among overlapping elements:
  /// a training frame with an output viewing an expanded input that
  /// requires grad runs eagerly.
  void refuseViewsOfOverlappingGradInputs();
  /// Makes integer divisions the outputs do not read outputs too (unused by
  /// the caller): eager raises ZeroDivisionError for them all the same.
  void keepDivisionChecks();
  /// Refuses, or guards against, other inputs sharing the memory of an
  /// input updated in place (eager would see the update through them).
  void guardDisjointFromOtherInputs(const Value *input);

  PyObject *foldBinary(int kind, const VarPtr &lhs, const VarPtr &rhs);
  VarPtr compareOp(int kind, const VarPtr &lhs, const VarPtr &rhs);

  VarPtr negate(const VarPtr &var);

  VarPtr logicalNot(const VarPtr &var);
  VarPtr containsOp(const VarPtr &item, const VarPtr &container, bool negated);
  VarPtr isOp(const VarPtr &lhs, const VarPtr &rhs, bool inverted);
  void guardSameness(const VarPtr &lhs, const VarPtr &rhs, bool same);
  std::optional<bool> sameAtSources(const VarPtr &lhs, const VarPtr &rhs);
  /// `a is b` for tensors; guards that two inputs stay distinct objects.
  bool sameTensorObject(const VarPtr &lhs, const VarPtr &rhs);

  /// How the interpreter lays out a callable and its self-or-NULL slot
  /// under CALL's arguments: 3.11 and 3.12 put NULL (or the method) below
  /// the callable, 3.13 puts NULL (or self) above it. pushCallable splits a
  /// bound method into function and self.
  void pushCallable(const VarPtr &callable);
  void pushWithNull(const VarPtr &callable);
  struct CallTarget {
    VarPtr callee;
    VarPtr self; ///< null when the slot held NULL
  };
  CallTarget popCallTarget();

  void call(int argc);
  /// LOAD_SUPER_ATTR (3.12): super().name, or super(cls, self).name.
  void loadSuperAttr(int arg);
  /// CALL_INTRINSIC_1 (3.12): unary plus and list-to-tuple; others refused.
  VarPtr callIntrinsic(int which, const VarPtr &operand);
  VarPtr positive(const VarPtr &var);
  VarPtr listToTuple(const VarPtr &list);

  VarPtr callAny(const VarPtr &callee, const std::vector<VarPtr> &args,
                 const Keywords &keywords);

  VarPtr callTorch(const VarPtr &callee, std::vector<VarPtr> args,
                   const Keywords &keywords);

  /// A torch builtin outside the op table, kept in the graph as a
  /// call_torch extern (its result types from a run on meta tensors).
  VarPtr torchExtern(PyObject *callable, const std::string &what,
                     const std::vector<VarPtr> &args,
                     const Keywords &keywords);
  VarPtr emitTorchCall(TorchCall call, std::vector<Operand> operands);
  CallArg callArgOf(const VarPtr &var, std::vector<Operand> &operands,
                    const std::string &what);
  /// The var for a call's Python result, its tensors taken from results.
  VarPtr resultVar(PyObject *output, const std::vector<Value *> &results,
                   size_t &next);
  /// super() with no arguments inside an inlined torch.Tensor method.
  VarPtr superOfTensor(const std::vector<VarPtr> &args);
  /// super() / super(cls, self) in a method of a Python object (an
  /// nn.Module's forward calling its base class's): a proxy var (method
  /// "super") whose attributes are the Python methods found past cls,
  /// bound to self and guarded as SuperAttr sources. Null otherwise.
  VarPtr superOfObject(const std::vector<VarPtr> &args);
  VarPtr superAttr(const VarPtr &proxy, PyObject *name);
  /// An object fixed for the entry's lifetime (torch.Tensor's Python
  /// methods), with a source its inlined code's globals hang off.
  VarPtr fixedObject(const PyRef &object, const std::string &name);

  /// torch._assert(condition, message) with a condition known at capture.
  VarPtr checkedAssert(const std::vector<VarPtr> &args);

  //===--------------------------------------------------------------------===//
  // Functions, methods, cells and nn.Module calls (the CallInliner inlines
  // them)
  //===--------------------------------------------------------------------===//

  /// obj.name where type(obj) defines name as a plain Python function:
  /// a method bound to obj, its function guarded through type(obj).
  VarPtr boundMethod(const VarPtr &base, PyObject *name);

  VarPtr makeFunction(int flags);
  /// MAKE_FUNCTION's flag (3.13's SET_FUNCTION_ATTRIBUTE): only a closure.
  void setFunctionAttribute(const VarPtr &function, int flag,
                            const VarPtr &attribute);
  VarPtr makeCell(int index);
  VarPtr cellAt(int index);
  /// isinstance(x, classes) as x's kind answers it, issubclass of a pinned
  /// class; null when not judged.
  VarPtr isInstance(PyObject *callable, const std::vector<VarPtr> &args);
  /// type(x): the class of a constant, of a guarded object (its type
  /// guarded), of a container var or of a tensor; null when unknown.
  VarPtr typeOf(const VarPtr &var);
  /// all, any, sum, len, bool, sorted, tuple, list, zip, enumerate over
  /// containers.
  VarPtr containerBuiltin(PyObject *callable, const std::vector<VarPtr> &args,
                          const Keywords &keywords);
  VarPtr sortedItems(const std::vector<VarPtr> &items);
  /// getattr(obj, "name"[, default]) and hasattr(obj, "name").
  VarPtr attributeBuiltin(PyObject *callable, const std::vector<VarPtr> &args);
  /// no_grad() / enable_grad() / inference_mode() / torch.autocast(...).
  VarPtr gradModeContext(PyObject *callable, const std::vector<VarPtr> &args,
                         const Keywords &keywords);
  /// BEFORE_WITH: enters a grad-mode or autocast context.
  void enterWith(const VarPtr &context);
  /// The __exit__ of a torch.no_grad() / enable_grad() entered before the
  /// frame resumed (object read from source): it restores the grad mode in
  /// its `prev`, guarded. Null for other objects.
  VarPtr gradModeExit(PyObject *object, int source);
  /// Whether op's results require grad (an operand does); breaks before an
  /// op without a derivative rule, or inside a no_grad block.
  bool checkDifferentiable(Op op, std::vector<Operand> &operands);
  /// The graph input holding this run's random seed on `device`.
  Value *randomSeed(const std::string &device);
  /// Whether overwriting target in place must keep its history (it
  /// requires grad, in grad mode), and the update that does: x.zero_(),
  /// x.fill_(v) and x.copy_(src) as a where that keeps x's.
  bool overwritesHistory(Value *target);
  VarPtr overwriteKeepingHistory(Value *target, Operand value);
  /// F.dropout in training mode: x where uniform numbers reach p, scaled by
  /// 1 / (1 - p); zero elsewhere.
  VarPtr trainingDropout(Value *x, double p);
  /// F.batch_norm: the eval op, or in training mode batch_norm_train with
  /// the running statistics (args 1 and 2) updated in place by momentum.
  VarPtr batchNorm(OpBinder::Binding &bound, const std::vector<VarPtr> &args,
                   const Keywords &keywords);
  /// F.scaled_dot_product_attention on q, k or v requiring grad (grad mode
  /// on): ATen's CPU flash kernel (sdpa_flash), whose rule runs its
  /// backward. Null where that kernel does not apply: the call stays a
  /// call_torch extern (a graph break in training, with the reason).
  VarPtr trainingAttention(PyObject *callable, const std::vector<VarPtr> &args,
                           const Keywords &keywords);
  /// Guards that obj (read from a source) still lacks attribute name.
  void guardMissingAttribute(const VarPtr &object, PyObject *name);

  //===--------------------------------------------------------------------===//
  // Exceptions raised by traced code (TracerObjects.cpp)
  //===--------------------------------------------------------------------===//

  /// BuiltinError(constants...): the exception, made at capture (null for
  /// other calls).
  VarPtr makeException(PyObject *callable, const std::vector<VarPtr> &args,
                       const Keywords &keywords);
  /// RAISE_VARARGS: throws RaisedInCapture.
  [[noreturn]] void raiseException(const VarPtr &exception);

  //===--------------------------------------------------------------------===//
  // Torch calls decided at capture (TracerTorchValues.cpp)
  //===--------------------------------------------------------------------===//

  /// torch.finfo / iinfo, torch.tensor of a constant, str() / repr() of
  /// constants and classes; null for other calls.
  VarPtr foldTorchValue(PyObject *callable, const std::vector<VarPtr> &args,
                        const Keywords &keywords);
  VarPtr constantTensor(const VarPtr &data, const Keywords &keywords);
  VarPtr tensorOfList(const VarPtr &data, std::optional<DType> dtype,
                      const std::string &device);
  VarPtr tensorTo(const VarPtr &tensor, const std::vector<VarPtr> &args,
                  const Keywords &keywords);

  //===--------------------------------------------------------------------===//
  // Python objects (PythonObjects.cpp) and their identities in outputs
  // (TracerObjects.cpp)
  //===--------------------------------------------------------------------===//

  /// Instances of Python classes made during capture, and the class
  /// machinery (properties, slots) they and guarded objects share.
  PythonObjects objects{*this};
  /// The handler of each kind of value: the generic operations (itemsOf,
  /// iterate, subscript, storeSubscript, truthOf, containsOp, outputOf,
  /// stateOf) dispatch through it.
  ValueHandlers values{*this, objects};
  /// A Dict var's entry for a key's text (DictKeys.h; null when absent),
  /// its update, the text of a key var (else unsupported: `what`).
  VarPtr dictEntry(const VarPtr &dict, const std::string &key);
  void setDictEntry(const VarPtr &dict, const std::string &key,
                    const VarPtr &value);
  std::string dictKeyOf(const VarPtr &key, const std::string &what);
  /// Lists, dicts and objects made during capture have one id each; an
  /// output (the return value, or the state at a break) spells each out
  /// once and refers to it by id after (OutputSpec::Kind::SameObject).
  std::map<const Var *, std::pair<VarPtr, int>> objectIds;
  std::set<int> emittedObjects;
  int objectIdOf(const VarPtr &var);
  bool seenInThisOutput(const VarPtr &var, OutputSpec &spec);

  //===--------------------------------------------------------------------===//
  // Stores into objects that existed before the frame (TracerStores.cpp)
  //===--------------------------------------------------------------------===//

  /// Stores capture made, in order: later reads see them, and each run
  /// repeats them (CapturedFrame::stores). A frame-level instruction that
  /// breaks drops the ones it made.
  struct PendingStore {
    bool item = false;
    PyObject *owner = nullptr; ///< borrowed: the owner's source keeps it
    int ownerSource = -1;
    std::string name;
    VarPtr value;
  };
  std::vector<PendingStore> pendingStores;
  /// obj.name = value on an object read from a source whose type uses the
  /// default __setattr__; false when capture cannot model the store.
  bool storeIntoObject(const VarPtr &owner, PyObject *name, const VarPtr &value);
  /// A dict read from one of the frame's own locals (its **kwargs).
  bool isFramesOwnDict(const VarPtr &dict) const;
  /// d[key] = value on the frame's own dict (a Dict var).
  void storeIntoSourceDict(const VarPtr &dict, const std::string &key,
                           const VarPtr &value);
  /// d.pop(key[, default]) on a dict var (made during capture, or the
  /// frame's own: then the removal is repeated by each run).
  VarPtr popDictItem(const VarPtr &dict, const VarPtr &key,
                     const VarPtr &fallback);
  /// The value capture stored into owner.name, or null.
  VarPtr storedAttribute(PyObject *owner, const std::string &name) const;
  /// The stores' specs (after the return value's or the break state's, in
  /// the same output, so objects keep their identity).
  std::vector<StoreEffect>
  storeEffects(const std::function<OutputSpec(const VarPtr &)> &valueSpec);

  //===--------------------------------------------------------------------===//
  // Tensor metadata (static under the tensor guards)
  //===--------------------------------------------------------------------===//

  VarPtr sizesTuple(const TensorType &type);
  VarPtr integerConstant(int64_t value);
  VarPtr tensorAttribute(const VarPtr &base, const std::string &attribute);

  /// Whether a graph value requires grad: inputs as guarded (possible under
  /// no_grad); computed values never do (capture runs only when grad mode is
  /// off or no input requires grad).
  bool inputRequiresGrad(const Value *value) const;

  VarPtr unguardedObject(PyRef object);

  VarPtr tensorMetadata(const VarPtr &tensor, const std::string &method,
                        const std::vector<VarPtr> &args);

  //===--------------------------------------------------------------------===//
  // Iteration (unrolled)
  //===--------------------------------------------------------------------===//

  /// Iterators over tuples, lists, ranges and module containers
  /// (nn.Sequential, nn.ModuleList) are unrolled at capture.
  VarPtr iterate(const VarPtr &iterable);

  VarPtr iterateModules(const VarPtr &container, VarPtr iterator);
  /// module._modules as a dict var: its length and every entry guarded.
  VarPtr modulesOf(const VarPtr &module);
  /// module.modules() / named_modules() / children() / named_children():
  /// the module tree read through guarded _modules dicts; null when method
  /// is none of these (or has arguments).
  VarPtr walkModules(PyObject *method, const VarPtr &self, size_t argCount);
  VarPtr pairVar(const std::string &name, const VarPtr &module);
  /// Appends module's submodules (recursively when asked) not yet in
  /// visited (objects with their sources), each once, as nn.Module's
  /// walks do.
  void collectSubmodules(const VarPtr &module, const std::string &prefix,
                         bool named, bool recurse,
                         std::vector<std::pair<PyObject *, int>> &visited,
                         std::vector<VarPtr> &out);

  /// Whether callable is the frame's builtin `name`.
  bool isBuiltin(PyObject *callable, const char *name) const;
  /// Pure builtins (float, int, min, ...) and math functions on constants
  /// run at capture time.
  VarPtr foldBuiltin(PyObject *callable, const std::vector<VarPtr> &args,
                     const Keywords &keywords);
  /// torch.device("cpu"), torch.device(type="cuda", index=0): made at
  /// capture time from constants (FX-generated code spells devices so).
  VarPtr foldTorchDevice(PyObject *callable, const std::vector<VarPtr> &args,
                         const Keywords &keywords);

  VarPtr bindAndEmit(const OpBinding &binding, const std::string &what,
                     const std::vector<VarPtr> &args,
                     const Keywords &keywords);

  //===--------------------------------------------------------------------===//
  // Return value
  //===--------------------------------------------------------------------===//

  OutputSpec outputOf(const VarPtr &var);

  OutputSpec tensorOutput(Value *value);
};

} // namespace capture
} // namespace dynafuse

#endif

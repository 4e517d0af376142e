//===- TorchBridge.h - The torch runtime's public interface -----*- C++ -*-===//
//
// The only interface to PyTorch's C++ API that the rest of Dynafuse sees
// (this header includes no torch header). Implemented by lib/Torch, the one
// library compiled against torch's headers: TorchTensors.cpp (tensor
// metadata for guards and kernel arguments, views, global torch state),
// TorchAllocators.cpp (tensors from the caching allocator),
// TorchExternOps.cpp (extern ops through ATen), TorchGraphReplay.cpp
// (graphs replayed op by op by ATen), TorchStreams.cpp (torch's current
// CUDA stream, read through Python), TorchAutograd.cpp (the autograd node
// of compiled training graphs), TorchCall.cpp (torch callables kept inside
// the graph), TorchContext.cpp (running a compiled module with ATen),
// TorchThreadPool.cpp (kernels on torch's threads) and
// TorchPrepackedWeights.h (convolution and linear weights kept packed for
// oneDNN and MKL: TorchPrepackedWeights.cpp, TorchPackedConvolutions.cpp,
// TorchPackedGemms.cpp, TorchOneDnnMatmul.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_TORCH_TORCHBRIDGE_H
#define DYNAFUSE_TORCH_TORCHBRIDGE_H

#include "dynafuse/Runtime/BackwardProgram.h"
#include "dynafuse/Graph/Graph.h"
#include "dynafuse/Runtime/CachingAllocator.h"
#include "dynafuse/Runtime/Executor.h"
#include "dynafuse/Support/Options.h"
#include "dynafuse/Support/PyRef.h"

#include <Python.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace dynafuse {

struct TensorMeta {
  /// at::ScalarType as an integer (covers dtypes Dynafuse cannot compile).
  int scalarType = -1;
  std::optional<DType> dtype;
  std::string device;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  bool requiresGrad = false;
  char *data = nullptr;
  std::string dtypeName;
  /// The device as c10's type and index, for cheap guard checks.
  int deviceType = 0;
  int deviceIndex = -1;
};

/// True for torch.Tensor and nn.Parameter exactly (not other subclasses).
bool isPlainTensor(PyObject *object);
/// The class torch.Tensor (borrowed).
PyObject *tensorClass();
/// A torch.Tensor (any subclass) on a CUDA device.
bool isCudaTensor(PyObject *object);
/// Any torch.Tensor instance, subclasses included.
bool isAnyTensor(PyObject *object);
/// How tensor types spell the device a torch.device or a device string
/// names: "cpu", "cuda:0" ("cuda" alone is device 0); empty for any other
/// object.
std::string deviceSpelling(PyObject *deviceOrString);
/// Requires isPlainTensor(object).
TensorMeta describeTensor(PyObject *object);
/// Cheap guard check: same dtype, device, sizes, strides and requires_grad.
bool tensorMatches(PyObject *object, const TensorMeta &expected);
/// The part of tensorMatches that is not about the shape (dtype, device,
/// requires_grad); the tensor's sizes and strides are returned for a
/// symbolic check.
bool tensorKindMatches(PyObject *object, const TensorMeta &expected,
                       std::vector<int64_t> &sizes,
                       std::vector<int64_t> &strides);
/// Data, sizes and strides only (the per-call argument path).
void tensorView(PyObject *object, char **data, std::vector<int64_t> &sizes,
                std::vector<int64_t> &strides);

/// A new contiguous tensor; returns a new reference and its data pointer.
PyObject *newTensor(const std::vector<int64_t> &sizes, DType dtype,
                    const std::string &device, char **data);

/// For the duration of a compiled graph's run, torch's CPU allocations on
/// this thread come from the runtime's caching allocator (unless
/// Options::cachingAllocator is off or under guard pages), and with a
/// planner the run's large blocks follow the program's allocation plan
/// (AllocationPlan.h): the scope opens the run, and closing it lets the
/// planner learn from the run's trace.
class PooledTorchAllocations {
public:
  /// `planner`: the compiled program's (null: no plan, nothing traced).
  explicit PooledTorchAllocations(AllocationPlanner *planner = nullptr);
  ~PooledTorchAllocations();
  PooledTorchAllocations(const PooledTorchAllocations &) = delete;
  PooledTorchAllocations &operator=(const PooledTorchAllocations &) = delete;
  /// The run's allocations, for the blocks the run allocates itself (null
  /// without a planner).
  RunAllocations *run() const { return planned.get(); }

private:
  bool active = false;
  AllocationPlanner *planner = nullptr;
  std::shared_ptr<RunAllocations> planned;
  /// The run the thread's torch allocations went to before this scope.
  RunAllocations *outer = nullptr;
};

/// Packing a weight, within a run: its allocations are no part of the
/// run's trace (packing happens once and its copy outlives the run, so the
/// first run's trace would otherwise differ from every later one's), and
/// closing the scope gives the pool blocks its temporaries left cached back
/// to the system (decision 88). A model's weights mostly grow layer by
/// layer: each packed copy lands beside the hole its temporaries left, a
/// hole no later, larger temporary fits, and resnet18 at batch 1 kept 30 MB
/// of them in the pool. (Blocks another thread released meanwhile go back
/// too: only their pages, which a later request faults in again.)
class WeightPackingAllocations {
public:
  WeightPackingAllocations();
  ~WeightPackingAllocations();
  WeightPackingAllocations(const WeightPackingAllocations &) = delete;
  WeightPackingAllocations &operator=(const WeightPackingAllocations &) = delete;

private:
  RunAllocations *suspended;
  /// CachingAllocator::clock() when the scope opened.
  double opened;
};

/// Whether tensors Dynafuse makes come from the runtime's caching allocator
/// (Options::cachingAllocator, or guard pages).
bool cachingAllocatorInUse();

/// torch.cuda.current_stream(0).cuda_stream (a CUstream; null for the
/// default stream): where the cuda backend queues a graph's kernels, so
/// they order with torch's own work. Throws Error when unavailable.
void *currentTorchCudaStream();

/// Torch's CPU allocator for the process: with GuardPages::All the
/// guard-page allocator (inputs, parameters and ATen's results guarded
/// too); otherwise one that pools allocations made during compiled runs
/// (PooledTorchAllocations) and forwards the rest to the allocator it
/// replaced. Called once, when the extension loads, after
/// CachingAllocator::configureGlobal(options).
void installTorchAllocators(const Options &options);

struct TorchCall;

/// The graph inputs of a forward run (the module's input declarations and
/// the objects passed), for extern steps whose state follows a parameter.
struct ForwardInputs {
  const std::vector<LoopBuffer> *names = nullptr;
  const std::vector<PyObject *> *objects = nullptr;
};

/// Weights kept packed between the runs of one compiled inference entry,
/// per parameter version: convolutions' in oneDNN's blocked layout, linear
/// layers' in the layout of the GEMM library running them
/// (TorchPrepackedWeights.h). `gemmLibrary`: that library, as
/// gemmLibraryFor resolved it (the entry's other matrix products use it
/// too).
class PrepackedWeights;
std::shared_ptr<PrepackedWeights>
newPrepackedWeights(std::optional<GemmLibrary> gemmLibrary);
/// The library that runs the matrix products of inference entries on this
/// machine for the `requested` one (DYNAFUSE_GEMM_LIBRARY; Auto: MKL's
/// packed sgemm on Intel CPUs, oneDNN elsewhere), the other when ATen lacks
/// it; nullopt when ATen has neither.
std::optional<GemmLibrary> gemmLibraryFor(GemmLibrary requested);
/// Marks weight_prepacked the nodes of an inference graph whose weight is a
/// graph input and which the runtime may run with it kept packed: CPU
/// float32 conv2d when ATen has oneDNN (with foldBatchNorm, then folds
/// their batch norms and activations into them: fuseConvolutionEpilogues,
/// conv2d_bn nodes), and float32 linear and addmm whose rows `gemmLibrary`
/// runs (TorchPackedGemms.cpp; MKL: static rows only).
void markPrepackedWeights(Graph &graph, bool foldBatchNorm,
                          std::optional<GemmLibrary> gemmLibrary);

/// What an extern step of a forward run may keep between runs.
struct ExternReuse {
  PrepackedWeights *weights = nullptr;
  /// The step (its address keys the kept state: stable for the module).
  const ProgramStep *step = nullptr;
  ForwardInputs inputs;
};

/// The extern results of a run, kept as ATen tensors by the names of the
/// buffers they define: no Python object is made for one (a wrap, a
/// deallocation and work for Python's cyclic collector, per result per
/// call) unless it becomes a result of the run. Opaque here (this header
/// stays free of ATen); defined with the extern ops.
class HeldTensors {
public:
  HeldTensors();
  ~HeldTensors();
  HeldTensors(const HeldTensors &) = delete;
  HeldTensors &operator=(const HeldTensors &) = delete;
  /// Drops the tensor of `name` (after its last reader), if held.
  void release(const std::string &name);
  /// A new reference to the Python tensor of `name`; null when none is held.
  PyObject *wrap(const std::string &name) const;
  struct Impl;

private:
  std::unique_ptr<Impl> impl;
  friend struct HeldTensorsAccess;
};

/// Runs extern op `op` with ATen on non-owning views of args; keeps its
/// results in `held` under `names`, each laid out as its entry of
/// `expected` declares, and fills in their data. Throws Error when a
/// result does not have the expected sizes. A step marked
/// weight_prepacked (conv2d, conv2d_bn, a linear layer's matmul, addmm)
/// runs with its weight kept packed in `reuse.weights` when there is one.
void runExternOp(Op op, const std::map<std::string, Attribute> &attributes,
                 const std::vector<TensorArg> &args,
                 std::vector<TensorArg> &expected, const std::string &device,
                 HeldTensors &held, const std::vector<std::string> &names,
                 const ExternReuse &reuse = {});

/// A tensor on the meta device with type's (static) sizes and strides, for
/// finding what a torch callable returns without running it.
PyObject *newMetaTensor(const TensorType &type);
/// A CPU tensor of zeros with type's (static) sizes and strides.
PyObject *newZeroTensor(const TensorType &type);
/// A tensor viewing arg's memory without owning it (valid while the buffer
/// lives).
PyObject *wrapTensorView(const TensorArg &arg, const std::string &device);
/// base.as_strided(sizes, strides, base.storage_offset() + offset): a view
/// sharing base's memory (new reference).
PyObject *viewOfTensor(PyObject *base, const std::vector<int64_t> &sizes,
                       const std::vector<int64_t> &strides, int64_t offset);
/// Whether two tensors use the same storage.
bool tensorsShareStorage(PyObject *a, PyObject *b);
/// dst.copy_(src) without autograd (writing back an input updated in
/// place).
void copyIntoTensor(PyObject *dst, PyObject *src);
/// A tensor's strides when they are a dense permutation other than
/// row-major (channels-last, a transpose); empty otherwise.
std::vector<int64_t> permutedDenseStrides(PyObject *object);
/// Whether a tensor is a view of another (its result aliases an input).
bool tensorIsView(PyObject *object);
/// Takes a tensor a torch callable returned as the buffer `expected`
/// describes: copied when it shares memory with one of `inputs`, laid out
/// with expected's strides, checked against expected's sizes and dtype. Returns
/// a new reference and its data.
PyObject *adoptTorchResult(PyObject *result,
                           const std::vector<PyObject *> &inputs,
                           const TensorArg &expected, char **data);

/// Like newTensor, with explicit strides (a permuted dense layout).
PyObject *newStridedTensor(const std::vector<int64_t> &sizes,
                           const std::vector<int64_t> &strides, DType dtype,
                           const std::string &device, char **data);

/// After a training entry's forward run: a DynafuseBackward autograd node
/// taking the gradients of the program's tangent outputs and giving those
/// of the forward inputs it differentiates, with what the backward reads
/// saved (SavedVariables: a later in-place change of them raises eager's
/// error at backward time). outputs: per forward module output, the tensor
/// the run returns for it; made: whether the run made it (it then gets the
/// node as its grad_fn; inputs and views of inputs keep their own).
/// torchCalls: the callables of the backward's call_torch steps.
/// symbols: size symbols the forward's inputs do not give (Python ints').
void attachBackward(const std::shared_ptr<const BackwardProgram> &program,
                    std::shared_ptr<const std::vector<TorchCall>> torchCalls,
                    const std::vector<PyObject *> &inputs,
                    const std::vector<PyObject *> &outputs,
                    const std::vector<bool> &made,
                    const std::map<std::string, int64_t> &symbols = {});

/// A 0-dim int64 tensor on `device` holding a number drawn from torch's
/// default generator of that device (new reference; null with a Python
/// error set when it fails). torch.manual_seed makes the draws repeat.
PyObject *newRandomSeed(const std::string &device);

bool gradModeEnabled();
/// torch.autocast's thread state on the two devices it casts for: whether
/// it is on, and the lower precision type it casts to (kept while it is
/// off: a torch.autocast(device) block inside a frame casts to it).
struct AutocastState {
  bool cpu = false;
  DType cpuType = DType::BF16;
  bool cuda = false;
  DType cudaType = DType::F16;
  bool any() const { return cpu || cuda; }
  bool operator==(const AutocastState &other) const {
    return cpu == other.cpu && cuda == other.cuda && cpuType == other.cpuType &&
           cudaType == other.cudaType;
  }
};
AutocastState autocastState();
/// The 16-bit float types whose CPU GEMMs and convolutions ATen runs
/// without a fast kernel on this host (oneDNN's bf16 needs AVX-512, its
/// f16 AVX512-FP16 or AMX): computeHalfProductsInFloat32 computes them in
/// f32 instead.
std::set<DType> slowHalfProductTypes();
/// While alive, autocast is off on this thread (a compiled graph carries
/// autocast's casts itself: its ATen calls must not cast again). Does
/// nothing when autocast was off.
class AutocastSuspended {
public:
  explicit AutocastSuspended(const AutocastState &state);
  ~AutocastSuspended();
  AutocastSuspended(const AutocastSuspended &) = delete;
  AutocastSuspended &operator=(const AutocastSuspended &) = delete;

private:
  AutocastState suspended;
};
/// While alive, the thread's autocast state is `wanted` (capture's probe of
/// what an extern computes under it); the state before comes back after.
class AutocastApplied {
public:
  explicit AutocastApplied(const AutocastState &wanted);
  ~AutocastApplied();
  AutocastApplied(const AutocastApplied &) = delete;
  AutocastApplied &operator=(const AutocastApplied &) = delete;

private:
  AutocastState before;
};
bool defaultDtypeIsFloat32();
/// A TorchFunctionMode (torch.set_default_device installs one) or a
/// TorchDispatchMode is active: compiled code would bypass it, so capture
/// refuses and entries do not run.
bool torchModesActive();
/// Converts a torch.dtype object; nullopt for other objects or dtypes.
std::optional<DType> dtypeFromObject(PyObject *object);

//===----------------------------------------------------------------------===//
// Torch callables kept inside the graph (TorchCall.cpp)
//
// A torch op the compiler cannot lower stays in the graph as a call_torch
// extern node instead of splitting it. The callable and its arguments, with
// graph operands in place of tensors, are kept with the captured frame;
// capture finds the result types by calling it on meta tensors, and every
// run calls it on views of the step's buffers.
//===----------------------------------------------------------------------===//
/// One argument: a graph operand, a constant, or a tuple or list of them.
struct CallArg {
  enum class Kind { Operand, Constant, Tuple, List };
  Kind kind = Kind::Constant;
  /// Operand: the index among the node's operands.
  int operand = -1;
  PyRef constant;
  std::vector<CallArg> items;

  /// "%0", "768", "(%1, None)".
  std::string str() const;
};

struct TorchCall {
  PyRef callable;
  /// What the user called, e.g. "torch._native_multi_head_attention".
  std::string target;
  std::vector<CallArg> args;
  std::vector<std::pair<std::string, CallArg>> keywords;
  /// Per slot of the flattened result (see flattenResult): the graph
  /// result it holds, or -1 for None.
  std::vector<int> resultOfSlot;
  /// Set when autocast casts inside the callable's ATen kernel (capture
  /// probed it): every call runs under this state, as eager's did.
  std::optional<AutocastState> autocast;
  /// The in-place method the user called when `callable` is its
  /// out-of-place form (`x.index_copy_` traced as `index_copy` and a
  /// write-back); null otherwise. Steps marked in_place
  /// (Loop/InPlaceUpdates.h) call it on the caller's tensor.
  PyRef inPlaceCallable;

  /// "(%0, %1, 768, need_weights=False)".
  std::string signature() const;
  /// The positional and keyword arguments of a call with tensors[i] for
  /// operand i.
  std::pair<PyRef, PyRef>
  arguments(const std::vector<PyObject *> &tensors) const;
  /// Calls the callable (inPlace: inPlaceCallable) with tensors[i] for
  /// operand i. Returns a new reference, or null with the Python error set.
  PyObject *invoke(const std::vector<PyObject *> &tensors,
                   bool inPlace = false) const;
};

/// The slots of a callable's result in order: a tensor, None (null), or
/// tuples and lists of them, nested. False when it holds anything else.
bool flattenResult(PyObject *result, std::vector<PyObject *> &slots);

/// Fetches and clears the pending Python error as "Type: message".
std::string takePythonError();

/// Runs call on views of args; fills in each result's data and keeps the
/// tensors holding it in `kept` (one per result). A result that comes back
/// None where capture saw an empty tensor (ops whose meta kernel returns
/// empty tensors for results they leave out) is an empty tensor.
void runTorchCall(const TorchCall &call, const std::vector<TensorArg> &args,
                  std::vector<TensorArg> &results, const std::string &device,
                  std::vector<PyRef> &kept);

/// Runs the gradient of call (a call_torch step with grad_inputs): args are
/// the forward operands, then the gradients of the forward results listed
/// in gradOutputs; results, the gradients of the operands listed in
/// gradInputs. The callable runs again on the operands under torch's
/// autograd, which differentiates it (TorchCallGradients.cpp).
void runTorchCallGradient(const TorchCall &call,
                          const std::vector<int64_t> &gradInputs,
                          const std::vector<int64_t> &gradOutputs,
                          const std::vector<TensorArg> &args,
                          std::vector<TensorArg> &results,
                          const std::string &device, std::vector<PyRef> &kept);

/// A copy of `calls` whose last owner frees it holding the GIL (autograd
/// nodes are freed on any thread).
std::shared_ptr<const std::vector<TorchCall>>
sharedTorchCalls(const std::vector<TorchCall> &calls);

/// Why capture cannot differentiate call through torch's autograd (empty
/// when it can): it draws random numbers, no ATen operator is known for
/// it, or its gradient fails on meta tensors of `operandTypes` (the
/// operands listed in `requiringGrad` requiring grad).
std::string
torchCallGradientRefusal(const TorchCall &call,
                         const std::vector<TensorType> &operandTypes,
                         const std::vector<size_t> &requiringGrad);

/// Runs call's in-place form on `target`, the caller's tensor of its first
/// argument (a step marked in_place): its one result is `target` itself.
/// False, having run nothing, when target's layout is not the result's
/// declared one (the caller then runs the out-of-place form).
bool runTorchCallInPlace(const TorchCall &call, PyObject *target,
                         const std::vector<TensorArg> &args,
                         std::vector<TensorArg> &results,
                         const std::string &device, std::vector<PyRef> &kept);

//===----------------------------------------------------------------------===//
// Running a compiled module with ATen (TorchContext.cpp)
//
// The execution context of compiled runs inside Python: buffers are torch
// tensors from the caching allocator, extern ops run through ATen, and
// call_torch steps call their captured callables. Every tensor it makes is
// kept (by buffer name), so a run's outputs can be handed back. Used for
// forward runs (lib/Frontend/Entry/RunEntry.cpp) and backward runs
// (TorchAutograd.cpp); the caller holds the GIL.
//===----------------------------------------------------------------------===//
/// Storage and extern ops through ATen; keeps every tensor it makes so
/// outputs can be returned.
class TorchContext : public ExecutionContext {
public:
  TorchContext(const std::vector<TorchCall> &torchCalls, void *stream)
      : torchCalls(torchCalls), stream(stream) {}
  char *allocate(const ProgramStep &step, const std::vector<int64_t> &sizes,
                 const std::vector<int64_t> &strides, bool escapes) override;
  void *deviceStream() const override { return stream; }
  void runExtern(const ProgramStep &step, const std::vector<TensorArg> &args,
                 std::vector<TensorArg> &results) override;
  /// The Python tensor of buffer `name` (a module output): an allocation's,
  /// a torch call's, or an extern result's, wrapped now.
  PyRef output(const std::string &name) const;
  /// Frees an intermediate after its last reader (an extern result's
  /// tensor, a scratch block back to the pool).
  void release(const std::string &buffer) override;
  /// Allocations and torch calls' results, as Python tensors.
  std::map<std::string, PyRef> tensors;
  /// Extern results, as ATen tensors.
  HeldTensors held;
  /// The run's scratch buffers by name (returned to the pool when released
  /// or with the context).
  struct ReleaseBlock {
    void operator()(void *block) const {
      CachingAllocator::global().release(block);
    }
  };
  using ScratchBlock = std::unique_ptr<void, ReleaseBlock>;
  std::map<std::string, ScratchBlock> scratch;
  /// A forward run of an inference entry: the entry's prepacked weights
  /// and the run's inputs (null and empty elsewhere).
  PrepackedWeights *weights = nullptr;
  ForwardInputs inputs;
  /// The run's planned allocations (PooledTorchAllocations::run; null:
  /// scratch blocks are not planned).
  RunAllocations *run = nullptr;

private:
  const TorchCall &torchCallOf(const ProgramStep &step) const;
  /// The caller's tensor a step marked in_place updates (its first
  /// argument, a forward input); null when unmarked or outside a forward
  /// run.
  PyObject *inPlaceTarget(const ProgramStep &step) const;
  const std::vector<TorchCall> &torchCalls;
  /// torch's current CUDA stream for the cuda backend, else null.
  void *stream;
};

/// Makes torch's intra-op thread pool the one parallel kernels run on,
/// unless `numThreads` (Options::numThreads) is at least 1: then Dynafuse's
/// own pool (configureThreadPool) is used.
void useTorchThreadPool(int numThreads);

} // namespace dynafuse

#endif

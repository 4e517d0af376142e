//===- TorchAutograd.cpp - The autograd node of compiled training graphs --===//
//
// A training entry's forward run hangs one DynafuseBackward node on the
// tensors it made: autograd then calls the node with their gradients, and
// the node runs the entry's compiled backward program and hands back the
// gradients of the forward inputs. Its next edges are the inputs' own
// (AccumulateGrad for leaves, so .grad accumulates as in eager; the
// grad_fn of a non-leaf, so the chain reaches earlier graphs), and what the
// backward reads is held in SavedVariables (an in-place change before the
// backward, or a second backward after the first freed them, raises
// eager's error).
//
// A backward asked for a graph of its own (create_graph=True: a gradient
// penalty, a Hessian-vector product) cannot use the compiled backward,
// whose kernels autograd cannot see into. The node then replays the
// forward with ATen from the inputs it kept (TorchGraphReplay.cpp) and
// differentiates the replay with autograd, as eager would have: that call
// runs eagerly, with a logged reason.
//
// The node is hand-written rather than a torch::autograd::Function: the
// Function API changed between torch releases, and so did the pointer
// type of nodes (std::shared_ptr up to 2.13, c10::intrusive_ptr from 2.14),
// which NodePtr and makeNode hide.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Torch/TorchBridge.h"

#include "dynafuse/Support/PyRef.h"
#include "TorchATenOps.h"

#include "dynafuse/Support/Logging.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <mutex>
#include <type_traits>

namespace dynafuse {
namespace {

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;
using NodePtr = decltype(torch::autograd::Edge::function);

template <typename T, typename... Args> NodePtr makeNode(Args &&...args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<Node>>)
    return std::make_shared<T>(std::forward<Args>(args)...);
  else
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
}

/// Holds the GIL for a scope (the autograd engine calls nodes without it).
class GILHeld {
public:
  GILHeld() : state(PyGILState_Ensure()) {}
  ~GILHeld() { PyGILState_Release(state); }

private:
  PyGILState_STATE state;
};

class DynafuseBackward : public Node {
public:
  DynafuseBackward(std::shared_ptr<const BackwardProgram> program,
                   torch::autograd::edge_list &&edges)
      : Node(std::move(edges)), program(std::move(program)) {}

  std::string name() const override { return "DynafuseBackward"; }

  variable_list apply(variable_list &&grads) override;

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (SavedVariable &variable : saved)
      variable.reset_data();
    for (SavedVariable &variable : forwardInputs)
      variable.reset_data();
  }

  /// The gradients by an ATen replay of the forward that autograd records
  /// (create_graph=True).
  variable_list applyByReplay(variable_list &&grads);

  std::shared_ptr<const BackwardProgram> program;
  /// The callables of the program's call_torch gradient steps (null when
  /// it has none).
  std::shared_ptr<const std::vector<TorchCall>> torchCalls;
  /// Per backward input: what it reads from the forward (tangents: none).
  std::vector<SavedVariable> saved;
  /// Every forward input, when the program's forward can be replayed.
  std::vector<SavedVariable> forwardInputs;
  /// Per tangent: the node input its gradient arrives at, or -1 when the
  /// forward's output was not made by the run (an input, or a view of an
  /// input or of another output: autograd routes its gradient around this
  /// node), and its sizes (what the module is told when none arrives).
  std::vector<int> tangentSlot;
  std::vector<std::vector<int64_t>> tangentSizes;
  /// The size symbols' values in the forward run.
  std::map<std::string, int64_t> forwardSymbols;
};

variable_list DynafuseBackward::applyByReplay(variable_list &&grads) {
  TORCH_CHECK(program->replayableForward,
              "dynafuse: double backward (create_graph=True) through the "
              "compiled graph '",
              program->name, "' is not supported: ", program->replayBlocked,
              "; compile the function with dynafuse.compile(..., "
              "disable=True) to run it eagerly");
  std::vector<at::Tensor> inputs;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (SavedVariable &variable : forwardInputs)
      inputs.push_back(variable.unpack());
  }
  logLine("graph_breaks",
          "double backward (create_graph=True) through '" + program->name +
              "': its forward is replayed eagerly by ATen for this call");
  std::vector<at::Tensor> outputs;
  try {
    outputs = replayGraphWithATen(*program->replayableForward, inputs);
  } catch (const Error &error) {
    TORCH_CHECK(false, "dynafuse: double backward (create_graph=True) "
                       "through the compiled graph '",
                program->name, "' failed: ", error.what());
  }
  std::vector<at::Tensor> roots, rootGrads;
  std::vector<bool> arrived;
  for (size_t t = 0; t < tangentSlot.size(); ++t) {
    int slot = tangentSlot[t];
    arrived.push_back(slot >= 0 && grads.at(size_t(slot)).defined());
    const at::Tensor &output =
        outputs.at(size_t(program->tangentOutputs[t]));
    if (arrived.back() && output.requires_grad()) {
      roots.push_back(output);
      rootGrads.push_back(grads[size_t(slot)]);
    }
  }
  std::vector<at::Tensor> wanted;
  for (int input : program->gradientOf)
    wanted.push_back(inputs.at(size_t(input)));
  variable_list gradients(wanted.size());
  if (!roots.empty())
    gradients = torch::autograd::grad(roots, wanted, rootGrads,
                                      /*retain_graph=*/true,
                                      /*create_graph=*/true,
                                      /*allow_unused=*/true);
  for (size_t k = 0; k < gradients.size(); ++k) {
    bool reached = false;
    for (int from : program->tangentsOfGradient.at(k))
      reached = reached || arrived.at(size_t(from));
    // As the compiled backward: undefined when no tangent it is computed
    // from arrived, zeros when one did and the replay found no path.
    if (!reached)
      gradients[k] = at::Tensor();
    else if (!gradients[k].defined())
      gradients[k] = at::zeros_like(wanted[k]);
  }
  return gradients;
}

variable_list DynafuseBackward::apply(variable_list &&grads) {
  if (at::GradMode::is_enabled())
    return applyByReplay(std::move(grads));
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<bool> arrived;
  for (int slot : tangentSlot)
    arrived.push_back(slot >= 0 && grads.at(size_t(slot)).defined());
  // Tangents that did not arrive are symbolic zeros of the module chosen,
  // which does not read them.
  const BackwardModule *chosen = nullptr;
  try {
    chosen = &program->moduleFor(arrived);
  } catch (const Error &error) {
    TORCH_CHECK(false, "dynafuse: compiling the backward '", program->name,
                "' for the gradients that arrived failed: ", error.what());
  }
  const CompiledModule &module = *chosen->module;
  const std::vector<LoopBuffer> &moduleInputs = module.module().inputs;
  std::vector<at::Tensor> held;
  std::vector<TensorArg> args(program->inputs.size());
  size_t tangent = 0;
  for (size_t i = 0; i < program->inputs.size(); ++i) {
    at::Tensor value;
    if (program->inputs[i].kind ==
        TrainingGraphs::BackwardInput::Kind::Tangent) {
      if (arrived[tangent]) {
        value = grads[size_t(tangentSlot[tangent])];
      } else {
        // A symbolic zero of the module chosen (moduleFor), unread: its
        // sizes with row-major strides over one zero.
        static double zero = 0;
        const std::vector<int64_t> &sizes = tangentSizes[tangent];
        args[i].data = reinterpret_cast<char *>(&zero);
        args[i].sizes = sizes;
        args[i].strides.assign(sizes.size(), 1);
        for (size_t k = sizes.size(); k-- > 1;)
          args[i].strides[k - 1] = args[i].strides[k] * sizes[k];
        held.emplace_back();
        ++tangent;
        continue;
      }
      ++tangent;
    } else {
      value = saved[i].unpack();
    }
    // The module was compiled for dense row-major buffers unless the input
    // was guarded with other strides; autograd hands expanded gradients.
    if (moduleInputs[i].type.strides.empty() && !value.is_contiguous())
      value = value.contiguous();
    args[i].data = static_cast<char *>(value.data_ptr());
    args[i].sizes.assign(value.sizes().begin(), value.sizes().end());
    args[i].strides.assign(value.strides().begin(), value.strides().end());
    held.push_back(std::move(value));
  }
  GILHeld gil;
  static const std::vector<TorchCall> noTorchCalls;
  bool cuda = false;
  for (const at::Tensor &tensor : held)
    cuda = cuda || (tensor.defined() && tensor.is_cuda());
  TorchContext context(torchCalls ? *torchCalls : noTorchCalls,
                       cuda ? currentTorchCudaStream() : nullptr);
  {
    PooledTorchAllocations pooled(chosen->allocationPlanner.get());
    context.run = pooled.run();
    module.run(args, context, forwardSymbols);
  }
  variable_list result;
  for (size_t k = 0; k < program->gradientOf.size(); ++k) {
    // No tangent it is computed from arrived: undefined, as in eager.
    bool reached = false;
    for (int from : program->tangentsOfGradient.at(k))
      reached = reached || arrived.at(size_t(from));
    if (!reached) {
      result.emplace_back();
      continue;
    }
    int input = chosen->outputInput[k];
    const OutputView &view = chosen->outputViews[k];
    if (input >= 0)
      result.push_back(held[size_t(input)]);
    else if (view.input >= 0) {
      std::map<std::string, int64_t> symbols =
          module.bindSymbols(args, forwardSymbols);
      result.push_back(held[size_t(view.input)].as_strided(
          evaluateAll(view.sizes, symbols), evaluateAll(view.strides, symbols),
          held[size_t(view.input)].storage_offset() +
              view.offset.evaluate(symbols)));
    }
    else
      result.push_back(
          THPVariable_Unpack(context.output(module.module().outputs[k]).get()));
  }
  return result;
}

} // namespace

std::shared_ptr<const std::vector<TorchCall>>
sharedTorchCalls(const std::vector<TorchCall> &calls) {
  return std::shared_ptr<const std::vector<TorchCall>>(
      new std::vector<TorchCall>(calls), [](const std::vector<TorchCall> *p) {
        if (!Py_IsInitialized())
          return; // the interpreter is gone: its objects with it
        GILHeld gil;
        delete p;
      });
}

void attachBackward(const std::shared_ptr<const BackwardProgram> &program,
                    std::shared_ptr<const std::vector<TorchCall>> torchCalls,
                    const std::vector<PyObject *> &inputs,
                    const std::vector<PyObject *> &outputs,
                    const std::vector<bool> &made,
                    const std::map<std::string, int64_t> &symbols) {
  variable_list differentiated;
  for (int input : program->gradientOf)
    differentiated.push_back(THPVariable_Unpack(inputs.at(size_t(input))));
  NodePtr node = makeNode<DynafuseBackward>(
      program, torch::autograd::collect_next_edges(differentiated));
  auto &backward = static_cast<DynafuseBackward &>(*node);
  backward.torchCalls = std::move(torchCalls);
  backward.forwardSymbols = symbols;
  for (size_t i = 0; i < program->forwardInputTypes.size() && i < inputs.size();
       ++i)
    if (THPVariable_Check(inputs[i]))
      bindSizeSymbols(program->forwardInputTypes[i],
                      THPVariable_Unpack(inputs[i]).sizes().vec(),
                      backward.forwardSymbols);
  int slots = 0;
  for (int output : program->tangentOutputs) {
    const at::Tensor &tensor = THPVariable_Unpack(outputs.at(size_t(output)));
    backward.tangentSizes.emplace_back(tensor.sizes().begin(),
                                       tensor.sizes().end());
    if (made.at(size_t(output))) {
      torch::autograd::set_history(tensor, node);
      backward.tangentSlot.push_back(slots++);
    } else {
      backward.tangentSlot.push_back(-1);
    }
  }
  if (program->replayableForward)
    for (PyObject *input : inputs)
      backward.forwardInputs.emplace_back(THPVariable_Unpack(input),
                                          /*is_output=*/false);
  for (const TrainingGraphs::BackwardInput &input : program->inputs) {
    using Kind = TrainingGraphs::BackwardInput::Kind;
    if (input.kind == Kind::Tangent) {
      backward.saved.emplace_back();
      continue;
    }
    PyObject *object = input.kind == Kind::ForwardInput
                           ? inputs.at(size_t(input.index))
                           : outputs.at(size_t(input.index));
    const at::Tensor &tensor = THPVariable_Unpack(object);
    // A tensor the node is the grad_fn of is saved detached (the same
    // memory and version counter): saving it as it is would make a cycle.
    bool ours = input.kind == Kind::ForwardOutput && made[size_t(input.index)];
    backward.saved.emplace_back(ours ? tensor.detach() : tensor,
                                /*is_output=*/false);
  }
}

} // namespace dynafuse

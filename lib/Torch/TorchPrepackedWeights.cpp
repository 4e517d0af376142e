//===- TorchPrepackedWeights.cpp - Weights kept packed between calls ------===//
//
// Part of the torch bridge (TorchPrepackedWeights.h): which nodes of an
// inference graph keep their weight packed, and the cache of packed
// copies each compiled entry holds.
//
// - markPrepackedWeights marks weight_prepacked the CPU float32 conv2d
//   nodes whose weight is a graph input (lowering then lays the network
//   out channels-last), and folds their batch norms and activations
//   (fuse-conv-epilogues); and the linear and addmm nodes whose weight is
//   a graph input, with rows the GEMM library runs (TorchPackedGemms.cpp:
//   MKL's packed sgemm for static rows where packing pays, oneDNN's inner
//   product for 2 rows and up, static or symbolic).
// - at run time a marked step finds its parameters among the caller's
//   tensors by address (a linear layer's matmul reads its weight through a
//   transposing view), once, and checks them on every later call.
//
//===----------------------------------------------------------------------===//
#include "TorchPrepackedWeights.h"

#include "dynafuse/Graph/ConvolutionEpilogues.h"
#include "dynafuse/Graph/OpRegistry.h"

#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>

namespace dynafuse {

namespace {

/// Packed weights kept per step (distinct weight tensors calling it).
constexpr size_t kCopiesPerStep = 4;

/// Whether `given` is `source` itself, or (both 2-D) its transpose.
bool sameOrTransposed(const at::Tensor &source, const at::Tensor &given) {
  if (source.data_ptr() != given.data_ptr())
    return false;
  if (source.sizes().equals(given.sizes()) &&
      source.strides().equals(given.strides()))
    return true;
  return source.dim() == 2 && given.dim() == 2 &&
         source.size(0) == given.size(1) && source.size(1) == given.size(0) &&
         source.stride(0) == given.stride(1) &&
         source.stride(1) == given.stride(0);
}

/// The caller's tensor of graph input `index`, if it is one.
const at::Tensor *inputTensor(const ForwardInputs &inputs, int index) {
  if (index < 0 || !inputs.objects || size_t(index) >= inputs.objects->size())
    return nullptr;
  PyObject *object = (*inputs.objects)[size_t(index)];
  if (!THPVariable_Check(object))
    return nullptr;
  return &THPVariable_Unpack(object);
}

/// A value the graph reads as it is from the caller: a graph input.
bool isGraphInput(const Operand &operand) {
  return operand.isValue() && !operand.value->producer;
}

/// Whether `library` runs a matrix product whose input has type `type`
/// (rows: all dims but the last): static rows in its range, or, for
/// oneDNN, symbolic ones (checked per call; a new size packs again).
bool routedRows(GemmLibrary library, const TensorType &type,
                const TensorType &weight) {
  if (type.rank() < 2)
    return false;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < type.rank(); ++d) {
    if (!type.sizes[d].isConstant())
      return library == GemmLibrary::OneDnn;
    rows *= type.sizes[d].constant();
  }
  int64_t weightElements = 1;
  for (const SymExpr &size : weight.sizes)
    weightElements *= size.isConstant() ? size.constant() : 0;
  return linearRowsRouted(library, rows, weightElements);
}

/// linear(x, W[, b]) or addmm(b, x, W) (beta = alpha = 1) with W a 2-D
/// float32 CPU graph input and x of rows `library` runs.
bool packableGemm(const Node &node, GemmLibrary library) {
  bool linear = node.op == Op::Linear;
  if ((!linear && node.op != Op::Addmm) || node.results.empty())
    return false;
  const Operand &x = node.operands.at(linear ? 0 : 1);
  const Operand &w = node.operands.at(linear ? 1 : 2);
  if (!isGraphInput(w) || !x.isValue() || w.value->type.rank() != 2)
    return false;
  if (!linear && (floatAttr(node, "beta", 1) != 1 ||
                  floatAttr(node, "alpha", 1) != 1))
    return false;
  const TensorType &type = node.results[0]->type;
  return type.device == "cpu" && type.dtype == DType::F32 &&
         routedRows(library, x.value->type, w.value->type);
}

} // namespace

bool PackedWeight::packedFrom(
    const std::vector<const at::Tensor *> &parameters) const {
  if (!packed.defined() || stamps.size() != parameters.size())
    return false;
  for (size_t i = 0; i < parameters.size(); ++i)
    if (!stamps[i].current(*parameters[i]))
      return false;
  return true;
}

bool PackedWeight::current(const std::vector<const at::Tensor *> &parameters,
                           at::IntArrayRef sizes) const {
  return (anySize || sizes.equals(inputSizes)) && packedFrom(parameters);
}

bool PackedWeight::currentForOtherSizes(
    const std::vector<const at::Tensor *> &parameters,
    at::IntArrayRef sizes) const {
  return !anySize && !sizes.equals(inputSizes) && packedFrom(parameters);
}

void PackedWeight::stamp(const std::vector<const at::Tensor *> &parameters,
                         at::IntArrayRef sizes) {
  stamps.clear();
  for (const at::Tensor *parameter : parameters)
    stamps.emplace_back(*parameter);
  inputSizes = sizes.vec();
  anySize = false;
}

std::vector<const at::Tensor *>
parameterSources(StepWeights &weights, const std::vector<at::Tensor> &tensors,
                 const std::vector<size_t> &arguments,
                 const ForwardInputs &inputs) {
  size_t inputCount = inputs.objects ? inputs.objects->size() : 0;
  if (weights.inputs.empty())
    for (size_t arg : arguments) {
      int found = -1;
      for (size_t i = 0; i < inputCount && found < 0; ++i) {
        const at::Tensor *source = inputTensor(inputs, int(i));
        if (source && sameOrTransposed(*source, tensors.at(arg)))
          found = int(i);
      }
      weights.inputs.push_back(found);
    }
  std::vector<const at::Tensor *> result;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const at::Tensor *source = inputTensor(inputs, weights.inputs.at(i));
    if (!source || !sameOrTransposed(*source, tensors.at(arguments[i])))
      return {};
    result.push_back(source);
  }
  return result;
}

PackedWeight &copyFor(StepWeights &weights, const at::Tensor &weight) {
  std::vector<PackedWeight> &copies = weights.copies;
  auto mine = std::find_if(copies.begin(), copies.end(),
                           [&](const PackedWeight &copy) {
                             return !copy.stamps.empty() &&
                                    copy.stamps[0].sameTensor(weight);
                           });
  if (mine != copies.end()) {
    std::rotate(mine, mine + 1, copies.end());
  } else {
    if (copies.size() >= kCopiesPerStep)
      copies.erase(copies.begin());
    copies.emplace_back();
  }
  return copies.back();
}

std::shared_ptr<PrepackedWeights>
newPrepackedWeights(std::optional<GemmLibrary> gemmLibrary) {
  return std::make_shared<PrepackedWeights>(gemmLibrary);
}

std::optional<at::Tensor>
runWithPrepackedWeight(PrepackedWeights &weights, const ProgramStep &step,
                       const std::vector<at::Tensor> &tensors,
                       const ForwardInputs &inputs) {
  return weights.run(step, tensors, inputs);
}

std::optional<at::Tensor>
PrepackedWeights::run(const ProgramStep &step,
                      const std::vector<at::Tensor> &tensors,
                      const ForwardInputs &inputs) {
  std::lock_guard<std::mutex> lock(mutex);
  StepWeights &weights = byStep[&step];
  if (step.op == Op::Conv2d || step.op == Op::Conv2dBn)
    return runPackedConvolution(weights, step, tensors, inputs);
  if ((step.op == Op::Matmul || step.op == Op::Addmm) && library)
    return runPackedGemm(weights, *library, step, tensors, inputs);
  return std::nullopt;
}

void markPrepackedWeights(Graph &graph, bool foldBatchNorm,
                          std::optional<GemmLibrary> gemmLibrary) {
  bool oneDnn = at::hasMKLDNN();
  for (const auto &node : graph.nodes) {
    if (gemmLibrary && packableGemm(*node, *gemmLibrary))
      node->attributes["weight_prepacked"] = true;
    if (!oneDnn || node->op != Op::Conv2d || node->operands.size() < 2 ||
        !isGraphInput(node->operands[1]) || node->results.empty())
      continue;
    const TensorType &type = node->results[0]->type;
    if (type.device == "cpu" && type.dtype == DType::F32)
      node->attributes["weight_prepacked"] = true;
  }
  if (oneDnn && foldBatchNorm)
    fuseConvolutionEpilogues(graph);
}

} // namespace dynafuse

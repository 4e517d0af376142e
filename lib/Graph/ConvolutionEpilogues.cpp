//===- ConvolutionEpilogues.cpp - Batch norm and activation into conv2d ---===//
//
// The graph pass `fuse-conv-epilogues` (ConvolutionEpilogues.h): a
// prepacked convolution, its eval-mode batch norm and an activation oneDNN
// has as a post-op become one conv2d_bn node. Operands: input, weight,
// [bias], running mean, running variance, batch norm weight, batch norm
// bias, [residual]; attributes: the convolution's, the batch norm's eps,
// has_bias, residual, and activation (the activation op's name, "none"
// without one; hardtanh keeps its min_val and max_val). With residual the
// batch norm's result is added to the last operand before the activation
// (relu or none: oneDNN has no other unary post-op after a binary one), and
// the fused node takes the add's place, after the residual's producer.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/ConvolutionEpilogues.h"

#include "dynafuse/Graph/OpRegistry.h"

#include <map>
#include <set>

namespace dynafuse {

double convolutionFlops(int64_t weightElements, int64_t batch,
                        const int64_t inputSpatial[2],
                        const int64_t kernel[2], const int64_t stride[2],
                        const int64_t padding[2], const int64_t dilation[2]) {
  double flops = 2.0 * double(weightElements) * double(batch);
  for (size_t d = 0; d < 2; ++d)
    flops *= double(windowCount(inputSpatial[d], kernel[d], stride[d],
                                padding[d], dilation[d], false)
                        .value_or(0));
  return flops;
}

bool isPostOpActivation(Op op) {
  return op == Op::Relu || op == Op::Hardtanh || op == Op::Silu ||
         op == Op::Hardswish || op == Op::Sigmoid;
}

namespace {

/// Who reads each value: how many operands (of any node) and graph outputs
/// do, and the last node that does (the only one where the count is 1).
struct Readers {
  std::map<const Value *, int> count;
  std::map<const Value *, Node *> reader;
};

Readers readersOf(const Graph &graph) {
  Readers readers;
  for (const auto &node : graph.nodes)
    for (const Operand &operand : node->operands)
      if (operand.isValue()) {
        ++readers.count[operand.value];
        readers.reader[operand.value] = node.get();
      }
  for (const Value *output : graph.outputs)
    readers.count[output] += 2; // an intermediate output is never folded away
  return readers;
}

/// Whether the runtime runs conv through oneDNN with its weight prepacked
/// (TorchPrepackedWeights.cpp decides the same at run time).
bool runsPrepacked(const Node &conv) {
  if (conv.op != Op::Conv2d || !boolAttr(conv, "weight_prepacked", false) ||
      conv.operands.size() < 2 || !conv.operands[1].isValue() ||
      conv.results.size() != 1)
    return false;
  const OpInfo *info = opInfoOf(conv);
  if (info && info->decomposesWhen && info->decomposesWhen(conv))
    return false; // fused window taps, no convolution left
  const TensorType &x = operandType(conv, 0), &w = operandType(conv, 1);
  const TensorType &y = conv.results[0]->type;
  if (x.rank() != 4 || w.rank() != 4 || !allConstant(x.sizes) ||
      !allConstant(w.sizes) || y.device != "cpu" || y.dtype != DType::F32 ||
      x.sizes[0].constant() == 0)
    return false;
  if (conv.intAttr("groups", 1) > 1)
    return true; // grouped or depthwise: prepacked at every size
  std::vector<int64_t> stride = perDim(conv, "stride", 2, 1),
                       padding = perDim(conv, "padding", 2, 0),
                       dilation = perDim(conv, "dilation", 2, 1);
  int64_t weightElements = 1;
  for (const SymExpr &size : w.sizes)
    weightElements *= size.constant();
  int64_t spatial[2] = {x.sizes[2].constant(), x.sizes[3].constant()};
  int64_t kernel[2] = {w.sizes[2].constant(), w.sizes[3].constant()};
  return convolutionFlops(weightElements, x.sizes[0].constant(), spatial,
                          kernel, stride.data(), padding.data(),
                          dilation.data()) >= kPrepackMinFlops;
}

/// An eval batch norm of conv's result whose four tensors are graph inputs.
bool foldableBatchNorm(const Node &norm, const Value *convResult) {
  if (norm.op != Op::BatchNorm || norm.operands.size() != 5 ||
      !boolAttr(norm, "has_weight", false) ||
      !boolAttr(norm, "has_bias", false) || norm.results.size() != 1 ||
      norm.operands[0].value != convResult)
    return false;
  for (size_t i = 1; i < 5; ++i) {
    const Operand &operand = norm.operands[i];
    if (!operand.isValue() || operand.value->producer ||
        operand.value->type.rank() != 1 ||
        operand.value->type.dtype != DType::F32)
      return false;
  }
  return true;
}

bool foldableActivation(const Node &node, const Value *normResult) {
  return isPostOpActivation(node.op) && node.operands.size() == 1 &&
         node.operands[0].value == normResult && node.results.size() == 1;
}

/// The operand an add of `normResult` and another value of its type adds
/// (a residual), or null.
Value *residualOf(const Node &add, const Value *normResult) {
  if (add.op != Op::Add || add.operands.size() != 2 ||
      !add.attributes.empty() || add.results.size() != 1 ||
      !add.operands[0].isValue() || !add.operands[1].isValue())
    return nullptr;
  Value *left = add.operands[0].value, *right = add.operands[1].value;
  if ((left == normResult) == (right == normResult))
    return nullptr; // not an operand, or both
  Value *other = left == normResult ? right : left;
  const TensorType &type = normResult->type;
  if (other->type.sizes != type.sizes || other->type.dtype != type.dtype ||
      other->type.device != type.device ||
      add.results[0]->type.sizes != type.sizes)
    return nullptr;
  return other;
}

} // namespace

bool fuseConvolutionEpilogues(Graph &graph) {
  Readers readers = readersOf(graph);
  std::set<const Node *> folded;
  // A fused node with a residual moves to the add's place (the last node it
  // replaces, always after it), where the residual is defined.
  std::map<const Node *, const Node *> placeOf;
  for (const auto &node : graph.nodes) {
    Node &conv = *node;
    if (!runsPrepacked(conv) || readers.count[conv.results[0]] != 1)
      continue;
    Node *norm = readers.reader[conv.results[0]];
    if (!foldableBatchNorm(*norm, conv.results[0]))
      continue;
    Node *activation = nullptr, *add = nullptr;
    Value *normResult = norm->results[0], *residual = nullptr;
    Node *next = readers.count[normResult] == 1 ? readers.reader[normResult]
                                                 : nullptr;
    if (next && foldableActivation(*next, normResult)) {
      activation = next;
    } else if (next && !folded.count(next) &&
               (residual = residualOf(*next, normResult))) {
      add = next;
      Value *sum = add->results[0];
      if (readers.count[sum] == 1 && readers.reader[sum]->op == Op::Relu &&
          foldableActivation(*readers.reader[sum], sum))
        activation = readers.reader[sum];
    }
    Value *result = activation ? activation->results[0]
                    : add      ? add->results[0]
                               : normResult;
    TensorType type = conv.results[0]->type;
    conv.attributes["has_bias"] = conv.operands.size() == 3;
    conv.attributes["eps"] = norm->attributes.count("eps")
                                 ? norm->attributes.at("eps")
                                 : Attribute(1e-5);
    conv.attributes["activation"] =
        activation ? opName(activation->op) : std::string("none");
    if (activation && activation->op == Op::Hardtanh) {
      conv.attributes["min_val"] = floatAttr(*activation, "min_val", -1.0);
      conv.attributes["max_val"] = floatAttr(*activation, "max_val", 1.0);
    }
    for (size_t i = 1; i < 5; ++i)
      conv.operands.push_back(norm->operands[i]);
    if (residual) {
      conv.attributes["residual"] = true;
      conv.operands.push_back(Operand(residual));
      placeOf[&conv] = activation ? activation : add;
      folded.insert(add);
    }
    conv.op = Op::Conv2dBn;
    conv.info = lookupOp(Op::Conv2dBn);
    result->type = type;
    result->producer = &conv;
    conv.results = {result};
    folded.insert(norm);
    if (activation)
      folded.insert(activation);
  }
  if (folded.empty())
    return false;
  // One pass: a moved node waits, by its place, until the walk reaches it.
  std::map<const Node *, std::unique_ptr<Node>> waiting;
  std::vector<std::unique_ptr<Node>> kept;
  for (auto &node : graph.nodes) {
    auto place = placeOf.find(node.get());
    auto arrived = waiting.find(node.get());
    if (place != placeOf.end())
      waiting[place->second] = std::move(node);
    else if (arrived != waiting.end())
      kept.push_back(std::move(arrived->second));
    else if (!folded.count(node.get()))
      kept.push_back(std::move(node));
  }
  graph.nodes = std::move(kept);
  // A folded result takes the convolution's layout (channels-last where its
  // input is): what reads it, and what reads that, infer their strides
  // anew, as the verifier will (a conv-bn-relu, then a convolution, of a
  // channels-last input failed to compile).
  for (auto &node : graph.nodes) {
    std::vector<TensorType> inferred = inferResultTypes(*node);
    for (size_t i = 0; i < inferred.size() && i < node->results.size(); ++i)
      node->results[i]->type = std::move(inferred[i]);
  }
  return true;
}

} // namespace dynafuse

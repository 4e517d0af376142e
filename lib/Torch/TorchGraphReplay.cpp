//===- TorchGraphReplay.cpp - A graph run node by node by ATen ------------===//
//
// Part of the torch bridge: replayGraphWithATen (TorchATenOps.h). A compiled
// training graph's backward is not itself differentiable: when autograd
// asks it for gradients that need a graph of their own (create_graph=True:
// gradient penalties, Hessian-vector products), the node replays the
// captured forward with ATen's ops from the inputs it kept, with autograd
// recording, and differentiates that replay as eager would have. The
// replay covers the ops a training forward holds (everything with a
// derivative rule, and the non-differentiable ones beside them); any other
// op is an error naming the node, never a guess.
//
//===----------------------------------------------------------------------===//
#include "TorchATenOps.h"

#include "TorchTypes.h"

#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Loop/ScalarSemantics.h"

#include <ATen/ScalarOps.h>
#include <ATen/core/grad_mode.h>

#include <functional>
#include <map>

namespace dynafuse {
namespace {

using Symbols = std::map<std::string, int64_t>;
using Tensors = std::vector<at::Tensor>;

/// A Python number operand as ATen's Python binding passes one: a 0-dim
/// "wrapped number", which type promotion treats as weak.
at::Tensor wrappedNumber(const Scalar &scalar) {
  c10::Scalar value;
  if (scalar.kind == Scalar::Kind::Bool)
    value = c10::Scalar(scalar.intValue != 0);
  else if (scalar.kind == Scalar::Kind::Int)
    value = c10::Scalar(scalar.intValue);
  else
    value = c10::Scalar(scalar.floatValue);
  at::Tensor tensor = c10::scalar_to_tensor(value);
  tensor.unsafeGetTensorImpl()->set_wrapped_number(true);
  return tensor;
}

std::vector<int64_t> sizesOf(const Value *value, const Symbols &symbols) {
  return evaluateAll(value->type.sizes, symbols);
}

at::TensorOptions optionsOf(const Value *value) {
  return at::TensorOptions()
      .dtype(toScalarType(value->type.dtype))
      .device(at::Device(value->type.device));
}

/// A number attribute that may be symbolic (full's value).
c10::Scalar numberAttr(const Node &node, const std::string &name,
                       const Symbols &symbols) {
  const Attribute *attribute = node.attribute(name);
  if (!attribute)
    return c10::Scalar(0.0);
  if (auto *value = std::get_if<SymExpr>(attribute))
    return c10::Scalar(value->evaluate(symbols));
  if (auto *value = std::get_if<int64_t>(attribute))
    return c10::Scalar(*value);
  if (auto *value = std::get_if<bool>(attribute))
    return c10::Scalar(*value);
  return c10::Scalar(floatAttr(node, name, 0));
}

/// The operand the flag `has_<name>` says is present (the optional operands
/// after the first, in order), or none.
std::optional<at::Tensor> optionalTensor(const Node &node, const Tensors &t,
                                         const std::string &name) {
  int at = optionalOperandIndex(node, name);
  if (at < 0)
    return std::nullopt;
  return t.at(size_t(at));
}

/// Optional operands of the norms: weight, then bias, each when flagged.
std::optional<at::Tensor> normOperand(const Node &node, const Tensors &t,
                                      const std::string &flag, size_t &next) {
  if (!boolAttr(node, flag, false))
    return std::nullopt;
  return t.at(next++);
}

/// uniform: element i is random(seed, offset + i), computed where the
/// compiled kernels compute it (ScalarSemantics.h), so a replayed dropout
/// keeps the forward's mask.
at::Tensor uniform(const Node &node, const Tensors &t, const Symbols &symbols) {
  const Value *result = node.result();
  std::vector<int64_t> sizes = sizesOf(result, symbols);
  int64_t seed = t.at(0).item<int64_t>();
  int64_t offset = symAttr(node, "offset", 0).evaluate(symbols);
  at::Tensor numbers = at::empty(sizes, at::TensorOptions().dtype(at::kDouble));
  double *data = numbers.data_ptr<double>();
  for (int64_t i = 0; i < numbers.numel(); ++i)
    data[i] = counterRandom(seed, offset + i);
  return numbers.to(optionsOf(result));
}

/// How ATen computes one op's results from its operands' tensors.
using ReplayRule =
    std::function<Tensors(const Node &, const Tensors &, const Symbols &)>;
using ReplayTable = std::map<Op, ReplayRule>;

/// cast: to the node's dtype.
Tensors castReplay(const Node &node, const Tensors &t, const Symbols &) {
  const Attribute *dtype = node.attribute("dtype");
  if (!dtype || !std::holds_alternative<DType>(*dtype))
    opError(node, "cast needs a dtype");
  return Tensors{t[0].to(toScalarType(std::get<DType>(*dtype)))};
}

/// Pointwise ops: from include/dynafuse/Ops/PointwiseOps.py.
void addPointwiseReplays(ReplayTable &table){
#include "dynafuse/Ops/PointwiseReplays.inc"
}

/// torch.max(x, dim) / torch.min(x, dim): values and indices.
Tensors extremeDimReplay(const Node &node, const Tensors &t, const Symbols &) {
  bool keepdim = boolAttr(node, "keepdim", false);
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), t[0].dim());
  auto [values, indices] = node.op == Op::MaxDim ? at::max(t[0], dim, keepdim)
                                                 : at::min(t[0], dim, keepdim);
  return Tensors{values, indices};
}

Tensors argExtremeReplay(const Node &node, const Tensors &t, const Symbols &) {
  bool keepdim = boolAttr(node, "keepdim", false);
  std::optional<int64_t> dim;
  if (node.attribute("dim"))
    dim = node.intAttr("dim", 0);
  return Tensors{node.op == Op::Argmax ? at::argmax(t[0], dim, keepdim)
                                       : at::argmin(t[0], dim, keepdim)};
}

Tensors sumReplay(const Node &node, const Tensors &t, const Symbols &) {
  std::optional<at::ScalarType> dtype;
  if (const Attribute *given = node.attribute("dtype"))
    if (auto *type = std::get_if<DType>(given))
      dtype = toScalarType(*type);
  return Tensors{at::sum(t[0], reducedDims(node),
                         boolAttr(node, "keepdim", false), dtype)};
}

Tensors anyOrAllReplay(const Node &node, const Tensors &t, const Symbols &) {
  bool keepdim = boolAttr(node, "keepdim", false);
  std::vector<int64_t> dims = reducedDims(node);
  at::Tensor result = t[0];
  // Highest dim first, so the lower ones keep their positions.
  for (auto dim = dims.rbegin(); dim != dims.rend(); ++dim)
    result = node.op == Op::Any ? at::any(result, *dim, keepdim)
                                : at::all(result, *dim, keepdim);
  return Tensors{result.to(at::kBool)};
}

/// Reductions: from include/dynafuse/Ops/ReductionOps.py.
void addReductionReplays(ReplayTable &table){
#include "dynafuse/Ops/ReductionReplays.inc"
}

Tensors transposeReplay(const Node &node, const Tensors &t, const Symbols &) {
  if (t[0].dim() < 2) // t() of a vector or a number: itself
    return Tensors{t[0].alias()};
  return Tensors{
      t[0].transpose(node.intAttr("dim0", 0), node.intAttr("dim1", 1))};
}

Tensors squeezeReplay(const Node &node, const Tensors &t, const Symbols &) {
  if (!node.attribute("dims"))
    return Tensors{t[0].squeeze()};
  return Tensors{t[0].squeeze(intListAttr(node, "dims", {}))};
}

/// slice and narrow, from their resolved bounds.
Tensors sliceReplay(const Node &node, const Tensors &t, const Symbols &s) {
  SliceBounds bounds = sliceBounds(node);
  int64_t start = bounds.start.evaluate(s);
  int64_t length = bounds.length.evaluate(s);
  return Tensors{
      t[0].slice(bounds.dim, start, start + length * bounds.step, bounds.step)};
}

/// split and chunk: the pieces splitLengths gives.
Tensors piecesReplay(const Node &node, const Tensors &t, const Symbols &) {
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0), t[0].dim());
  return at::split_with_sizes(t[0], splitLengths(node, t[0].size(dim)), dim);
}

Tensors unbindReplay(const Node &node, const Tensors &t, const Symbols &) {
  return at::unbind(t[0], node.intAttr("dim", 0));
}

Tensors fullReplay(const Node &node, const Tensors &, const Symbols &s) {
  const Value *result = node.result();
  return Tensors{at::full(sizesOf(result, s), numberAttr(node, "value", s),
                          optionsOf(result))};
}

Tensors fullLikeReplay(const Node &node, const Tensors &t, const Symbols &s) {
  const Value *result = node.result();
  return Tensors{at::full(sizesOf(result, s), numberAttr(node, "value", s),
                          optionsOf(result).device(t[0].device()))};
}

Tensors arangeReplay(const Node &node, const Tensors &, const Symbols &s) {
  const Value *result = node.result();
  double start = floatAttr(node, "start", 0), step = floatAttr(node, "step", 1);
  int64_t count = sizesOf(result, s).at(0);
  at::Tensor positions =
      at::arange(count, at::TensorOptions().dtype(at::kDouble));
  return Tensors{(positions * step + start).to(optionsOf(result))};
}

/// Views and data movement: from include/dynafuse/Ops/ViewOps.py,
/// CopyingRemapOps.py and DataMovementOps.py.
void addViewReplays(ReplayTable &table){
#include "dynafuse/Ops/ViewReplays.inc"
}

/// var and std over the node's dims.
Tensors spreadReplay(const Node &node, const Tensors &t, const Symbols &) {
  std::vector<int64_t> dims = reducedDims(node);
  at::Scalar correction = floatAttr(node, "correction", 1.0);
  bool keepdim = boolAttr(node, "keepdim", false);
  return Tensors{
      node.op == Op::Var
          ? at::var(t[0], at::IntArrayRef(dims), correction, keepdim)
          : at::std(t[0], at::IntArrayRef(dims), correction, keepdim)};
}

Tensors layerNormReplay(const Node &node, const Tensors &t, const Symbols &) {
  size_t next = 1;
  std::optional<at::Tensor> weight = normOperand(node, t, "has_weight", next);
  std::optional<at::Tensor> bias = normOperand(node, t, "has_bias", next);
  return Tensors{at::layer_norm(t[0], intListAttr(node, "normalized_shape", {}),
                                weight, bias, floatAttr(node, "eps", 1e-5))};
}

Tensors rmsNormReplay(const Node &node, const Tensors &t, const Symbols &) {
  size_t next = 1;
  std::optional<at::Tensor> weight = normOperand(node, t, "has_weight", next);
  std::optional<double> eps;
  if (node.attribute("eps"))
    eps = floatAttr(node, "eps", 0);
  return Tensors{at::rms_norm(t[0], intListAttr(node, "normalized_shape", {}),
                              weight, eps)};
}

Tensors batchNormTrainReplay(const Node &node, const Tensors &t,
                             const Symbols &) {
  size_t next = 1;
  std::optional<at::Tensor> weight = normOperand(node, t, "has_weight", next);
  std::optional<at::Tensor> bias = normOperand(node, t, "has_bias", next);
  double eps = floatAttr(node, "eps", 1e-5);
  std::vector<int64_t> dims = batchNormDims(node);
  at::Tensor mean = at::mean(t[0], dims);
  at::Tensor variance = at::var(t[0], at::OptionalIntArrayRef(dims),
                                std::optional<at::Scalar>(0), false);
  at::Tensor y = at::batch_norm(t[0], weight, bias, std::nullopt, std::nullopt,
                                /*training=*/true, /*momentum=*/0.0, eps,
                                /*cudnn_enabled=*/true);
  return Tensors{y, mean, variance};
}

/// Composites (from include/dynafuse/Ops/CompositeOps.py), and sdpa_flash.
void addCompositeReplays(ReplayTable &table) {
#include "dynafuse/Ops/CompositeReplays.inc"
  table[Op::SdpaFlash] = [](const Node &node, const Tensors &t,
                            const Symbols &) {
    // The attention output as eager's F.scaled_dot_product_attention makes
    // it (a path autograd can differentiate twice); the row logsumexp, a
    // value only the compiled backward reads, from the flash kernel.
    std::optional<at::Tensor> mask;
    if (t.size() > 3)
      mask = t[3];
    std::optional<double> scale;
    if (node.attribute("scale"))
      scale = floatAttr(node, "scale", 1.0);
    at::Tensor out = at::scaled_dot_product_attention(
        t[0], t[1], t[2], mask, 0.0, boolAttr(node, "is_causal", false), scale);
    at::NoGradGuard noGrad;
    Tensors flash = externResultsWithATen(node.op, node.attributes, t, {});
    return Tensors{out, flash.at(1)};
  };
}

/// Every op the replay covers, by name: one rule each, looked up once per
/// node.
const ReplayTable &replayTable() {
  static const ReplayTable table = [] {
    ReplayTable built;
    addPointwiseReplays(built);
    addReductionReplays(built);
    addViewReplays(built);
    addCompositeReplays(built);
    return built;
  }();
  return table;
}

Tensors runNode(const Node &node, const Tensors &t, const Symbols &symbols) {
  auto rule = replayTable().find(node.op);
  if (rule != replayTable().end())
    return rule->second(node, t, symbols);
  const OpInfo *info = opInfoOf(node);
  if (info && info->kind == OpKind::Extern && node.op != Op::CallTorch)
    return externResultsWithATen(node.op, node.attributes, t, {});
  return {};
}

} // namespace

std::vector<at::Tensor>
replayGraphWithATen(const Graph &graph, const std::vector<at::Tensor> &inputs) {
  if (inputs.size() != graph.inputs.size())
    fail("replaying graph '" + graph.name +
         "': " + std::to_string(inputs.size()) + " inputs for " +
         std::to_string(graph.inputs.size()));
  Symbols symbols;
  std::map<const Value *, at::Tensor> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value *input = graph.inputs[i];
    values[input] = inputs[i];
    const std::vector<SymExpr> &sizes = input->type.sizes;
    for (size_t d = 0; d < sizes.size() && d < size_t(inputs[i].dim()); ++d)
      if (sizes[d].isSymbol())
        symbols[sizes[d].symbolName()] = inputs[i].size(int64_t(d));
  }
  for (const std::unique_ptr<Node> &node : graph.nodes) {
    Tensors operands;
    for (const Operand &operand : node->operands)
      operands.push_back(operand.isValue() ? values.at(operand.value)
                                           : wrappedNumber(operand.scalar));
    Tensors results;
    try {
      results = runNode(*node, operands, symbols);
    } catch (const c10::Error &error) {
      opError(*node, std::string("ATen failed replaying it: ") +
                         error.what_without_backtrace());
    }
    if (results.size() != node->results.size())
      opError(*node, "cannot be replayed by ATen (" +
                         std::to_string(results.size()) + " results for " +
                         std::to_string(node->results.size()) + ")");
    for (size_t r = 0; r < results.size(); ++r) {
      const Value *result = node->results[r];
      if (!results[r].sizes().equals(sizesOf(result, symbols)))
        opError(*node, "its ATen replay made sizes that differ from its type");
      at::ScalarType dtype = toScalarType(result->type.dtype);
      if (results[r].scalar_type() != dtype)
        results[r] = results[r].to(dtype);
      values[result] = results[r];
    }
  }
  std::vector<at::Tensor> outputs;
  for (const Value *output : graph.outputs)
    outputs.push_back(values.at(output));
  return outputs;
}

} // namespace dynafuse

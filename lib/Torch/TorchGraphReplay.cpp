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

at::Tensor unaryOp(const std::string &op, const at::Tensor &x) {
  using Unary = at::Tensor (*)(const at::Tensor &);
  static const std::map<std::string, Unary> table = {
      {"exp", at::exp},           {"log", at::log},
      {"tanh", at::tanh},         {"sigmoid", at::sigmoid},
      {"sqrt", at::sqrt},         {"rsqrt", at::rsqrt},
      {"erf", at::erf},           {"exp2", at::exp2},
      {"log1p", at::log1p},       {"expm1", at::expm1},
      {"sin", at::sin},           {"cos", at::cos},
      {"reciprocal", at::reciprocal}, {"log2", at::log2},
      {"log10", at::log10},       {"neg", at::neg},
      {"relu", at::relu},         {"abs", at::abs},
      {"floor", at::floor},       {"ceil", at::ceil},
      {"trunc", at::trunc},       {"sign", at::sign},
      {"square", at::square},     {"bitwise_not", at::bitwise_not},
      {"logical_not", at::logical_not}, {"silu", at::silu},
      {"hardswish", at::hardswish}, {"hardsigmoid", at::hardsigmoid},
      {"mish", at::mish},
  };
  if (op == "round")
    return at::round(x);
  auto found = table.find(op);
  return found == table.end() ? at::Tensor() : found->second(x);
}

at::Tensor binaryOp(const std::string &op, const at::Tensor &a,
                    const at::Tensor &b) {
  using Binary = at::Tensor (*)(const at::Tensor &, const at::Tensor &);
  static const std::map<std::string, Binary> table = {
      {"mul", at::mul},
      {"maximum", at::maximum},
      {"minimum", at::minimum},
      {"div", at::div},
      {"eq", at::eq},
      {"ne", at::ne},
      {"lt", at::lt},
      {"le", at::le},
      {"gt", at::gt},
      {"ge", at::ge},
      {"fmod", at::fmod},
      {"remainder", at::remainder},
      {"bitwise_and", at::bitwise_and},
      {"bitwise_or", at::bitwise_or},
      {"bitwise_xor", at::bitwise_xor},
      {"logical_and", at::logical_and},
      {"logical_or", at::logical_or},
      {"logical_xor", at::logical_xor},
      {"pow", at::pow},
  };
  if (op == "add")
    return at::add(a, b);
  if (op == "sub")
    return at::sub(a, b);
  if (op == "div_floor" || op == "div_trunc")
    return at::div(a, b, op == "div_floor" ? "floor" : "trunc");
  auto found = table.find(op);
  return found == table.end() ? at::Tensor() : found->second(a, b);
}

/// Pointwise ops with attributes or optional operands.
at::Tensor pointwiseOp(const Node &node, const Tensors &t) {
  const std::string &op = node.op;
  if (op == "gelu")
    return at::gelu(t[0], node.stringAttr("approximate", "none"));
  if (op == "leaky_relu")
    return at::leaky_relu(t[0], floatAttr(node, "negative_slope", 0.01));
  if (op == "elu")
    return at::elu(t[0], floatAttr(node, "alpha", 1.0));
  if (op == "softplus")
    return at::softplus(t[0], floatAttr(node, "beta", 1.0),
                        floatAttr(node, "threshold", 20.0));
  if (op == "hardtanh")
    return at::hardtanh(t[0], floatAttr(node, "min_val", -1.0),
                        floatAttr(node, "max_val", 1.0));
  if (op == "clamp")
    return at::clamp(t[0], optionalTensor(node, t, "min"),
                     optionalTensor(node, t, "max"));
  if (op == "masked_fill")
    return at::masked_fill(t[0], t[1], t[2]);
  if (op == "where")
    return at::where(t[0], t[1], t[2]);
  if (op == "cast") {
    const Attribute *dtype = node.attribute("dtype");
    if (!dtype || !std::holds_alternative<DType>(*dtype))
      opError(node, "cast needs a dtype");
    return t[0].to(toScalarType(std::get<DType>(*dtype)));
  }
  if (t.size() == 1)
    return unaryOp(op, t[0]);
  if (t.size() == 2)
    return binaryOp(op, t[0], t[1]);
  return {};
}

Tensors reductionOp(const Node &node, const Tensors &t) {
  const std::string &op = node.op;
  if (opInfoOf(node)->kind != OpKind::Reduction)
    return {};
  bool keepdim = boolAttr(node, "keepdim", false);
  if (op == "max_dim" || op == "min_dim") {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), t[0].dim());
    auto [values, indices] = op == "max_dim" ? at::max(t[0], dim, keepdim)
                                             : at::min(t[0], dim, keepdim);
    return {values, indices};
  }
  if (op == "argmax" || op == "argmin") {
    std::optional<int64_t> dim;
    if (node.attribute("dim"))
      dim = node.intAttr("dim", 0);
    return {op == "argmax" ? at::argmax(t[0], dim, keepdim)
                           : at::argmin(t[0], dim, keepdim)};
  }
  std::vector<int64_t> dims = reducedDims(node);
  if (op == "sum") {
    std::optional<at::ScalarType> dtype;
    if (const Attribute *given = node.attribute("dtype"))
      if (auto *type = std::get_if<DType>(given))
        dtype = toScalarType(*type);
    return {at::sum(t[0], dims, keepdim, dtype)};
  }
  if (op == "amax")
    return {at::amax(t[0], dims, keepdim)};
  if (op == "amin")
    return {at::amin(t[0], dims, keepdim)};
  if (op == "any" || op == "all") {
    at::Tensor result = t[0];
    // Highest dim first, so the lower ones keep their positions.
    for (auto dim = dims.rbegin(); dim != dims.rend(); ++dim)
      result = op == "any" ? at::any(result, *dim, keepdim)
                           : at::all(result, *dim, keepdim);
    return {result.to(at::kBool)};
  }
  return {};
}

Tensors viewOp(const Node &node, const Tensors &t, const Symbols &symbols) {
  const std::string &op = node.op;
  const at::Tensor &x = t[0];
  std::vector<int64_t> resultSizes = sizesOf(node.result(), symbols);
  if (op == "reshape")
    return {at::reshape(x, resultSizes)};
  if (op == "expand")
    return {x.expand(resultSizes)};
  if (op == "permute")
    return {x.permute(intListAttr(node, "dims", {}))};
  if (op == "transpose") {
    if (x.dim() < 2) // t() of a vector or a number: itself
      return {x.alias()};
    return {x.transpose(node.intAttr("dim0", 0), node.intAttr("dim1", 1))};
  }
  if (op == "squeeze") {
    if (!node.attribute("dims"))
      return {x.squeeze()};
    return {x.squeeze(intListAttr(node, "dims", {}))};
  }
  if (op == "unsqueeze")
    return {x.unsqueeze(node.intAttr("dim", 0))};
  if (op == "flatten")
    return {x.flatten(node.intAttr("start_dim", 0), node.intAttr("end_dim", -1))};
  if (op == "select")
    return {x.select(node.intAttr("dim", 0), node.intAttr("index", 0))};
  if (op == "slice" || op == "narrow") {
    SliceBounds bounds = sliceBounds(node);
    int64_t start = bounds.start.evaluate(symbols);
    int64_t length = bounds.length.evaluate(symbols);
    return {x.slice(bounds.dim, start, start + length * bounds.step,
                    bounds.step)};
  }
  if (op == "detach")
    return {x.detach()};
  if (op == "contiguous")
    return {x.contiguous()};
  if (op == "flip")
    return {x.flip(intListAttr(node, "dims", {}))};
  if (op == "roll")
    return {x.roll(intListAttr(node, "shifts", {}), intListAttr(node, "dims", {}))};
  if (op == "repeat")
    return {x.repeat(intListAttr(node, "repeats", {}))};
  if (op == "split" || op == "chunk") {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), x.dim());
    return at::split_with_sizes(x, splitLengths(node, x.size(dim)), dim);
  }
  if (op == "unbind")
    return at::unbind(x, node.intAttr("dim", 0));
  return {};
}

Tensors dataMovementOp(const Node &node, const Tensors &t,
                       const Symbols &symbols) {
  const std::string &op = node.op;
  const Value *result = node.result();
  if (op == "uniform")
    return {uniform(node, t, symbols)};
  if (op == "full")
    return {at::full(sizesOf(result, symbols), numberAttr(node, "value", symbols),
                     optionsOf(result))};
  if (op == "full_like")
    return {at::full(sizesOf(result, symbols), numberAttr(node, "value", symbols),
                     optionsOf(result).device(t[0].device()))};
  if (op == "arange") {
    double start = floatAttr(node, "start", 0), step = floatAttr(node, "step", 1);
    int64_t count = sizesOf(result, symbols).at(0);
    at::Tensor positions = at::arange(count, at::TensorOptions().dtype(at::kDouble));
    return {(positions * step + start).to(optionsOf(result))};
  }
  if (op == "tril")
    return {at::tril(t[0], node.intAttr("diagonal", 0))};
  if (op == "triu")
    return {at::triu(t[0], node.intAttr("diagonal", 0))};
  if (op == "pad")
    return {at::constant_pad_nd(t[0], intListAttr(node, "pad", {}),
                                floatAttr(node, "value", 0))};
  if (op == "cat")
    return {at::cat(t, node.intAttr("dim", 0))};
  if (op == "index_select")
    return {at::index_select(t[0], node.intAttr("dim", 0), t[1])};
  if (op == "gather")
    return {at::gather(t[0], node.intAttr("dim", 0), t[1])};
  if (op == "embedding")
    return {at::embedding(t[1], t[0], node.intAttr("padding_idx", -1))};
  return {};
}

Tensors compositeOp(const Node &node, const Tensors &t) {
  const std::string &op = node.op;
  if (op == "softmax")
    return {at::softmax(t[0], node.intAttr("dim", -1))};
  if (op == "log_softmax")
    return {at::log_softmax(t[0], node.intAttr("dim", -1))};
  if (op == "var" || op == "std") {
    std::vector<int64_t> dims = reducedDims(node);
    at::Scalar correction = floatAttr(node, "correction", 1.0);
    bool keepdim = boolAttr(node, "keepdim", false);
    return {op == "var" ? at::var(t[0], at::IntArrayRef(dims), correction,
                                  keepdim)
                        : at::std(t[0], at::IntArrayRef(dims), correction,
                                  keepdim)};
  }
  size_t next = 1;
  if (op == "layer_norm") {
    std::optional<at::Tensor> weight = normOperand(node, t, "has_weight", next);
    std::optional<at::Tensor> bias = normOperand(node, t, "has_bias", next);
    return {at::layer_norm(t[0], intListAttr(node, "normalized_shape", {}),
                           weight, bias, floatAttr(node, "eps", 1e-5))};
  }
  if (op == "rms_norm") {
    std::optional<at::Tensor> weight = normOperand(node, t, "has_weight", next);
    std::optional<double> eps;
    if (node.attribute("eps"))
      eps = floatAttr(node, "eps", 0);
    return {at::rms_norm(t[0], intListAttr(node, "normalized_shape", {}),
                         weight, eps)};
  }
  if (op == "batch_norm_train") {
    std::optional<at::Tensor> weight = normOperand(node, t, "has_weight", next);
    std::optional<at::Tensor> bias = normOperand(node, t, "has_bias", next);
    double eps = floatAttr(node, "eps", 1e-5);
    std::vector<int64_t> dims = batchNormDims(node);
    at::Tensor mean = at::mean(t[0], dims);
    at::Tensor variance = at::var(t[0], at::OptionalIntArrayRef(dims),
                                   std::optional<at::Scalar>(0), false);
    at::Tensor y = at::batch_norm(t[0], weight, bias, std::nullopt,
                                  std::nullopt, /*training=*/true,
                                  /*momentum=*/0.0, eps,
                                  /*cudnn_enabled=*/true);
    return {y, mean, variance};
  }
  if (op == "sdpa_flash") {
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
    Tensors flash = externResultsWithATen(op, node.attributes, t, {});
    return {out, flash.at(1)};
  }
  return {};
}

Tensors runNode(const Node &node, const Tensors &t, const Symbols &symbols) {
  const OpInfo *info = opInfoOf(node);
  if (info && info->kind == OpKind::Extern && node.op != "sdpa_flash" &&
      node.op != "call_torch")
    return externResultsWithATen(node.op, node.attributes, t, {});
  Tensors results;
  if (at::Tensor pointwise = pointwiseOp(node, t); pointwise.defined())
    return {pointwise};
  for (auto family : {&reductionOp, &compositeOp}) {
    results = family(node, t);
    if (!results.empty())
      return results;
  }
  results = viewOp(node, t, symbols);
  if (!results.empty())
    return results;
  return dataMovementOp(node, t, symbols);
}

} // namespace

std::vector<at::Tensor> replayGraphWithATen(const Graph &graph,
                                            const std::vector<at::Tensor> &inputs) {
  if (inputs.size() != graph.inputs.size())
    fail("replaying graph '" + graph.name + "': " +
         std::to_string(inputs.size()) + " inputs for " +
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

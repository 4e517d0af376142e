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

void addPointwiseReplays(ReplayTable &table) {
  using Unary = at::Tensor (*)(const at::Tensor &);
  const std::pair<Op, Unary> unaries[] = {
      {Op::Exp, at::exp},
      {Op::Log, at::log},
      {Op::Tanh, at::tanh},
      {Op::Sigmoid, at::sigmoid},
      {Op::Sqrt, at::sqrt},
      {Op::Rsqrt, at::rsqrt},
      {Op::Erf, at::erf},
      {Op::Exp2, at::exp2},
      {Op::Log1p, at::log1p},
      {Op::Expm1, at::expm1},
      {Op::Sin, at::sin},
      {Op::Cos, at::cos},
      {Op::Reciprocal, at::reciprocal},
      {Op::Log2, at::log2},
      {Op::Log10, at::log10},
      {Op::Neg, at::neg},
      {Op::Relu, at::relu},
      {Op::Abs, at::abs},
      {Op::Floor, at::floor},
      {Op::Ceil, at::ceil},
      {Op::Trunc, at::trunc},
      {Op::Sign, at::sign},
      {Op::Square, at::square},
      {Op::BitwiseNot, at::bitwise_not},
      {Op::LogicalNot, at::logical_not},
      {Op::Silu, at::silu},
      {Op::Hardswish, at::hardswish},
      {Op::Hardsigmoid, at::hardsigmoid},
      {Op::Mish, at::mish},
  };
  for (const auto &[name, fn] : unaries)
    table[name] = [fn = fn](const Node &, const Tensors &t, const Symbols &) {
      return Tensors{fn(t[0])};
    };
  table[Op::Round] = [](const Node &, const Tensors &t, const Symbols &) {
    return Tensors{at::round(t[0])};
  };
  using Binary = at::Tensor (*)(const at::Tensor &, const at::Tensor &);
  const std::pair<Op, Binary> binaries[] = {
      {Op::Mul, at::mul},
      {Op::Maximum, at::maximum},
      {Op::Minimum, at::minimum},
      {Op::Div, at::div},
      {Op::Eq, at::eq},
      {Op::Ne, at::ne},
      {Op::Lt, at::lt},
      {Op::Le, at::le},
      {Op::Gt, at::gt},
      {Op::Ge, at::ge},
      {Op::Fmod, at::fmod},
      {Op::Remainder, at::remainder},
      {Op::BitwiseAnd, at::bitwise_and},
      {Op::BitwiseOr, at::bitwise_or},
      {Op::BitwiseXor, at::bitwise_xor},
      {Op::LogicalAnd, at::logical_and},
      {Op::LogicalOr, at::logical_or},
      {Op::LogicalXor, at::logical_xor},
      {Op::Pow, at::pow},
  };
  for (const auto &[name, fn] : binaries)
    table[name] = [fn = fn](const Node &, const Tensors &t, const Symbols &) {
      return Tensors{fn(t[0], t[1])};
    };
  table[Op::Add] = [](const Node &, const Tensors &t, const Symbols &) {
    return Tensors{at::add(t[0], t[1])};
  };
  table[Op::Sub] = [](const Node &, const Tensors &t, const Symbols &) {
    return Tensors{at::sub(t[0], t[1])};
  };
  table[Op::DivFloor] = [](const Node &, const Tensors &t, const Symbols &) {
    return Tensors{at::div(t[0], t[1], "floor")};
  };
  table[Op::DivTrunc] = [](const Node &, const Tensors &t, const Symbols &) {
    return Tensors{at::div(t[0], t[1], "trunc")};
  };
  // Pointwise ops with attributes or optional operands.
  table[Op::Gelu] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{at::gelu(t[0], node.stringAttr("approximate", "none"))};
  };
  table[Op::LeakyRelu] = [](const Node &node, const Tensors &t,
                            const Symbols &) {
    return Tensors{
        at::leaky_relu(t[0], floatAttr(node, "negative_slope", 0.01))};
  };
  table[Op::Elu] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{at::elu(t[0], floatAttr(node, "alpha", 1.0))};
  };
  table[Op::Softplus] = [](const Node &node, const Tensors &t,
                           const Symbols &) {
    return Tensors{at::softplus(t[0], floatAttr(node, "beta", 1.0),
                                floatAttr(node, "threshold", 20.0))};
  };
  table[Op::Hardtanh] = [](const Node &node, const Tensors &t,
                           const Symbols &) {
    return Tensors{at::hardtanh(t[0], floatAttr(node, "min_val", -1.0),
                                floatAttr(node, "max_val", 1.0))};
  };
  table[Op::Clamp] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{at::clamp(t[0], optionalTensor(node, t, "min"),
                             optionalTensor(node, t, "max"))};
  };
  table[Op::MaskedFill] = [](const Node &, const Tensors &t, const Symbols &) {
    return Tensors{at::masked_fill(t[0], t[1], t[2])};
  };
  table[Op::Where] = [](const Node &, const Tensors &t, const Symbols &) {
    return Tensors{at::where(t[0], t[1], t[2])};
  };
  table[Op::Cast] = [](const Node &node, const Tensors &t, const Symbols &) {
    const Attribute *dtype = node.attribute("dtype");
    if (!dtype || !std::holds_alternative<DType>(*dtype))
      opError(node, "cast needs a dtype");
    return Tensors{t[0].to(toScalarType(std::get<DType>(*dtype)))};
  };
}

void addReductionReplays(ReplayTable &table) {
  auto extreme = [](const Node &node, const Tensors &t, const Symbols &) {
    bool keepdim = boolAttr(node, "keepdim", false);
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), t[0].dim());
    auto [values, indices] = node.op == Op::MaxDim
                                 ? at::max(t[0], dim, keepdim)
                                 : at::min(t[0], dim, keepdim);
    return Tensors{values, indices};
  };
  table[Op::MaxDim] = extreme;
  table[Op::MinDim] = extreme;
  auto argExtreme = [](const Node &node, const Tensors &t, const Symbols &) {
    bool keepdim = boolAttr(node, "keepdim", false);
    std::optional<int64_t> dim;
    if (node.attribute("dim"))
      dim = node.intAttr("dim", 0);
    return Tensors{node.op == Op::Argmax ? at::argmax(t[0], dim, keepdim)
                                         : at::argmin(t[0], dim, keepdim)};
  };
  table[Op::Argmax] = argExtreme;
  table[Op::Argmin] = argExtreme;
  table[Op::Sum] = [](const Node &node, const Tensors &t, const Symbols &) {
    std::optional<at::ScalarType> dtype;
    if (const Attribute *given = node.attribute("dtype"))
      if (auto *type = std::get_if<DType>(given))
        dtype = toScalarType(*type);
    return Tensors{at::sum(t[0], reducedDims(node),
                           boolAttr(node, "keepdim", false), dtype)};
  };
  table[Op::Amax] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{
        at::amax(t[0], reducedDims(node), boolAttr(node, "keepdim", false))};
  };
  table[Op::Amin] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{
        at::amin(t[0], reducedDims(node), boolAttr(node, "keepdim", false))};
  };
  auto anyOrAll = [](const Node &node, const Tensors &t, const Symbols &) {
    bool keepdim = boolAttr(node, "keepdim", false);
    std::vector<int64_t> dims = reducedDims(node);
    at::Tensor result = t[0];
    // Highest dim first, so the lower ones keep their positions.
    for (auto dim = dims.rbegin(); dim != dims.rend(); ++dim)
      result = node.op == Op::Any ? at::any(result, *dim, keepdim)
                                  : at::all(result, *dim, keepdim);
    return Tensors{result.to(at::kBool)};
  };
  table[Op::Any] = anyOrAll;
  table[Op::All] = anyOrAll;
}

void addViewReplays(ReplayTable &table) {
  table[Op::Reshape] = [](const Node &node, const Tensors &t,
                          const Symbols &s) {
    return Tensors{at::reshape(t[0], sizesOf(node.result(), s))};
  };
  table[Op::Expand] = [](const Node &node, const Tensors &t, const Symbols &s) {
    return Tensors{t[0].expand(sizesOf(node.result(), s))};
  };
  table[Op::Permute] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{t[0].permute(intListAttr(node, "dims", {}))};
  };
  table[Op::Transpose] = [](const Node &node, const Tensors &t,
                            const Symbols &) {
    if (t[0].dim() < 2) // t() of a vector or a number: itself
      return Tensors{t[0].alias()};
    return Tensors{
        t[0].transpose(node.intAttr("dim0", 0), node.intAttr("dim1", 1))};
  };
  table[Op::Squeeze] = [](const Node &node, const Tensors &t, const Symbols &) {
    if (!node.attribute("dims"))
      return Tensors{t[0].squeeze()};
    return Tensors{t[0].squeeze(intListAttr(node, "dims", {}))};
  };
  table[Op::Unsqueeze] = [](const Node &node, const Tensors &t,
                            const Symbols &) {
    return Tensors{t[0].unsqueeze(node.intAttr("dim", 0))};
  };
  table[Op::Flatten] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{t[0].flatten(node.intAttr("start_dim", 0),
                                node.intAttr("end_dim", -1))};
  };
  table[Op::Select] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{
        t[0].select(node.intAttr("dim", 0), node.intAttr("index", 0))};
  };
  auto slice = [](const Node &node, const Tensors &t, const Symbols &s) {
    SliceBounds bounds = sliceBounds(node);
    int64_t start = bounds.start.evaluate(s);
    int64_t length = bounds.length.evaluate(s);
    return Tensors{t[0].slice(bounds.dim, start, start + length * bounds.step,
                              bounds.step)};
  };
  table[Op::Slice] = slice;
  table[Op::Narrow] = slice;
  table[Op::Detach] = [](const Node &, const Tensors &t, const Symbols &) {
    return Tensors{t[0].detach()};
  };
  table[Op::Contiguous] = [](const Node &, const Tensors &t, const Symbols &) {
    return Tensors{t[0].contiguous()};
  };
  table[Op::Flip] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{t[0].flip(intListAttr(node, "dims", {}))};
  };
  table[Op::Roll] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{t[0].roll(intListAttr(node, "shifts", {}),
                             intListAttr(node, "dims", {}))};
  };
  table[Op::Repeat] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{t[0].repeat(intListAttr(node, "repeats", {}))};
  };
  auto pieces = [](const Node &node, const Tensors &t, const Symbols &) {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), t[0].dim());
    return at::split_with_sizes(t[0], splitLengths(node, t[0].size(dim)), dim);
  };
  table[Op::Split] = pieces;
  table[Op::Chunk] = pieces;
  table[Op::Unbind] = [](const Node &node, const Tensors &t, const Symbols &) {
    return at::unbind(t[0], node.intAttr("dim", 0));
  };
}

void addDataMovementReplays(ReplayTable &table) {
  table[Op::Uniform] = [](const Node &node, const Tensors &t,
                          const Symbols &s) {
    return Tensors{uniform(node, t, s)};
  };
  table[Op::Full] = [](const Node &node, const Tensors &, const Symbols &s) {
    const Value *result = node.result();
    return Tensors{at::full(sizesOf(result, s), numberAttr(node, "value", s),
                            optionsOf(result))};
  };
  table[Op::FullLike] = [](const Node &node, const Tensors &t,
                           const Symbols &s) {
    const Value *result = node.result();
    return Tensors{at::full(sizesOf(result, s), numberAttr(node, "value", s),
                            optionsOf(result).device(t[0].device()))};
  };
  table[Op::Arange] = [](const Node &node, const Tensors &, const Symbols &s) {
    const Value *result = node.result();
    double start = floatAttr(node, "start", 0),
           step = floatAttr(node, "step", 1);
    int64_t count = sizesOf(result, s).at(0);
    at::Tensor positions =
        at::arange(count, at::TensorOptions().dtype(at::kDouble));
    return Tensors{(positions * step + start).to(optionsOf(result))};
  };
  table[Op::Tril] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{at::tril(t[0], node.intAttr("diagonal", 0))};
  };
  table[Op::Triu] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{at::triu(t[0], node.intAttr("diagonal", 0))};
  };
  table[Op::Pad] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{at::constant_pad_nd(t[0], intListAttr(node, "pad", {}),
                                       floatAttr(node, "value", 0))};
  };
  table[Op::Cat] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{at::cat(t, node.intAttr("dim", 0))};
  };
  table[Op::IndexSelect] = [](const Node &node, const Tensors &t,
                              const Symbols &) {
    return Tensors{at::index_select(t[0], node.intAttr("dim", 0), t[1])};
  };
  table[Op::Gather] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{at::gather(t[0], node.intAttr("dim", 0), t[1])};
  };
  table[Op::Embedding] = [](const Node &node, const Tensors &t,
                            const Symbols &) {
    return Tensors{at::embedding(t[1], t[0], node.intAttr("padding_idx", -1))};
  };
}

void addCompositeReplays(ReplayTable &table) {
  table[Op::Softmax] = [](const Node &node, const Tensors &t, const Symbols &) {
    return Tensors{at::softmax(t[0], node.intAttr("dim", -1))};
  };
  table[Op::LogSoftmax] = [](const Node &node, const Tensors &t,
                             const Symbols &) {
    return Tensors{at::log_softmax(t[0], node.intAttr("dim", -1))};
  };
  auto spread = [](const Node &node, const Tensors &t, const Symbols &) {
    std::vector<int64_t> dims = reducedDims(node);
    at::Scalar correction = floatAttr(node, "correction", 1.0);
    bool keepdim = boolAttr(node, "keepdim", false);
    return Tensors{
        node.op == Op::Var
            ? at::var(t[0], at::IntArrayRef(dims), correction, keepdim)
            : at::std(t[0], at::IntArrayRef(dims), correction, keepdim)};
  };
  table[Op::Var] = spread;
  table[Op::Std] = spread;
  table[Op::LayerNorm] = [](const Node &node, const Tensors &t,
                            const Symbols &) {
    size_t next = 1;
    std::optional<at::Tensor> weight = normOperand(node, t, "has_weight", next);
    std::optional<at::Tensor> bias = normOperand(node, t, "has_bias", next);
    return Tensors{at::layer_norm(t[0],
                                  intListAttr(node, "normalized_shape", {}),
                                  weight, bias, floatAttr(node, "eps", 1e-5))};
  };
  table[Op::RmsNorm] = [](const Node &node, const Tensors &t, const Symbols &) {
    size_t next = 1;
    std::optional<at::Tensor> weight = normOperand(node, t, "has_weight", next);
    std::optional<double> eps;
    if (node.attribute("eps"))
      eps = floatAttr(node, "eps", 0);
    return Tensors{at::rms_norm(t[0], intListAttr(node, "normalized_shape", {}),
                                weight, eps)};
  };
  table[Op::BatchNormTrain] = [](const Node &node, const Tensors &t,
                                 const Symbols &) {
    size_t next = 1;
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
    return Tensors{y, mean, variance};
  };
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
    addDataMovementReplays(built);
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

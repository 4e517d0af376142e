//===- CompositeOps.cpp - Ops defined by other ops ------------------------===//
//
// The decomposition table: softmax, normalizations, statistics and linear
// are written here in terms of primitive reductions, pointwise ops, views
// and externs. The decompose pass applies it before lowering, so the
// scheduler sees only primitives (and fuses softmax or layer_norm into one
// kernel because their pieces share one iteration space).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpRegistry.h"

#include <cmath>

namespace dynafuse {
namespace {

Value *input(const Node &node, size_t i) { return node.operands.at(i).value; }

std::vector<int64_t> dimsOf(const Node &node) { return reducedDims(node); }

/// The number of elements a reduction over dims combines (symbolic when
/// a reduced dim is).
SymExpr reducedCount(const Node &node, const std::vector<int64_t> &dims) {
  const TensorType &type = operandType(node, 0);
  SymExpr count(1);
  for (int64_t dim : dims)
    count = count * type.sizes[dim];
  return count;
}

/// count as a divisor: a float literal, or a 0-dim f32 tensor of a
/// symbolic count (full with a symbolic value).
Operand countOperand(Graph &graph, const Node &node, const SymExpr &count) {
  if (count.isConstant())
    return Scalar::ofFloat(double(count.constant()));
  return emit(graph, node, Op::Full, {},
              {{"shape", std::vector<int64_t>{}},
               {"value", count},
               {"dtype", DType::F32}});
}

/// sum / count in sum's dtype. A symbolic count is a 0-dim f32 tensor, and
/// a full reduction's sum is 0-dim too: their quotient would promote a
/// bf16/f16 sum to f32 where eager keeps the input's dtype.
Value *divideByCount(Graph &graph, const Node &node, Value *sum,
                     const Operand &count) {
  Value *quotient = emit(graph, node, Op::Div, {sum, count});
  if (quotient->type.dtype == sum->type.dtype ||
      !isFloating(sum->type.dtype))
    return quotient;
  return emit(graph, node, Op::Cast, {quotient}, {{"dtype", sum->type.dtype}});
}

Attribute dimsAttr(const std::vector<int64_t> &dims) { return dims; }

/// Casts integer inputs to f32 (mean, logsumexp on ints) as torch does.
Value *asFloat(Graph &graph, const Node &node, Value *value) {
  if (isFloating(value->type.dtype))
    return value;
  return emit(graph, node, Op::Cast, {value}, {{"dtype", DType::F32}});
}

Value *meanOver(Graph &graph, const Node &node, Value *x,
                const std::vector<int64_t> &dims, bool keepdim,
                const SymExpr &count) {
  Value *sum = emit(graph, node, Op::Sum, {x},
                    {{"dims", dimsAttr(dims)}, {"keepdim", keepdim}});
  return divideByCount(graph, node, sum, countOperand(graph, node, count));
}

/// Normalizes x over dims: (x - mean) * rsqrt(var + eps), biased variance.
Value *normalize(Graph &graph, const Node &node, Value *x,
                 const std::vector<int64_t> &dims, const SymExpr &count,
                 double eps) {
  Value *mean = meanOver(graph, node, x, dims, true, count);
  Value *centered = emit(graph, node, Op::Sub, {x, mean});
  Value *square = emit(graph, node, Op::Mul, {centered, centered});
  Value *variance = meanOver(graph, node, square, dims, true, count);
  Value *shifted = emit(graph, node, Op::Add, {variance, Scalar::ofFloat(eps)});
  Value *scale = emit(graph, node, Op::Rsqrt, {shifted});
  return emit(graph, node, Op::Mul, {centered, scale});
}

/// ATen's norms compute in float for f16 and bf16 inputs (opmath) and
/// round once at the end: the input in f32 for those, as is otherwise.
Value *inComputeType(Graph &graph, const Node &node, Value *x) {
  DType type = x->type.dtype;
  if (type != DType::F16 && type != DType::BF16)
    return x;
  return emit(graph, node, Op::Cast, {x}, {{"dtype", DType::F32}});
}

/// y back in the dtype of the node's input (after inComputeType).
Value *inInputType(Graph &graph, const Node &node, Value *y) {
  DType type = operandType(node, 0).dtype;
  if (y->type.dtype == type)
    return y;
  return emit(graph, node, Op::Cast, {y}, {{"dtype", type}});
}

/// Multiplies by weight and adds bias, each optional, broadcast as given.
Value *affine(Graph &graph, const Node &node, Value *y, Value *weight,
              Value *bias) {
  if (weight)
    y = emit(graph, node, Op::Mul, {y, weight});
  if (bias)
    y = emit(graph, node, Op::Add, {y, bias});
  return y;
}

/// Optional operands after the first: has_weight / has_bias say which exist.
Value *optionalOperand(const Node &node, const std::string &flag,
                       size_t &next) {
  if (!boolAttr(node, flag, false))
    return nullptr;
  return input(node, next++);
}

std::vector<int64_t> lastDims(const Node &node, size_t count) {
  size_t rank = operandType(node, 0).rank();
  if (count > rank)
    opError(node, "normalized_shape has more dims than the input");
  std::vector<int64_t> dims;
  for (size_t k = rank - count; k < rank; ++k)
    dims.push_back(int64_t(k));
  return dims;
}

//===----------------------------------------------------------------------===//
// Decompositions
//===----------------------------------------------------------------------===//

std::vector<Value *> decomposeMean(Graph &graph, const Node &node) {
  std::vector<int64_t> dims = dimsOf(node);
  Value *x = input(node, 0);
  if (const Attribute *dtype = node.attribute("dtype"))
    x = emit(graph, node, Op::Cast, {x}, {{"dtype", std::get<DType>(*dtype)}});
  return {meanOver(graph, node, x, dims, boolAttr(node, "keepdim", false),
                   reducedCount(node, dims))};
}

/// var, or std (squareRoot) of the variance.
std::vector<Value *> decomposeVariance(Graph &graph, const Node &node,
                                       bool squareRoot) {
  std::vector<int64_t> dims = dimsOf(node);
  bool keepdim = boolAttr(node, "keepdim", false);
  SymExpr count = reducedCount(node, dims);
  Value *x = input(node, 0);
  Value *mean = meanOver(graph, node, x, dims, true, count);
  Value *centered = emit(graph, node, Op::Sub, {x, mean});
  Value *square = emit(graph, node, Op::Mul, {centered, centered});
  Value *sum = emit(graph, node, Op::Sum, {square},
                    {{"dims", dimsAttr(dims)}, {"keepdim", keepdim}});
  double correction = floatAttr(node, "correction", 1.0);
  Operand divisor = Scalar::ofFloat(0);
  if (count.isConstant()) {
    divisor = Scalar::ofFloat(
        std::max(double(count.constant()) - correction, 0.0));
  } else {
    // A symbolic count is at least 2 (capture specializes 0 and 1): an
    // integral correction of at most 1 keeps it positive.
    if (correction != std::floor(correction) || correction > 1)
      opError(node, "needs a static count for this correction");
    divisor = countOperand(graph, node, count - int64_t(correction));
  }
  Value *variance = divideByCount(graph, node, sum, divisor);
  if (!squareRoot)
    return {variance};
  // sqrt of a zero variance is 0 with eager's gradient 0 (std_backward
  // masks it): sqrt's own, g / (2 * 0) times the variance's zero, is NaN.
  // The square root reads 1 there, and the result is 0.
  Value *zero = emit(graph, node, Op::Eq, {variance, Scalar::ofFloat(0.0)});
  Value *safe =
      emit(graph, node, Op::Where, {zero, Scalar::ofFloat(1.0), variance});
  return {
      emit(graph, node, Op::Where,
           {zero, Scalar::ofFloat(0.0), emit(graph, node, Op::Sqrt, {safe})})};
}

std::vector<Value *> decomposeLogSumExp(Graph &graph, const Node &node) {
  std::vector<int64_t> dims = dimsOf(node);
  bool keepdim = boolAttr(node, "keepdim", false);
  Value *x = asFloat(graph, node, input(node, 0));
  if (reducedCount(node, dims) == SymExpr(0)) // log(0): -inf, as in eager
    return {emit(graph, node, Op::Log,
                 {emit(graph, node, Op::Sum, {emit(graph, node, Op::Exp, {x})},
                       {{"dims", dimsAttr(dims)}, {"keepdim", keepdim}})})};
  Value *max = emit(graph, node, Op::Amax, {x},
                    {{"dims", dimsAttr(dims)}, {"keepdim", true}});
  // An infinite max would give inf - inf: shift by 0 there, as torch does.
  Value *magnitude = emit(graph, node, Op::Abs, {max});
  Value *infinite =
      emit(graph, node, Op::Eq, {magnitude, Scalar::ofFloat(INFINITY)});
  Value *shift =
      emit(graph, node, Op::Where, {infinite, Scalar::ofFloat(0), max});
  Value *exp =
      emit(graph, node, Op::Exp, {emit(graph, node, Op::Sub, {x, shift})});
  Value *sum = emit(graph, node, Op::Sum, {exp},
                    {{"dims", dimsAttr(dims)}, {"keepdim", keepdim}});
  Value *log = emit(graph, node, Op::Log, {sum});
  if (!keepdim) {
    shift = emit(graph, node, Op::Reshape, {shift},
                 {{"shape", canonicalAttribute(log->type.sizes)}});
  }
  return {emit(graph, node, Op::Add, {log, shift})};
}

std::vector<Value *> decomposeNorm(Graph &graph, const Node &node) {
  std::vector<int64_t> dims = dimsOf(node);
  std::map<std::string, Attribute> reduce = {
      {"dims", dimsAttr(dims)}, {"keepdim", boolAttr(node, "keepdim", false)}};
  double p = floatAttr(node, "p", 2.0);
  Value *magnitude = emit(graph, node, Op::Abs, {input(node, 0)});
  if (std::isinf(p))
    return {
        emit(graph, node, p > 0 ? Op::Amax : Op::Amin, {magnitude}, reduce)};
  if (p == 1.0)
    return {emit(graph, node, Op::Sum, {magnitude}, reduce)};
  if (p == 2.0) {
    Value *square = emit(graph, node, Op::Mul, {magnitude, magnitude});
    return {emit(graph, node, Op::Sqrt,
                 {emit(graph, node, Op::Sum, {square}, reduce)})};
  }
  Value *powered = emit(graph, node, Op::Pow, {magnitude, Scalar::ofFloat(p)});
  Value *sum = emit(graph, node, Op::Sum, {powered}, reduce);
  return {emit(graph, node, Op::Pow, {sum, Scalar::ofFloat(1.0 / p)})};
}

/// softmax, or log_softmax (inLogSpace). f16 and bf16 inputs are
/// normalized in f32, as eager's kernels accumulate, and rounded once at
/// the end: an f16 max beside the unrounded x it came from would give
/// log_softmax a positive result.
std::vector<Value *> decomposeSoftmax(Graph &graph, const Node &node,
                                      bool inLogSpace) {
  Value *x = inComputeType(graph, node, input(node, 0));
  std::vector<int64_t> dims = {
      normalizeDim(node, node.intAttr("dim", -1), x->type.rank())};
  if (x->type.rank() == 0)
    dims.clear();
  std::map<std::string, Attribute> reduce = {{"dims", dimsAttr(dims)},
                                             {"keepdim", true}};
  if (x->type.numel() == SymExpr(0)) // no elements: nothing to normalize
    return {
        emit(graph, node, Op::FullLike, {input(node, 0)}, {{"value", 0.0}})};
  Value *max = emit(graph, node, Op::Amax, {x}, reduce);
  Value *shifted = emit(graph, node, Op::Sub, {x, max});
  Value *exp = emit(graph, node, Op::Exp, {shifted});
  Value *sum = emit(graph, node, Op::Sum, {exp}, reduce);
  if (!inLogSpace) {
    // One reciprocal per row, then a multiply per element, as ATen's
    // softmax kernels compute it.
    Value *inverse = emit(graph, node, Op::Div, {Scalar::ofFloat(1.0), sum});
    return {
        inInputType(graph, node, emit(graph, node, Op::Mul, {exp, inverse}))};
  }
  return {inInputType(graph, node,
                      emit(graph, node, Op::Sub,
                           {shifted, emit(graph, node, Op::Log, {sum})}))};
}

/// layer_norm's and rms_norm's dims: normalized_shape must be the input's
/// last sizes, and each weight or bias that shape, as eager checks them (a
/// symbolic size that is not provably equal is refused: capture then
/// retries with static sizes, where eager's error shows).
std::vector<int64_t> normalizedDims(const Node &node) {
  std::vector<SymExpr> shape = symListAttr(node, "normalized_shape", {});
  if (shape.empty())
    opError(node, "normalized_shape must have at least one element");
  std::vector<int64_t> dims = lastDims(node, shape.size());
  const TensorType &x = operandType(node, 0);
  auto shapeText = [&] {
    std::string text;
    for (const SymExpr &size : shape)
      text += (text.empty() ? "" : ", ") + size.str();
    return "[" + text + "]";
  };
  for (size_t k = 0; k < dims.size(); ++k)
    if (x.sizes[size_t(dims[k])] != shape[k])
      opError(node, "normalized_shape " + shapeText() +
                        " is not the last sizes of the input " + x.str());
  for (size_t i = 1; i < node.operands.size(); ++i)
    if (operandType(node, i).sizes != shape)
      opError(node, "weight and bias must have the normalized shape " +
                        shapeText() + ", not " + operandType(node, i).str());
  return dims;
}

std::vector<Value *> decomposeLayerNorm(Graph &graph, const Node &node) {
  std::vector<int64_t> dims = normalizedDims(node);
  size_t next = 1;
  Value *weight = optionalOperand(node, "has_weight", next);
  Value *bias = optionalOperand(node, "has_bias", next);
  Value *y = normalize(graph, node, inComputeType(graph, node, input(node, 0)),
                       dims, reducedCount(node, dims),
                       floatAttr(node, "eps", 1e-5));
  Value *scaled = affine(graph, node, y, weight, bias);
  // Eager adds a zero bias when there is none: a zero scaled by a negative
  // weight is +0.0 there, not -0.0.
  if (weight && !bias)
    scaled = emit(graph, node, Op::Add, {scaled, Scalar::ofFloat(0.0)});
  return {inInputType(graph, node, scaled)};
}

std::vector<Value *> decomposeRmsNorm(Graph &graph, const Node &node) {
  std::vector<int64_t> dims = normalizedDims(node);
  size_t next = 1;
  Value *weight = optionalOperand(node, "has_weight", next);
  Value *x = inComputeType(graph, node, input(node, 0));
  Value *square = emit(graph, node, Op::Mul, {x, x});
  Value *mean =
      meanOver(graph, node, square, dims, true, reducedCount(node, dims));
  // eps=None: the epsilon of ATen's compute type.
  double eps = floatAttr(node, "eps", computeEpsilon(x->type.dtype));
  Value *scale =
      emit(graph, node, Op::Rsqrt,
           {emit(graph, node, Op::Add, {mean, Scalar::ofFloat(eps)})});
  // ATen rounds the normalized input to its dtype before the weight.
  Value *y = inInputType(graph, node, emit(graph, node, Op::Mul, {x, scale}));
  return {affine(graph, node, y, weight, nullptr)};
}

/// Per-channel parameters ([C]) reshaped to broadcast over dim 1.
Value *perChannel(Graph &graph, const Node &node, Value *param) {
  if (!param)
    return nullptr;
  size_t rank = operandType(node, 0).rank();
  std::vector<int64_t> shape(rank, 1);
  if (!param->type.sizes[0].isConstant())
    opError(node, "needs static channel counts");
  shape[1] = param->type.sizes[0].constant();
  return emit(graph, node, Op::Reshape, {param}, {{"shape", shape}});
}

std::vector<Value *> decomposeGroupNorm(Graph &graph, const Node &node) {
  const TensorType &type = operandType(node, 0);
  int64_t groups = node.intAttr("num_groups", 1);
  std::vector<int64_t> shape;
  for (const SymExpr &size : type.sizes) {
    if (!size.isConstant())
      opError(node, "needs static sizes");
    shape.push_back(size.constant());
  }
  if (shape.size() < 2 || groups <= 0 || shape[1] % groups != 0)
    opError(node, "channels must divide into num_groups");
  int64_t perGroup = 1;
  for (size_t k = 1; k < shape.size(); ++k)
    perGroup *= shape[k];
  perGroup /= groups;
  Value *grouped = emit(
      graph, node, Op::Reshape, {inComputeType(graph, node, input(node, 0))},
      {{"shape", std::vector<int64_t>{shape[0], groups, perGroup}}});
  Value *y = normalize(graph, node, grouped, {2}, SymExpr(perGroup),
                       floatAttr(node, "eps", 1e-5));
  y = emit(graph, node, Op::Reshape, {y}, {{"shape", shape}});
  size_t next = 1;
  Value *weight =
      perChannel(graph, node, optionalOperand(node, "has_weight", next));
  Value *bias =
      perChannel(graph, node, optionalOperand(node, "has_bias", next));
  return {inInputType(graph, node, affine(graph, node, y, weight, bias))};
}

std::vector<Value *> decomposeBatchNorm(Graph &graph, const Node &node) {
  Value *mean = perChannel(graph, node, input(node, 1));
  Value *variance = perChannel(graph, node, input(node, 2));
  size_t next = 3;
  Value *weight =
      perChannel(graph, node, optionalOperand(node, "has_weight", next));
  Value *bias =
      perChannel(graph, node, optionalOperand(node, "has_bias", next));
  Value *shifted =
      emit(graph, node, Op::Add,
           {variance, Scalar::ofFloat(floatAttr(node, "eps", 1e-5))});
  Value *scale = emit(graph, node, Op::Rsqrt, {shifted});
  Value *centered = emit(graph, node, Op::Sub, {input(node, 0), mean});
  return {affine(graph, node, emit(graph, node, Op::Mul, {centered, scale}),
                 weight, bias)};
}

/// batch_norm in training mode: x normalized by its own statistics over
/// every dim but the channels (dim 1). Its second and third results are the
/// batch mean and biased variance, [C] each, which the running statistics
/// move toward.
std::vector<Value *> decomposeBatchNormTrain(Graph &graph, const Node &node) {
  const TensorType &type = operandType(node, 0);
  std::vector<int64_t> dims = batchNormDims(node);
  SymExpr count = reducedCount(node, dims);
  Value *x = input(node, 0);
  Value *mean = meanOver(graph, node, x, dims, true, count);
  Value *centered = emit(graph, node, Op::Sub, {x, mean});
  Value *variance =
      meanOver(graph, node, emit(graph, node, Op::Mul, {centered, centered}),
               dims, true, count);
  Value *scale =
      emit(graph, node, Op::Rsqrt,
           {emit(graph, node, Op::Add,
                 {variance, Scalar::ofFloat(floatAttr(node, "eps", 1e-5))})});
  size_t next = 1;
  Value *weight =
      perChannel(graph, node, optionalOperand(node, "has_weight", next));
  Value *bias =
      perChannel(graph, node, optionalOperand(node, "has_bias", next));
  Value *y = affine(graph, node, emit(graph, node, Op::Mul, {centered, scale}),
                    weight, bias);
  auto channels = [&](Value *statistic) {
    return emit(graph, node, Op::Reshape, {statistic},
                {{"shape", std::vector<SymExpr>{type.sizes[1]}}});
  };
  return {y, channels(mean), channels(variance)};
}

/// nll_loss(logp, target) {ignore_index, reduction}: -logp at each
/// target's class (dim 1; dim 0 unbatched), zero where the target is
/// ignore_index; "mean" divides the sum by the count of targets kept.
Value *negativeLogLikelihood(Graph &graph, const Node &node, Value *logp,
                             Value *target) {
  const TensorType &scores = logp->type;
  if (isFloating(target->type.dtype) || target->type.dtype == DType::Bool ||
      target->type.rank() + 1 != scores.rank())
    opError(node, "needs integer class targets with one dim fewer than the "
                  "scores (class probabilities are not supported)");
  int64_t classDim = scores.rank() == 1 ? 0 : 1;
  Value *kept =
      emit(graph, node, Op::Ne,
           {target, Scalar::ofInt(node.intAttr("ignore_index", -100))});
  Value *safe = emit(graph, node, Op::Where, {kept, target, Scalar::ofInt(0)});
  Value *picked = emit(
      graph, node, Op::Gather,
      {logp, emit(graph, node, Op::Unsqueeze, {safe}, {{"dim", classDim}})},
      {{"dim", classDim}});
  picked = emit(graph, node, Op::Squeeze, {picked},
                {{"dims", std::vector<int64_t>{classDim}}});
  Value *loss =
      emit(graph, node, Op::Where,
           {kept, emit(graph, node, Op::Neg, {picked}), Scalar::ofFloat(0)});
  std::string reduction = node.stringAttr("reduction", "mean");
  if (reduction == "none")
    return loss;
  if (reduction != "sum" && reduction != "mean")
    opError(node, "reduction must be 'none', 'sum' or 'mean', not '" +
                      reduction + "'");
  std::vector<int64_t> all;
  for (size_t k = 0; k < loss->type.rank(); ++k)
    all.push_back(int64_t(k));
  auto total = [&](Value *value) {
    return emit(graph, node, Op::Sum, {value},
                {{"dims", all}, {"keepdim", false}});
  };
  Value *sum = total(loss);
  if (reduction == "sum")
    return sum;
  Value *count =
      total(emit(graph, node, Op::Cast, {kept}, {{"dtype", scores.dtype}}));
  return emit(graph, node, Op::Div, {sum, count});
}

std::vector<Value *> decomposeNllLoss(Graph &graph, const Node &node) {
  return {negativeLogLikelihood(graph, node, input(node, 0), input(node, 1))};
}

/// cross_entropy(scores, target): nll_loss of log_softmax over the classes.
std::vector<Value *> decomposeCrossEntropy(Graph &graph, const Node &node) {
  Value *scores = input(node, 0);
  int64_t classDim = scores->type.rank() == 1 ? 0 : 1;
  Value *logp =
      emit(graph, node, Op::LogSoftmax, {scores}, {{"dim", classDim}});
  return {negativeLogLikelihood(graph, node, logp, input(node, 1))};
}

std::vector<Value *> decomposeLinear(Graph &graph, const Node &node) {
  // Eager transposes the weight with t(): at most 2 dims, a 1-d weight as
  // it is (a dot product with the last dim).
  size_t weightRank = operandType(node, 1).rank();
  if (weightRank > 2)
    opError(node, "t() expects a tensor with <= 2 dimensions, but the weight "
                  "is " + std::to_string(weightRank) + "-d");
  Value *weightT = weightRank < 2
                       ? input(node, 1)
                       : emit(graph, node, Op::Transpose, {input(node, 1)},
                              {{"dim0", int64_t(0)}, {"dim1", int64_t(1)}});
  // weight_prepacked (the torch bridge's mark) passes to the product.
  std::map<std::string, Attribute> attributes;
  if (boolAttr(node, "weight_prepacked", false))
    attributes["weight_prepacked"] = true;
  Value *product =
      emit(graph, node, Op::Matmul, {input(node, 0), weightT}, attributes);
  if (node.operands.size() == 3) {
    // Eager's addmm expands the bias to the product's shape: the bias may
    // not widen it (a [2] bias on a [1] product raises there).
    const std::vector<SymExpr> &sizes = product->type.sizes;
    if (broadcastShapes(sizes, operandType(node, 2).sizes, node.location) !=
        sizes)
      opError(node, "the bias of shape " + operandType(node, 2).str() +
                        " does not expand to the product's shape " +
                        product->type.str());
    product = emit(graph, node, Op::Add, {product, input(node, 2)});
  }
  return {product};
}

std::vector<Value *> decomposeStack(Graph &graph, const Node &node) {
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0),
                             operandType(node, 0).rank() + 1);
  std::vector<Operand> pieces;
  for (const Operand &operand : node.operands)
    pieces.push_back(
        emit(graph, node, Op::Unsqueeze, {operand}, {{"dim", dim}}));
  return {emit(graph, node, Op::Cat, pieces, {{"dim", dim}})};
}

std::vector<Value *> decomposeDropout(Graph &, const Node &node) {
  if (boolAttr(node, "training", false) && floatAttr(node, "p", 0.5) > 0)
    opError(node, "dropout in training mode is not supported");
  return {input(node, 0)};
}

//===----------------------------------------------------------------------===//
// Table
//===----------------------------------------------------------------------===//

/// Result types of a composite: those of its decomposition, computed on a
/// scratch graph.
std::vector<TensorType> inferByDecomposing(const Node &node) {
  Graph scratch("infer");
  Node copy;
  copy.op = node.op;
  copy.attributes = node.attributes;
  copy.location = node.location;
  for (const Operand &operand : node.operands) {
    if (!operand.isValue()) {
      copy.operands.push_back(operand.scalar);
      continue;
    }
    copy.operands.push_back(scratch.addInput(
        "in" + std::to_string(copy.operands.size()), operand.value->type));
  }
  std::vector<TensorType> types;
  for (Value *value : opInfoOf(node)->decompose(scratch, copy))
    types.push_back(value->type);
  return types;
}

void requireFloatingInput(const Node &node) {
  if (!isFloating(operandType(node, 0).dtype) && !node.attribute("dtype"))
    opError(node, std::string("needs a floating input, got ") +
                      dtypeName(operandType(node, 0).dtype));
}

OpInfo composite(Op name, int arity, std::vector<std::string> attributes,
                 Decomposition decompose, bool floatingOnly = true) {
  OpInfo info;
  info.op = name;
  info.kind = OpKind::Composite;
  info.arity = arity;
  info.attributes = std::move(attributes);
  info.decompose = std::move(decompose);
  info.infer = [floatingOnly](const Node &node) {
    if (floatingOnly)
      requireFloatingInput(node);
    return inferByDecomposing(node);
  };
  return info;
}

} // namespace

std::vector<int64_t> batchNormDims(const Node &node) {
  size_t rank = operandType(node, 0).rank();
  if (rank < 2)
    opError(node, "needs an input with a channel dim (rank 2 or more)");
  std::vector<int64_t> dims = {0};
  for (size_t k = 2; k < rank; ++k)
    dims.push_back(int64_t(k));
  return dims;
}

namespace {

std::vector<Value *> decomposeVar(Graph &graph, const Node &node) {
  return decomposeVariance(graph, node, false);
}

std::vector<Value *> decomposeStd(Graph &graph, const Node &node) {
  return decomposeVariance(graph, node, true);
}

std::vector<Value *> decomposePlainSoftmax(Graph &graph, const Node &node) {
  return decomposeSoftmax(graph, node, false);
}

std::vector<Value *> decomposeLogSoftmax(Graph &graph, const Node &node) {
  return decomposeSoftmax(graph, node, true);
}

} // namespace

/// The entries: from include/dynafuse/Ops/CompositeOps.py.
void addCompositeOps(std::vector<OpInfo> &table) {
#include "dynafuse/Ops/CompositeOps.inc"
}

} // namespace dynafuse

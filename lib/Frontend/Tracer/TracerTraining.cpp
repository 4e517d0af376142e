//===- TracerTraining.cpp - What capture does differently for training --===//
//
// A frame whose tensors require grad: which ops may read them (their
// derivative rules), no_grad blocks as detach, and the train-mode modules:
// dropout with the counter-based RNG seeded per run, batch norm with batch
// statistics and its running averages written back, and attention through
// ATen's CPU flash kernel, whose backward reads its logsumexp (issue 16).
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include "dynafuse/Graph/Derivatives.h"

#include <cmath>
#include <optional>
#include <set>

namespace dynafuse {
namespace capture {

Value *BytecodeTracer::randomSeed(const std::string &device) {
  Value *&seed = randomSeeds[device];
  if (seed)
    return seed;
  Source source;
  source.kind = Source::Kind::RandomSeed;
  source.name = PyRef::steal(PyUnicode_FromString(device.c_str()));
  int index = guardBuilder.addSource(std::move(source));
  TensorType type;
  type.dtype = DType::I64;
  type.device = device;
  seed = result.graph->addInput(
      "seed" + std::to_string(result.graph->inputs.size()), type);
  result.inputSources.push_back(index);
  result.inputRequiresGrad.push_back(false);
  return seed;
}

VarPtr BytecodeTracer::trainingDropout(Value *x, double p) {
  if (p >= 1)
    return emit(Op::Mul, {x, Scalar::ofFloat(0)});
  VarPtr uniform = emit(Op::Uniform, {randomSeed(x->type.device)},
                        {{"shape", x->type.sizes},
                         {"dtype", DType::F32},
                         {"offset", randomOffset}});
  randomOffset = randomOffset + x->type.numel();
  VarPtr keep = emit(Op::Ge, {uniform->tensor, Scalar::ofFloat(p)});
  VarPtr scaled = emit(Op::Mul, {x, Scalar::ofFloat(1.0 / (1.0 - p))});
  return emit(Op::Where, {keep->tensor, scaled->tensor, Scalar::ofFloat(0)});
}

VarPtr BytecodeTracer::overwriteKeepingHistory(Value *target,
                                               Operand value) {
  // x.zero_(), x.fill_(v), x.copy_(src) of a tensor that requires grad:
  // eager's result still requires grad, and the old value gets a zero
  // gradient (fill_'s and copy_'s zeros_like(grad)), which reaches the ops
  // before it (an input's .grad becomes zeros, not None; their backward
  // formulas run on zeros). As where(true, value, x), whose rule gives x
  // exactly where(true, 0, g) and value g.
  VarPtr everywhere = emit(Op::FullLike, {target},
                           {{"value", int64_t(1)}, {"dtype", DType::Bool}});
  return emit(Op::Where, {everywhere->tensor, value, target});
}

bool BytecodeTracer::overwritesHistory(Value *target) {
  return gradMode && inputs.requiresGrad(latestValue(target));
}

bool BytecodeTracer::checkDifferentiable(Op op,
                                         std::vector<Operand> &operands) {
  bool reads = false;
  for (const Operand &operand : operands)
    reads |= operand.isValue() && inputs.requiresGrad(operand.value);
  if (!reads)
    return false;
  if (!gradMode) {
    // In a no_grad block: the op reads its operands through detach, the
    // graph's mark that gradients stop there.
    for (Operand &operand : operands)
      if (operand.isValue() && inputs.requiresGrad(operand.value))
        operand =
            result.graph
                ->addNode(Op::Detach, {operand}, {}, here(current.currentLine))
                ->result();
    return false;
  }
  const DerivativeInfo *info = derivativeOf(op);
  if (!info)
    unsupported("'" + opName(op) +
                "' on a tensor that requires grad (no derivative "
                "rule for it yet)");
  if (op == Op::Pow && operands.size() == 2 && operands[1].isValue())
    unsupported("pow with a tensor exponent on a tensor that requires grad "
                "(no derivative rule for it yet)");
  // ATen's remainder and fmod of a number by a tensor have no derivative:
  // eager raises "derivative for aten::remainder is not implemented".
  if ((op == Op::Remainder || op == Op::Fmod) && operands.size() == 2 &&
      !operands[0].isValue())
    unsupported("'" + opName(op) +
                "' of a number by a tensor that requires grad "
                "(eager has no derivative for it)");
  return info->kind != DerivativeInfo::Kind::NonDifferentiable;
}

/// The argument of a call at position `index` or keyword `name` (null when
/// neither was passed).
static VarPtr argumentOf(const std::vector<VarPtr> &args,
                         const Keywords &keywords, size_t index,
                         const char *name) {
  if (index < args.size())
    return args[index];
  auto found = keywords.find(name);
  return found == keywords.end() ? nullptr : found->second;
}

VarPtr BytecodeTracer::batchNorm(OpBinder::Binding &bound,
                                 const std::vector<VarPtr> &args,
                                 const Keywords &keywords) {
  auto takeAttribute = [&](const char *name) {
    std::optional<Attribute> value;
    auto found = bound.attributes.find(name);
    if (found != bound.attributes.end()) {
      value = found->second;
      bound.attributes.erase(found);
    }
    return value;
  };
  std::optional<Attribute> training = takeAttribute("training");
  std::optional<Attribute> momentum = takeAttribute("momentum");
  if (!training || !std::get_if<bool>(&*training))
    unsupported("F.batch_norm with a 'training' that is not a constant bool");
  // The running statistics are optional operands: both or neither.
  size_t statistics = 0;
  for (size_t i : {1, 2}) {
    VarPtr running =
        argumentOf(args, keywords, i, i == 1 ? "running_mean" : "running_var");
    statistics += running && !(running->kind == Var::Kind::Constant &&
                               running->object.get() == Py_None);
  }
  if (statistics == 1)
    unsupported("batch norm with one of its running statistics None");
  if (!std::get<bool>(*training)) {
    if (!statistics)
      unsupported("batch norm in evaluation mode without running statistics "
                  "(eager raises)");
    return emit(Op::BatchNorm, bound.operands, bound.attributes);
  }

  // Training (or no running statistics, as BatchNorm2d with
  // track_running_stats=False uses): normalized by the batch's statistics
  // (batch_norm_train), running averages, if any, moved toward them in
  // place.
  std::vector<Operand> operands = {bound.operands[0]};
  operands.insert(operands.end(), bound.operands.begin() + 1 + long(statistics),
                  bound.operands.end());
  Value *x = bound.operands[0].value;
  if (!x || x->type.rank() < 2)
    unsupported("batch norm in training mode on an input without channels");
  // The values per channel the statistics average.
  SymExpr count = 1;
  for (size_t k = 0; k < x->type.rank(); ++k)
    if (k != 1)
      count = count * x->type.sizes[k];
  if (count.isConstant() && count.constant() <= 1)
    unsupported("batch norm in training mode with one value per channel "
                "(eager raises)");
  VarPtr results = emit(Op::BatchNormTrain, operands, bound.attributes);
  if (!statistics)
    return results->items[0];
  const double *rate = momentum ? std::get_if<double>(&*momentum) : nullptr;
  if (!rate)
    unsupported("batch norm in training mode with momentum None (a "
                "cumulative average)");
  for (size_t i : {1, 2}) {
    VarPtr running = argumentOf(args, keywords, i,
                                i == 1 ? "running_mean" : "running_var");
    if (!running || running->kind != Var::Kind::Tensor)
      unsupported("batch norm in training mode without running statistics");
    Value *batch = emit(Op::Detach, {results->items[i]->tensor})->tensor;
    if (i == 2) {
      // The running variance averages the unbiased batch variance.
      auto countTensor = [&](const SymExpr &value) {
        return emit(Op::Full, {},
                    {{"shape", std::vector<int64_t>{}},
                     {"value", value},
                     {"dtype", DType::F32}})
            ->tensor;
      };
      Operand correction =
          count.isConstant()
              ? Operand(Scalar::ofFloat(double(count.constant()) /
                                        double(count.constant() - 1)))
              : Operand(emit(Op::Div, {countTensor(count),
                                       countTensor(count - SymExpr(1))})
                            ->tensor);
      batch = emit(Op::Mul, {batch, correction})->tensor;
    }
    Value *old = running->tensor;
    if (batch->type.dtype != old->type.dtype)
      batch = emit(Op::Cast, {batch}, {{"dtype", old->type.dtype}})->tensor;
    Value *kept = emit(Op::Mul, {old, Scalar::ofFloat(1 - *rate)})->tensor;
    Value *moved = emit(Op::Mul, {batch, Scalar::ofFloat(*rate)})->tensor;
    updateInPlace(running, emit(Op::Add, {kept, moved}));
  }
  return results->items[0];
}

/// A constant argument as a number (null for anything else).
static std::optional<double> constantNumber(const VarPtr &var) {
  if (!var || var->kind != Var::Kind::Constant || !var->object ||
      PyBool_Check(var->object.get()) ||
      !(PyFloat_Check(var->object.get()) || PyLong_Check(var->object.get())))
    return std::nullopt;
  return PyFloat_AsDouble(var->object.get());
}

static bool isNone(const VarPtr &var) {
  return !var || (var->kind == Var::Kind::Constant &&
                  var->object.get() == Py_None);
}

VarPtr BytecodeTracer::trainingAttention(PyObject *callable,
                                         const std::vector<VarPtr> &args,
                                         const Keywords &keywords) {
  if (!gradMode)
    return nullptr;
  PyRef functional =
      PyRef::steal(PyImport_ImportModule("torch.nn.functional"));
  PyRef attention =
      functional ? PyRef::steal(PyObject_GetAttrString(
                       functional.get(), "scaled_dot_product_attention"))
                 : PyRef();
  if (!attention) {
    PyErr_Clear();
    return nullptr;
  }
  if (callable != attention.get() || args.size() > 8)
    return nullptr;
  static const std::set<std::string> known = {
      "query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
      "enable_gqa"};
  for (const auto &keyword : keywords)
    if (!known.count(keyword.first))
      return nullptr;
  VarPtr q = argumentOf(args, keywords, 0, "query");
  VarPtr k = argumentOf(args, keywords, 1, "key");
  VarPtr v = argumentOf(args, keywords, 2, "value");
  for (const VarPtr &x : {q, k, v})
    if (!x || x->kind != Var::Kind::Tensor)
      return nullptr;
  Value *query = q->tensor, *key = k->tensor, *value = v->tensor;
  if (!inputs.requiresGrad(query) && !inputs.requiresGrad(key) &&
      !inputs.requiresGrad(value))
    return nullptr;
  // ATen's CPU flash kernel: 4-D q, k, v of one floating dtype, one head
  // size, no dropout; with dropout (nn.MultiheadAttention in training),
  // graph ops as eager's math path computes it.
  DType dtype = query->type.dtype;
  for (Value *x : {query, key, value})
    if (x->type.dtype != dtype || x->type.rank() != 4 ||
        x->type.device != "cpu" || !isFloating(dtype))
      return nullptr;
  VarPtr dropoutArg = argumentOf(args, keywords, 4, "dropout_p");
  std::optional<double> dropout = constantNumber(dropoutArg);
  if (dropoutArg && !isNone(dropoutArg) && !dropout)
    return nullptr;
  double dropoutRate = dropout ? *dropout : 0.0;
  if (dropoutRate < 0 || dropoutRate > 1)
    return nullptr; // eager raises
  VarPtr causalArg = argumentOf(args, keywords, 5, "is_causal");
  bool causal = false;
  if (causalArg) {
    if (causalArg->kind != Var::Kind::Constant ||
        !PyBool_Check(causalArg->object.get()))
      return nullptr;
    causal = causalArg->object.get() == Py_True;
  }
  VarPtr scaleArg = argumentOf(args, keywords, 6, "scale");
  std::optional<double> scale = constantNumber(scaleArg);
  if (!isNone(scaleArg) && !scale)
    return nullptr;
  VarPtr groupsArg = argumentOf(args, keywords, 7, "enable_gqa");
  if (groupsArg && (groupsArg->kind != Var::Kind::Constant ||
                    !PyBool_Check(groupsArg->object.get())))
    return nullptr;
  const SymExpr &heads = query->type.sizes[1], &groups = key->type.sizes[1];
  int64_t repeat = 1;
  if (groupsArg && groupsArg->object.get() == Py_True) {
    if (!heads.isConstant() || !groups.isConstant() ||
        value->type.sizes[1] != groups || groups.constant() <= 0 ||
        heads.constant() % groups.constant() != 0)
      return nullptr;
    repeat = heads.constant() / groups.constant();
  }
  VarPtr maskArg = argumentOf(args, keywords, 3, "attn_mask");
  Value *mask = nullptr;
  if (!isNone(maskArg)) {
    if (maskArg->kind != Var::Kind::Tensor || causal ||
        !(isFloating(maskArg->tensor->type.dtype) ||
          maskArg->tensor->type.dtype == DType::Bool))
      return nullptr;
    mask = maskArg->tensor;
  }
  // A learned bias (T5's relative positions) needs the scores' gradient,
  // which the flash kernel does not give: attention in graph ops then, as
  // eager's math path computes it.
  bool learnedBias = mask && inputs.requiresGrad(mask);
  if (learnedBias && (mask->type.dtype == DType::Bool ||
                      (!scale && !query->type.sizes[3].isConstant())))
    return nullptr;
  bool inGraphOps = learnedBias || dropoutRate > 0;
  if (dropoutRate > 0 && !scale && !query->type.sizes[3].isConstant())
    return nullptr;

  // Everything checked: emit. Grouped heads (llama's key/value heads): each
  // key and value head repeated for its group of query heads, as eager's
  // math path does; the repeat's gradient sums the group back.
  auto repeated = [&](Value *x) {
    if (repeat == 1)
      return x;
    std::vector<SymExpr> grouped = {x->type.sizes[0], groups, SymExpr(repeat),
                                    x->type.sizes[2], x->type.sizes[3]};
    Value *wide =
        emit(Op::Expand,
             {emit(Op::Unsqueeze, {x}, {{"dim", int64_t(2)}})->tensor},
             {{"shape", grouped}})
            ->tensor;
    std::vector<SymExpr> flat = {x->type.sizes[0], heads, x->type.sizes[2],
                                 x->type.sizes[3]};
    return emit(Op::Reshape, {wide}, {{"shape", flat}})->tensor;
  };
  key = repeated(key);
  value = repeated(value);
  if (mask &&
      mask->type.dtype == DType::Bool) // eager's conversion: -inf where false
    mask =
        emit(Op::Where, {mask, Scalar::ofFloat(0), Scalar::ofFloat(-INFINITY)})
            ->tensor;
  if (inGraphOps) {
    double factor = scale ? *scale
                          : 1.0 / std::sqrt(double(
                                      query->type.sizes[3].constant()));
    Value *keysT =
        emit(Op::Transpose, {key}, {{"dim0", int64_t(2)}, {"dim1", int64_t(3)}})
            ->tensor;
    Value *scores = emit(Op::Matmul, {query, keysT})->tensor;
    scores = emit(Op::Mul, {scores, Scalar::ofFloat(factor)})->tensor;
    if (mask)
      scores = emit(Op::Add, {scores, mask})->tensor;
    if (causal) { // eager's ones(L, S).tril(): -inf above the diagonal
      std::vector<SymExpr> square = {query->type.sizes[2], key->type.sizes[2]};
      Value *ones = emit(Op::Full, {},
                         {{"shape", square},
                          {"value", int64_t(1)},
                          {"dtype", DType::Bool},
                          {"device", query->type.device}})
                        ->tensor;
      Value *lower = emit(Op::Tril, {ones}, {{"diagonal", int64_t(0)}})->tensor;
      scores =
          emit(Op::Where, {lower, scores, Scalar::ofFloat(-INFINITY)})->tensor;
    }
    Value *weights =
        emit(Op::Softmax, {scores}, {{"dim", int64_t(-1)}})->tensor;
    if (dropoutRate > 0)
      weights = trainingDropout(weights, dropoutRate)->tensor;
    return emit(Op::Matmul, {weights, value});
  }
  std::map<std::string, Attribute> attributes = {{"is_causal", causal},
                                                 {"has_mask", mask != nullptr}};
  if (scale)
    attributes["scale"] = *scale;
  std::vector<Operand> operands = {query, key, value};
  if (mask) {
    if (mask->type.dtype != dtype)
      mask = emit(Op::Cast, {mask}, {{"dtype", dtype}})->tensor;
    operands.push_back(mask);
  }
  try {
    return emit(Op::SdpaFlash, operands, attributes)->items[0];
  } catch (const Unsupported &) {
    return nullptr; // shapes the kernel does not take: a call_torch extern
  }
}

} // namespace capture
} // namespace dynafuse

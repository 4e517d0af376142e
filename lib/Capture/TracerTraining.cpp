//===- TracerTraining.cpp - What capture does differently for training --===//
//
// A frame whose tensors require grad: which ops may read them (their
// derivative rules), no_grad blocks as detach, and the train-mode modules:
// dropout with the counter-based RNG seeded per run, batch norm with batch
// statistics and its running averages written back (issue 16).
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include "dynafuse/Graph/Derivatives.h"

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
    return emit("mul", {x, Scalar::ofFloat(0)});
  VarPtr uniform = emit("uniform", {randomSeed(x->type.device)},
                        {{"shape", x->type.sizes},
                         {"dtype", DType::F32},
                         {"offset", randomOffset}});
  randomOffset = randomOffset + x->type.numel();
  VarPtr keep = emit("ge", {uniform->tensor, Scalar::ofFloat(p)});
  VarPtr scaled = emit("mul", {x, Scalar::ofFloat(1.0 / (1.0 - p))});
  return emit("where", {keep->tensor, scaled->tensor, Scalar::ofFloat(0)});
}

bool BytecodeTracer::checkDifferentiable(const std::string &op,
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
        operand = result.graph->addNode("detach", {operand}, {},
                                        here(current.currentLine))
                      ->result();
    return false;
  }
  const DerivativeInfo *info = derivativeOf(op);
  if (!info)
    unsupported("'" + op + "' on a tensor that requires grad (no derivative "
                "rule for it yet)");
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
  if (!std::get<bool>(*training))
    return emit("batch_norm", bound.operands, bound.attributes);

  // Training: normalized by the batch's statistics (batch_norm_train), the
  // running averages moved toward them in place.
  std::vector<Operand> operands = {bound.operands[0]};
  operands.insert(operands.end(), bound.operands.begin() + 3,
                  bound.operands.end());
  Value *x = bound.operands[0].value;
  if (!x || x->type.rank() < 2)
    unsupported("batch norm in training mode on an input without channels");
  SymExpr perChannel = x->type.numel();
  if (perChannel.isConstant() && x->type.sizes[1].isConstant() &&
      x->type.sizes[1].constant() > 0 &&
      perChannel.constant() / x->type.sizes[1].constant() <= 1)
    unsupported("batch norm in training mode with one value per channel "
                "(eager raises)");
  VarPtr results = emit("batch_norm_train", operands, bound.attributes);
  const double *rate = momentum ? std::get_if<double>(&*momentum) : nullptr;
  if (!rate)
    unsupported("batch norm in training mode with momentum None (a "
                "cumulative average)");
  SymExpr count = 1;
  for (size_t k = 0; k < x->type.rank(); ++k)
    if (k != 1)
      count = count * x->type.sizes[k];
  for (size_t i : {1, 2}) {
    VarPtr running = argumentOf(args, keywords, i,
                                i == 1 ? "running_mean" : "running_var");
    if (!running || running->kind != Var::Kind::Tensor)
      unsupported("batch norm in training mode without running statistics");
    Value *batch = emit("detach", {results->items[i]->tensor})->tensor;
    if (i == 2) {
      // The running variance averages the unbiased batch variance.
      auto countTensor = [&](const SymExpr &value) {
        return emit("full", {},
                    {{"shape", std::vector<int64_t>{}},
                     {"value", value},
                     {"dtype", DType::F32}})
            ->tensor;
      };
      Operand correction =
          count.isConstant()
              ? Operand(Scalar::ofFloat(double(count.constant()) /
                                        double(count.constant() - 1)))
              : Operand(emit("div", {countTensor(count),
                                     countTensor(count - SymExpr(1))})
                            ->tensor);
      batch = emit("mul", {batch, correction})->tensor;
    }
    Value *old = running->tensor;
    if (batch->type.dtype != old->type.dtype)
      batch = emit("cast", {batch}, {{"dtype", old->type.dtype}})->tensor;
    Value *kept = emit("mul", {old, Scalar::ofFloat(1 - *rate)})->tensor;
    Value *moved = emit("mul", {batch, Scalar::ofFloat(*rate)})->tensor;
    updateInPlace(running, emit("add", {kept, moved}));
  }
  return results->items[0];
}

} // namespace capture
} // namespace dynafuse

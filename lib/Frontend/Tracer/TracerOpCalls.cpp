//===- TracerOpCalls.cpp - Torch callables bound through the op table -----===//
//
// A call the op table binds (OpBinder) becomes graph nodes: its arguments
// bound to the op's signature, then rewritten where torch's call and the
// graph op differ (alpha scaling, division modes, unflatten's sizes, fill
// values), and refused where training would need a derivative the graph op
// lacks.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include "dynafuse/Graph/Derivatives.h"

#include <utility>

namespace dynafuse {
namespace capture {

/// The number x.zero_() / x.fill_(v) writes (none for a symbolic one).
static std::optional<Scalar> fillValueOf(const OpBinder::Binding &bound) {
  auto value = bound.attributes.find("value");
  if (value == bound.attributes.end())
    return Scalar::ofInt(0);
  if (const double *number = std::get_if<double>(&value->second))
    return Scalar::ofFloat(*number);
  if (const int64_t *number = std::get_if<int64_t>(&value->second))
    return Scalar::ofInt(*number);
  if (const bool *flag = std::get_if<bool>(&value->second))
    return Scalar::ofBool(*flag);
  return std::nullopt;
}

VarPtr BytecodeTracer::bindAndEmit(const OpBinding &binding,
                                   const std::string &what,
                                   const std::vector<VarPtr> &args,
                                   const Keywords &keywords) {
  OpBinder::Binding bound = OpBinder(*this).bind(binding, what, args, keywords);
  if (binding.graphOp == Op::Cast && bound.operands[0].isValue() &&
      std::get<DType>(bound.attributes["dtype"]) ==
          bound.operands[0].value->type.dtype) {
    VarPtr same = makeVar(Var::Kind::Tensor);
    same->tensor = bound.operands[0].value;
    return same;
  }
  if (binding.graphOp == Op::Pad && bound.operands[0].isValue()) {
    // Padding by zero everywhere keeps the values (swin pads windows that
    // already fit): the same graph value.
    auto pad = bound.attributes.find("pad");
    const auto *amounts = pad == bound.attributes.end()
                              ? nullptr
                              : std::get_if<std::vector<int64_t>>(&pad->second);
    if (amounts && !bound.inPlace &&
        std::all_of(amounts->begin(), amounts->end(),
                    [](int64_t amount) { return amount == 0; })) {
      VarPtr same = makeVar(Var::Kind::Tensor);
      same->tensor = bound.operands[0].value;
      return same;
    }
  }
  if (binding.graphOp == Op::BatchNorm)
    return batchNorm(bound, args, keywords);
  if (binding.graphOp == Op::MaxPool2d && !bound.inPlace &&
      bound.operands[0].isValue() && gradMode &&
      inputs.requiresGrad(bound.operands[0].value)) {
    // Its backward reads the maxima's positions, as eager's does: saved by
    // the forward rather than found again.
    return emit(Op::MaxPool2dWithIndices, bound.operands, bound.attributes)
        ->items[0];
  }
  auto training = bound.attributes.find("training");
  if (binding.graphOp == Op::Dropout && bound.operands[0].isValue() &&
      training != bound.attributes.end() &&
      std::get_if<bool>(&training->second) &&
      !std::get<bool>(training->second)) {
    // Dropout outside training is the identity (in place or not).
    if (bound.inPlace && bound.self)
      return bound.self;
    VarPtr same = makeVar(Var::Kind::Tensor);
    same->tensor = bound.operands[0].value;
    return same;
  }
  if (binding.graphOp == Op::Dropout && bound.operands[0].isValue() &&
      training != bound.attributes.end() &&
      std::get_if<bool>(&training->second)) {
    // Training: a counter-based mask from this run's seed (statistically
    // eager's dropout, not its numbers).
    if (bound.inPlace)
      unsupported("in-place dropout in training mode");
    auto p = bound.attributes.find("p");
    double rate = p == bound.attributes.end() ? 0.5
                  : std::get_if<double>(&p->second)
                      ? std::get<double>(p->second)
                      : double(std::get<int64_t>(p->second));
    if (rate < 0 || rate > 1)
      unsupported("dropout probability has to be between 0 and 1");
    if (rate == 0) {
      VarPtr same = makeVar(Var::Kind::Tensor);
      same->tensor = bound.operands[0].value;
      return same;
    }
    return trainingDropout(bound.operands[0].value, rate);
  }
  if (binding.graphOp == Op::Cat) {
    // torch.cat skips 1-d empty tensors beside tensors of other ranks (a
    // cache that starts as torch.tensor([])): so does the graph.
    auto legacyEmpty = [](const Operand &operand) {
      return operand.isValue() && operand.value->type.sizes.size() == 1 &&
             operand.value->type.sizes[0] == SymExpr(int64_t(0));
    };
    std::vector<Operand> kept;
    for (const Operand &operand : bound.operands)
      if (!legacyEmpty(operand))
        kept.push_back(operand);
    bool otherRank = false;
    for (const Operand &operand : kept)
      otherRank |= operand.isValue() && operand.value->type.sizes.size() != 1;
    if (otherRank && !kept.empty() && kept.size() < bound.operands.size()) {
      bound.operands = std::move(kept);
      if (bound.operands.size() == 1) {
        // cat of one tensor is a copy of it.
        return emit(Op::Contiguous, bound.operands, {});
      }
    }
  }
  if (bound.selfIfContiguous && bound.self && !bound.inPlace)
    return viewIfContiguous(bound.self);
  if (bound.keepsLayout && bound.self)
    return cloneKeepingLayout(bound.self);
  if (binding.graphOp == Op::Flatten && bound.self && flattensNothing(bound))
    return bound.self; // eager's flatten returns the tensor itself
  if (binding.unflatten)
    return unflatten(bound, what);
  if (bound.noDerivative)
    refuseWithoutDerivative(bound.operands, what);
  Op graphOp = binding.graphOp;
  if ((graphOp == Op::Softmax || graphOp == Op::LogSoftmax) &&
      bound.attributes.count("dtype") && bound.operands[0].isValue()) {
    // softmax(x, dim, dtype=d) casts x to d first, as eager does.
    Attribute dtype = bound.attributes["dtype"];
    bound.attributes.erase("dtype");
    if (!std::holds_alternative<DType>(dtype))
      unsupported(what + " with a dtype that is not a torch.dtype");
    bound.operands[0] =
        emit(Op::Cast, {bound.operands[0]}, {{"dtype", dtype}})->tensor;
  }
  if (graphOp == Op::Div)
    graphOp = divisionOp(bound, what);
  if (bound.matrixTranspose && bound.self) {
    size_t rank = bound.self->tensor->type.rank();
    if (rank > 2)
      unsupported(what + " of more than 2 dims (eager raises)");
    if (rank < 2)
      bound.attributes["dim1"] = int64_t(0);
  }
  if (binding.graphOp == Op::Add || binding.graphOp == Op::Sub)
    scaleByAlpha(binding.graphOp, bound, what);
  if (graphOp == Op::FullLike && bound.inPlace && bound.self &&
      overwritesHistory(bound.self->tensor))
    if (std::optional<Scalar> value = fillValueOf(bound))
      return updateInPlace(
          bound.self,
          overwriteKeepingHistory(latestValue(bound.self->tensor), *value));
  // view(): whether the tensor's alias set is certain before the reshape,
  // which marks it uncertain where it may copy.
  const AliasMember *before =
      bound.mustView && bound.self
          ? aliases.memberOf(latestValue(bound.self->tensor))
          : nullptr;
  bool certainBefore = !before || before->set->uncertain.empty();
  VarPtr result = emit(graphOp, bound.operands, bound.attributes);
  if (bound.mustView && bound.self && result->kind == Var::Kind::Tensor &&
      provablyNoView(latestValue(bound.self->tensor), result->tensor,
                     certainBefore))
    unsupported(what + " where the strides allow no view (eager raises)");
  if (!bound.inPlace)
    return result;
  if (!bound.self)
    unsupported(what + " in place without a tensor to update");
  return updateInPlace(bound.self, result);
}

void BytecodeTracer::scaleByAlpha(Op op, OpBinder::Binding &bound,
                                  const std::string &what) {
  auto found = bound.attributes.find("alpha");
  if (found == bound.attributes.end())
    return;
  Attribute alpha = found->second;
  bound.attributes.erase(found);
  if (bound.operands.size() != 2)
    return;
  DType type = DType::Bool;
  for (const Operand &operand : bound.operands)
    if (operand.isValue())
      type = promoteTypes(type, operand.value->type.dtype);
  Scalar scale;
  if (const int64_t *value = std::get_if<int64_t>(&alpha))
    scale = Scalar::ofInt(*value);
  else if (const double *value = std::get_if<double>(&alpha))
    scale = Scalar::ofFloat(*value);
  else if (const bool *value = std::get_if<bool>(&alpha))
    scale = Scalar::ofInt(*value ? 1 : 0);
  else
    unsupported(what + " with an alpha that is not a number");
  if (scale.kind == Scalar::Kind::Float && !isFloating(type))
    unsupported(what + ": for integral tensors alpha must not be a float "
                       "(eager raises)");
  Operand &other = bound.operands[1];
  const Operand &first = bound.operands[0];
  bool firstIsBool = first.isValue() ? first.value->type.dtype == DType::Bool
                                     : first.scalar.kind == Scalar::Kind::Bool;
  bool otherIsBool = other.isValue() ? other.value->type.dtype == DType::Bool
                                     : other.scalar.kind == Scalar::Kind::Bool;
  if (firstIsBool && otherIsBool) {
    // Bools: x + alpha * y is x or (alpha and y).
    if (op == Op::Sub)
      return; // eager refuses to subtract bools: the op's own check
    if (scale.asDouble() == 0.0)
      other =
          other.isValue()
              ? Operand(emit(Op::Mul, {other, Scalar::ofBool(false)})->tensor)
              : Operand(Scalar::ofBool(false));
    return;
  }
  if (scale.asDouble() == 1.0 && scale.kind == Scalar::Kind::Int)
    return;
  Operand &second = bound.operands[1];
  if (second.isValue()) {
    // The scaled operand in the type the op computes in (eager's
    // x + alpha * y promotes x and y, not alpha): the op's own result type.
    DType result = emit(op, bound.operands)->tensor->type.dtype;
    second = emit(Op::Cast, {emit(Op::Mul, {second, scale})->tensor},
                  {{"dtype", result}})
                 ->tensor;
  } else if (second.scalar.kind == Scalar::Kind::Float ||
             scale.kind == Scalar::Kind::Float)
    second = Scalar::ofFloat(second.scalar.asDouble() * scale.asDouble());
  else
    second = Scalar::ofInt(second.scalar.intValue * scale.intValue);
}

void BytecodeTracer::refuseWithoutDerivative(
    const std::vector<Operand> &operands, const std::string &what) {
  for (const Operand &operand : operands)
    if (gradMode && operand.isValue() && inputs.requiresGrad(operand.value))
      unsupported(what + " of a tensor that requires grad (eager has no "
                         "derivative for it: its backward raises)");
}

Op BytecodeTracer::divisionOp(OpBinder::Binding &bound,
                              const std::string &what) {
  auto mode = bound.attributes.find("rounding_mode");
  if (mode == bound.attributes.end())
    return Op::Div;
  const std::string *name = std::get_if<std::string>(&mode->second);
  if (!name || (*name != "floor" && *name != "trunc"))
    unsupported(what + ": rounding_mode must be None, 'trunc' or 'floor' "
                       "(eager raises)");
  Op op = *name == "floor" ? Op::DivFloor : Op::DivTrunc;
  bound.attributes.erase(mode);
  return op;
}

VarPtr BytecodeTracer::unflatten(const OpBinder::Binding &bound,
                                 const std::string &what) {
  // Splitting one dim is always a view (its stride divides): a reshape
  // that always views, with the sizes eager infers.
  if (!bound.self || bound.inPlace)
    unsupported(what + " of a non-tensor");
  const TensorType &type = latestValue(bound.self->tensor)->type;
  auto found = bound.attributes.find("dim");
  const int64_t *dimValue = found == bound.attributes.end()
                                ? nullptr
                                : std::get_if<int64_t>(&found->second);
  int64_t rank = int64_t(type.rank());
  if (!dimValue || rank == 0)
    unsupported(what + " without an integer dim of a tensor with dims");
  int64_t dim = *dimValue < 0 ? *dimValue + rank : *dimValue;
  if (dim < 0 || dim >= rank)
    unsupported(what + ": dim " + std::to_string(*dimValue) +
                " is out of range (eager raises)");
  found = bound.attributes.find("sizes");
  std::optional<std::vector<SymExpr>> sizes =
      found == bound.attributes.end() ? std::nullopt
                                      : sizesOfAttribute(found->second);
  if (!sizes || sizes->empty())
    unsupported(what + " without a non-empty list of sizes (eager raises)");
  const SymExpr &size = type.sizes[size_t(dim)];
  SymExpr known(1);
  int inferred = -1;
  for (size_t k = 0; k < sizes->size(); ++k) {
    if ((*sizes)[k] == SymExpr(-1)) {
      if (inferred >= 0)
        unsupported(what + " with two inferred sizes (eager raises)");
      inferred = int(k);
    } else {
      known = known * (*sizes)[k];
    }
  }
  if (inferred >= 0) {
    if (!known.isConstant() || known.constant() <= 0)
      unsupported(what + " inferring a size beside sizes " + known.str());
    if (known.constant() != 1 &&
        !(size.isConstant() && size.constant() % known.constant() == 0))
      unsupported(what + ": sizes do not multiply up to dim " +
                  std::to_string(dim) + "'s size " + size.str());
    (*sizes)[size_t(inferred)] = floorDiv(size, known);
    known = size;
  }
  if (symbolic.env.canonical(known) != symbolic.env.canonical(size))
    unsupported(what + ": sizes do not multiply up to dim " +
                std::to_string(dim) + "'s size " + size.str() +
                " (eager raises)");
  std::vector<SymExpr> shape(type.sizes.begin(), type.sizes.begin() + dim);
  shape.insert(shape.end(), sizes->begin(), sizes->end());
  shape.insert(shape.end(), type.sizes.begin() + dim + 1, type.sizes.end());
  return emit(Op::Reshape, {bound.self->tensor},
              {{"shape", canonicalAttribute(shape)}});
}

bool BytecodeTracer::flattensNothing(const OpBinder::Binding &bound) {
  int64_t rank = int64_t(bound.self->tensor->type.rank());
  if (rank == 0)
    return false; // a 0-dim tensor flattens to a view of one element
  auto dimOf = [&](const char *name, int64_t fallback) {
    auto found = bound.attributes.find(name);
    const int64_t *value = found == bound.attributes.end()
                               ? nullptr
                               : std::get_if<int64_t>(&found->second);
    int64_t dim = value ? *value : fallback;
    return dim < 0 ? dim + rank : dim;
  };
  return dimOf("start_dim", 0) == dimOf("end_dim", -1);
}

} // namespace capture
} // namespace dynafuse

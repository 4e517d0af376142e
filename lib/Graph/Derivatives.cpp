//===- Derivatives.cpp - The derivative table and its builder -------------===//
#include "dynafuse/Graph/Derivatives.h"

#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
namespace {

std::map<Op, DerivativeInfo> buildTable() {
  std::map<Op, DerivativeInfo> table;
  addPointwiseDerivatives(table);
  addReductionDerivatives(table);
  addViewDerivatives(table);
  addExternDerivatives(table);
  addCompositeDerivatives(table);
  return table;
}

} // namespace

DerivativeInfo nonDifferentiable() {
  DerivativeInfo info;
  info.kind = DerivativeInfo::Kind::NonDifferentiable;
  return info;
}

/// Composites marked "decomposed" differentiate through their
/// decompositions, which use only ops with rules (checked by the unit tests
/// over each one).
DerivativeInfo differentiatedByDecomposing() {
  DerivativeInfo info;
  info.kind = DerivativeInfo::Kind::Decomposed;
  return info;
}

const DerivativeInfo *derivativeOf(Op op) {
  static const auto *table = new std::map<Op, DerivativeInfo>(buildTable());
  auto found = table->find(op);
  return found == table->end() ? nullptr : &found->second;
}

bool isDifferentiable(DType dtype) { return isFloating(dtype); }

Value *GradBuilder::emit(Op op, std::vector<Operand> operands,
                         std::map<std::string, Attribute> attributes) {
  return graph.addNode(op, std::move(operands), std::move(attributes), location)
      ->result();
}

Value *GradBuilder::placeAlong(Value *g, Value *index, const TensorType &x,
                               size_t dim) {
  Value *positions = emit(Op::Arange, {},
                          {{"start", int64_t(0)},
                           {"end", x.sizes[dim]},
                           {"dtype", index->type.dtype},
                           {"device", x.device}});
  std::vector<SymExpr> along(x.rank(), SymExpr(1));
  along[dim] = x.sizes[dim];
  positions = emit(Op::Reshape, {positions}, {{"shape", along}});
  Value *hit = emit(Op::Eq, {positions, index});
  return emit(Op::Where, {hit, g, Scalar::ofFloat(0)});
}

Value *GradBuilder::sumTo(Value *g, const TensorType &type) {
  size_t rank = type.rank();
  size_t gradRank = g->type.rank();
  if (gradRank < rank)
    throw Error("a gradient has fewer dims (" + g->type.str() +
                ") than its operand (" + type.str() + ")");
  std::vector<int64_t> leading;
  for (size_t k = 0; k < gradRank - rank; ++k)
    leading.push_back(int64_t(k));
  if (!leading.empty())
    g = emit(Op::Sum, {g}, {{"dims", leading}, {"keepdim", false}});
  std::vector<int64_t> broadcast;
  for (size_t k = 0; k < rank; ++k)
    if (type.sizes[k] == SymExpr(1) && !(g->type.sizes[k] == SymExpr(1)))
      broadcast.push_back(int64_t(k));
  if (!broadcast.empty())
    g = emit(Op::Sum, {g}, {{"dims", broadcast}, {"keepdim", true}});
  if (g->type.dtype != type.dtype)
    g = emit(Op::Cast, {g}, {{"dtype", type.dtype}});
  return g;
}

Value *GradBuilder::expandReduced(Value *g, const TensorType &x,
                                  const std::vector<int64_t> &dims,
                                  bool keepdim) {
  if (!keepdim && !dims.empty()) {
    std::vector<SymExpr> kept = x.sizes;
    for (int64_t dim : dims)
      kept[size_t(dim)] = SymExpr(1);
    g = emit(Op::Reshape, {g}, {{"shape", kept}});
  }
  if (g->type.sizes != x.sizes)
    g = emit(Op::Expand, {g}, {{"shape", x.sizes}});
  return g;
}

Value *GradBuilder::zerosLike(const TensorType &type) {
  Value *zeros = emit(Op::Full, {},
                      {{"shape", type.sizes},
                       {"value", 0.0},
                       {"dtype", type.dtype},
                       {"device", type.device}});
  return zeros;
}

} // namespace dynafuse

//===- Derivatives.h - Derivative rules of graph ops ------------*- C++ -*-===//
//
// The table beside the op registry that says how each op is differentiated
// (issue 16): a rule builds, in graph ops, the gradients of an op's
// operands from the gradients of its results. Composite ops are decomposed
// before differentiation, so their entry only says that they may be; ops
// without an entry are not differentiable yet, and capture breaks before
// such an op when a tensor it reads requires grad.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_DERIVATIVES_H
#define DYNAFUSE_GRAPH_DERIVATIVES_H

#include "dynafuse/Graph/Graph.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace dynafuse {

/// Appends the nodes of gradient computations to a graph, located where the
/// node being differentiated came from.
class GradBuilder {
public:
  /// `requiringGrad`: the values whose gradients are wanted (null: all).
  GradBuilder(Graph &graph, Location location,
              const std::set<const Value *> *requiringGrad = nullptr)
      : graph(graph), location(std::move(location)),
        requiringGrad(requiringGrad) {}

  /// Whether the gradient of `operand` is wanted: rules whose one node
  /// computes several gradients (conv_backward) skip the others.
  bool wantsGradient(const Value *operand) const {
    return !requiringGrad || requiringGrad->count(operand) != 0;
  }

  Value *emit(Op op, std::vector<Operand> operands,
              std::map<std::string, Attribute> attributes = {});
  /// g summed over the dims it was broadcast along from `type` (leading
  /// dims, and dims of size 1 in type), cast to type's dtype.
  Value *sumTo(Value *g, const TensorType &type);
  /// g (the gradient of a reduction over `dims` of x) with the reduced
  /// dims back as size 1 when the reduction dropped them, expanded to x's
  /// sizes.
  Value *expandReduced(Value *g, const TensorType &x,
                       const std::vector<int64_t> &dims, bool keepdim);
  Value *zerosLike(const TensorType &type);
  /// g at the positions `index` names along dim, zero elsewhere, of x's
  /// sizes: g and index have x's sizes but 1 at dim (one index per row, as
  /// max_dim returns and cross entropy gathers). A pointwise select, so it
  /// fuses with its neighbours.
  Value *placeAlong(Value *g, Value *index, const TensorType &x, size_t dim);

  Graph &graph;

private:
  Location location;
  const std::set<const Value *> *requiringGrad;
};

/// The gradients of a node's operands (null: none, i.e. zero, or not a
/// tensor) from those of its results (null: that result got no gradient).
using DerivativeRule = std::function<std::vector<Value *>(
    GradBuilder &, const Node &, const std::vector<Value *> &gradOfResults)>;

struct DerivativeInfo {
  enum class Kind {
    /// rule gives the operands' gradients.
    Rule,
    /// A composite: decomposed before differentiation.
    Decomposed,
    /// Results carry no gradient (comparisons, integer results, argmax).
    NonDifferentiable,
  };
  Kind kind = Kind::Rule;
  DerivativeRule rule;
};

/// The entry of an op whose results carry no gradient (comparisons, integer
/// results, argmax).
DerivativeInfo nonDifferentiable();
/// The entry of a composite differentiated through its decomposition.
DerivativeInfo differentiatedByDecomposing();

/// The entry of op, or null when op cannot be differentiated yet.
const DerivativeInfo *derivativeOf(Op op);
/// Whether values of dtype carry gradients (floating dtypes).
bool isDifferentiable(DType dtype);

/// One table part per op family (lib/Graph/*Derivatives.cpp).
void addPointwiseDerivatives(std::map<Op, DerivativeInfo> &table);
void addReductionDerivatives(std::map<Op, DerivativeInfo> &table);
void addViewDerivatives(std::map<Op, DerivativeInfo> &table);
void addExternDerivatives(std::map<Op, DerivativeInfo> &table);
/// Composites with a rule of their own (cheaper than differentiating the
/// decomposition, or saving less); the others are Decomposed.
void addCompositeDerivatives(std::map<Op, DerivativeInfo> &table);

} // namespace dynafuse

#endif

//===- OpRegistry.h - What each graph op accepts and produces ---*- C++ -*-===//
//
// One table entry per op: its kind, operand count, attributes and the type
// rule that computes result dtypes (PyTorch's promotion, with Python numbers
// as weak operands) and shapes (broadcasting). The lowering of each op lives
// in Lowering/; the torch callables that map to it live in
// python/dynafuse/ops/. Ops are keyed by Op (Ops.def).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_OPREGISTRY_H
#define DYNAFUSE_GRAPH_OPREGISTRY_H

#include "dynafuse/Graph/Graph.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dynafuse {

/// How lowering treats an op: pointwise (inlined elementwise), reduction,
/// view (index remapping), extern (a call into ATen), composite (rewritten
/// into other ops by the decompose pass before lowering).
enum class OpKind { Pointwise, Reduction, View, Extern, Composite };

/// How a pointwise op derives its result dtype from the promoted operand
/// dtype.
enum class TypeRule {
  Promote,        ///< result = promoted operands (add, maximum, where)
  PromoteToFloat, ///< integers become the default float (div, exp)
  FloatOnly,      ///< floating inputs only (gelu)
  NumericOnly,    ///< like Promote, but bool is rejected (neg, floor)
  IntegralOnly,   ///< like Promote, but floats are rejected (bitwise_and)
  BoolToI64,      ///< like Promote, but bool becomes i64 (square: pow(x, 2))
  FirstOperand,   ///< the first operand's dtype (masked_fill)
  Compare,        ///< bool result (lt, eq, logical_and)
  Cast,           ///< the "dtype" attribute
};

/// Result types of a non-pointwise node; throws via opError.
/// The lowering side of a view op (ViewRules.h; kept out of this header so
/// that only the code lowering views sees its types).
struct ViewRule;

using ShapeRule = std::function<std::vector<TensorType>(const Node &)>;
/// Rewrites a composite node (whose operands are values of `graph`) into
/// primitive nodes appended to `graph`; returns the replacement results.
using Decomposition =
    std::function<std::vector<Value *>(Graph &graph, const Node &node)>;

struct OpInfo {
  Op op = Op::Add;
  OpKind kind = OpKind::Pointwise;
  /// Operand count; -1 means one or more (cat, stack).
  int arity = 1;
  TypeRule rule = TypeRule::Promote;
  /// Attribute names the op accepts.
  std::vector<std::string> attributes;
  /// For where: the first operand is a bool condition outside promotion.
  bool conditionFirst = false;
  /// For pow: the last operand must be a scalar.
  bool scalarLast = false;
  /// The last operands that may be left out (clamp's min and max); an absent
  /// one is marked by the bool attribute "has_<name>" = false (which
  /// `attributes` must list; missing means present), as the op table's
  /// "optional_operand" parameters bind. The others keep their order.
  std::vector<std::string> optionalOperands;
  /// Extern ops whose result is channels-last when their first operand is
  /// (ATen's convolutions and pools); their shape rules and lowering's
  /// buffer layouts both follow it.
  bool keepsChannelsLast = false;
  /// Extern ops that make a CPU graph run channels-last (lowering's layout
  /// choice) and then produce channels-last results themselves, their
  /// input converted by the torch bridge (conv2d).
  bool startsChannelsLast = false;
  /// Pointwise math much costlier than a load (division, transcendental
  /// functions): realization computes it once on a small value that a
  /// larger result broadcasts (batch norm's rsqrt of the variance).
  bool costlyMath = false;
  /// View ops: how lowering computes their elements, and for index
  /// remappings the remap and strided form (ViewRules.h); null otherwise.
  std::shared_ptr<const ViewRule> view;
  /// Ops that read one operand at indices loaded from another (gather,
  /// index_select, embedding): the position of the operand read that way,
  /// which lowering keeps in a buffer; -1 for other ops.
  int indexedOperand = -1;
  /// Ops whose results are the items of one sequence (split, chunk,
  /// unbind): torch returns a tuple of them, even of one tensor.
  bool resultsAreSequence = false;
  /// Further checks of operands and attributes; throws via opError.
  std::function<void(const Node &)> verify;
  /// Rewrites attributes that torch accepts in several spellings into the
  /// one the op's consumers read (adaptive_avg_pool2d's int output_size
  /// into a pair); the graph applies it to every node it adds. Null for
  /// ops with one spelling.
  std::function<void(std::map<std::string, Attribute> &)> canonicalAttributes;
  /// Non-pointwise ops: computes result types (pointwise ops use `rule`).
  ShapeRule infer;
  /// Composite ops: their rewrite into other ops. Extern ops may have one
  /// too, applied (by the decompose pass) to the nodes `decomposesWhen`
  /// accepts: those the loop IR computes better than an ATen call
  /// (adaptive_avg_pool2d to a 1x1 output is a mean).
  Decomposition decompose;
  std::function<bool(const Node &)> decomposesWhen;
};

/// An entry for a non-pointwise op: its shape rule computes result types.
OpInfo shapedOp(Op op, OpKind kind, int arity,
                std::vector<std::string> attributes, ShapeRule infer);

/// Adds node `op` to graph at origin's source location (a decomposition's
/// piece of the node it replaces); returns its one result.
Value *emit(Graph &graph, const Node &origin, Op op,
            std::vector<Operand> operands,
            std::map<std::string, Attribute> attributes = {});

/// How many windows of a pool or convolution fit `size` elements, as ATen
/// counts them (ceil_mode's last window must start inside the input or
/// its left padding); nullopt when none fits or the stride is not positive.
std::optional<int64_t> windowCount(int64_t size, int64_t kernel,
                                   int64_t stride, int64_t padding,
                                   int64_t dilation, bool ceilMode);

/// A list attribute with one value per spatial dim (`count` of them; a
/// single value repeats, absent: `fallback` for each), as convolutions and
/// pools take stride, padding, dilation and kernel_size. Throws naming the
/// op when the list has another length.
std::vector<int64_t> perDim(const Node &node, const std::string &name,
                            size_t count, int64_t fallback);

/// The table builders, one file per op family; each includes the entries
/// tools/dynafuse-opgen generates from include/dynafuse/Ops/<Family>Ops.py.
void addPointwiseOps(std::vector<OpInfo> &table);
void addReductionOps(std::vector<OpInfo> &table);
void addViewOps(std::vector<OpInfo> &table);
/// flip, roll, repeat: view ops never strided (CopyingRemapOps.cpp).
void addCopyingRemapOps(std::vector<OpInfo> &table);
void addDataMovementOps(std::vector<OpInfo> &table);
void addExternOps(std::vector<OpInfo> &table);
/// max_pool2d, avg_pool2d and depthwise conv2d as window taps
/// (WindowOps.cpp), and the tests choosing the nodes that take them: the
/// decompositions ExternOps.py names.
std::vector<Value *> maxPoolAsWindowTaps(Graph &graph, const Node &node);
bool maxPoolTakesWindowTaps(const Node &node);
std::vector<Value *> avgPoolAsWindowTaps(Graph &graph, const Node &node);
bool avgPoolTakesWindowTaps(const Node &node);
std::vector<Value *> depthwiseAsWindowTaps(Graph &graph, const Node &node);
bool depthwiseTakesWindowTaps(const Node &node);
void addCompositeOps(std::vector<OpInfo> &table);

[[noreturn]] void opError(const Node &node, const std::string &message);

/// Attribute readers for shape rules and lowering; throw naming the op when
/// an attribute has the wrong kind. A missing attribute gives the fallback.
bool boolAttr(const Node &node, const std::string &name, bool fallback);
double floatAttr(const Node &node, const std::string &name, double fallback);
std::vector<int64_t> intListAttr(const Node &node, const std::string &name,
                                 std::vector<int64_t> fallback);
/// Size attributes that may be symbolic (an integer or a SymExpr; a list of
/// either).
SymExpr symAttr(const Node &node, const std::string &name, SymExpr fallback);
/// The same readings of an attribute value alone (capture's attribute maps,
/// a run's recorded view steps): nullopt for any other kind.
std::optional<SymExpr> sizeOfAttribute(const Attribute &attribute);
std::optional<std::vector<SymExpr>> sizesOfAttribute(const Attribute &attribute);
std::vector<SymExpr> symListAttr(const Node &node, const std::string &name,
                                 std::vector<SymExpr> fallback);
/// Wraps a possibly negative dim into [0, rank); throws when out of range.
int64_t normalizeDim(const Node &node, int64_t dim, size_t rank);
/// The tensor operand i (throws when it is a scalar).
const TensorType &operandType(const Node &node, size_t i);
/// A contiguous tensor type of `sizes` with operand 0's dtype and device.
TensorType likeFirstOperand(const Node &node, std::vector<SymExpr> sizes);
/// The shape rule of ops whose one result is like operand 0 in every way.
std::vector<TensorType> inferSameShape(const Node &node);
/// The position among node's operands of the optional operand `name`, or -1
/// when node leaves it out.
int optionalOperandIndex(const Node &node, const std::string &name);

/// The dims a reduction node reduces ("dim" or "dims"; none means all),
/// normalized and sorted; and its result sizes (honouring "keepdim").
std::vector<int64_t> reducedDims(const Node &node);
std::vector<SymExpr> reducedShape(const Node &node);
/// The dims batch_norm_train's statistics reduce: every dim but the
/// channels (dim 1) of node's input; an error for inputs of rank below 2.
std::vector<int64_t> batchNormDims(const Node &node);

/// A slice or narrow node's resolved bounds on its dim. Constant bounds on
/// a constant size clamp as Python's do; a bound that is symbolic, or
/// meets a symbolic size, is taken as already within [0, size] once a
/// negative constant is wrapped (capture guards that it is).
struct SliceBounds {
  int64_t dim = 0;
  SymExpr start = 0;
  int64_t step = 1;
  SymExpr length = 0;
};
SliceBounds sliceBounds(const Node &node);
/// The lengths of the pieces of a split, chunk or unbind along a dim of
/// size total.
std::vector<int64_t> splitLengths(const Node &node, int64_t total);

/// The registry entry of op; null for an op Ops.def lists that no table
/// builder registered (OpIdTest checks that there is none).
const OpInfo *lookupOp(Op op);
/// The op info of node: the one resolved when it was added to its graph,
/// else (a node built outside a graph, as shape rules' probes) looked up by
/// name. Null for an unknown op.
const OpInfo *opInfoOf(const Node &node);
std::vector<std::string> registeredOpNames();

/// Result types of node, or an Error naming the op and the problem.
std::vector<TensorType> inferResultTypes(const Node &node);

/// The dtype PyTorch computes a pointwise node in (before its type rule):
/// tensor operands promote fully, scalars only by category.
DType promotedOperandType(const Node &node);

/// Broadcasts sizes right-aligned; throws when they are incompatible.
std::vector<SymExpr> broadcastShapes(const std::vector<SymExpr> &lhs,
                                     const std::vector<SymExpr> &rhs,
                                     const Location &where);

} // namespace dynafuse

#endif

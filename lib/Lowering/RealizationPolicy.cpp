//===- RealizationPolicy.cpp - Which values live in buffers ---------------===//
//
// The realize pass: values computed inline wherever they are used are the
// default; these are realized into buffers up front. Emission may ask for
// more (lowerGraph's fixed-point loop).
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Lowering/LoweringPasses.h"

#include "dynafuse/Lowering/StridedView.h"

namespace dynafuse {
namespace {

/// An output that is a strided view of a graph input: returned as a view
/// of the input, as eager returns it, not a copy. Symbolic sizes, strides
/// and offset are evaluated per run with the call's sizes.
bool isViewOfInput(const Value *value) {
  BufferView viewed;
  return value->producer && describeView(value, {}, viewed) &&
         !viewed.base->producer;
}

/// Whether a value is computed through pointwise and view ops only from
/// graph inputs and extern results, buffers that exist before any kernel
/// runs (no reduction, whose kernel its consumers fuse into): the same
/// for every element of a larger consumer that broadcasts it.
bool fromBuffersOnly(const Value *value, std::map<const Value *, bool> &memo) {
  if (!value->producer || kindOf(*value->producer) == OpKind::Extern)
    return true;
  auto found = memo.find(value);
  if (found != memo.end())
    return found->second;
  OpKind kind = kindOf(*value->producer);
  bool pure = kind == OpKind::Pointwise || kind == OpKind::View;
  for (const Operand &operand : value->producer->operands)
    if (pure && operand.value)
      pure = fromBuffersOnly(operand.value, memo);
  return memo[value] = pure;
}

/// A pointwise op whose math costs more than a load (rsqrt, exp, ...).
bool isCostlyMath(const Node &node) {
  return kindOf(node) == OpKind::Pointwise && opInfoOf(node)->costlyMath;
}

/// A view of a buffer (a graph input; with `ofComputed` also a realized
/// value, such as an extern's result) whose innermost dim of more than one
/// element is not contiguous: a depthwise convolution's tap weight, one
/// column of a [C, 1, kh, kw] weight (channel stride kh * kw). Its
/// consumer's innermost loop is the channel (channels-last), so each
/// vector of weights would be a gather.
bool isGatheredView(const Value *value,
                    const std::set<const Value *> &realized,
                    bool ofComputed = false) {
  BufferView viewed;
  if (kindOf(*value->producer) != OpKind::View ||
      !describeView(value, realized, viewed) ||
      (viewed.base->producer && !ofComputed))
    return false;
  for (size_t d = viewed.view.sizes.size(); d-- > 0;)
    if (viewed.view.sizes[d] != SymExpr(1))
      return viewed.view.strides[d] != SymExpr(1);
  return false;
}

/// Whether a chain of views indexes what it views with divisions and
/// remainders: no strided view of the value below it (a window partition,
/// reshape-permute-reshape, of a [56, 56] mask), were that a buffer.
bool regroupsItsBase(const Value *value,
                     const std::set<const Value *> &realized) {
  const Value *base = value;
  while (base->producer && !realized.count(base) &&
         kindOf(*base->producer) == OpKind::View &&
         !base->producer->operands.empty() &&
         base->producer->operands[0].value) {
    if (opInfoOf(*base->producer)->indexedOperand >= 0)
      return false; // a gather: a load of its index, no arithmetic
    base = base->producer->operands[0].value;
  }
  std::set<const Value *> buffers = realized;
  buffers.insert(base);
  BufferView viewed;
  return !describeView(value, buffers, viewed);
}

/// f32 sin, cos and pow are evaluated in double precision (VectorMath.cpp),
/// about 16 times other costly math per element: a small decoder's rotary
/// cos and sin, [64, 16] per layer, recomputed for each of 4 heads and 2
/// sequences in q's and k's kernels (8192 elements), took 121 us of a 1.27
/// ms call (bitnet, width 64), so a table of them that few consumers read
/// pays for its buffer too (kBroadcastFactor).
constexpr int64_t kDoublePrecisionMathWeight = 16;

/// What computing a value inline costs beyond loading it, per element: 0
/// when nothing; else its pointwise and view producers, down to buffers,
/// hold costly math or read a buffer through a gathered view or a
/// regrouping one (no strided view of its base: its index divides and
/// takes remainders per element), 1, or kDoublePrecisionMathWeight when
/// that math includes f32 sin, cos or pow.
int64_t recomputationCost(const Value *value,
                          const std::set<const Value *> &realized,
                          std::map<const Value *, int64_t> &memo) {
  if (!value->producer || realized.count(value))
    return 0;
  auto found = memo.find(value);
  if (found != memo.end())
    return found->second;
  const Node &producer = *value->producer;
  OpKind kind = kindOf(producer);
  bool doubleMath = kind == OpKind::Pointwise &&
                    value->type.dtype == DType::F32 &&
                    (producer.op == Op::Sin || producer.op == Op::Cos ||
                     producer.op == Op::Pow);
  bool costly = isCostlyMath(producer) ||
                (kind == OpKind::View &&
                 (regroupsItsBase(value, realized) ||
                  isGatheredView(value, realized, /*ofComputed=*/true)));
  int64_t cost = doubleMath ? kDoublePrecisionMathWeight : costly ? 1 : 0;
  if (kind == OpKind::Pointwise || kind == OpKind::View)
    for (const Operand &operand : producer.operands)
      if (cost < kDoublePrecisionMathWeight && operand.value)
        cost = std::max(cost, recomputationCost(operand.value, realized, memo));
  return memo[value] = cost;
}

/// What a pointwise op's operand reads once per element of its own: the
/// operand itself, or below the views that broadcast it (expand) the first
/// value of at most `limit` elements. Null when there is none.
const Value *broadcastSource(const Value *operand, int64_t limit) {
  while (operand) {
    SymExpr count = operand->type.numel();
    if (count.isConstant() && count.constant() > 0 &&
        count.constant() <= limit)
      return operand;
    if (!operand->producer || kindOf(*operand->producer) != OpKind::View ||
        operand->producer->operands.empty())
      return nullptr;
    operand = operand->producer->operands[0].value;
  }
  return nullptr;
}

/// A small value, computed from buffers only with costly math or through a
/// gathered or regrouping view, that a larger pointwise result broadcasts
/// (recomputationCost): realized, it
/// is computed once per element of its own instead of once per element of
/// the consumer (and again in each pass of a softmax over it).
/// - Batch norm's rsqrt of the running variance, per channel: with
///   channels-last buffers the channel is the innermost loop, so LLVM
///   cannot hoist it: mobilenet's batch-norm+ReLU6 kernel on
///   8x96x112x112 took 2.45 ms with the rsqrt per element, 1.75 ms with
///   the per-channel factors precomputed.
/// - A small gathered view of an input (isGatheredView): copied once into
///   a contiguous buffer, it is read a vector at a time.
/// - swin_v2's relative position bias, 16 * sigmoid of a permuted
///   [heads, 64, 64] view of an extern's [4096, heads] result, which every
///   window's attention scores add: computed per element of the
///   [windows, heads, 64, 64] scores, in the softmax's max and again in its
///   sum, swin_v2_t's first-stage softmax took 11 ms (decision 90).
/// The stored value costs one store per element of its own (the consumer's
/// load of it replaces the loads its computation made) and a kernel call
/// of its own, a few microseconds: realized when its consumers together
/// have 64 times its elements, or twice them and at least 2^16 elements
/// more (a batch norm's factors at 4x4 pixels, 16 per channel, stay
/// inline).
constexpr int64_t kBroadcastFactor = 2;
constexpr int64_t kAlwaysBroadcastFactor = 64;
constexpr int64_t kRecomputationsSaved = int64_t(1) << 16;

/// Whether a consumer of `consumerCount` elements broadcasting a value of
/// `smallCount`, each recomputation costing `cost` (recomputationCost),
/// pays for realizing it (see kBroadcastFactor).
bool broadcastPays(int64_t consumerCount, int64_t smallCount, int64_t cost) {
  return consumerCount >= kAlwaysBroadcastFactor * smallCount ||
         (consumerCount >= kBroadcastFactor * smallCount &&
          (consumerCount - smallCount) * cost >= kRecomputationsSaved);
}

void realizeBroadcastMath(const Graph &graph,
                          std::set<const Value *> &realized) {
  // What each small value's broadcasting consumers compute in all: a
  // table every layer reads (a vision transformer's rotary cos and sin,
  // [tokens, head_dim], broadcast over each layer's heads of q and of k)
  // pays once all its consumers are counted, though no one of them pays.
  std::vector<const Value *> order;
  std::map<const Value *, int64_t> demand;
  for (const auto &node : graph.nodes) {
    if (kindOf(*node) != OpKind::Pointwise || node->results.empty())
      continue;
    SymExpr consumerCount = node->results[0]->type.numel();
    if (!consumerCount.isConstant())
      continue;
    for (const Operand &operand : node->operands) {
      if (!operand.value)
        continue;
      const Value *small = broadcastSource(
          operand.value, consumerCount.constant() / kBroadcastFactor);
      if (!small || !small->producer || realized.count(small))
        continue;
      if (!demand.count(small))
        order.push_back(small);
      demand[small] += consumerCount.constant();
    }
  }
  // costMemo holds for the realized set it was filled under: cleared when
  // that grows (a newly realized value cuts the cones above it).
  std::map<const Value *, bool> pureMemo;
  std::map<const Value *, int64_t> costMemo;
  for (const Value *small : order) {
    if (realized.count(small))
      continue;
    int64_t cost = recomputationCost(small, realized, costMemo);
    if (cost == 0 ||
        !broadcastPays(demand[small], small->type.numel().constant(), cost) ||
        !fromBuffersOnly(small, pureMemo))
      continue;
    realized.insert(small);
    costMemo.clear();
  }
}

/// The row of a matrix-vector product written as a sum of products (the
/// matrix-vector-products pass's, or a program's own `(x * W).sum(-1)`):
/// every output element of the sum reads all of it, so math in it would be
/// computed once per output element (a SwiGLU's exp, 256 times for each of
/// 768 elements in a decode step's down projection: 0.6 ms instead of 60
/// us). Realized when its recomputation has costly math.
void realizeReducedRows(const Graph &graph, std::set<const Value *> &realized) {
  std::map<const Value *, int64_t> costMemo;
  for (const auto &node : graph.nodes) {
    if (kindOf(*node) != OpKind::Reduction || node->operands.empty() ||
        !node->operands[0].isValue())
      continue;
    const Value *terms = node->operands[0].value;
    if (!terms->producer || terms->producer->op != Op::Mul ||
        realized.count(terms))
      continue;
    SymExpr termCount = terms->type.numel();
    for (const Operand &operand : terms->producer->operands) {
      const Value *row = operand.value;
      while (row && row->producer && kindOf(*row->producer) == OpKind::View &&
             !row->producer->operands.empty() && !realized.count(row))
        row = row->producer->operands[0].value;
      if (!row || !row->producer || realized.count(row))
        continue;
      SymExpr rowCount = row->type.numel();
      if (!termCount.isConstant() || !rowCount.isConstant() ||
          termCount.constant() < kBroadcastFactor * rowCount.constant())
        continue;
      if (recomputationCost(row, realized, costMemo) == 0)
        continue;
      realized.insert(row);
      costMemo.clear();
    }
  }
}

/// A contiguous copy of a gathered view of a graph input: the depthwise
/// taps' weights with the channel innermost ([kh, kw, C], WindowOps.cpp),
/// which every tap reads a row of. Realized, it is one small copy per call
/// (kh * kw * C floats) and every tap reads vectors; inline, each tap read
/// the weight's column of channel stride kh * kw, a gather per vector:
/// efficientnet_b0's 5x5 taps at 4x4 outputs ran at ~3 GMAC/s (decision
/// 89). A program's own `x.t().contiguous()` of an input is realized too:
/// the copy eager makes.
void realizeTransposedCopies(const Graph &graph,
                             std::set<const Value *> &realized) {
  for (const auto &node : graph.nodes)
    if (node->op == Op::Contiguous && node->operands[0].isValue() &&
        node->operands[0].value->producer &&
        isGatheredView(node->operands[0].value, realized))
      realized.insert(node->results[0]);
}

/// A cast to f16 or bf16 from a wider type is realized when something
/// reads it: kernels compute f16 and bf16 in f32 (the loop IR has no
/// narrower float), so inline, `x.half()` would hand its reader x's f32
/// value unrounded; a buffer of the narrow type rounds it on the store, as
/// eager's cast does (`torch.fmod(x.half(), 1e-3)` differed everywhere).
/// A cast reading it rounds it itself (castRule), so a value only casts
/// read (autocast's bf16 weight cast up again for an f32 product) stays
/// inline: one kernel rounds it.
void realizeNarrowingFloatCasts(const Graph &graph,
                                std::set<const Value *> &realized) {
  std::set<const Value *> read;
  for (const auto &node : graph.nodes)
    for (const Operand &operand : node->operands)
      if (operand.isValue() && node->op != Op::Cast)
        read.insert(operand.value);
  for (const auto &node : graph.nodes)
    if (narrowsToHalfPrecision(node->results[0]) &&
        read.count(node->results[0]))
      realized.insert(node->results[0]);
}

/// Whether a batched product (matmul, bmm) reads `view` as it is: its
/// batch dims (all but the last two) merge into one, as at::matmul's
/// reshape to [batch, M, K] needs, else it copies the operand.
bool batchDimsMerge(const StridedView &view) {
  size_t rank = view.sizes.size();
  std::vector<size_t> batch;
  for (size_t d = 0; d + 2 < rank; ++d)
    if (view.sizes[d] != SymExpr(1))
      batch.push_back(d);
  for (size_t i = 0; i + 1 < batch.size(); ++i)
    if (view.strides[batch[i]] !=
        view.strides[batch[i + 1]] * view.sizes[batch[i + 1]])
      return false;
  return true;
}

/// What an extern reads through a view chain (a transposed, reshaped
/// product in a backward graph: mm(x^T, g)) is realized at the chain's
/// base when the chain is a strided view of it: the producer then writes
/// its own layout contiguously, and the extern reads the view without a
/// copy. Realizing the view's result instead would make the producer's
/// kernel write (or read) through the transposition, element by element.
/// A batched product's operand whose batch dims would not merge in such a
/// view (attention's q of [b, t, h, d] viewed as [b, h, t, d]) is realized
/// at the first value of the chain that gives mergeable ones (q itself; k,
/// not k^T): at::matmul would copy the view anyway, and the producer's
/// kernel writes that copy in its stead. Returns the value to realize.
const Value *externOperandBuffer(const Node &consumer, const Value *operand,
                                 const std::set<const Value *> &realized) {
  std::vector<const Value *> chain{operand}; // operand down to the base
  while (chain.back()->producer &&
         kindOf(*chain.back()->producer) == OpKind::View &&
         chain.back()->producer->results.size() == 1 &&
         !chain.back()->producer->operands.empty() &&
         chain.back()->producer->operands[0].value)
    chain.push_back(chain.back()->producer->operands[0].value);
  if (chain.size() == 1 || !chain.back()->producer)
    return operand;
  bool batched = (consumer.op == Op::Matmul || consumer.op == Op::Bmm) &&
                 operand->type.rank() >= 3;
  for (size_t i = chain.size(); i-- > 0;) {
    std::set<const Value *> withCandidate = realized;
    withCandidate.insert(chain[i]);
    BufferView viewed;
    if (describeView(operand, withCandidate, viewed) &&
        (!batched || batchDimsMerge(viewed.view)))
      return chain[i];
  }
  return operand;
}

/// The sizes of a shape without its 1s.
std::vector<SymExpr> withoutOnes(const std::vector<SymExpr> &sizes) {
  std::vector<SymExpr> kept;
  for (const SymExpr &size : sizes)
    if (size != SymExpr(1))
      kept.push_back(size);
  return kept;
}

/// A reshape or flatten that splits or merges dims: its index remap
/// divides or takes a remainder (a channel shuffle has two).
bool regroupsDims(const Node &node) {
  if ((node.op != Op::Reshape && node.op != Op::Flatten) ||
      !node.operands[0].isValue() || node.results.size() != 1)
    return false;
  return withoutOnes(node.operands[0].value->type.sizes) !=
         withoutOnes(node.results[0]->type.sizes);
}

/// The computed value a window tap (a slice, through pads, slices and other
/// views) reads; null when it reads a graph input. A regrouping reshape
/// ends the walk (its result is what the taps read): taps shifted by
/// their padding offsets through a regrouping index their source with
/// nested divisions of a flattened offset (a channel shuffle before a
/// stride-2 depthwise layer of shufflenet_v2: 0.35 ms for 8 x 48 x 8 x 8
/// outputs, where a copy of the shuffled tensor costs a few us).
const Value *windowSource(const Value *value) {
  while (value->producer && kindOf(*value->producer) == OpKind::View &&
         opInfoOf(*value->producer)->indexedOperand < 0 &&
         !regroupsDims(*value->producer) &&
         !value->producer->operands.empty() &&
         value->producer->operands[0].isValue())
    value = value->producer->operands[0].value;
  return value->producer ? value : nullptr;
}

/// What two or more window taps read (a pool's or depthwise convolution's
/// slices of one padded input, WindowOps.cpp) is realized when it is
/// computed: inline, each tap would recompute its producer (a batch norm
/// and activation) at every kernel position, 9 or 25 times per element.
void realizeWindowSources(const Graph &graph,
                          std::set<const Value *> &realized) {
  // A tap is the last slice of a chain (a row's slice, then the column's
  // within it): two chained slices are one read of each element.
  std::set<const Value *> sliced;
  for (const auto &node : graph.nodes)
    if (node->op == Op::Slice && node->operands[0].isValue())
      sliced.insert(node->operands[0].value);
  std::map<const Value *, int> taps;
  for (const auto &node : graph.nodes)
    if (node->op == Op::Slice && node->operands[0].isValue() &&
        !sliced.count(node->results[0]))
      if (const Value *source = windowSource(node->operands[0].value))
        if (++taps[source] == 2)
          realized.insert(source);
}

/// Chains of regrouping reshapes computed inline compose their floor
/// divisions and remainders: shufflenet's channel shuffles, each block's
/// passing the previous block's half through, gave its last kernels an
/// index of nested divisions per element (and a mask per concatenated
/// piece), 5-6 s to compile and slower than eager's copies. A value that
/// would be the third regrouping on an inline path is realized, so each
/// kernel reads through at most two.
constexpr int kRegroupingsInline = 2;

void realizeDeepRegroupings(const Graph &graph,
                            std::set<const Value *> &realized) {
  std::map<const Value *, int> depth;
  for (const auto &node : graph.nodes) {
    int deepest = 0;
    for (const Operand &operand : node->operands)
      if (operand.isValue() && !realized.count(operand.value)) {
        auto found = depth.find(operand.value);
        if (found != depth.end())
          deepest = std::max(deepest, found->second);
      }
    OpKind kind = kindOf(*node);
    if (kind != OpKind::Pointwise && kind != OpKind::View)
      continue; // reductions and externs read buffers or start afresh
    int own = deepest + (regroupsDims(*node) ? 1 : 0);
    for (const Value *result : node->results) {
      if (own > kRegroupingsInline && node->operands[0].isValue() &&
          node->operands[0].value->producer) {
        // The regrouping reads a buffer instead.
        realized.insert(node->operands[0].value);
        depth[result] = 1;
      } else {
        depth[result] = own;
      }
    }
  }
}

/// An expression inline is recomputed by each of its readers: a chain
/// whose every step is also read elsewhere (a scan unrolled step by step,
/// each partial result stacked: `total = combine(total, x[i])`) would
/// compute step i again for every later step, quadratic in the chain's
/// length (falcon_mamba's 64-step scan: 32 ms instead of 0.3). A value read
/// by two or more ops whose inline expression holds more than
/// kReusedOpsInline pointwise ops (counted down to buffers, as often as
/// they would be computed) is realized, as Inductor realizes a reused
/// buffer past its `realize_opcount_threshold`; models' reused values
/// (a norm's output feeding q, k and v) hold a handful.
constexpr int64_t kReusedOpsInline = 30;

void realizeReusedExpressions(const Graph &graph,
                              std::set<const Value *> &realized) {
  std::map<const Value *, int> readers;
  for (const auto &node : graph.nodes)
    for (const Operand &operand : node->operands)
      if (operand.isValue())
        ++readers[operand.value];
  std::map<const Value *, int64_t> inlineOps;
  for (const auto &node : graph.nodes) {
    OpKind kind = kindOf(*node);
    if (kind != OpKind::Pointwise && kind != OpKind::View)
      continue; // reductions and externs read buffers or start afresh
    int64_t ops = kind == OpKind::Pointwise ? 1 : 0;
    for (const Operand &operand : node->operands)
      if (operand.isValue() && !realized.count(operand.value)) {
        auto found = inlineOps.find(operand.value);
        if (found != inlineOps.end())
          ops += found->second;
      }
    for (const Value *result : node->results) {
      if (ops > kReusedOpsInline && readers[result] >= 2 &&
          !realized.count(result)) {
        realized.insert(result);
        inlineOps[result] = 0;
      } else {
        inlineOps[result] = ops;
      }
    }
  }
}

} // namespace

bool narrowsToHalfPrecision(const Value *value) {
  const Node *node = value->producer;
  if (!node || node->op != Op::Cast || node->operands.empty() ||
      !node->operands[0].isValue())
    return false;
  DType to = value->type.dtype;
  DType from = node->operands[0].value->type.dtype;
  return (to == DType::F16 || to == DType::BF16) && from != to;
}

void realizeValues(LoweringState &state) {
  const Graph &graph = state.graph;
  std::set<const Value *> &realized = state.realized;
  for (const Value *output : graph.outputs)
    if (output->producer && !isViewOfInput(output))
      realized.insert(output);
  for (const auto &node : graph.nodes) {
    if (kindOf(*node) == OpKind::Extern)
      for (const Value *result : node->results)
        realized.insert(result);
  }
  for (const auto &node : graph.nodes) {
    bool extern_ = kindOf(*node) == OpKind::Extern;
    for (size_t i = 0; i < node->operands.size(); ++i) {
      const Value *operand = node->operands[i].value;
      if (!operand || !operand->producer)
        continue;
      BufferView viewed;
      // Gathers read their data at loaded indices: from a buffer, or a
      // strided view of one (a transposed input returned as well stays a
      // view of it, as eager's).
      if (int(i) == opInfoOf(*node)->indexedOperand) {
        if (!describeView(operand, realized, viewed))
          realized.insert(operand);
      }
      else if (extern_ && !describeView(operand, realized, viewed))
        realized.insert(externOperandBuffer(*node, operand, realized));
    }
  }
  realizeTransposedCopies(graph, realized);
  realizeNarrowingFloatCasts(graph, realized);
  realizeBroadcastMath(graph, realized);
  realizeReducedRows(graph, realized);
  realizeWindowSources(graph, realized);
  realizeDeepRegroupings(graph, realized);
  realizeReusedExpressions(graph, realized);
}

} // namespace dynafuse

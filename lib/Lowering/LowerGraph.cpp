//===- LowerGraph.cpp - Graph IR to loop IR -------------------------------===//
#include "dynafuse/Lowering/LowerGraph.h"

#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Graph/Passes.h"
#include "dynafuse/Loop/LoopText.h"
#include "dynafuse/Lowering/ElementEmitter.h"

#include <algorithm>
#include <map>
#include <set>

namespace dynafuse {
namespace {

OpKind kindOf(const Node &node) {
  const OpInfo *info = lookupOp(node.op);
  if (!info)
    fail("unknown op '" + node.op + "'", node.location);
  return info->kind;
}

bool isIndexedOp(const Node &node) {
  return node.op == "gather" || node.op == "index_select" ||
         node.op == "embedding";
}

/// A strided view of a buffer: what an extern op can read without a copy.
struct StridedView {
  const Value *base = nullptr;
  std::vector<SymExpr> sizes;
  std::vector<SymExpr> strides;
  SymExpr offset;
};

/// Strides for viewing view's elements with newSizes without a copy (the
/// algorithm of torch's computeStride); false when a copy would be needed.
bool reshapeView(const std::vector<SymExpr> &newSizes, StridedView &view) {
  std::vector<int64_t> oldShape, newShape;
  for (const SymExpr &size : view.sizes) {
    if (!size.isConstant())
      return false;
    oldShape.push_back(size.constant());
  }
  for (const SymExpr &size : newSizes) {
    if (!size.isConstant())
      return false;
    newShape.push_back(size.constant());
  }
  std::vector<SymExpr> newStrides(newShape.size());
  if (oldShape.empty()) {
    for (SymExpr &stride : newStrides)
      stride = SymExpr(1);
  } else {
    int64_t viewD = int64_t(newShape.size()) - 1;
    SymExpr chunkBase = view.strides.back();
    int64_t tensorNumel = 1, viewNumel = 1;
    for (int64_t d = int64_t(oldShape.size()) - 1; d >= 0; --d) {
      tensorNumel *= oldShape[d];
      bool chunkEnds =
          d == 0 || (oldShape[d - 1] != 1 &&
                     view.strides[d - 1] != chunkBase * tensorNumel);
      if (!chunkEnds)
        continue;
      while (viewD >= 0 && (viewNumel < tensorNumel || newShape[viewD] == 1)) {
        newStrides[viewD] = chunkBase * viewNumel;
        viewNumel *= newShape[viewD];
        --viewD;
      }
      if (viewNumel != tensorNumel)
        return false;
      if (d > 0) {
        chunkBase = view.strides[d - 1];
        tensorNumel = viewNumel = 1;
      }
    }
    if (viewD != -1)
      return false;
  }
  view.sizes = newSizes;
  view.strides = newStrides;
  return true;
}

/// The views extern operands may go through without being copied.
/// `layouts`: the strides buffers were given (a channels-last layout chosen
/// for a computed value), where they differ from the graph type's.
bool describeView(
    const Value *value, const std::set<const Value *> &buffers,
    StridedView &view,
    const std::map<const Value *, TensorType> *layouts = nullptr) {
  if (buffers.count(value) || !value->producer) {
    const TensorType *type = &value->type;
    if (layouts && layouts->count(value))
      type = &layouts->at(value);
    view.base = value;
    view.sizes = type->sizes;
    view.strides = type->effectiveStrides();
    view.offset = SymExpr(0);
    return true;
  }
  const Node &node = *value->producer;
  if (node.operands.empty() || !node.operands[0].isValue() ||
      !describeView(node.operands[0].value, buffers, view, layouts))
    return false;
  size_t rank = view.sizes.size();
  if (node.op == "transpose" && rank >= 2) {
    int64_t a = normalizeDim(node, node.intAttr("dim0", 0), rank);
    int64_t b = normalizeDim(node, node.intAttr("dim1", 1), rank);
    std::swap(view.sizes[a], view.sizes[b]);
    std::swap(view.strides[a], view.strides[b]);
    return true;
  }
  if (node.op == "permute") {
    std::vector<int64_t> dims = intListAttr(node, "dims", {});
    StridedView permuted = view;
    for (size_t k = 0; k < dims.size(); ++k) {
      int64_t d = normalizeDim(node, dims[k], rank);
      permuted.sizes[k] = view.sizes[d];
      permuted.strides[k] = view.strides[d];
    }
    view = permuted;
    return true;
  }
  if (node.op == "unsqueeze") {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), rank + 1);
    // torch's stride for the new dim: size * stride of the dim it precedes.
    SymExpr stride = size_t(dim) < rank
                         ? view.sizes[size_t(dim)] * view.strides[size_t(dim)]
                         : SymExpr(1);
    view.sizes.insert(view.sizes.begin() + dim, SymExpr(1));
    view.strides.insert(view.strides.begin() + dim, stride);
    return true;
  }
  if (node.op == "expand") {
    const std::vector<SymExpr> &out = value->type.sizes;
    size_t lead = out.size() - rank;
    std::vector<SymExpr> strides(lead, SymExpr(0));
    for (size_t k = 0; k < rank; ++k)
      strides.push_back(view.sizes[k] == out[lead + k] ? view.strides[k]
                                                       : SymExpr(0));
    view.sizes = out;
    view.strides = strides;
    return true;
  }
  if (node.op == "slice" || node.op == "narrow") {
    SliceBounds bounds = sliceBounds(node);
    view.offset = view.offset + view.strides[bounds.dim] * bounds.start;
    view.sizes[bounds.dim] = SymExpr(bounds.length);
    view.strides[bounds.dim] = view.strides[bounds.dim] * bounds.step;
    return true;
  }
  if (node.op == "select") {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), rank);
    int64_t at = node.intAttr("index", 0);
    if (at < 0)
      at += view.sizes[dim].constant();
    view.offset = view.offset + view.strides[dim] * at;
    view.sizes.erase(view.sizes.begin() + dim);
    view.strides.erase(view.strides.begin() + dim);
    return true;
  }
  if (node.op == "split" || node.op == "chunk" || node.op == "unbind") {
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), rank);
    if (!view.sizes[dim].isConstant())
      return false;
    std::vector<int64_t> lengths =
        splitLengths(node, view.sizes[dim].constant());
    size_t piece =
        size_t(std::find(node.results.begin(), node.results.end(), value) -
               node.results.begin());
    int64_t start = 0;
    for (size_t r = 0; r < piece; ++r)
      start += lengths[r];
    view.offset = view.offset + view.strides[dim] * start;
    if (node.op == "unbind") {
      view.sizes.erase(view.sizes.begin() + dim);
      view.strides.erase(view.strides.begin() + dim);
    } else {
      view.sizes[dim] = SymExpr(lengths[piece]);
    }
    return true;
  }
  if (node.op == "reshape" || node.op == "flatten")
    return reshapeView(value->type.sizes, view);
  return false;
}

/// How a value reaches a realized value: not at all, only through
/// same-shape pointwise ops (so one kernel can compute both), or otherwise.
enum class Reach { None, Direct, Indirect };

class Lowering {
public:
  Lowering(const Graph &graph, std::set<const Value *> realized)
      : graph(graph), realized(std::move(realized)) {}

  LoopModule run() {
    module.name = graph.name;
    module.hasProgram = true;
    declareInputs();
    convolutionsChannelsLast = prefersChannelsLast(graph);
    nameBuffers();
    schedule();
    for (Step &step : steps)
      emitStep(step);
    for (const Value *output : graph.outputs)
      module.outputs.push_back(bufferOf.count(output) ? bufferOf.at(output)
                                                      : viewOf(output));
    return std::move(module);
  }

private:
  /// A program step in the making: one kernel (a group of realized values
  /// over one iteration space) or one extern op.
  struct Step {
    const Node *externNode = nullptr;
    std::vector<const Value *> members;
  };

  const Graph &graph;
  std::set<const Value *> realized;
  /// Whether 2-D convolutions produce channels-last buffers (see
  /// prefersChannelsLast).
  bool convolutionsChannelsLast = false;
  LoopModule module;
  std::map<const Value *, std::string> bufferOf;
  std::set<std::string> usedNames;
  std::vector<Step> steps;
  std::map<const Value *, int> stepOf;
  /// Layout of each realized value: dims from outermost to innermost, and
  /// the buffer type with matching strides.
  std::map<const Value *, std::vector<size_t>> orderOf;
  std::map<const Value *, TensorType> bufferTypes;
  int viewCounter = 0;

  std::string uniqueName(const std::string &base) {
    std::string name = base;
    for (int suffix = 0; usedNames.count(name); ++suffix)
      name = base + "_" + std::to_string(suffix);
    usedNames.insert(name);
    return name;
  }

  void declareInputs() {
    std::set<std::string> symbols;
    for (const Value *input : graph.inputs) {
      bufferOf[input] = uniqueName(input->name);
      module.inputs.push_back(LoopBuffer{bufferOf[input], input->type});
      for (const SymExpr &size : input->type.sizes)
        size.collectSymbols(symbols);
      for (const SymExpr &stride : input->type.strides)
        stride.collectSymbols(symbols);
    }
    module.symbols.assign(symbols.begin(), symbols.end());
  }

  void nameBuffers() {
    int counter = 0;
    for (const auto &node : graph.nodes) {
      for (const Value *result : node->results) {
        if (!realized.count(result))
          continue;
        bufferOf[result] = uniqueName("buf" + std::to_string(counter++));
        if (kindOf(*node) != OpKind::Extern)
          chooseLayout(result);
        else
          followChannelsLast(*node, result);
      }
    }
  }

  /// Pointwise results follow the layout of an input of the same shape they
  /// are computed from, as eager's TensorIterator does (channels-last in,
  /// channels-last out); the loops then run in that memory order.
  void chooseLayout(const Value *value) {
    std::vector<size_t> order(value->type.rank());
    for (size_t k = 0; k < order.size(); ++k)
      order[k] = k;
    const Value *input = layoutSource(value, value->type.sizes);
    if (input) {
      const std::vector<SymExpr> &strides = bufferType(input).strides;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return strides[a].constant() > strides[b].constant();
      });
    }
    orderOf[value] = order;
    TensorType type = value->type;
    type.strides.clear();
    if (input) {
      type.strides.assign(order.size(), SymExpr(1));
      SymExpr running(1);
      for (size_t k = order.size(); k-- > 0;) {
        type.strides[order[k]] = running;
        running = running * type.sizes[order[k]];
      }
    }
    bufferTypes[value] = type;
  }

  const TensorType &bufferType(const Value *value) const {
    auto found = bufferTypes.find(value);
    return found == bufferTypes.end() ? value->type : found->second;
  }

  /// CPU convolution networks run channels-last inside the graph, as
  /// Inductor's layout optimization does: oneDNN's NHWC convolutions skip
  /// the reorders its NCHW path makes on every call (eager torchvision
  /// batch 8: resnet18 159 -> 126 ms, mobilenet_v2 119 -> 81 ms with a
  /// channels-last input). The first convolution's input is converted by
  /// the torch bridge, everything after follows (pointwise epilogues and
  /// pools keep a channels-last source's layout). Only when no graph
  /// output has rank 4, so callers still get eager's layouts.
  static bool prefersChannelsLast(const Graph &graph) {
    bool convolution = false;
    for (const auto &node : graph.nodes)
      if (node->op == "conv2d" && !node->results.empty() &&
          node->results[0]->type.device == "cpu")
        convolution = true;
    for (const Value *output : graph.outputs)
      if (output->type.rank() == 4)
        return false;
    return convolution;
  }

  /// Convolutions and pools of a buffer laid out channels-last (chosen
  /// here for a computed value) give channels-last results, as ATen's do.
  void followChannelsLast(const Node &node, const Value *result) {
    if (convolutionsChannelsLast && node.op == "conv2d" &&
        result->type.rank() == 4) {
      TensorType type = result->type;
      type.strides = channelsLastStrides(type.sizes);
      bufferTypes[result] = type;
      return;
    }
    const OpInfo *info = lookupOp(node.op);
    if (!info || !info->keepsChannelsLast || !node.operands[0].isValue() ||
        result->type.rank() != 4 ||
        !isChannelsLast(bufferType(node.operands[0].value)))
      return;
    TensorType type = result->type;
    type.strides = channelsLastStrides(type.sizes);
    bufferTypes[result] = type;
  }

  /// A graph input with explicit, distinct positive strides and the same
  /// sizes, reached from value through pointwise ops only.
  const Value *layoutSource(const Value *value,
                            const std::vector<SymExpr> &sizes) const {
    if (value->type.sizes != sizes || !allConstant(sizes))
      return nullptr;
    bool externResult =
        value->producer && kindOf(*value->producer) == OpKind::Extern;
    if (!value->producer || externResult) {
      const std::vector<SymExpr> &strides = bufferType(value).strides;
      std::set<int64_t> distinct;
      for (size_t k = 0; k < strides.size(); ++k) {
        if (!strides[k].isConstant() || strides[k].constant() <= 0)
          return nullptr;
        if (sizes[k] != SymExpr(1))
          distinct.insert(strides[k].constant());
      }
      return !strides.empty() && distinct.size() > 1 ? value : nullptr;
    }
    if (kindOf(*value->producer) != OpKind::Pointwise)
      return nullptr;
    for (const Operand &operand : value->producer->operands)
      if (operand.isValue())
        if (const Value *found = layoutSource(operand.value, sizes))
          return found;
    return nullptr;
  }

  bool isBuffer(const Value *value) const {
    return !value->producer || realized.count(value);
  }

  /// The buffers value's computation reads, stopping at buffers.
  void collectDeps(const Value *value, std::set<const Value *> &deps,
                   std::set<const Value *> &seen) const {
    if (!seen.insert(value).second)
      return;
    for (const Operand &operand : value->producer->operands) {
      if (!operand.isValue())
        continue;
      if (isBuffer(operand.value))
        deps.insert(operand.value);
      else
        collectDeps(operand.value, deps, seen);
    }
  }

  /// How from's computation reaches target (from itself is not a stop).
  Reach reach(const Value *from, const Value *target,
              const std::vector<SymExpr> &shape) const {
    const Node &node = *from->producer;
    bool direct =
        kindOf(node) == OpKind::Pointwise && from->type.sizes == shape;
    Reach result = Reach::None;
    for (const Operand &operand : node.operands) {
      if (!operand.isValue())
        continue;
      Reach inner = Reach::None;
      if (operand.value == target)
        inner = Reach::Direct;
      else if (!isBuffer(operand.value))
        inner = reach(operand.value, target, shape);
      if (inner == Reach::Indirect || (inner == Reach::Direct && !direct))
        return Reach::Indirect;
      if (inner == Reach::Direct)
        result = Reach::Direct;
    }
    return result;
  }

  bool sameSpace(const Value *a, const Value *b) const {
    return a->type.sizes == b->type.sizes && a->type.device == b->type.device &&
           orderOf.at(a) == orderOf.at(b);
  }

  void schedule() {
    for (const auto &node : graph.nodes) {
      if (kindOf(*node) == OpKind::Extern) {
        scheduleExtern(*node);
        continue;
      }
      for (const Value *result : node->results)
        if (realized.count(result))
          scheduleKernelValue(result);
    }
  }

  int earliestStep(const std::set<const Value *> &deps) const {
    int earliest = 0;
    for (const Value *dep : deps) {
      auto found = stepOf.find(dep);
      if (found != stepOf.end())
        earliest = std::max(earliest, found->second + 1);
    }
    return earliest;
  }

  void scheduleExtern(const Node &node) {
    std::set<const Value *> deps;
    for (const Operand &operand : node.operands) {
      StridedView view;
      if (!describeView(operand.value, realized, view))
        fail("extern operand is not a buffer view", node.location);
      deps.insert(view.base);
    }
    int earliest = earliestStep(deps);
    Step step;
    step.externNode = &node;
    steps.push_back(step);
    int index = std::max(earliest, int(steps.size()) - 1);
    for (const Value *result : node.results)
      stepOf[result] = index;
  }

  void scheduleKernelValue(const Value *value) {
    std::set<const Value *> deps, seen;
    collectDeps(value, deps, seen);
    for (size_t s = 0; s < steps.size(); ++s) {
      Step &step = steps[s];
      if (step.externNode || !sameSpace(step.members[0], value))
        continue;
      if (canJoin(value, deps, int(s))) {
        step.members.push_back(value);
        stepOf[value] = int(s);
        return;
      }
    }
    steps.push_back(Step{nullptr, {value}});
    stepOf[value] = int(steps.size()) - 1;
  }

  /// value may join step s when every buffer it depends on is computed
  /// earlier, or is a member of s reached only through same-shape pointwise
  /// ops (then the kernel computes it inline).
  bool canJoin(const Value *value, const std::set<const Value *> &deps,
               int s) const {
    for (const Value *dep : deps) {
      auto found = stepOf.find(dep);
      if (found == stepOf.end() || found->second < s)
        continue;
      if (found->second > s)
        return false;
      if (reach(value, dep, value->type.sizes) != Reach::Direct)
        return false;
    }
    return true;
  }

  void emitStep(const Step &step) {
    if (step.externNode) {
      emitExtern(*step.externNode);
      return;
    }
    Kernel kernel;
    kernel.name = graph.name + "_k" + std::to_string(module.kernels.size());
    KernelBuilder builder(kernel);
    std::set<const Value *> members(step.members.begin(), step.members.end());
    ElementEmitter emitter(kernel, builder, bufferOf, bufferTypes, members);
    const Value *first = step.members[0];
    std::vector<SymExpr> index(first->type.rank());
    for (size_t dim : orderOf.at(first))
      index[dim] = builder.openLoop(first->type.sizes[dim]);
    for (const Value *member : step.members)
      emitter.store(member, index, emitter.emit(member, index));
    for (size_t k = 0; k < index.size(); ++k)
      builder.closeLoop();
    builder.finish();
    kernel.symbols = symbolsOf(kernel);
    for (const Value *member : step.members) {
      ProgramStep alloc;
      alloc.kind = ProgramStep::Kind::Alloc;
      alloc.result = bufferOf.at(member);
      alloc.type = bufferTypes.at(member);
      module.steps.push_back(alloc);
    }
    ProgramStep call;
    call.kind = ProgramStep::Kind::Call;
    call.kernel = kernel.name;
    for (const LoopBuffer &param : kernel.params)
      call.args.push_back(param.name);
    module.steps.push_back(call);
    module.kernels.push_back(std::move(kernel));
  }

  void emitExtern(const Node &node) {
    ProgramStep step;
    step.kind = ProgramStep::Kind::Extern;
    step.op = node.op;
    step.attributes = node.attributes;
    for (const Value *result : node.results) {
      step.results.push_back(bufferOf.at(result));
      step.types.push_back(bufferType(result));
    }
    for (const Operand &operand : node.operands)
      step.args.push_back(viewOf(operand.value));
    module.steps.push_back(step);
  }

  /// The buffer name an extern reads operand through, adding a view step
  /// when it is not a buffer itself.
  std::string viewOf(const Value *operand) {
    StridedView view;
    // With the layouts buffers were given (channels-last), a reshape that
    // looked like a view may not be one: have it computed into a buffer of
    // its own (lowerGraph retries with the value realized).
    if (!describeView(operand, realized, view, &bufferTypes))
      throw NeedsRealization{operand};
    const std::string &base = bufferOf.at(view.base);
    if (view.base == operand)
      return base;
    ProgramStep step;
    step.kind = ProgramStep::Kind::View;
    step.result = uniqueName("view" + std::to_string(viewCounter++));
    step.source = base;
    step.offset = view.offset;
    step.type.dtype = operand->type.dtype;
    step.type.device = operand->type.device;
    step.type.sizes = view.sizes;
    step.type.strides = view.strides;
    module.steps.push_back(step);
    return step.result;
  }

  std::vector<std::string> symbolsOf(const Kernel &kernel) const {
    std::set<std::string> used;
    for (const LoopBuffer &param : kernel.params) {
      for (const SymExpr &size : param.type.sizes)
        size.collectSymbols(used);
      for (const SymExpr &stride : param.type.strides)
        stride.collectSymbols(used);
    }
    std::vector<std::string> symbols;
    for (const std::string &symbol : module.symbols)
      if (used.count(symbol))
        symbols.push_back(symbol);
    return symbols;
  }
};

/// An output that views a graph input with static sizes, strides and
/// offset: returned as a view of the input, as eager returns it, not a copy.
bool isStaticViewOfInput(const Value *value) {
  StridedView view;
  return value->producer && describeView(value, {}, view) &&
         !view.base->producer && view.offset.isConstant() &&
         allConstant(view.sizes) && allConstant(view.strides);
}

/// Whether a value is computed from graph inputs through pointwise and
/// view ops only (no reduction, no extern): the same for every element of
/// a larger consumer that broadcasts it.
bool fromInputsOnly(const Value *value, std::map<const Value *, bool> &memo) {
  if (!value->producer)
    return true;
  auto found = memo.find(value);
  if (found != memo.end())
    return found->second;
  OpKind kind = kindOf(*value->producer);
  bool pure = kind == OpKind::Pointwise || kind == OpKind::View;
  for (const Operand &operand : value->producer->operands)
    if (pure && operand.value)
      pure = fromInputsOnly(operand.value, memo);
  return memo[value] = pure;
}

bool isCostlyMath(const std::string &op) {
  static const std::set<std::string> costly = {
      "rsqrt", "sqrt", "div",   "exp",   "log", "tanh", "erf",       "sigmoid",
      "pow",   "exp2", "log1p", "expm1", "sin", "cos",  "reciprocal"};
  return costly.count(op) != 0;
}

/// Costly math on a small value computed from inputs only, which a much
/// larger pointwise result broadcasts (batch norm's rsqrt of the running
/// variance, per channel): realized, it is computed once per element of
/// its own instead of once per element of the consumer. With channels-last
/// buffers the channel is the innermost loop, so LLVM cannot hoist it:
/// mobilenet's batch-norm+ReLU6 kernel on 8x96x112x112 took 2.45 ms with
/// the rsqrt per element, 1.75 ms with the per-channel factors precomputed.
void realizeBroadcastMath(const Graph &graph,
                          std::set<const Value *> &realized) {
  std::map<const Value *, bool> memo;
  for (const auto &node : graph.nodes) {
    if (kindOf(*node) != OpKind::Pointwise || node->results.empty())
      continue;
    SymExpr consumerCount = node->results[0]->type.numel();
    for (const Operand &operand : node->operands) {
      const Value *small = operand.value;
      if (!small || !small->producer || realized.count(small) ||
          kindOf(*small->producer) != OpKind::Pointwise ||
          !isCostlyMath(small->producer->op))
        continue;
      SymExpr smallCount = small->type.numel();
      if (!smallCount.isConstant() || !consumerCount.isConstant() ||
          smallCount.constant() <= 0 ||
          consumerCount.constant() < 64 * smallCount.constant() ||
          !fromInputsOnly(small, memo))
        continue;
      realized.insert(small);
    }
  }
}

/// Values that must live in buffers before any kernel is emitted.
std::set<const Value *> initialRealized(const Graph &graph) {
  std::set<const Value *> realized;
  for (const Value *output : graph.outputs)
    if (output->producer && !isStaticViewOfInput(output))
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
      StridedView view;
      bool needsBuffer =
          (extern_ && !describeView(operand, realized, view)) ||
          (isIndexedOp(*node) && i == (node->op == "embedding" ? 1u : 0u));
      if (needsBuffer)
        realized.insert(operand);
    }
  }
  realizeBroadcastMath(graph, realized);
  return realized;
}

std::unique_ptr<Graph> cloneGraph(const Graph &graph) {
  return parseGraph(printGraph(graph), graph.name);
}

} // namespace

LoopModule lowerGraph(const Graph &input, const LoweringObserver &observer) {
  std::unique_ptr<Graph> graph = cloneGraph(input);
  decomposeComposites(*graph);
  eliminateCommonSubexpressions(*graph);
  eliminateDeadCode(*graph);
  verifyGraph(*graph);
  if (observer)
    observer("decompose,cse,dce", printGraph(*graph));
  std::set<const Value *> realized = initialRealized(*graph);
  for (size_t attempt = 0;; ++attempt) {
    try {
      LoopModule module = Lowering(*graph, realized).run();
      for (Kernel &kernel : module.kernels) {
        interchangeColumnReductions(kernel);
        reuseReductionElements(kernel);
      }
      if (observer)
        observer("schedule", printLoopModule(module));
      planMemory(module);
      verifyLoopModule(module);
      if (observer)
        observer("plan-memory", printLoopModule(module));
      return module;
    } catch (const NeedsRealization &needed) {
      if (!realized.insert(needed.value).second ||
          attempt > graph->nodes.size())
        fail("lowering could not place '%" + needed.value->name + "'");
    }
  }
}

} // namespace dynafuse

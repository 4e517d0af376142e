//===- Autodiff.cpp - Joint graph, and its split into forward/backward ----===//
#include "dynafuse/Graph/Autodiff.h"

#include "dynafuse/Graph/Derivatives.h"
#include "dynafuse/Graph/GraphText.h"
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Graph/Passes.h"
#include "dynafuse/Graph/ViewRules.h"
#include "dynafuse/Support/MinCut.h"

#include <algorithm>
#include <functional>
#include <set>

namespace dynafuse {
namespace {

std::string where(const Node &node) { return "'" + opName(node.op) + "'"; }

/// The forward and gradient nodes in one graph, and what the split needs.
struct JointGraph {
  std::unique_ptr<Graph> graph;
  size_t primalInputs = 0;
  size_t userOutputs = 0;
  std::vector<Value *> tangents;
  std::vector<int> tangentOutputs;
  std::vector<int> gradientOf;
  std::vector<Value *> gradients;
};

/// Whether node reads any of values.
bool readsAny(const Node &node, const std::set<const Value *> &values) {
  for (const Operand &operand : node.operands)
    if (operand.isValue() && values.count(operand.value))
      return true;
  return false;
}

/// Values that require grad: the flagged inputs and every floating result
/// of a node reading one (through ops that carry gradients).
std::set<const Value *> propagateRequiresGrad(const Graph &graph,
                                              const std::vector<bool> &flags) {
  std::set<const Value *> requires;
  for (size_t i = 0; i < graph.inputs.size() && i < flags.size(); ++i)
    if (flags[i] && isDifferentiable(graph.inputs[i]->type.dtype))
      requires.insert(graph.inputs[i]);
  for (const auto &node : graph.nodes) {
    if (!readsAny(*node, requires))
      continue;
    const DerivativeInfo *info = derivativeOf(node->op);
    if (!info || info->kind == DerivativeInfo::Kind::Decomposed)
      throw Error("no derivative rule for op '" + opName(node->op) + "' yet",
                  node->location);
    if (info->kind == DerivativeInfo::Kind::NonDifferentiable)
      continue;
    for (Value *result : node->results)
      if (isDifferentiable(result->type.dtype))
        requires.insert(result);
  }
  return requires;
}

/// A train-mode batch norm's output re-expressed as pointwise ops over its
/// input and batch statistics, (x - mean) * rsqrt(var + eps) * w + b,
/// inserted right after the op and read by every former reader. Done
/// after the reverse sweep, so gradients still come from batch_norm_train's
/// own rule (two sums), and the values are the decomposition's. Being
/// pointwise, the split recomputes it in the backward from the input the
/// rule saves anyway and two [C] vectors, instead of saving a tensor of the
/// input's size; the forward no longer stores it.
void expressBatchNormOutputsPointwise(Graph &g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node *norm = g.nodes[i].get();
    if (norm->op != Op::BatchNormTrain)
      continue;
    size_t before = g.nodes.size();
    GradBuilder b(g, norm->location);
    Value *x = norm->operands[0].value;
    std::vector<SymExpr> perChannel(x->type.rank(), SymExpr(1));
    perChannel[1] = x->type.sizes[1];
    auto broadcast = [&](Value *channels) {
      return b.emit(Op::Reshape, {channels}, {{"shape", perChannel}});
    };
    Value *scale = b.emit(
        Op::Rsqrt,
        {b.emit(Op::Add, {broadcast(norm->results[2]),
                          Scalar::ofFloat(floatAttr(*norm, "eps", 1e-5))})});
    Value *out = b.emit(
        Op::Mul, {b.emit(Op::Sub, {x, broadcast(norm->results[1])}), scale});
    size_t next = 1;
    if (boolAttr(*norm, "has_weight", false))
      out = b.emit(Op::Mul, {out, broadcast(norm->operands[next++].value)});
    if (boolAttr(*norm, "has_bias", false))
      out = b.emit(Op::Add, {out, broadcast(norm->operands[next++].value)});
    size_t added = g.nodes.size() - before;
    std::rotate(g.nodes.begin() + long(i) + 1, g.nodes.begin() + long(before),
                g.nodes.end());
    Value *y = norm->results[0];
    for (size_t k = i + 1 + added; k < g.nodes.size(); ++k)
      for (Operand &operand : g.nodes[k]->operands)
        if (operand.isValue() && operand.value == y)
          operand.value = out;
    for (Value *&output : g.outputs)
      if (output == y)
        output = out;
    i += added;
  }
}

JointGraph buildJointGraph(const Graph &graph,
                           const std::vector<bool> &inputRequiresGrad) {
  JointGraph joint;
  joint.graph = graph.clone();
  // Composites without a rule of their own are differentiated through
  // their decompositions; the others stay whole (lowering decomposes them).
  decomposeComposites(*joint.graph, [](const Node &node) {
    const DerivativeInfo *info = derivativeOf(node.op);
    return !info || info->kind == DerivativeInfo::Kind::Decomposed;
  });
  Graph &g = *joint.graph;
  joint.primalInputs = g.inputs.size();
  joint.userOutputs = g.outputs.size();
  std::set<const Value *> requires =
      propagateRequiresGrad(g, inputRequiresGrad);
  std::vector<Node *> forwardNodes;
  for (const auto &node : g.nodes)
    forwardNodes.push_back(node.get());

  std::map<const Value *, Value *> gradOf;
  for (size_t j = 0; j < g.outputs.size(); ++j) {
    Value *output = g.outputs[j];
    if (!requires.count(output) || !output->producer || gradOf.count(output))
      continue;
    TensorType type = output->type;
    type.strides.clear();
    Value *tangent =
        g.addInput("tangent" + std::to_string(joint.tangents.size()), type);
    joint.tangents.push_back(tangent);
    joint.tangentOutputs.push_back(int(j));
    gradOf[output] = tangent;
  }

  for (auto it = forwardNodes.rbegin(); it != forwardNodes.rend(); ++it) {
    const Node &node = **it;
    std::vector<Value *> resultGrads;
    bool any = false;
    for (Value *result : node.results) {
      auto found = gradOf.find(result);
      resultGrads.push_back(found == gradOf.end() ? nullptr : found->second);
      any |= found != gradOf.end();
    }
    if (!any || !readsAny(node, requires))
      continue;
    const DerivativeInfo *info = derivativeOf(node.op);
    if (info->kind != DerivativeInfo::Kind::Rule)
      continue;
    GradBuilder builder(g, node.location, &requires);
    std::vector<Value *> operandGrads;
    try {
      operandGrads = info->rule(builder, node, resultGrads);
    } catch (const Error &error) {
      throw Error(where(node) + ": its gradient: " + error.bareMessage(),
                  node.location);
    }
    for (size_t i = 0; i < node.operands.size() && i < operandGrads.size();
         ++i) {
      Value *operand = node.operands[i].value;
      Value *grad = operandGrads[i];
      if (!grad || !operand || !requires.count(operand))
        continue;
      if (grad->type.sizes != operand->type.sizes)
        throw Error(where(node) + ": the gradient of operand " +
                        std::to_string(i) + " is " + grad->type.str() +
                        ", not of the operand's shape " +
                        operand->type.str(),
                    node.location);
      auto &slot = gradOf[operand];
      slot = slot ? builder.emit(Op::Add, {slot, grad}) : grad;
    }
  }
  for (size_t i = 0; i < joint.primalInputs; ++i) {
    auto found = gradOf.find(g.inputs[i]);
    if (found == gradOf.end() || !requires.count(g.inputs[i]))
      continue;
    joint.gradientOf.push_back(int(i));
    joint.gradients.push_back(found->second);
  }
  expressBatchNormOutputsPointwise(g);
  return joint;
}

void collectSymbols(const TensorType &type, std::set<std::string> &symbols) {
  for (const SymExpr &size : type.sizes)
    size.collectSymbols(symbols);
}

Node *copyNode(Graph &into, const Node &node,
               std::map<const Value *, Value *> &mapping) {
  std::vector<Operand> operands;
  for (const Operand &operand : node.operands)
    operands.push_back(operand.isValue() ? Operand(mapping.at(operand.value))
                                         : Operand(operand.scalar));
  std::vector<TensorType> types;
  std::vector<std::string> names;
  for (const Value *result : node.results) {
    types.push_back(result->type);
    names.push_back(result->name);
  }
  Node *copy = into.addNodeWithTypes(node.op, std::move(operands),
                                     node.attributes, types, names,
                                     node.location);
  for (size_t i = 0; i < node.results.size(); ++i)
    mapping[node.results[i]] = copy->results[i];
  return copy;
}

/// Bytes of a value, sizes 64 for symbols (a comparison of alternatives,
/// not a measurement).
int64_t estimatedBytes(const TensorType &type) {
  int64_t count = 1;
  for (const SymExpr &size : type.sizes) {
    std::set<std::string> symbols;
    size.collectSymbols(symbols);
    std::map<std::string, int64_t> hints;
    for (const std::string &symbol : symbols)
      hints[symbol] = 64;
    count *= size.evaluate(hints);
  }
  return count * int64_t(dtypeSize(type.dtype));
}

/// Pointwise math, views and the normalizations (a pass over their input)
/// are recomputed in the backward rather than saved when that saves no
/// more; reductions and externs (GEMMs) are not, nor are random numbers: a
/// hash per element costs the memory-bound block more (48.6 against 43.9
/// ms a step) than storing dropout's keep mask, a byte per element.
bool isCheapToRecompute(const Node &node) {
  if (!node.info || node.results.size() != 1)
    return false;
  if (node.info->kind == OpKind::View && node.info->view &&
      node.info->view->form == ViewForm::Random)
    return false;
  if (node.info->kind == OpKind::Pointwise || node.info->kind == OpKind::View)
    return true;
  return node.op == Op::LayerNorm || node.op == Op::RmsNorm;
}

bool isSingleView(const Node &node) {
  return node.info && node.info->kind == OpKind::View &&
         node.results.size() == 1;
}

/// The forward values the backward should receive, as the minimum cut of a
/// flow network over bytes (the partitioner of functorch's AOTAutograd,
/// in memory only). Each forward value v is an edge in(v) -> out(v) whose
/// capacity is what saving v costs: its bytes; 0 for a forward input (the
/// node keeps a reference anyway); unbounded for a view (its base is saved
/// instead) and for a value only the backward uses (computed there). An
/// operand w of v's producer gives out(w) -> in(v), unbounded. The source
/// feeds in(v) of inputs and of values that cannot be recomputed in the
/// backward (reductions, externs, random numbers: only forward nodes that
/// isCheapToRecompute may be); the sink takes out(w) of every forward value
/// a tangent-dependent node reads. A checkpointed region's nodes may all
/// be recomputed, and its values that stay inside it are never saved. Every
/// cut edge is a saved value; the
/// cut nearest the source recomputes as much as costs nothing more, so
/// saved bytes are the least possible under those rules: x +
/// gelu(layer_norm(x)) saves only x, and a batch norm's output (re-expressed
/// over its statistics) is recomputed from its input.
std::set<const Value *>
minCutSavedValues(const Graph &g, const JointGraph &joint,
                  const std::set<const Value *> &tangents,
                  const std::set<const Node *> &dependsOnTangents,
                  const std::set<const Node *> &forwardNeeds) {
  std::map<const Value *, int> vertexOf; // in(v); out(v) is in(v) + 1
  std::vector<const Value *> values;
  auto add = [&](const Value *value) {
    vertexOf[value] = int(2 * values.size());
    values.push_back(value);
  };
  for (size_t i = 0; i < joint.primalInputs; ++i)
    add(g.inputs[i]);
  for (const auto &node : g.nodes)
    if (!dependsOnTangents.count(node.get()))
      for (const Value *result : node->results)
        add(result);
  // Values of a checkpointed region that leave it (read by a forward node
  // outside it, or returned): saved like any value; the rest of the region
  // is never saved, only recomputed (torch.utils.checkpoint).
  std::set<const Value *> leaveRegion;
  for (const auto &node : g.nodes)
    if (!node->recompute && !dependsOnTangents.count(node.get()))
      for (const Operand &operand : node->operands)
        if (operand.isValue())
          leaveRegion.insert(operand.value);
  for (size_t j = 0; j < joint.userOutputs; ++j)
    leaveRegion.insert(g.outputs[j]);
  int source = int(2 * values.size()), sink = source + 1;
  FlowNetwork network(sink + 1);
  const int64_t infinite = FlowNetwork::kInfinite;
  for (const Value *value : values) {
    int in = vertexOf.at(value), out = in + 1;
    const Node *producer = value->producer;
    if (!producer) {
      network.addEdge(source, in, infinite);
      network.addEdge(in, out, 0);
      continue;
    }
    bool inForward = forwardNeeds.count(producer);
    if (inForward && !isCheapToRecompute(*producer) && !producer->recompute)
      network.addEdge(source, in, infinite);
    bool neverSaved = !inForward || isSingleView(*producer) ||
                      (producer->recompute && !leaveRegion.count(value));
    network.addEdge(in, out,
                    neverSaved ? infinite : estimatedBytes(value->type));
    for (const Operand &operand : producer->operands)
      if (operand.isValue() && vertexOf.count(operand.value))
        network.addEdge(vertexOf.at(operand.value) + 1, in, infinite);
  }
  for (const Node *node : dependsOnTangents)
    for (const Operand &operand : node->operands)
      if (operand.isValue() && !tangents.count(operand.value) &&
          vertexOf.count(operand.value))
        network.addEdge(vertexOf.at(operand.value) + 1, sink, infinite);
  for (const Value *gradient : joint.gradients)
    if (vertexOf.count(gradient)) // a gradient that is a forward value
      network.addEdge(vertexOf.at(gradient) + 1, sink, infinite);
  if (network.maxFlow(source, sink) >= infinite)
    fail("autodiff: no finite set of values to save for the backward of @" +
         g.name);
  std::set<const Value *> cut;
  const std::vector<bool> &sourceSide = network.sourceSide();
  for (const Value *value : values) {
    int in = vertexOf.at(value);
    if (sourceSide[size_t(in)] && !sourceSide[size_t(in + 1)])
      cut.insert(value);
  }
  return cut;
}

/// Splits the joint graph where the tangents start (see Autodiff.h).
TrainingGraphs split(JointGraph &joint) {
  Graph &g = *joint.graph;
  std::set<const Value *> tangentDependent(joint.tangents.begin(),
                                           joint.tangents.end());
  std::set<const Node *> dependsOnTangents;
  for (const auto &node : g.nodes) {
    if (!readsAny(*node, tangentDependent))
      continue;
    dependsOnTangents.insert(node.get());
    for (Value *result : node->results)
      tangentDependent.insert(result);
  }
  std::set<const Node *> forwardNeeds;
  std::function<void(const Value *)> needForward = [&](const Value *value) {
    const Node *producer = value->producer;
    if (!producer || !forwardNeeds.insert(producer).second)
      return;
    for (const Operand &operand : producer->operands)
      if (operand.isValue())
        needForward(operand.value);
  };
  for (size_t j = 0; j < joint.userOutputs; ++j)
    needForward(g.outputs[j]);

  // What the forward saves: a minimum cut over bytes (minCutSavedValues),
  // then the backward's nodes are every tangent-dependent node plus the
  // forward nodes it recomputes from what is saved.
  std::set<const Value *> tangentSet(joint.tangents.begin(),
                                     joint.tangents.end());
  std::set<const Value *> cut =
      minCutSavedValues(g, joint, tangentSet, dependsOnTangents, forwardNeeds);
  std::set<const Node *> backwardNodes;
  std::vector<const Value *> saved;
  std::set<const Value *> savedSet;
  auto save = [&](const Value *value) {
    if (savedSet.insert(value).second)
      saved.push_back(value);
  };
  std::function<void(const Value *)> needBackward = [&](const Value *value) {
    if (tangentSet.count(value))
      return;
    const Node *producer = value->producer;
    if (!producer || cut.count(value)) {
      save(value);
      return;
    }
    if (!backwardNodes.insert(producer).second)
      return;
    for (const Operand &operand : producer->operands)
      if (operand.isValue())
        needBackward(operand.value);
  };
  for (const Value *gradient : joint.gradients)
    needBackward(gradient);

  // Every size symbol the backward uses must come with one of its inputs.
  std::set<std::string> used, carried;
  for (const Node *node : backwardNodes) {
    for (const Value *result : node->results)
      collectSymbols(result->type, used);
    for (const auto &[name, attribute] : node->attributes)
      collectSymbols(attribute, used);
  }
  for (const Value *value : saved)
    collectSymbols(value->type, carried);
  for (const Value *tangent : joint.tangents)
    collectSymbols(tangent->type, carried);
  for (const std::string &symbol : used) {
    if (carried.count(symbol))
      continue;
    for (size_t i = 0; i < joint.primalInputs; ++i) {
      std::set<std::string> symbols;
      collectSymbols(g.inputs[i]->type, symbols);
      if (symbols.count(symbol)) {
        save(g.inputs[i]);
        carried.insert(symbols.begin(), symbols.end());
        break;
      }
    }
  }

  TrainingGraphs result;
  result.userOutputs = joint.userOutputs;
  result.tangentOutputs = joint.tangentOutputs;
  result.gradientOf = joint.gradientOf;
  result.forward = std::make_unique<Graph>(g.name);
  std::map<const Value *, Value *> toForward;
  for (size_t i = 0; i < joint.primalInputs; ++i)
    toForward[g.inputs[i]] =
        result.forward->addInput(g.inputs[i]->name, g.inputs[i]->type);
  for (const auto &node : g.nodes)
    if (forwardNeeds.count(node.get()))
      copyNode(*result.forward, *node, toForward);
  for (size_t j = 0; j < joint.userOutputs; ++j)
    result.forward->outputs.push_back(toForward.at(g.outputs[j]));

  result.backward = std::make_unique<Graph>(g.name + "_backward");
  std::map<const Value *, Value *> toBackward;
  for (const Value *value : saved) {
    TrainingGraphs::BackwardInput input;
    if (!value->producer) {
      input.kind = TrainingGraphs::BackwardInput::Kind::ForwardInput;
      for (size_t i = 0; i < joint.primalInputs; ++i)
        if (g.inputs[i] == value)
          input.index = int(i);
    } else {
      input.kind = TrainingGraphs::BackwardInput::Kind::ForwardOutput;
      input.index = -1;
      for (size_t j = 0; j < joint.userOutputs; ++j)
        if (g.outputs[j] == value && input.index < 0)
          input.index = int(j);
      if (input.index < 0) {
        input.index = int(result.forward->outputs.size());
        result.forward->outputs.push_back(toForward.at(value));
      }
    }
    result.backwardInputs.push_back(input);
    // Inputs are named like the captured graph's (node results are
    // numbered): a saved value's number gets a prefix.
    std::string name = value->producer ? "saved" + value->name : value->name;
    toBackward[value] = result.backward->addInput(name, value->type);
  }
  for (size_t k = 0; k < joint.tangents.size(); ++k) {
    TrainingGraphs::BackwardInput input;
    input.kind = TrainingGraphs::BackwardInput::Kind::Tangent;
    input.index = joint.tangentOutputs[k];
    result.backwardInputs.push_back(input);
    toBackward[joint.tangents[k]] = result.backward->addInput(
        joint.tangents[k]->name, joint.tangents[k]->type);
  }
  for (const auto &node : g.nodes)
    if (backwardNodes.count(node.get()))
      copyNode(*result.backward, *node, toBackward);
  for (const Value *gradient : joint.gradients)
    result.backward->outputs.push_back(toBackward.at(gradient));
  // Which tangents each gradient is computed from.
  std::map<const Value *, std::set<int>> reaching;
  for (size_t k = 0; k < joint.tangents.size(); ++k)
    reaching[joint.tangents[k]].insert(int(k));
  for (const auto &node : g.nodes) {
    if (!backwardNodes.count(node.get()))
      continue;
    std::set<int> from;
    for (const Operand &operand : node->operands)
      if (operand.isValue()) {
        auto found = reaching.find(operand.value);
        if (found != reaching.end())
          from.insert(found->second.begin(), found->second.end());
      }
    for (const Value *value : node->results)
      reaching[value] = from;
  }
  for (const Value *gradient : joint.gradients) {
    const std::set<int> &from = reaching[gradient];
    result.tangentsOfGradient.emplace_back(from.begin(), from.end());
  }
  return result;
}

} // namespace

TrainingGraphs differentiateGraph(const Graph &graph,
                                  const std::vector<bool> &inputRequiresGrad) {
  JointGraph joint = buildJointGraph(graph, inputRequiresGrad);
  return split(joint);
}

std::string printTrainingGraphs(const TrainingGraphs &graphs) {
  std::string text = printGraph(*graphs.forward);
  text += "// -----\n";
  const Graph &backward = *graphs.backward;
  for (size_t i = 0; i < graphs.backwardInputs.size(); ++i) {
    const TrainingGraphs::BackwardInput &input = graphs.backwardInputs[i];
    const char *kind =
        input.kind == TrainingGraphs::BackwardInput::Kind::ForwardInput
            ? "forward input"
        : input.kind == TrainingGraphs::BackwardInput::Kind::ForwardOutput
            ? "forward output"
            : "tangent of forward output";
    text += "// %" + backward.inputs[i]->name + ": " + kind + " " +
            std::to_string(input.index) + "\n";
  }
  for (size_t k = 0; k < graphs.gradientOf.size(); ++k)
    text += "// output " + std::to_string(k) + ": gradient of forward input " +
            std::to_string(graphs.gradientOf[k]) + "\n";
  text += printGraph(backward);
  return text;
}

} // namespace dynafuse

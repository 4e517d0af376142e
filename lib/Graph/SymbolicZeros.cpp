//===- SymbolicZeros.cpp - A graph with some inputs known to be zero ------===//
//
// One walk in order: each node's operands are either values of the new
// graph or symbolic zeros (old values computed linearly from zero inputs).
// A node linear in a zero operand (mul, div of a zero numerator, neg, cast,
// sum, views, gathers, GEMMs; where and cat when every branch is zero) is a
// zero itself; add and sub pass their other operand on when its type is the
// result's; any other node gets a zero fill in place of the operand.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/SymbolicZeros.h"

#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Graph/Passes.h"
#include "dynafuse/Graph/ViewRules.h"

#include <map>
#include <set>

namespace dynafuse {
namespace {

enum class Outcome { Keep, Zero, PassFirst, PassSecond, NegateSecond };

bool isZeroScalar(const Operand &operand) {
  return !operand.isValue() && operand.scalar.asDouble() == 0.0;
}

/// What a node becomes given which of its operands are symbolic zeros.
Outcome outcomeOf(const Node &node, const std::vector<bool> &zero) {
  auto only = [&](size_t k) {
    for (size_t i = 0; i < zero.size(); ++i)
      if (zero[i] != (i == k))
        return false;
    return true;
  };
  auto allValuesZero = [&](size_t from) {
    for (size_t i = from; i < zero.size(); ++i)
      if (!zero[i] && !isZeroScalar(node.operands[i]))
        return false;
    return true;
  };
  const Value *result = node.results.size() == 1 ? node.result() : nullptr;
  auto sameType = [&](size_t k) {
    return result && node.operands[k].isValue() &&
           node.operands[k].value->type == result->type;
  };
  Op op = node.op;
  if (op == Op::Add || op == Op::Sub) {
    if (zero[0] && zero[1])
      return Outcome::Zero;
    if (zero[1] && sameType(0))
      return Outcome::PassFirst;
    if (zero[0] && sameType(1))
      return op == Op::Add ? Outcome::PassSecond : Outcome::NegateSecond;
    return Outcome::Keep;
  }
  if (op == Op::Mul || op == Op::Mm || op == Op::Bmm || op == Op::Matmul)
    return Outcome::Zero;
  if (op == Op::Div || op == Op::GatherBackward ||
      op == Op::IndexSelectBackward)
    return only(0) ? Outcome::Zero : Outcome::Keep;
  if (op == Op::Neg || op == Op::Cast || op == Op::Sum || op == Op::Contiguous)
    return Outcome::Zero;
  if (op == Op::Where)
    return allValuesZero(1) && !zero[0] ? Outcome::Zero : Outcome::Keep;
  if (op == Op::MaskedFill)
    return zero[0] && isZeroScalar(node.operands.at(2)) ? Outcome::Zero
                                                        : Outcome::Keep;
  const OpInfo *info = node.info ? node.info : opInfoOf(node);
  if (!info || !info->view)
    return Outcome::Keep;
  switch (info->view->form) {
  case ViewForm::Remap:
  case ViewForm::Gather:
  case ViewForm::IndexSelect:
  case ViewForm::LowerTriangle:
  case ViewForm::UpperTriangle:
    return only(0) ? Outcome::Zero : Outcome::Keep;
  case ViewForm::Embedding:
    return only(1) ? Outcome::Zero : Outcome::Keep;
  case ViewForm::Concat:
    return allValuesZero(0) ? Outcome::Zero : Outcome::Keep;
  default:
    return Outcome::Keep;
  }
}

} // namespace

std::unique_ptr<Graph> withZeroInputs(const Graph &graph,
                                      const std::vector<bool> &isZero) {
  auto result = std::make_unique<Graph>(graph.name);
  std::map<const Value *, Value *> mapped;
  std::set<const Value *> zeros;
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const Value *input = graph.inputs[i];
    mapped[input] = result->addInput(input->name, input->type);
    if (i < isZero.size() && isZero[i])
      zeros.insert(input);
  }
  std::map<const Value *, Value *> fills;
  auto fillOf = [&](const Value *old) {
    Value *&fill = fills[old];
    TensorType dense = old->type;
    dense.strides.clear();
    if (!fill)
      fill = result
                 ->addNodeWithTypes(Op::Full, {},
                                    {{"shape", old->type.sizes},
                                     {"value", 0.0},
                                     {"dtype", old->type.dtype},
                                     {"device", old->type.device}},
                                    {dense}, {"zero_" + old->name})
                 ->result();
    return fill;
  };
  auto operandOf = [&](const Operand &operand) -> Operand {
    if (!operand.isValue())
      return operand;
    if (zeros.count(operand.value))
      return fillOf(operand.value);
    return mapped.at(operand.value);
  };
  for (const auto &node : graph.nodes) {
    std::vector<bool> zero;
    bool any = false;
    for (const Operand &operand : node->operands) {
      zero.push_back(operand.isValue() && zeros.count(operand.value));
      any |= zero.back();
    }
    Outcome outcome = any ? outcomeOf(*node, zero) : Outcome::Keep;
    switch (outcome) {
    case Outcome::Zero:
      for (const Value *value : node->results)
        zeros.insert(value);
      continue;
    case Outcome::PassFirst:
      mapped[node->result()] = mapped.at(node->operands[0].value);
      continue;
    case Outcome::PassSecond:
      mapped[node->result()] = mapped.at(node->operands[1].value);
      continue;
    case Outcome::NegateSecond:
      mapped[node->result()] =
          result
              ->addNodeWithTypes(Op::Neg, {mapped.at(node->operands[1].value)},
                                 {}, {node->result()->type},
                                 {node->result()->name}, node->location)
              ->result();
      continue;
    case Outcome::Keep:
      break;
    }
    std::vector<Operand> operands;
    for (const Operand &operand : node->operands)
      operands.push_back(operandOf(operand));
    std::vector<TensorType> types;
    std::vector<std::string> names;
    for (const Value *value : node->results) {
      types.push_back(value->type);
      names.push_back(value->name);
    }
    Node *copy = result->addNodeWithTypes(node->op, std::move(operands),
                                          node->attributes, types, names,
                                          node->location);
    for (size_t k = 0; k < node->results.size(); ++k)
      mapped[node->results[k]] = copy->results[k];
  }
  for (const Value *output : graph.outputs)
    result->outputs.push_back(zeros.count(output) ? fillOf(output)
                                                  : mapped.at(output));
  eliminateDeadCode(*result);
  return result;
}

} // namespace dynafuse

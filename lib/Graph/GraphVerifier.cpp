//===- GraphVerifier.cpp - Structural and type checks of graph IR ---------===//
#include "dynafuse/Graph/GraphText.h"

#include "dynafuse/Graph/OpRegistry.h"

#include <set>

namespace dynafuse {

void verifyGraph(const Graph &graph) {
  std::set<const Value *> defined(graph.inputs.begin(), graph.inputs.end());
  std::set<std::string> names;
  for (const Value *input : graph.inputs)
    if (!names.insert(input->name).second)
      fail("graph @" + graph.name + ": duplicate value '%" + input->name + "'");
  for (const auto &node : graph.nodes) {
    for (const Operand &operand : node->operands)
      if (operand.isValue() && !defined.count(operand.value))
        fail("op '" + opName(node->op) + "' uses '%" + operand.value->name +
                 "' before its definition",
             node->location);
    std::vector<TensorType> inferred = inferResultTypes(*node);
    if (inferred.size() != node->results.size())
      fail("op '" + opName(node->op) + "' has the wrong number of results",
           node->location);
    for (size_t i = 0; i < inferred.size(); ++i) {
      const Value *result = node->results[i];
      if (inferred[i] != result->type)
        fail("op '" + opName(node->op) + "' result '%" + result->name +
                 "' has type " + result->type.str() + " but inference gives " +
                 inferred[i].str(),
             node->location);
      if (!names.insert(result->name).second)
        fail("duplicate value '%" + result->name + "'", node->location);
      defined.insert(result);
    }
  }
  for (const Value *output : graph.outputs)
    if (!defined.count(output))
      fail("graph @" + graph.name + " returns undefined value '%" +
           output->name + "'");
}

} // namespace dynafuse

//===- GraphParser.cpp - Text to graph IR ---------------------------------===//
#include "dynafuse/Graph/GraphText.h"

#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Support/TextCursor.h"

namespace dynafuse {
namespace {

Attribute parseAttributeValue(TextCursor &cursor) {
  if (cursor.peek() == '"')
    return cursor.stringLiteral();
  if (cursor.acceptWord("true"))
    return true;
  if (cursor.acceptWord("false"))
    return false;
  if (cursor.accept("[")) {
    // Integers, or symbolic sizes ([s0, -1, 64]); canonical once in a node.
    std::vector<SymExpr> list;
    if (cursor.accept("]"))
      return std::vector<int64_t>{};
    do {
      list.push_back(cursor.symExpr());
    } while (cursor.accept(","));
    cursor.expect("]");
    return canonicalAttribute(list);
  }
  // A symbolic size prints parenthesized ("(s0 - 1)") or as a bare symbol.
  if (cursor.peek() == '(')
    return canonicalAttribute(cursor.symExpr());
  if (cursor.peekNumber()) {
    TextCursor::Number number = cursor.number();
    if (number.isFloat)
      return number.floatValue;
    return number.intValue;
  }
  Location where = cursor.location();
  std::string word = cursor.identifier("an attribute value");
  if (std::optional<DType> type = parseDType(word))
    return *type;
  if (isSizeSymbolName(word))
    return SymExpr::symbol(word);
  cursor.errorAt(where, "unknown attribute value '" + word + "'");
}

} // namespace

std::map<std::string, Attribute> parseAttributeDict(TextCursor &cursor) {
  std::map<std::string, Attribute> attributes;
  if (!cursor.accept("{"))
    return attributes;
  do {
    Location where = cursor.location();
    std::string name = cursor.identifier("an attribute name");
    cursor.expect("=");
    if (attributes.count(name))
      cursor.errorAt(where, "duplicate attribute '" + name + "'");
    attributes[name] = parseAttributeValue(cursor);
  } while (cursor.accept(","));
  cursor.expect("}");
  return attributes;
}

namespace {

class GraphParser {
public:
  GraphParser(const std::string &text, const std::string &fileName)
      : cursor(text, fileName) {}

  std::unique_ptr<Graph> parse() {
    if (!cursor.acceptWord("graph"))
      cursor.error("expected 'graph'");
    graph = std::make_unique<Graph>(cursor.sigilName('@', "a graph name"));
    parseInputs();
    cursor.expect("{");
    while (!cursor.acceptWord("return"))
      parseNode();
    parseOutputs();
    cursor.expect("}");
    if (!cursor.atEnd())
      cursor.error("unexpected text after the graph");
    return std::move(graph);
  }

private:
  TextCursor cursor;
  std::unique_ptr<Graph> graph;

  void parseInputs() {
    cursor.expect("(");
    if (cursor.accept(")"))
      return;
    do {
      Location where = cursor.location();
      std::string name = cursor.sigilName('%', "an input name");
      cursor.expect(":");
      TensorType type = parseTensorType(cursor);
      if (graph->findValue(name))
        cursor.errorAt(where, "redefinition of '%" + name + "'");
      graph->addInput(name, type);
    } while (cursor.accept(","));
    cursor.expect(")");
  }

  Value *useValue() {
    Location where = cursor.location();
    std::string name = cursor.sigilName('%', "a value");
    Value *value = graph->findValue(name);
    if (!value)
      cursor.errorAt(where, "use of undefined value '%" + name + "'");
    return value;
  }

  Operand parseOperand() {
    if (cursor.peek() == '%')
      return useValue();
    if (cursor.acceptWord("true"))
      return Scalar::ofBool(true);
    if (cursor.acceptWord("false"))
      return Scalar::ofBool(false);
    if (!cursor.peekNumber())
      cursor.error("expected an operand (a %value or a number)");
    TextCursor::Number number = cursor.number();
    return number.isFloat ? Scalar::ofFloat(number.floatValue)
                          : Scalar::ofInt(number.intValue);
  }

  Location parseUserLocation() {
    Location where;
    if (!cursor.acceptWord("loc"))
      return where;
    cursor.expect("(");
    where.file = cursor.stringLiteral();
    cursor.expect(":");
    where.line = int(cursor.integer());
    cursor.expect(")");
    return where;
  }

  void parseNode() {
    Location nodeAt = cursor.location();
    std::vector<std::pair<std::string, Location>> names;
    do {
      Location where = cursor.location();
      names.push_back({cursor.sigilName('%', "a result name"), where});
    } while (cursor.accept(","));
    cursor.expect("=");
    Location opAt = cursor.location();
    std::string opText = cursor.identifier("an op name");
    std::optional<Op> op = findOp(opText);
    if (!op || !lookupOp(*op))
      cursor.errorAt(opAt, "unknown op '" + opText + "'");
    std::vector<Operand> operands;
    if (cursor.peek() != '{' && cursor.peek() != ':') {
      do {
        operands.push_back(parseOperand());
      } while (cursor.accept(","));
    }
    std::map<std::string, Attribute> attributes = parseAttributeDict(cursor);
    cursor.expect(":");
    std::vector<TensorType> types;
    do {
      types.push_back(parseTensorType(cursor));
    } while (cursor.accept(","));
    bool recompute = cursor.acceptWord("recompute");
    Location userLocation = parseUserLocation();
    if (types.size() != names.size())
      cursor.errorAt(nodeAt, std::to_string(names.size()) + " results but " +
                                 std::to_string(types.size()) + " types");
    for (auto &name : names)
      if (graph->findValue(name.first))
        cursor.errorAt(name.second, "redefinition of '%" + name.first + "'");
    std::vector<std::string> resultNames;
    for (auto &name : names)
      resultNames.push_back(name.first);
    Node *node = graph->addNodeWithTypes(*op, operands, attributes, types,
                                         resultNames, userLocation);
    node->recompute = recompute;
    checkTypes(*node, nodeAt);
  }

  void checkTypes(const Node &node, const Location &nodeAt) {
    std::vector<TensorType> inferred;
    try {
      inferred = inferResultTypes(node);
    } catch (const Error &error) {
      cursor.errorAt(nodeAt, error.bareMessage());
    }
    for (size_t i = 0; i < inferred.size() && i < node.results.size(); ++i)
      if (inferred[i] != node.results[i]->type)
        cursor.errorAt(nodeAt, "'" + opName(node.op) + "' result type " +
                                   node.results[i]->type.str() +
                                   " does not match the inferred type " +
                                   inferred[i].str());
    if (inferred.size() != node.results.size())
      cursor.errorAt(nodeAt, "'" + opName(node.op) + "' produces " +
                                 std::to_string(inferred.size()) + " results");
  }

  void parseOutputs() {
    if (cursor.peek() == '}')
      return;
    do {
      graph->outputs.push_back(useValue());
    } while (cursor.accept(","));
  }
};

} // namespace

std::unique_ptr<Graph> parseGraph(const std::string &text,
                                  const std::string &fileName) {
  return GraphParser(text, fileName).parse();
}

} // namespace dynafuse

//===- GraphText.h - Printing, parsing and verifying graph IR ---*- C++ -*-===//
//
// The .graph text form:
//
//   graph @f(%x: f32[4, 8], %w: f32[8]) {
//     %0 = mul %x, %w : f32[4, 8]
//     %1 = gelu %0 {approximate = "none"} : f32[4, 8] loc("model.py":12)
//     return %1
//   }
//
// Operands are values or number literals (2, 2.5, true). The printer and the
// parser round-trip exactly. The verifier checks definitions before uses,
// registered ops and that every declared result type matches inference.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_GRAPHTEXT_H
#define DYNAFUSE_GRAPH_GRAPHTEXT_H

#include "dynafuse/Graph/Graph.h"

#include <memory>
#include <string>

namespace dynafuse {

std::string printGraph(const Graph &graph);

/// Parses one graph; throws Error with line:column on malformed or invalid
/// text.
std::unique_ptr<Graph> parseGraph(const std::string &text,
                                  const std::string &fileName = "");

/// Throws Error describing the first problem found.
void verifyGraph(const Graph &graph);

class TextCursor;
/// Reads "{name = value, ...}" if the text continues with '{'; else empty.
std::map<std::string, Attribute> parseAttributeDict(TextCursor &cursor);
/// " {name = value, ...}", or "" when there are none.
std::string printAttributeDict(const std::map<std::string, Attribute> &dict);

} // namespace dynafuse

#endif

//===- OpId.h - The typed key of a graph op ---------------------*- C++ -*-===//
//
// Op names a graph op. Ops.def lists them all; tools/dynafuse-opgen writes
// it into the build from the op definitions (include/dynafuse/Ops/). Nodes,
// tables and rules key ops by it, so a misspelt op is a compile error rather
// than a lookup that silently finds nothing; the name is text only at the
// edges: the text IR, diagnostics and the Python op tables.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_OPID_H
#define DYNAFUSE_GRAPH_OPID_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dynafuse {

enum class Op : uint16_t {
#define DYNAFUSE_OP(ID, NAME) ID,
#include "dynafuse/Graph/Ops.def"
};

/// How many ops Ops.def lists; Op values are 0 .. opCount - 1.
inline constexpr size_t opCount = 0
#define DYNAFUSE_OP(ID, NAME) +1
#include "dynafuse/Graph/Ops.def"
    ;

/// The op's name as the text IR spells it.
const std::string &opName(Op op);
/// The op named `name`, or nullopt when no op has that name.
std::optional<Op> findOp(std::string_view name);
/// op as an index into per-op arrays.
constexpr size_t opIndex(Op op) { return static_cast<size_t>(op); }

} // namespace dynafuse

#endif

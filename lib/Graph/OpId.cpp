//===- OpId.cpp - Op names and their lookup -------------------------------===//
//
// The two directions between an Op and its name, both from Ops.def.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpId.h"

#include <array>
#include <unordered_map>

namespace dynafuse {
namespace {

const std::array<std::string, opCount> &names() {
  static const std::array<std::string, opCount> table = {
#define DYNAFUSE_OP(ID, NAME) NAME,
#include "dynafuse/Graph/Ops.def"
  };
  return table;
}

} // namespace

const std::string &opName(Op op) { return names().at(opIndex(op)); }

std::optional<Op> findOp(std::string_view name) {
  static const std::unordered_map<std::string_view, Op> byName = [] {
    std::unordered_map<std::string_view, Op> map;
    for (size_t i = 0; i < opCount; ++i)
      map.emplace(names()[i], static_cast<Op>(i));
    return map;
  }();
  auto found = byName.find(name);
  if (found == byName.end())
    return std::nullopt;
  return found->second;
}

} // namespace dynafuse

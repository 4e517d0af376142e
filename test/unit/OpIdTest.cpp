//===- OpIdTest.cpp - The one list of graph ops ---------------------------===//
//
// Ops.def and the facets keyed by its ops stay in step: every op has one
// registry entry and a name that maps back to it, every pointwise op a
// lowering rule, every composite op a decomposition, and every other op
// the facet its kind needs.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Graph/OpId.h"
#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Graph/ViewRules.h"
#include "dynafuse/Lowering/PointwiseRules.h"

#include <gtest/gtest.h>

#include <set>

using namespace dynafuse;

namespace {

std::vector<Op> everyOp() {
  std::vector<Op> ops;
  for (size_t i = 0; i < opCount; ++i)
    ops.push_back(static_cast<Op>(i));
  return ops;
}

} // namespace

TEST(OpId, NamesMapBothWays) {
  std::set<std::string> names;
  for (Op op : everyOp()) {
    const std::string &name = opName(op);
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << name << " is listed twice";
    ASSERT_TRUE(findOp(name).has_value()) << name;
    EXPECT_EQ(*findOp(name), op) << name;
  }
  EXPECT_FALSE(findOp("frobnicate").has_value());
  EXPECT_FALSE(findOp("").has_value());
  EXPECT_FALSE(findOp("Add").has_value()); // names are case-sensitive
}

TEST(OpId, EveryOpHasOneRegistryEntry) {
  for (Op op : everyOp()) {
    const OpInfo *info = lookupOp(op);
    ASSERT_NE(info, nullptr) << opName(op) << " has no registry entry";
    EXPECT_EQ(info->op, op) << opName(op);
  }
  std::vector<std::string> registered = registeredOpNames();
  EXPECT_EQ(registered.size(), opCount);
  EXPECT_EQ(std::set<std::string>(registered.begin(), registered.end()).size(),
            opCount);
}

TEST(OpId, EveryOpHasTheFacetsOfItsKind) {
  for (Op op : everyOp()) {
    const OpInfo &info = *lookupOp(op);
    SCOPED_TRACE(opName(op));
    switch (info.kind) {
    case OpKind::Pointwise:
      EXPECT_NE(findPointwiseRule(op), nullptr) << "no lowering rule";
      EXPECT_FALSE(info.infer) << "pointwise types come from the type rule";
      break;
    case OpKind::Composite:
      EXPECT_TRUE(info.decompose) << "no decomposition";
      break;
    case OpKind::View:
      EXPECT_TRUE(info.view) << "no view rule";
      EXPECT_TRUE(info.infer) << "no shape rule";
      break;
    case OpKind::Reduction:
    case OpKind::Extern:
      EXPECT_TRUE(info.infer) << "no shape rule";
      EXPECT_EQ(findPointwiseRule(op), nullptr);
      break;
    }
  }
}

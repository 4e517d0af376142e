//===- ReductionOps.cpp - Reductions of the graph IR ----------------------===//
#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
void addReductionOps(std::vector<OpInfo> &table) {}
} // namespace dynafuse

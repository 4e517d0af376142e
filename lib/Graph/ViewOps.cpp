//===- ViewOps.cpp - View ops of the graph IR ---------------------------===//
#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
void addViewOps(std::vector<OpInfo> &table) {}
} // namespace dynafuse

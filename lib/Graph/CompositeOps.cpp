//===- CompositeOps.cpp - Composite ops of the graph IR ---------------------------===//
#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
void addCompositeOps(std::vector<OpInfo> &table) {}
} // namespace dynafuse

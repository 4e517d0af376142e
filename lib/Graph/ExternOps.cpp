//===- ExternOps.cpp - Extern ops of the graph IR ---------------------------===//
#include "dynafuse/Graph/OpRegistry.h"

namespace dynafuse {
void addExternOps(std::vector<OpInfo> &table) {}
} // namespace dynafuse

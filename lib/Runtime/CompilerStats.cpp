//===- CompilerStats.cpp - The process's counters -------------------------===//
#include "dynafuse/Runtime/CompilerStats.h"

namespace dynafuse {

CompilerStats &compilerStats() {
  static CompilerStats stats;
  return stats;
}

} // namespace dynafuse

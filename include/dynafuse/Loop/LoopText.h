//===- LoopText.h - Printing, parsing and verifying loop IR -----*- C++ -*-===//
//
// The .loop text form: an optional module (the program) followed by kernels.
//
//   module @f[s0](%x: f32[s0, 8], %w: f32[8]) {
//     %buf0 = alloc f32[s0, 8]
//     call @f_k0(%x, %w, %buf0)
//     return %buf0
//   }
//
//   kernel @f_k0[s0](%x: f32[s0, 8], %w: f32[8], %out: f32[s0, 8]) {
//     for i0 in 0..s0 {
//       for i1 in 0..8 {
//         %0 = load %x[i0, i1] : f32
//         %1 = load %w[i1] : f32
//         %2 = mul %0, %1 : f32
//         store %out[i0, i1], %2
//       }
//     }
//   }
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOOP_LOOPTEXT_H
#define DYNAFUSE_LOOP_LOOPTEXT_H

#include "dynafuse/Loop/Kernel.h"

#include <string>

namespace dynafuse {

std::string printKernel(const Kernel &kernel);
std::string printLoopModule(const LoopModule &module);
/// One program step as it appears in the module text.
std::string stepStr(const ProgramStep &step);

/// Throws Error with line:column on malformed or invalid text.
LoopModule parseLoopModule(const std::string &text,
                           const std::string &fileName = "");

void verifyKernel(const Kernel &kernel);
/// Verifies every kernel and the program's calls.
void verifyLoopModule(const LoopModule &module);

} // namespace dynafuse

#endif

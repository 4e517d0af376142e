//===- HalfFloat.h - f16 and bf16 conversions -------------------*- C++ -*-===//
//
// Bit-exact conversions between f32 and the 16-bit storage types (round to
// nearest even, NaN preserved). The interpreter uses them directly and the
// LLVM backend calls them from generated code (Debian 12's libgcc lacks
// __truncsfbf2, and __extendhfsf2 is slow without F16C).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_HALFFLOAT_H
#define DYNAFUSE_SUPPORT_HALFFLOAT_H

#include <cstdint>

extern "C" {
float dynafuse_f16_to_f32(uint16_t bits);
uint16_t dynafuse_f32_to_f16(float value);
float dynafuse_bf16_to_f32(uint16_t bits);
uint16_t dynafuse_f32_to_bf16(float value);
}

#endif

//===- HalfFloat.cpp - f16 and bf16 conversions ---------------------------===//
#include "dynafuse/Support/HalfFloat.h"

#include <cmath>
#include <cstring>

namespace {
uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
float floatOf(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}
} // namespace

extern "C" float dynafuse_f16_to_f32(uint16_t half) {
  uint32_t sign = uint32_t(half & 0x8000) << 16;
  uint32_t exponent = (half >> 10) & 0x1f;
  uint32_t mantissa = half & 0x3ff;
  if (exponent == 0x1f)
    return floatOf(sign | 0x7f800000 | (mantissa << 13));
  if (exponent != 0)
    return floatOf(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24.
  float magnitude = std::ldexp(float(mantissa), -24);
  return sign ? -magnitude : magnitude;
}

extern "C" uint16_t dynafuse_f32_to_f16(float value) {
  uint32_t bits = bitsOf(value);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  uint32_t absBits = bits & 0x7fffffff;
  if (absBits > 0x7f800000)
    return sign | 0x7e00 | uint16_t((absBits >> 13) & 0x3ff);
  if (absBits >= 0x477ff000) // Rounds to >= 65520: infinity.
    return sign | 0x7c00;
  if (absBits < 0x38800000) {
    // Subnormal half: round |value| * 2^24 to nearest even.
    float scaled = std::fabs(value) * 16777216.0f;
    return sign | uint16_t(std::nearbyint(scaled));
  }
  uint32_t rounded = absBits + 0xfff + ((absBits >> 13) & 1);
  return sign | uint16_t((rounded - 0x38000000) >> 13);
}

extern "C" float dynafuse_bf16_to_f32(uint16_t bits) {
  return floatOf(uint32_t(bits) << 16);
}

extern "C" uint16_t dynafuse_f32_to_bf16(float value) {
  uint32_t bits = bitsOf(value);
  if ((bits & 0x7fffffff) > 0x7f800000)
    return uint16_t((bits >> 16) | 0x40);
  uint32_t rounded = bits + 0x7fff + ((bits >> 16) & 1);
  return uint16_t(rounded >> 16);
}

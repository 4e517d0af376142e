//===- TorchTypes.h - Conversions between Dynafuse's and ATen's types -*- C++
//-*-===//
//
// Private to the files of the torch bridge (the only ones compiled against
// PyTorch's headers): dtype conversions and the allocator every tensor
// Dynafuse creates on the CPU comes from.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_TORCHTYPES_H
#define DYNAFUSE_CAPTURE_TORCHTYPES_H

#include "dynafuse/Graph/DType.h"

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>

#include <optional>

namespace dynafuse {

inline std::optional<DType> fromScalarType(at::ScalarType type) {
  switch (type) {
  case at::kBool:
    return DType::Bool;
  case at::kInt:
    return DType::I32;
  case at::kLong:
    return DType::I64;
  case at::kHalf:
    return DType::F16;
  case at::kBFloat16:
    return DType::BF16;
  case at::kFloat:
    return DType::F32;
  case at::kDouble:
    return DType::F64;
  default:
    return std::nullopt;
  }
}

inline at::ScalarType toScalarType(DType type) {
  switch (type) {
  case DType::Bool:
    return at::kBool;
  case DType::I32:
    return at::kInt;
  case DType::I64:
    return at::kLong;
  case DType::F16:
    return at::kHalf;
  case DType::BF16:
    return at::kBFloat16;
  case DType::F32:
    return at::kFloat;
  case DType::F64:
    return at::kDouble;
  }
  return at::kFloat;
}

/// The caching allocator as a c10::Allocator (TorchAllocators.cpp), or
/// null with Options::cachingAllocator off.
c10::Allocator *poolAllocator();

} // namespace dynafuse

#endif

//===- DType.h - Element types of tensors and scalars -----------*- C++ -*-===//
//
// The element types Dynafuse knows, their text names (bool, i32, i64, f16,
// bf16, f32, f64), sizes, and PyTorch's promotion lattice. f16 and bf16 are
// storage types: computation on them happens in f32.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_GRAPH_DTYPE_H
#define DYNAFUSE_GRAPH_DTYPE_H

#include <cstddef>
#include <optional>
#include <string>

namespace dynafuse {

enum class DType { Bool, I32, I64, F16, BF16, F32, F64 };

const char *dtypeName(DType type);
std::optional<DType> parseDType(const std::string &name);
size_t dtypeSize(DType type);
bool isFloating(DType type);
/// Integral including bool.
bool isIntegral(DType type);
/// PyTorch's promote_types for two dtypes.
DType promoteTypes(DType lhs, DType rhs);
/// The type arithmetic happens in: f16 and bf16 compute in f32.
DType computeType(DType type);
/// The machine epsilon of the type `type` computes in (double for f64, float
/// for f32, f16 and bf16): ATen's default eps of rms_norm, forward and
/// backward.
double computeEpsilon(DType type);

/// The three promotion categories of PyTorch: bool < integer < floating.
int dtypeCategory(DType type);

} // namespace dynafuse

#endif

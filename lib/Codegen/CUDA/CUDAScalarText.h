//===- CUDAScalarText.h - Scalar types, values, ops as CUDA C ---*- C++ -*-===//
//
// The CUDA C text of scalar things, free of any kernel state: C types of
// loop-IR dtypes, literals, casts, unary and binary operations and reduce
// combiners. Values are f32 for f16/bf16 storage; integer arithmetic wraps
// and division by zero gives 0, as in Loop/ScalarSemantics.cpp (the helpers
// named df_* are in the prelude, CUDAPrelude.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CODEGEN_CUDA_CUDASCALARTEXT_H
#define DYNAFUSE_CODEGEN_CUDA_CUDASCALARTEXT_H

#include "dynafuse/Loop/ScalarSemantics.h"

#include <string>

namespace dynafuse {
namespace cudatext {

/// The C type a value of `type` is computed in (f32 for f16/bf16).
const char *valueType(DType type);
/// Accumulator type of a reduce: bool does not shuffle, so int.
const char *accType(DType type);
/// The C type of a buffer element of `type`.
const char *storageType(DType type);
std::string intLiteral(int64_t value);
std::string literal(DType type, ScalarValue value);
/// The result of 64-bit integer arithmetic `text` as a value of `type`.
std::string wrapInt(DType type, const std::string &text);
/// A loop-IR name as a C identifier.
std::string sanitize(const std::string &name);

std::string cast(DType from, DType to, const std::string &x);
std::string unary(ScalarOp op, DType type, const std::string &x);
std::string binary(ScalarOp op, DType type, const std::string &a,
                   const std::string &b);
/// The combiner of a non-arg reduce as an expression of a and b.
std::string combiner(ReduceKind kind, DType type, const std::string &a,
                     const std::string &b);

} // namespace cudatext
} // namespace dynafuse

#endif

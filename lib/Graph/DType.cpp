//===- DType.cpp - Element types of tensors and scalars -------------------===//
#include "dynafuse/Graph/DType.h"

namespace dynafuse {

namespace {
struct DTypeInfo {
  DType type;
  const char *name;
  size_t size;
};
const DTypeInfo dtypeTable[] = {
    {DType::Bool, "bool", 1}, {DType::I32, "i32", 4},   {DType::I64, "i64", 8},
    {DType::F16, "f16", 2},   {DType::BF16, "bf16", 2}, {DType::F32, "f32", 4},
    {DType::F64, "f64", 8},
};
} // namespace

const char *dtypeName(DType type) {
  return dtypeTable[static_cast<int>(type)].name;
}

std::optional<DType> parseDType(const std::string &name) {
  for (const DTypeInfo &info : dtypeTable)
    if (name == info.name)
      return info.type;
  return std::nullopt;
}

size_t dtypeSize(DType type) { return dtypeTable[static_cast<int>(type)].size; }

bool isFloating(DType type) {
  return type == DType::F16 || type == DType::BF16 || type == DType::F32 ||
         type == DType::F64;
}

bool isIntegral(DType type) { return !isFloating(type); }

int dtypeCategory(DType type) {
  if (type == DType::Bool)
    return 0;
  return isFloating(type) ? 2 : 1;
}

DType promoteTypes(DType lhs, DType rhs) {
  if (lhs == rhs)
    return lhs;
  if ((lhs == DType::F16 && rhs == DType::BF16) ||
      (lhs == DType::BF16 && rhs == DType::F16))
    return DType::F32;
  if (dtypeCategory(lhs) != dtypeCategory(rhs))
    return dtypeCategory(lhs) > dtypeCategory(rhs) ? lhs : rhs;
  return static_cast<int>(lhs) > static_cast<int>(rhs) ? lhs : rhs;
}

DType computeType(DType type) {
  if (type == DType::F16 || type == DType::BF16)
    return DType::F32;
  return type;
}

double computeEpsilon(DType type) {
  return type == DType::F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
}

} // namespace dynafuse

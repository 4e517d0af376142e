//===- ElementCompare.cpp - When two backends' elements agree -------------===//
#include "ElementCompare.h"

#include <cmath>

namespace dynafuse::tools {

bool elementsClose(DType type, ScalarValue want, ScalarValue got, double rtol,
                   double atol) {
  if (!isFloating(type))
    return want.i == got.i;
  if (std::isnan(want.f) || std::isnan(got.f))
    return std::isnan(want.f) && std::isnan(got.f);
  if (want.f == got.f)
    return true;
  if (type != DType::F32 && type != DType::F64)
    rtol *= 100;
  return std::fabs(want.f - got.f) <= atol + rtol * std::fabs(want.f);
}

} // namespace dynafuse::tools

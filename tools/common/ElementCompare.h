//===- ElementCompare.h - When two backends' elements agree -----*- C++ -*-===//
//
// The comparison dynafuse-run and dynafuse-diff apply to every element of
// the buffers two backends produced.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_TOOLS_ELEMENTCOMPARE_H
#define DYNAFUSE_TOOLS_ELEMENTCOMPARE_H

#include "dynafuse/Loop/ScalarSemantics.h"

namespace dynafuse::tools {

/// Integers and bools exactly; floats within atol + rtol * |want| (f16 and
/// bf16, which round at about 1e-3 and 1e-2, within 100 times rtol, so
/// rtol 0 is exact for every type), NaN equal to NaN.
bool elementsClose(DType type, ScalarValue want, ScalarValue got, double rtol,
                   double atol);

} // namespace dynafuse::tools

#endif // DYNAFUSE_TOOLS_ELEMENTCOMPARE_H

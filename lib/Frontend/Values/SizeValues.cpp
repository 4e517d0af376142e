//===- SizeValues.cpp - Symbolic sizes as Python ints ---------------------===//
//
// A SymInt is an int the code computed from tensor sizes that vary between
// calls (ShapeEnv.h). Its truth is decided by the shape environment (and
// guarded); returned or live at a break it is rebuilt from the inputs'
// sizes on each run.
//
//===----------------------------------------------------------------------===//
#include "ValueHandlers.h"

#include "Tracer/BytecodeTracer.h"

namespace dynafuse {
namespace capture {

SizeValues::SizeValues(BytecodeTracer &tracer)
    : ValueHandler(tracer, "a symbolic size") {}

bool SizeValues::truth(const VarPtr &value) {
  return tracer.symbolic.decide(Py_NE, value->size, 0);
}

OutputSpec SizeValues::output(const VarPtr &value, const ItemSpec &) {
  OutputSpec spec;
  spec.kind = OutputSpec::Kind::Size;
  spec.size = tracer.symbolic.env.canonical(value->size);
  return spec;
}

OutputSpec SizeValues::liveState(const VarPtr &value,
                                 const ItemSpec &itemSpec) {
  return output(value, itemSpec);
}

} // namespace capture
} // namespace dynafuse

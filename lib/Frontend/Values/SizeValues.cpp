//===- SizeValues.cpp - Symbolic sizes as Python ints ---------------------===//
//
// A SymInt is an int the code computed from tensor sizes that vary between
// calls (ShapeEnv.h). Its truth is decided by the shape environment (and
// guarded); returned or live at a break it is rebuilt from the inputs'
// sizes on each run. Its type is exactly int, as eager's sizes are.
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

VarPtr SizeValues::type(const VarPtr &) {
  return classVar(reinterpret_cast<PyObject *>(&PyLong_Type));
}

VarPtr SizeValues::isInstance(const VarPtr &, PyObject *classes) {
  int result =
      PyObject_IsSubclass(reinterpret_cast<PyObject *>(&PyLong_Type), classes);
  if (result < 0) {
    PyErr_Clear();
    tracer.unsupported("isinstance raised");
  }
  return tracer.constant(result ? Py_True : Py_False);
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

//===- CallableValues.cpp - Functions and bound methods on the trace ------===//
//
// Functions made during capture (lambdas, comprehensions, closures), a
// tensor's methods (x.view before the call) and functions bound to a traced
// self. They are truthy and callable; at a break a method is handed to the
// resume function as its self's attribute or as (function, self), while a
// function made during capture cannot be (its closure cells are not).
// The NULL a call pushes below its callable is handed on as NULL.
//
//===----------------------------------------------------------------------===//
#include "ValueHandlers.h"

#include "Tracer/BytecodeTracer.h"

namespace dynafuse {
namespace capture {

CallableValues::CallableValues(BytecodeTracer &tracer, std::string description)
    : ValueHandler(tracer, std::move(description)) {}

bool CallableValues::truth(const VarPtr &) { return true; }

int CallableValues::callable(const VarPtr &) { return 1; }

TensorMethodValues::TensorMethodValues(BytecodeTracer &tracer)
    : CallableValues(tracer, "a tensor method") {}

OutputSpec TensorMethodValues::liveState(const VarPtr &value,
                                         const ItemSpec &itemSpec) {
  OutputSpec spec;
  spec.kind = OutputSpec::Kind::Attribute;
  spec.items.push_back(itemSpec(value->self));
  spec.keys.push_back(value->method);
  return spec;
}

OutputSpec TensorMethodValues::output(const VarPtr &value,
                                      const ItemSpec &itemSpec) {
  return liveState(value, itemSpec);
}

BoundMethodValues::BoundMethodValues(BytecodeTracer &tracer)
    : CallableValues(tracer, "a bound method") {}

OutputSpec BoundMethodValues::output(const VarPtr &value,
                                     const ItemSpec &itemSpec) {
  try {
    return liveState(value, itemSpec);
  } catch (const CannotResume &why) { // not an exception outputs catch
    refuseBecause("returning a bound method: " + why.why);
  }
}

OutputSpec BoundMethodValues::liveState(const VarPtr &value,
                                        const ItemSpec &itemSpec) {
  OutputSpec spec;
  if (!value->function->object) { // dict.items, list.append, ...: by name
    const std::string &method = value->function->method;
    if (method.rfind("object.", 0) == 0) // a base class's, past overrides
      throw CannotResume{"a builtin method of an object made during capture "
                         "is live"};
    spec.kind = OutputSpec::Kind::Attribute;
    spec.items.push_back(itemSpec(value->self));
    spec.keys.push_back(method.substr(method.find('.') + 1));
    return spec;
  }
  spec.kind = OutputSpec::Kind::Method;
  spec.items.push_back(itemSpec(value->function));
  spec.items.push_back(itemSpec(value->self));
  return spec;
}

NullValues::NullValues(BytecodeTracer &tracer)
    : ValueHandler(tracer, "a NULL") {}

OutputSpec NullValues::liveState(const VarPtr &, const ItemSpec &) {
  OutputSpec spec;
  spec.kind = OutputSpec::Kind::Null;
  return spec;
}

} // namespace capture
} // namespace dynafuse

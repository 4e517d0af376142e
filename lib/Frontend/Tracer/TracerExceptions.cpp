//===- TracerExceptions.cpp - Exceptions raised and caught in traced code -===//
//
// An exception the traced code raises where capture knows it is raised
// (RaisedInCapture: a `raise` of a builtin exception, a missing key of a
// dict whose keys capture knows) goes to the handler the code object's
// exception table names for the raising instruction, as the interpreter
// does: the stack cut to the handler's depth, the exception object pushed
// and the handler's bytecode traced (PUSH_EXC_INFO, CHECK_EXC_MATCH,
// POP_EXCEPT, RERAISE). What the code did before the raise stays done, as
// in Python. A raise no handler of the frame covers leaves the inlined
// call (CallInliner restores the caller) and is looked up again there;
// past the compiled frame it is a graph break (eager raises it), as is one
// whose innermost handler only cleans up.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

namespace dynafuse {
namespace capture {

int BytecodeTracer::raiseToHandler(size_t pc, const RaisedInCapture &raised,
                                   bool find) {
  int offset = current.instructions[pc].offset;
  for (const ExceptionTableEntry &entry : parseExceptionTable(current.code)) {
    if (offset < entry.start || offset >= entry.end)
      continue;
    // Handlers that only clean up and re-raise (a with block's exit, the
    // exception-state restore) are left to eager: the raise is a plain
    // refusal from here on, which no outer handler catches (one would
    // continue past a cleanup that never ran: a with block's grad mode).
    auto target = current.indexOfOffset.find(entry.target);
    if (!raised.exception || target == current.indexOfOffset.end() ||
        handlerAt(size_t(target->second)) != Handler::User) {
      if (find)
        return -1;
      throw Unsupported(raised.bareMessage(), raised.location());
    }
    if (find)
      return target->second;
    if (current.stack.size() < size_t(entry.depth))
      unsupported("an exception handler deeper than the stack");
    current.stack.resize(size_t(entry.depth));
    if (entry.lasti)
      push(integerConstant(current.instructions[pc].start));
    // The exception object itself (its type and message: what handlers
    // match, print and re-raise).
    PyRef exception = raised.exception;
    if (!exception)
      throw raised;
    VarPtr var = makeVar(Var::Kind::Object);
    var->object = exception;
    var->method = "exception";
    push(var);
    return target->second;
  }
  if (find)
    return -1;
  throw raised;
}

int BytecodeTracer::exceptionStep(const Instruction &in) {
  switch (in.opcode) {
  case PUSH_EXC_INFO: {
    // The exception being handled before this one (none: capture only
    // enters handlers of exceptions it raised) under the new one.
    VarPtr exception = pop();
    push(constant(Py_None));
    push(exception);
    return -1;
  }
  case POP_EXCEPT:
    pop();
    return -1;
  case CHECK_EXC_MATCH: {
    VarPtr classes = pop();
    VarPtr exception = peek(1);
    std::vector<VarPtr> items = classes->kind == Var::Kind::Tuple
                                    ? classes->items
                                    : std::vector<VarPtr>{classes};
    bool match = false;
    for (const VarPtr &cls : items) {
      if (cls->kind != Var::Kind::Object || !cls->object ||
          !PyExceptionClass_Check(cls->object.get()))
        unsupported("except clause naming something other than a class");
      match |= PyErr_GivenExceptionMatches(exception->object.get(),
                                           cls->object.get()) != 0;
    }
    push(constant(match ? Py_True : Py_False));
    return -1;
  }
  case RERAISE: {
    VarPtr exception = pop();
    if (exception->kind != Var::Kind::Object ||
        exception->method != "exception" || !exception->object)
      unsupported("re-raise of an exception capture did not make");
    raiseException(exception);
  }
  default:
    return -2;
  }
}

} // namespace capture
} // namespace dynafuse

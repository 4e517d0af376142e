//===- TracerBranches.cpp - Jumps, branches, loops and exception handlers -===//
//
// Control flow of the bytecode tracer. Branches are decided at capture time
// (their conditions are constants, or facts guarded about the inputs);
// loops unroll. The decoder has already resolved every jump to an absolute
// offset (Bytecode.h), so what differs between interpreters here is only
// which opcodes branch, and how FOR_ITER leaves its loop.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

namespace dynafuse {
namespace capture {

namespace {

/// CALL_INTRINSIC_1's argument turning StopIteration into RuntimeError in
/// generators (3.12 and 3.13: Include/internal/pycore_intrinsics.h).
constexpr int kIntrinsicStopIterationError = 3;

} // namespace

/// Exception handlers run only when an exception is raised, and capture
/// never raises one: it follows the normal path, and what it cannot
/// interpret is a break. An exception raised by the compiled graph makes
/// that call rerun eagerly (the handlers run there). A graph break inside a
/// try block does not resume (its handler would not see an exception the
/// break instruction raises); handlers that only restore state and
/// re-raise are transparent (handlerOnlyCleansUp).
void BytecodeTracer::checkHandlers() {
  for (const ExceptionTableEntry &entry : parseExceptionTable(current.code))
    if (!current.indexOfOffset.count(entry.target))
      unsupported("exception handler at an unknown offset", firstLine());
}

/// Handlers that only restore state and re-raise:
///  - a with block's cleanup (PUSH_EXC_INFO, WITH_EXCEPT_START: it restores
///    grad mode and re-raises);
///  - a straight run of stack and local shuffles ending in RERAISE: the
///    exception-state restore after every handler (COPY, POP_EXCEPT), 3.12's
///    inlined comprehensions restoring their hidden locals (SWAP, POP_TOP,
///    STORE_FAST) and generator expressions turning StopIteration into
///    RuntimeError (CALL_INTRINSIC_1).
BytecodeTracer::Handler BytecodeTracer::handlerAt(size_t at) const {
  auto opcodeAt = [&](size_t i) {
    return i < current.instructions.size() ? current.instructions[i].opcode
                                           : -1;
  };
  if (opcodeAt(at) == PUSH_EXC_INFO && opcodeAt(at + 1) == WITH_EXCEPT_START)
    return Handler::WithCleanup;
  for (size_t i = at; i < current.instructions.size(); ++i) {
    const Instruction &in = current.instructions[i];
    switch (in.opcode) {
    case RERAISE:
      return Handler::Reraise;
    case COPY:
    case POP_EXCEPT:
    case SWAP:
    case POP_TOP:
    case STORE_FAST:
      continue;
#ifdef CALL_INTRINSIC_1
    case CALL_INTRINSIC_1:
      if (in.arg == kIntrinsicStopIterationError)
        continue;
      return Handler::User;
#endif
    default:
      return Handler::User;
    }
  }
  return Handler::User;
}

int BytecodeTracer::jumpTarget(int offset) {
  auto found = current.indexOfOffset.find(offset);
  if (found == current.indexOfOffset.end())
    unsupported("jump to an unknown offset");
  return found->second;
}

/// FOR_ITER over an unrolled iterator. When it is exhausted, 3.11 pops it
/// and jumps past the loop; 3.12 and 3.13 jump to the END_FOR that closes
/// the loop, which (with 3.13's POP_TOP after it) pops the iterator and the
/// value FOR_ITER would have pushed: a placeholder stands in for it.
int BytecodeTracer::forIter(const Instruction &in) {
  VarPtr iterator = peek(1);
  if (iterator->kind != Var::Kind::Iterator)
    // A real iterator (a resume function's argument): its items are not
    // known to the capture.
    unsupported("a loop over an iterator made before the frame resumed");
  if (iterator->position < iterator->items.size()) {
    willMutate(iterator);
    push(iterator->items[iterator->position++]);
    return -1;
  }
#ifdef END_FOR
  push(makeVar(Var::Kind::Null));
#else
  pop();
#endif
  return jumpTarget(in.target);
}

bool BytecodeTracer::truthOf(const VarPtr &condition, bool noneTest) {
  if (noneTest) // `x is None`, `x is not None` on any value
    return condition->kind != Var::Kind::Constant ||
           condition->object.get() != Py_None;
  return values.of(condition).truth(condition);
}

int BytecodeTracer::conditionalJump(const Instruction &in) {
  Branch branch = branchOf(in.opcode);
  if (branch == Branch::IfFalseOrPop || branch == Branch::IfTrueOrPop) {
    bool truth = truthOf(peek(1), false);
    if (truth == (branch == Branch::IfTrueOrPop))
      return jumpTarget(in.target);
    pop();
    return -1;
  }
  VarPtr condition = pop();
  bool noneTest = branch == Branch::PopIfNone || branch == Branch::PopIfNotNone;
  bool value = truthOf(condition, noneTest);
  bool jumpWhen = branch == Branch::PopIfTrue || branch == Branch::PopIfNotNone;
  return value == jumpWhen ? jumpTarget(in.target) : -1;
}

} // namespace capture
} // namespace dynafuse

//===- TracerResume.cpp - Graph breaks the frame resumes after ------------===//
//
// Decision 43. The frame's own instructions run one at a time; when one cannot
// be interpreted (here, or anywhere in a call it makes), what it changed is
// undone and the capture ends before it: the graph computes the frame's state
// at that instruction (the live stack and locals), and the ResumePoint says how
// a run rebuilds that state, runs the instruction natively and continues in a
// resume function. Breaks that cannot resume (inside a loop over an iterator,
// in a function that makes closure cells, at an instruction that touches the
// frame's slots) throw as before: the frame then runs eagerly for calls under
// the guards seen so far.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"
#include "Resume/LocalLiveness.h"

#include <functional>

namespace dynafuse {
namespace capture {

namespace {

bool usesArgumentlessSuper(PyCodeObject *code) {
  PyRef names = PyRef::steal(PyCode_GetFreevars(code));
  for (Py_ssize_t i = 0; names && i < PyTuple_GET_SIZE(names.get()); ++i)
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(names.get(), i),
                                         "__class__") == 0)
      return true;
  PyErr_Clear();
  return false;
}

} // namespace

bool BytecodeTracer::needsItsCallersFrame(const VarPtr &callee) const {
  PyObject *object = callee->object.get();
  if (!object)
    return false;
  // super() without arguments, locals(), eval() and friends read the frame
  // that calls them: a stub's frame is not the user's.
  for (const char *name :
       {"super", "locals", "vars", "dir", "eval", "exec", "globals"})
    if (PyDict_GetItemString(frame->builtins, name) == object)
      return true;
  return object == PySys_GetObject("_getframe");
}

void BytecodeTracer::willMutate(const VarPtr &var) {
  journal.emplace_back(var, *var);
}

void BytecodeTracer::willUpdateInputs() {
  if (!inputsBefore)
    inputsBefore = std::make_unique<InputTable>(inputs);
}

int BytecodeTracer::stepOrBreak(size_t pc) {
  const Instruction &instruction = current.instructions[pc];
  std::vector<VarPtr> stackBefore = current.stack;
  PyRef kwNamesBefore = current.kwNames;
  bool gradModeBefore = gradMode;
  std::vector<bool> gradModeStackBefore = gradModeStack;
  AutocastState autocastBefore = autocastCasts.state;
  std::vector<AutocastState> autocastStackBefore = autocastCasts.stack;
  journal.clear();
  aliasJournal.clear();
  inputsBefore.reset();
  size_t storesBefore = pendingStores.size();
  try {
    return step(instruction);
  } catch (Unsupported &error) {
    // A raise the frame's own handler catches goes there (runBody), with
    // what the code did before it kept, as in Python.
    if (auto *raised = dynamic_cast<RaisedInCapture *>(&error))
      if (raiseToHandler(pc, *raised, true) >= 0)
        throw;
    if (!allowResume)
      throw;
    pendingStores.resize(storesBefore);
    for (auto entry = journal.rbegin(); entry != journal.rend(); ++entry)
      *entry->first = entry->second;
    journal.clear();
    if (inputsBefore)
      inputs = std::move(*inputsBefore);
    for (auto entry = aliasJournal.rbegin(); entry != aliasJournal.rend();
         ++entry)
      *entry->first = entry->second;
    aliasJournal.clear();
    current.stack = std::move(stackBefore);
    current.kwNames = kwNamesBefore;
    current.currentLine = instruction.line;
    gradMode = gradModeBefore;
    gradModeStack = std::move(gradModeStackBefore);
    autocastCasts.state = autocastBefore;
    autocastCasts.stack = std::move(autocastStackBefore);
    breakAt(pc, error);
    return kBroke;
  }
}

OutputSpec BytecodeTracer::stateOf(const VarPtr &var) {
  return values.of(var).liveState(
      var, [&](const VarPtr &item) { return stateOf(item); });
}

std::vector<int> BytecodeTracer::withExitSlots(const Instruction &in) {
  std::vector<int> exits;
  std::vector<ExceptionTableEntry> table = parseExceptionTable(current.code);
  int at = in.start >= 0 ? in.start : in.offset;
  // The handler of a with block is itself covered by the enclosing
  // block's entry: follow the chain outwards.
  for (int hop = 0; hop < 64; ++hop) {
    const ExceptionTableEntry *covering = nullptr;
    for (const ExceptionTableEntry &entry : table)
      if (at >= entry.start && at < entry.end)
        covering = &entry;
    if (!covering)
      return exits;
    auto found = current.indexOfOffset.find(covering->target);
    if (found == current.indexOfOffset.end())
      throw CannotResume{"an exception handler at an unknown offset"};
    Handler handler = handlerAt(size_t(found->second));
    if (handler == Handler::User)
      throw CannotResume{"it is inside a try block (its handler would not "
                         "see an exception the break raises)"};
    if (handler == Handler::WithCleanup)
      exits.push_back(covering->depth - 1);
    at = covering->target;
  }
  throw CannotResume{"exception handlers nest too deeply"};
}

void BytecodeTracer::breakAt(size_t pc, const Unsupported &error) {
  const Instruction &in = current.instructions[pc];
  try {
    if (auto refusal = resumeRefusal(current.code))
      throw CannotResume{*refusal};
    auto point = std::make_shared<ResumePoint>();
    point->reason = error.bareMessage();
    point->where = error.location();
    point->offset = in.start >= 0 ? in.start : in.offset;
    point->next = in.nextOffset;
    point->line = in.line;
    size_t inputCount = 0;
    Branch branch = branchOf(in.opcode);
    if (branch != Branch::None) {
      if (branch == Branch::PopIfNone || branch == Branch::PopIfNotNone)
        throw CannotResume{"a None test"};
      inputCount = 1;
      point->jumpTarget = in.target;
      point->jumpWhenTrue =
          branch == Branch::PopIfTrue || branch == Branch::IfTrueOrPop;
      point->keepOnJump =
          branch == Branch::IfFalseOrPop || branch == Branch::IfTrueOrPop;
    } else {
      if (in.opcode == CALL && current.stack.size() >= size_t(in.arg) + 2)
        for (size_t depth : {size_t(in.arg) + 1, size_t(in.arg) + 2})
          if (needsItsCallersFrame(peek(depth)))
            throw CannotResume{"the call needs its caller's frame"};
      point->instruction = breakInstructionOf(in, current.kwNames.get(),
                                              current.code->co_consts);
      if (!point->instruction)
        throw CannotResume{std::string("its instruction ") +
                           opcodeName(in.opcode) + " cannot run on its own"};
      inputCount = size_t(point->instruction->inputs);
    }
    if (current.stack.size() < inputCount)
      throw CannotResume{"stack underflow"};
    size_t deep = current.stack.size() - inputCount;
    point->withExits = withExitSlots(in);
    for (int slot : point->withExits) {
      if (slot < 0 || size_t(slot) >= deep)
        throw CannotResume{"a with block's exit is not on the stack"};
      const VarPtr &exit = current.stack[size_t(slot)];
      if (exit->kind != Var::Kind::Object || exit->method != "__exit__")
        throw CannotResume{"a with block over a context manager defined in "
                           "Python is open (only grad mode and autocast "
                           "blocks are re-entered)"};
    }
    bool mode = result.state.gradMode;
    emittedObjects.clear();
    for (size_t i = 0; i < current.stack.size(); ++i) {
      OutputSpec spec = stateOf(current.stack[i]);
      if (spec.kind == OutputSpec::Kind::EnteredContext)
        mode = spec.index == 1;
      if (i < deep)
        point->stack.push_back(std::move(spec));
      else
        point->inputs.push_back(std::move(spec));
    }
    if (mode != gradMode)
      throw CannotResume{"grad mode was changed other than by a with block"};
    if (!point->instruction &&
        point->inputs[0].kind == OutputSpec::Kind::Null)
      throw CannotResume{"a branch on NULL"};

    int locals = current.code->co_nlocals;
    std::vector<bool> live =
        liveLocals(current.instructions, current.indexOfOffset,
                   parseExceptionTable(current.code), locals)[pc];
    PyCodeObject *code = current.code;
    if (usesArgumentlessSuper(code) && locals > 0)
      live[0] = true; // super() reads the first argument without LOAD_FAST
    int arguments = code->co_argcount + code->co_kwonlyargcount +
                    ((code->co_flags & CO_VARARGS) ? 1 : 0) +
                    ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
    for (int slot = 0; slot < locals; ++slot) {
      if (!live[size_t(slot)])
        continue;
      const VarPtr &var = current.locals[size_t(slot)];
      OutputSpec spec;
      bool unbound = var ? var->kind == Var::Kind::Null
                         : slot >= arguments || !frame->localsplus[slot];
      if (unbound) {
        point->unboundLocals.push_back(slot);
        continue;
      }
      if (!var) {
        // Never read or written by the capture: the frame's own value.
        spec.kind = OutputSpec::Kind::Source;
        spec.index = guardBuilder.indexedSource(Source::Kind::Local, -1, slot);
      } else {
        spec = stateOf(var);
      }
      point->locals.emplace_back(slot, std::move(spec));
    }
    result.stores =
        storeEffects([&](const VarPtr &value) { return stateOf(value); });
    result.resume = std::move(point);
  } catch (const CannotResume &refusal) {
    Unsupported refused(error.bareMessage() +
                            " (the frame cannot resume after it: " +
                            refusal.why + ")",
                        error.location());
    throw refused;
  }
}

} // namespace capture
} // namespace dynafuse

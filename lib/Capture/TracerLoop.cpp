//===- TracerLoop.cpp - The bytecode loop: stack, jumps, return values ----===//
#include "BytecodeTracer.h"

namespace dynafuse {
namespace capture {

BytecodeTracer::BytecodeTracer(DynafuseFrame *frame,
                               const std::string &graphName)
    : frame(frame) {
  current.code = frame->code;
  current.globals = frame->globals;
  result.graph = std::make_unique<Graph>(graphName);
  current.fileName = PyUnicode_AsUTF8(current.code->co_filename);
  current.locals.resize(current.code->co_nlocalsplus);
  current.closure =
      frame->function ? PyFunction_GetClosure(frame->function) : nullptr;
}

CapturedFrame BytecodeTracer::run() {
  if (!defaultDtypeIsFloat32())
    unsupported("torch.get_default_dtype() other than float32", firstLine());
  if (autocastEnabled())
    unsupported("autocast is enabled", firstLine());
  result.gradMode = gradModeEnabled();
  gradMode = result.gradMode;
  result.result = outputOf(runBody());
  addWriteBacks();
  guardBuilder.moveInto(result.sources, result.guards);
  return std::move(result);
}

/// Exception handlers that only clean up after a with block (they restore
/// grad mode and re-raise) do not change what a run computes: an exception
/// from the graph propagates as it would from eager's block. Handlers of
/// try/except/finally would run user code on errors: refused.
void BytecodeTracer::requireOnlyWithCleanup() {
  for (const ExceptionTableEntry &entry : parseExceptionTable(current.code)) {
    auto found = current.indexOfOffset.find(entry.target);
    if (found == current.indexOfOffset.end())
      unsupported("exception handler at an unknown offset", firstLine());
    size_t at = size_t(found->second);
    auto opcodeAt = [&](size_t i) {
      return i < current.instructions.size() ? current.instructions[i].opcode
                                             : -1;
    };
    bool withCleanup =
        opcodeAt(at) == PUSH_EXC_INFO && opcodeAt(at + 1) == WITH_EXCEPT_START;
    bool reraise = opcodeAt(at) == COPY && opcodeAt(at + 1) == POP_EXCEPT &&
                   opcodeAt(at + 2) == RERAISE;
    if (!withCleanup && !reraise)
      unsupported("try/except/finally blocks", current.instructions[at].line);
  }
}

VarPtr BytecodeTracer::runBody() {
  current.instructions = decodeInstructions(current.code);
  current.indexOfOffset.clear();
  for (size_t i = 0; i < current.instructions.size(); ++i)
    current.indexOfOffset[current.instructions[i].start] = int(i);
  requireOnlyWithCleanup();
  for (size_t pc = 0; pc < current.instructions.size();) {
    if (++steps > 100000)
      unsupported("more than 100000 bytecode steps", current.currentLine);
    const Instruction &instruction = current.instructions[pc];
    current.currentLine = instruction.line;
    int next = step(instruction);
    if (next == kReturned)
      return returned;
    pc = next < 0 ? pc + 1 : size_t(next);
  }
  unsupported("fell off the end of the bytecode", current.currentLine);
}

void BytecodeTracer::unsupported(const std::string &what, int line) const {
  throw Unsupported(what, here(line));
}

void BytecodeTracer::unsupported(const std::string &what) const {
  unsupported(what, current.currentLine);
}

VarPtr BytecodeTracer::pop() {
  if (current.stack.empty())
    unsupported("stack underflow in bytecode");
  VarPtr top = current.stack.back();
  current.stack.pop_back();
  return top;
}

VarPtr BytecodeTracer::peek(size_t depth) {
  if (depth == 0 || depth > current.stack.size())
    unsupported("stack underflow in bytecode");
  return current.stack[current.stack.size() - depth];
}

int BytecodeTracer::step(const Instruction &in) {
  switch (in.opcode) {
  case NOP:
  case RESUME:
  case PRECALL:
  case COPY_FREE_VARS:
    return -1;
  case POP_TOP:
    pop();
    return -1;
  case PUSH_NULL:
    push(makeVar(Var::Kind::Null));
    return -1;
  case COPY:
    push(peek(size_t(in.arg)));
    return -1;
  case SWAP:
    std::swap(current.stack[current.stack.size() - 1],
              current.stack[current.stack.size() - size_t(in.arg)]);
    return -1;
  case LOAD_FAST:
    push(loadLocal(in.arg));
    return -1;
  case STORE_FAST:
    current.locals.at(size_t(in.arg)) = pop();
    return -1;
  case DELETE_FAST:
    // A Null var marks it deleted (an empty slot means "not read yet").
    current.locals.at(size_t(in.arg)) = makeVar(Var::Kind::Null);
    return -1;
  case LOAD_CONST:
    push(constant(PyTuple_GET_ITEM(current.code->co_consts, in.arg)));
    return -1;
  case LOAD_GLOBAL:
    if (in.arg & 1)
      push(makeVar(Var::Kind::Null));
    push(loadGlobal(PyTuple_GET_ITEM(current.code->co_names, in.arg >> 1)));
    return -1;
  case LOAD_DEREF:
    push(loadDeref(in.arg));
    return -1;
  case MAKE_CELL:
    current.locals.at(size_t(in.arg)) = makeCell(in.arg);
    return -1;
  case LOAD_CLOSURE: {
    VarPtr cell = cellAt(in.arg);
    if (!cell)
      unsupported("closure over a variable of an outer compiled function");
    push(cell);
    return -1;
  }
  case STORE_DEREF: {
    VarPtr cell = cellAt(in.arg);
    if (!cell)
      unsupported("assignment to a closure variable");
    cell->items.assign(1, pop());
    return -1;
  }
  case MAKE_FUNCTION:
    push(makeFunction(in.arg));
    return -1;
  case CONTAINS_OP: {
    VarPtr container = pop();
    VarPtr item = pop();
    push(containsOp(item, container, in.arg != 0));
    return -1;
  }
  case MAP_ADD: {
    VarPtr value = pop();
    VarPtr key = pop();
    VarPtr dict = peek(size_t(in.arg));
    if (dict->kind != Var::Kind::Dict)
      unsupported("dict comprehension into a non-dict");
    setDictItem(dict, key, value);
    return -1;
  }
  case RETURN_GENERATOR:
    push(constant(Py_None));
    return -1;
  case YIELD_VALUE:
    if (!current.yielded)
      unsupported("yield outside an inlined generator expression");
    current.yielded->push_back(pop());
    push(constant(Py_None));
    return -1;
  case LOAD_ATTR:
    push(loadAttr(pop(), PyTuple_GET_ITEM(current.code->co_names, in.arg)));
    return -1;
  case LOAD_METHOD: {
    VarPtr attr =
        loadAttr(pop(), PyTuple_GET_ITEM(current.code->co_names, in.arg));
    if (attr->kind == Var::Kind::BoundMethod) {
      push(attr->function);
      push(attr->self);
      return -1;
    }
    push(makeVar(Var::Kind::Null));
    push(attr);
    return -1;
  }
  case KW_NAMES:
    current.kwNames =
        PyRef::borrow(PyTuple_GET_ITEM(current.code->co_consts, in.arg));
    return -1;
  case CALL:
    call(in.arg);
    return -1;
  case BINARY_OP: {
    VarPtr rhs = pop();
    VarPtr lhs = pop();
    push(binaryOp(in.arg, lhs, rhs));
    return -1;
  }
  case COMPARE_OP: {
    VarPtr rhs = pop();
    VarPtr lhs = pop();
    push(compareOp(in.arg, lhs, rhs));
    return -1;
  }
  case UNARY_NEGATIVE:
    push(negate(pop()));
    return -1;
  case UNARY_NOT:
    push(logicalNot(pop()));
    return -1;
  case FORMAT_VALUE:
    push(formatValue(in.arg));
    return -1;
  case BUILD_STRING:
    push(buildString(in.arg));
    return -1;
  case UNARY_INVERT: {
    VarPtr operand = pop();
    if (operand->kind == Var::Kind::Constant)
      push(foldPython(PyNumber_Invert(operand->object.get())));
    else
      push(emit("bitwise_not", {operandOf(operand, "~")}));
    return -1;
  }
  case IS_OP: {
    VarPtr rhs = pop();
    VarPtr lhs = pop();
    push(isOp(lhs, rhs, in.arg != 0));
    return -1;
  }
  case BUILD_SLICE:
    push(buildSlice(in.arg));
    return -1;
  case BUILD_TUPLE:
    push(buildTuple(in.arg));
    return -1;
  case BUILD_LIST: {
    // Lists are values here: list mutation is not interpreted.
    VarPtr list = buildTuple(in.arg);
    list->isList = true;
    push(list);
    return -1;
  }
  case LIST_APPEND: {
    VarPtr item = pop();
    VarPtr list = peek(size_t(in.arg));
    if (list->kind != Var::Kind::Tuple)
      unsupported("list.append on a non-list");
    list->items.push_back(item);
    return -1;
  }
  case LIST_TO_TUPLE: {
    VarPtr tuple = makeVar(Var::Kind::Tuple);
    tuple->items = itemsOf(pop());
    push(tuple);
    return -1;
  }
  case BUILD_MAP:
    push(buildMap(in.arg));
    return -1;
  case BUILD_CONST_KEY_MAP:
    push(buildConstKeyMap(in.arg));
    return -1;
  case DICT_MERGE:
  case DICT_UPDATE: {
    VarPtr other = pop();
    mergeInto(peek(size_t(in.arg)), other);
    return -1;
  }
  case CALL_FUNCTION_EX:
    callWithUnpacking(in.arg & 1);
    return -1;
  case LIST_EXTEND: {
    VarPtr extra = pop();
    VarPtr list = peek(size_t(in.arg));
    if (list->kind != Var::Kind::Tuple)
      unsupported("list.extend on a non-list");
    for (const VarPtr &item : itemsOf(extra))
      list->items.push_back(item);
    return -1;
  }
  case UNPACK_SEQUENCE:
    unpack(pop(), in.arg);
    return -1;
  case STORE_ATTR: {
    VarPtr owner = pop();
    storeAttribute(owner, PyTuple_GET_ITEM(current.code->co_names, in.arg),
                   pop());
    return -1;
  }
  case BEFORE_WITH:
    enterWith(pop());
    return -1;
  case STORE_SUBSCR: {
    VarPtr index = pop();
    VarPtr container = pop();
    storeSubscript(container, index, pop());
    return -1;
  }
  case BINARY_SUBSCR: {
    VarPtr index = pop();
    push(subscript(pop(), index));
    return -1;
  }
  case RETURN_VALUE:
    returned = pop();
    return kReturned;
  case GET_ITER:
    push(iterate(pop()));
    return -1;
  case FOR_ITER: {
    VarPtr iterator = peek(1);
    if (iterator->position < iterator->items.size()) {
      push(iterator->items[iterator->position++]);
      return -1;
    }
    pop();
    return jumpTarget(in.nextOffset + 2 * in.arg);
  }
  case JUMP_BACKWARD:
  case JUMP_BACKWARD_NO_INTERRUPT:
    return jumpTarget(in.nextOffset - 2 * in.arg);
  case JUMP_FORWARD:
    return jumpTarget(in.nextOffset + 2 * in.arg);
  case POP_JUMP_FORWARD_IF_FALSE:
  case POP_JUMP_FORWARD_IF_TRUE:
  case POP_JUMP_FORWARD_IF_NONE:
  case POP_JUMP_FORWARD_IF_NOT_NONE:
  case POP_JUMP_BACKWARD_IF_FALSE:
  case POP_JUMP_BACKWARD_IF_TRUE:
  case POP_JUMP_BACKWARD_IF_NONE:
  case POP_JUMP_BACKWARD_IF_NOT_NONE:
  case JUMP_IF_FALSE_OR_POP:
  case JUMP_IF_TRUE_OR_POP:
    return conditionalJump(in);
  default:
    unsupported(std::string("bytecode ") + opcodeName(in.opcode));
  }
}

int BytecodeTracer::jumpTarget(int offset) {
  auto found = current.indexOfOffset.find(offset);
  if (found == current.indexOfOffset.end())
    unsupported("jump to an unknown offset");
  return found->second;
}

bool BytecodeTracer::truthOf(const VarPtr &condition, bool noneTest) {
  if (condition->kind == Var::Kind::Tensor) {
    if (noneTest)
      return true; // A tensor is not None.
    unsupported("data-dependent branch on a tensor value");
  }
  if (condition->kind == Var::Kind::Tuple || condition->kind == Var::Kind::Dict)
    return noneTest || !condition->items.empty();
  if (condition->kind == Var::Kind::TensorMethod ||
      condition->kind == Var::Kind::BoundMethod ||
      condition->kind == Var::Kind::Function)
    return true;
  if (condition->kind == Var::Kind::Object && noneTest)
    return true;
  if (condition->kind != Var::Kind::Constant) {
    if (!condition->object)
      unsupported("branch on the truth value of a value the interpreter "
                  "cannot judge");
    PyTypeObject *type = Py_TYPE(condition->object.get());
    bool customTruth =
        (type->tp_as_number && type->tp_as_number->nb_bool) ||
        (type->tp_as_mapping && type->tp_as_mapping->mp_length) ||
        (type->tp_as_sequence && type->tp_as_sequence->sq_length);
    if (condition->kind == Var::Kind::Object && !customTruth)
      return true; // Plain objects (modules, functions) are truthy.
    unsupported("branch on the truth value of an object");
  }
  PyObject *object = condition->object.get();
  if (noneTest)
    return object != Py_None;
  int truth = PyObject_IsTrue(object);
  if (truth < 0) {
    PyErr_Clear();
    unsupported("truth value raised");
  }
  return truth != 0;
}

int BytecodeTracer::conditionalJump(const Instruction &in) {
  int op = in.opcode;
  bool backward =
      op == POP_JUMP_BACKWARD_IF_FALSE || op == POP_JUMP_BACKWARD_IF_TRUE ||
      op == POP_JUMP_BACKWARD_IF_NONE || op == POP_JUMP_BACKWARD_IF_NOT_NONE;
  int target =
      backward ? in.nextOffset - 2 * in.arg : in.nextOffset + 2 * in.arg;
  if (op == JUMP_IF_FALSE_OR_POP || op == JUMP_IF_TRUE_OR_POP) {
    bool truth = truthOf(peek(1), false);
    if (truth == (op == JUMP_IF_TRUE_OR_POP))
      return jumpTarget(target);
    pop();
    return -1;
  }
  VarPtr condition = pop();
  bool noneTest =
      op == POP_JUMP_FORWARD_IF_NONE || op == POP_JUMP_FORWARD_IF_NOT_NONE ||
      op == POP_JUMP_BACKWARD_IF_NONE || op == POP_JUMP_BACKWARD_IF_NOT_NONE;
  bool value = truthOf(condition, noneTest);
  bool jumpWhen =
      op == POP_JUMP_FORWARD_IF_TRUE || op == POP_JUMP_BACKWARD_IF_TRUE ||
      op == POP_JUMP_FORWARD_IF_NOT_NONE || op == POP_JUMP_BACKWARD_IF_NOT_NONE;
  return value == jumpWhen ? jumpTarget(target) : -1;
}

OutputSpec BytecodeTracer::outputOf(const VarPtr &var) {
  OutputSpec spec;
  switch (var->kind) {
  case Var::Kind::Tensor:
    return tensorOutput(var->tensor);
  case Var::Kind::Constant:
  case Var::Kind::Object:
    spec.kind = OutputSpec::Kind::Constant;
    spec.constant = var->object;
    return spec;
  case Var::Kind::Dict:
    spec.kind = OutputSpec::Kind::Dict;
    spec.keys = var->keys;
    for (const VarPtr &item : var->items)
      spec.items.push_back(outputOf(item));
    return spec;
  case Var::Kind::Tuple:
    spec.kind = var->isList ? OutputSpec::Kind::List : OutputSpec::Kind::Tuple;
    for (const VarPtr &item : var->items)
      spec.items.push_back(outputOf(item));
    return spec;
  default:
    unsupported("returning a value the interpreter cannot rebuild");
  }
}

OutputSpec BytecodeTracer::tensorOutput(Value *value) {
  OutputSpec spec;
  Graph &graph = *result.graph;
  // An input updated in place is returned as the input object itself (the
  // run writes the new value back into it first).
  if (const Value *input = inputs.inputUpdatedTo(value))
    value = const_cast<Value *>(input);
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    if (graph.inputs[i] == value) {
      spec.kind = OutputSpec::Kind::Input;
      spec.index = int(i);
      return spec;
    }
  }
  spec.kind = OutputSpec::Kind::GraphOutput;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    if (graph.outputs[i] == value) {
      spec.index = int(i);
      return spec;
    }
  }
  graph.outputs.push_back(value);
  spec.index = int(graph.outputs.size()) - 1;
  return spec;
}

} // namespace capture

bool globalStateMatches(const CapturedFrame &captured) {
  return gradModeEnabled() == captured.gradMode && defaultDtypeIsFloat32() &&
         !autocastEnabled();
}

CapturedFrame captureFrame(DynafuseFrame *frame, const std::string &graphName) {
  return capture::BytecodeTracer(frame, graphName).run();
}

} // namespace dynafuse

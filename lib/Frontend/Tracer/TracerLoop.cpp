//===- TracerLoop.cpp - The bytecode loop: stack, jumps, return values ----===//
#include "BytecodeTracer.h"

#include "dynafuse/Lowering/StridedView.h"

namespace dynafuse {
namespace capture {

BytecodeTracer::BytecodeTracer(DynafuseFrame *frame,
                               const std::string &graphName, bool allowResume,
                               const ShapePolicy &shapePolicy)
    : frame(frame), symbolic(shapePolicy, guardBuilder, result),
      allowResume(allowResume) {
  current.code = frame->code;
  current.globals = frame->globals;
  result.graph = std::make_unique<Graph>(graphName);
  current.fileName = PyUnicode_AsUTF8(current.code->co_filename);
  current.locals.resize(current.code->co_nlocalsplus);
  current.closure =
      frame->function ? PyFunction_GetClosure(frame->function) : nullptr;
}

CapturedFrame BytecodeTracer::run() {
  GlobalState state = GlobalState::current();
  // Capture's own torch calls (meta runs, folds) compute what the graph
  // will: its casts are explicit.
  AutocastSuspended noAutocast(state.autocast);
  try {
    if (!state.defaultFloat32)
      unsupported("torch.get_default_dtype() other than float32", firstLine());
    if (state.torchModes)
      unsupported("a TorchFunctionMode or TorchDispatchMode is active "
                  "(torch.set_default_device installs one)",
                  firstLine());
    result.state = state;
    gradMode = state.gradMode;
    autocastCasts.state = state.autocast;
    VarPtr returnedValue = runBody(/*frameLevel=*/true);
    if (!result.resume) {
      emittedObjects.clear();
      result.result = outputOf(returnedValue);
      result.stores =
          storeEffects([&](const VarPtr &value) { return outputOf(value); });
    }
    addWriteBacks();
    if (result.training()) {
      refuseViewsOfOverlappingGradInputs();
    } else {
      keepDivisionChecks();
    }
    linkOutputViews();
  } catch (Unsupported &error) {
    // What the trace relied on so far keys the negative entry.
    auto guards = std::make_shared<BreakGuards>();
    guardBuilder.moveInto(guards->sources, guards->guards);
    guards->state = state;
    error.guards = std::move(guards);
    error.withSymbolicSizes = !symbolic.env.empty();
    error.withSymbolicInts = symbolic.madeIntSymbols();
    throw;
  }
  guardBuilder.moveInto(result.sources, result.guards);
  result.symbolic = !symbolic.env.empty();
  result.symbolicInts = symbolic.madeIntSymbols();
  result.sizeHints = symbolic.env.symbolHints();
  return std::move(result);
}

void BytecodeTracer::refuseViewsOfOverlappingGradInputs() {
  for (const Value *output : result.graph->outputs) {
    BufferView viewed;
    if (!output->producer || !describeView(output, {}, viewed) ||
        !inputs.requiresGrad(viewed.base))
      continue;
    const TensorType &type = viewed.base->type;
    for (size_t k = 0; k < type.strides.size(); ++k)
      if (type.sizes[k] != SymExpr(1) && type.strides[k] == SymExpr(0))
        unsupported("an output viewing an input that requires grad and "
                    "whose elements overlap (an expanded tensor)");
  }
}

void BytecodeTracer::loadCode() {
  current.instructions = decodeInstructions(current.code);
  current.indexOfOffset.clear();
  for (size_t i = 0; i < current.instructions.size(); ++i)
    if (current.instructions[i].start >= 0)
      current.indexOfOffset[current.instructions[i].start] = int(i);
  checkHandlers();
}

VarPtr BytecodeTracer::runBody(bool frameLevel) {
  loadCode();
  for (size_t pc = 0; pc < current.instructions.size();) {
    if (++steps > 100000)
      unsupported("more than 100000 bytecode steps", current.currentLine);
    const Instruction &instruction = current.instructions[pc];
    current.currentLine = instruction.line;
    int next;
    try {
      next = frameLevel ? stepOrBreak(pc) : step(instruction);
    } catch (const RaisedInCapture &raised) {
      next = raiseToHandler(pc, raised, false); // rethrows when none catches
    }
    if (next == kBroke)
      return nullptr;
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

/// One instruction. Opcodes that exist only in some interpreters sit under
/// #ifdef of their name (3.12 or 3.13 in the comment); how the interpreters
/// lay out a call's callable and NULL is pushCallable/popCallTarget's.
int BytecodeTracer::step(const Instruction &in) {
  switch (in.opcode) {
  case NOP:
  case RESUME:
  case COPY_FREE_VARS:
#ifdef PRECALL // 3.11
  case PRECALL:
#endif
    return -1;
  case POP_TOP:
    pop();
    return -1;
  case PUSH_EXC_INFO:
  case POP_EXCEPT:
  case CHECK_EXC_MATCH:
  case RERAISE:
    return exceptionStep(in);
  case PUSH_NULL:
    push(makeVar(Var::Kind::Null));
    return -1;
  case COPY:
    push(peek(size_t(in.arg)));
    return -1;
  case SWAP:
    peek(size_t(in.arg));
    std::swap(current.stack[current.stack.size() - 1],
              current.stack[current.stack.size() - size_t(in.arg)]);
    return -1;
  case LOAD_FAST:
#ifdef LOAD_FAST_CHECK // 3.12
  case LOAD_FAST_CHECK:
#endif
    // 3.13 loads a closure's cells with LOAD_FAST (LOAD_CLOSURE is gone).
    if (VarPtr cell = closureSlot(in.arg)) {
      push(cell);
      return -1;
    }
    push(loadLocal(in.arg));
    return -1;
#ifdef LOAD_FAST_AND_CLEAR // 3.12: inlined comprehensions (PEP 709)
  case LOAD_FAST_AND_CLEAR:
    push(takeLocal(in.arg));
    return -1;
#endif
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
  case LOAD_GLOBAL: {
    VarPtr global =
        loadGlobal(PyTuple_GET_ITEM(current.code->co_names, in.arg >> 1));
    if (in.arg & 1)
      pushWithNull(global);
    else
      push(global);
    return -1;
  }
  case LOAD_DEREF:
    push(loadDeref(in.arg));
    return -1;
  case MAKE_CELL:
    current.locals.at(size_t(in.arg)) = makeCell(in.arg);
    return -1;
  case LOAD_CLOSURE: { // 3.11 and 3.12
    VarPtr cell = closureSlot(in.arg);
    if (!cell)
      unsupported("closure over a variable of an outer compiled function");
    push(cell);
    return -1;
  }
  case STORE_DEREF: {
    VarPtr cell = cellAt(in.arg);
    if (!cell || cell->method == "mirror of a closure cell")
      unsupported("assignment to a closure variable");
    willMutate(cell);
    cell->items.assign(1, pop());
    return -1;
  }
  case MAKE_FUNCTION:
    push(makeFunction(in.arg));
    return -1;
#ifdef SET_FUNCTION_ATTRIBUTE // 3.13: MAKE_FUNCTION's flags, one by one
  case SET_FUNCTION_ATTRIBUTE: {
    VarPtr function = pop();
    VarPtr attribute = pop();
    setFunctionAttribute(function, in.arg, attribute);
    push(function);
    return -1;
  }
#endif
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
  case YIELD_VALUE: {
    // Unrolling stops at a bound, so that an endless generator (consumed
    // lazily in eager) refuses instead of hanging capture.
    constexpr size_t kMaxYields = 100000;
    if (!current.yielded)
      unsupported("yield outside an inlined generator");
    if (current.yielded->size() >= kMaxYields)
      unsupported("a generator yielding more than 100000 items");
    current.yielded->push_back(pop());
    push(constant(Py_None));
    return -1;
  }
  case GET_YIELD_FROM_ITER:
    push(iterate(pop()));
    return -1;
  case SEND: {
    // `yield from receiver`, unrolled: each item is yielded in turn; at
    // the end the receiver's return value (an inlined generator's, else
    // None) is the expression's value.
    VarPtr receiver = peek(2);
    if (receiver->kind != Var::Kind::Iterator)
      unsupported("yield from a value that is not an unrolled iterator");
    if (peek(1)->kind != Var::Kind::Constant ||
        peek(1)->object.get() != Py_None)
      unsupported("a value sent into a generator");
    pop();
    if (receiver->position < receiver->items.size()) {
      willMutate(receiver);
      push(receiver->items[receiver->position++]);
      return -1;
    }
    VarPtr value = receiver->self ? receiver->self : constant(Py_None);
#ifndef END_SEND // 3.11: the value replaces the receiver
    pop();
#endif
    push(value);
    return jumpTarget(in.target);
  }
#ifdef END_SEND // 3.12: removes the receiver under the value
  case END_SEND: {
    VarPtr value = pop();
    pop();
    push(value);
    return -1;
  }
#endif
  case LOAD_ATTR: {
    // 3.12 folded LOAD_METHOD into LOAD_ATTR's low bit.
    constexpr bool methodBit = PY_VERSION_HEX >= 0x030C0000;
    int name = methodBit ? in.arg >> 1 : in.arg;
    VarPtr attr =
        loadAttr(pop(), PyTuple_GET_ITEM(current.code->co_names, name));
    if (methodBit && (in.arg & 1))
      pushCallable(attr);
    else
      push(attr);
    return -1;
  }
  case LOAD_METHOD: // 3.11
    pushCallable(
        loadAttr(pop(), PyTuple_GET_ITEM(current.code->co_names, in.arg)));
    return -1;
#ifdef LOAD_SUPER_ATTR // 3.12
  case LOAD_SUPER_ATTR:
    loadSuperAttr(in.arg);
    return -1;
#endif
#ifdef KW_NAMES // 3.11 and 3.12
  case KW_NAMES:
    current.kwNames =
        PyRef::borrow(PyTuple_GET_ITEM(current.code->co_consts, in.arg));
    return -1;
#endif
  case CALL:
    call(in.arg);
    return -1;
#ifdef CALL_KW // 3.13: the keyword names are on the stack
  case CALL_KW: {
    VarPtr names = pop();
    if (names->kind != Var::Kind::Constant ||
        !PyTuple_Check(names->object.get()))
      unsupported("CALL_KW without a tuple of keyword names");
    current.kwNames = names->object;
    call(in.arg);
    return -1;
  }
#endif
#ifdef CALL_INTRINSIC_1 // 3.12
  case CALL_INTRINSIC_1:
    push(callIntrinsic(in.arg, pop()));
    return -1;
#endif
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
#ifdef UNARY_POSITIVE // 3.11; later an intrinsic
  case UNARY_POSITIVE:
    push(positive(pop()));
    return -1;
#endif
  case UNARY_NOT:
    push(logicalNot(pop()));
    return -1;
#ifdef TO_BOOL // 3.13: before branches and `not`
  case TO_BOOL:
    push(constant(truthOf(pop(), false) ? Py_True : Py_False));
    return -1;
#endif
#ifdef FORMAT_VALUE // 3.11 and 3.12
  case FORMAT_VALUE: {
    VarPtr spec = (in.arg & 0x04) ? pop() : nullptr;
    push(formatValue(convertValue(pop(), in.arg & 0x03), spec));
    return -1;
  }
#endif
#ifdef FORMAT_SIMPLE // 3.13: FORMAT_VALUE split in three
  case CONVERT_VALUE:
    push(convertValue(pop(), in.arg));
    return -1;
  case FORMAT_SIMPLE:
    push(formatValue(pop(), nullptr));
    return -1;
  case FORMAT_WITH_SPEC: {
    VarPtr spec = pop();
    push(formatValue(pop(), spec));
    return -1;
  }
#endif
  case BUILD_STRING:
    push(buildString(in.arg));
    return -1;
  case UNARY_INVERT: {
    VarPtr operand = pop();
    if (operand->kind == Var::Kind::Constant)
      push(foldPython(PyNumber_Invert(operand->object.get())));
    else
      push(emit(Op::BitwiseNot, {operandOf(operand, "~")}));
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
#ifdef BINARY_SLICE // 3.12: container[start:stop]
  case BINARY_SLICE: {
    VarPtr slice = buildSlice(2);
    VarPtr container = pop();
    push(subscript(container, slice));
    return -1;
  }
  case STORE_SLICE: {
    VarPtr slice = buildSlice(2);
    VarPtr container = pop();
    storeSubscript(container, slice, pop());
    return -1;
  }
#endif
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
  case BUILD_SET: {
    VarPtr set = makeVar(Var::Kind::Tuple);
    set->isSet = true;
    VarPtr items = buildTuple(in.arg); // kept alive through the loop
    for (const VarPtr &item : items->items)
      addToSet(set, item);
    push(set);
    return -1;
  }
  case SET_ADD: {
    VarPtr item = pop();
    addToSet(peek(size_t(in.arg)), item);
    return -1;
  }
  case SET_UPDATE: {
    VarPtr extra = pop();
    VarPtr set = peek(size_t(in.arg));
    for (const VarPtr &item : itemsOf(extra))
      addToSet(set, item);
    return -1;
  }
  case LIST_APPEND: {
    VarPtr item = pop();
    VarPtr list = peek(size_t(in.arg));
    if (list->kind != Var::Kind::Tuple)
      unsupported("list.append on a non-list");
    willMutate(list);
    list->items.push_back(item);
    return -1;
  }
#ifdef LIST_TO_TUPLE // 3.11; later an intrinsic
  case LIST_TO_TUPLE:
    push(listToTuple(pop()));
    return -1;
#endif
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
    willMutate(list);
    for (const VarPtr &item : itemsOf(extra))
      list->items.push_back(item);
    return -1;
  }
  case UNPACK_SEQUENCE:
    unpack(pop(), in.arg);
    return -1;
  case UNPACK_EX: // a, *rest, b = value
    unpackStarred(pop(), in.arg & 0xff, in.arg >> 8);
    return -1;
  case STORE_ATTR: {
    VarPtr owner = pop();
    storeAttribute(owner, PyTuple_GET_ITEM(current.code->co_names, in.arg),
                   pop());
    return -1;
  }
  case DELETE_ATTR: {
    VarPtr owner = pop();
    if (owner->kind != Var::Kind::NewObject)
      unsupported("del of an attribute of an object capture did not make");
    objects.deleteAttribute(
        owner, PyTuple_GET_ITEM(current.code->co_names, in.arg), false);
    return -1;
  }
  case BEFORE_WITH:
    enterWith(pop());
    return -1;
  case IMPORT_NAME: {
    VarPtr fromList = pop();
    VarPtr level = pop();
    push(importModule(PyTuple_GET_ITEM(current.code->co_names, in.arg), level,
                      fromList));
    return -1;
  }
  case IMPORT_FROM:
    push(loadAttr(peek(1), PyTuple_GET_ITEM(current.code->co_names, in.arg)));
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
  case RAISE_VARARGS:
    if (in.arg != 1)
      unsupported("raise without an exception, or raise ... from ...");
    raiseException(pop());
  case RETURN_VALUE:
    returned = pop();
    return kReturned;
#ifdef RETURN_CONST // 3.12
  case RETURN_CONST:
    returned = constant(PyTuple_GET_ITEM(current.code->co_consts, in.arg));
    return kReturned;
#endif
  case GET_ITER:
    push(iterate(pop()));
    return -1;
  case FOR_ITER:
    return forIter(in);
#ifdef END_FOR // 3.12: where FOR_ITER's loop exits
  case END_FOR:
    for (int effect = stackEffect(END_FOR, 0); effect < 0; ++effect)
      pop();
    return -1;
#endif
  case JUMP_FORWARD:
  case JUMP_BACKWARD:
  case JUMP_BACKWARD_NO_INTERRUPT:
    return jumpTarget(in.target);
  default:
    if (branchOf(in.opcode) != Branch::None)
      return conditionalJump(in);
    unsupported(std::string("bytecode ") + opcodeName(in.opcode));
  }
}

OutputSpec BytecodeTracer::outputOf(const VarPtr &var) {
  return values.of(var).output(
      var, [&](const VarPtr &item) { return outputOf(item); });
}

OutputSpec BytecodeTracer::tensorOutput(Value *value) {
  OutputSpec spec;
  Graph &graph = *result.graph;
  Value *latest = latestValue(value);
  value = viewOfUpdatedInput(latest);
  bool viewsUpdatedInput = value != latest;
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
  if (viewsUpdatedInput)
    result.outputsViewingUpdatedInputs.push_back(spec.index);
  return spec;
}

} // namespace capture

GlobalState GlobalState::current() {
  GlobalState state;
  state.gradMode = gradModeEnabled();
  state.defaultFloat32 = defaultDtypeIsFloat32();
  state.autocast = autocastState();
  state.torchModes = torchModesActive();
  return state;
}

CapturedFrame captureFrame(DynafuseFrame *frame, const std::string &graphName,
                           bool allowResume, const ShapePolicy &policy) {
  return capture::BytecodeTracer(frame, graphName, allowResume, policy).run();
}

} // namespace dynafuse

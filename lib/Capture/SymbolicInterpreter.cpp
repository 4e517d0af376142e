//===- SymbolicInterpreter.cpp - Bytecode to graph ------------------------===//
#include "SymbolicInterpreter.h"

#include "Bytecode.h"
#include "OpTable.h"
#include "TorchBridge.h"
#include "dynafuse/Graph/OpRegistry.h"

#include <algorithm>

#include <opcode.h>

#include <limits>
#include <map>
#include <memory>
#include <set>

namespace dynafuse {
namespace {

/// A value on the symbolic stack or in a symbolic local.
struct Var;
using VarPtr = std::shared_ptr<Var>;
struct Var {
  /// BoundMethod: `function` (an Object var) bound to `self`; Iterator:
  /// `items` consumed from `position`.
  enum class Kind {
    Null,
    Tensor,
    Constant,
    Object,
    Tuple,
    TensorMethod,
    BoundMethod,
    Iterator,
    Dict
  };
  Kind kind = Kind::Null;
  Value *tensor = nullptr;
  PyRef object;
  std::vector<VarPtr> items;
  size_t position = 0;
  std::string method;
  VarPtr self;
  VarPtr function;
  /// Where a concrete object came from (-1: made during capture).
  int source = -1;
  /// A Tuple var built as a list (rebuilt as a list when returned).
  bool isList = false;
  /// Dict: string keys, parallel to items.
  std::vector<std::string> keys;
};

VarPtr makeVar(Var::Kind kind) {
  auto var = std::make_shared<Var>();
  var->kind = kind;
  return var;
}

bool isConstantObject(PyObject *object) {
  if (object == Py_None || object == Py_Ellipsis || PyBool_Check(object) ||
      PyLong_CheckExact(object) || PyFloat_CheckExact(object) ||
      PyUnicode_CheckExact(object) || PyRange_Check(object))
    return true;
  if (!PyTuple_CheckExact(object))
    return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(object); ++i)
    if (!isConstantObject(PyTuple_GET_ITEM(object, i)))
      return false;
  return true;
}

bool isNumber(PyObject *object) {
  return PyBool_Check(object) || PyLong_CheckExact(object) ||
         PyFloat_CheckExact(object);
}

class SymbolicInterpreter {
public:
  SymbolicInterpreter(DynafuseFrame *frame, const std::string &graphName)
      : frame(frame), code(frame->code), globals(frame->globals) {
    result.graph = std::make_unique<Graph>(graphName);
    fileName = PyUnicode_AsUTF8(code->co_filename);
    locals.resize(code->co_nlocalsplus);
    closure =
        frame->function ? PyFunction_GetClosure(frame->function) : nullptr;
  }

  CapturedFrame run() {
    if (!defaultDtypeIsFloat32())
      unsupported("torch.get_default_dtype() other than float32", firstLine());
    result.gradMode = gradModeEnabled();
    result.result = outputOf(runBody());
    return std::move(result);
  }

private:
  static constexpr int kReturned = -2;
  static constexpr int kMaxInlineDepth = 24;
  DynafuseFrame *frame;
  PyCodeObject *code;
  /// The globals and closure of the code being interpreted (the frame's, or
  /// an inlined function's), and that function's source (-1 for the frame).
  PyObject *globals;
  PyObject *closure = nullptr;
  int functionSource = -1;
  int inlineDepth = 0;
  VarPtr returned;
  /// Values that are views or have views: in-place updates of them would
  /// need aliasing the graph does not model.
  std::set<const Value *> aliased;
  std::string fileName;
  CapturedFrame result;
  std::vector<Instruction> instructions;
  std::map<int, int> indexOfOffset;
  std::vector<VarPtr> stack;
  std::vector<VarPtr> locals;
  PyRef kwNames;
  int currentLine = 0;
  int steps = 0;
  std::map<std::string, int> sourceIds;
  std::map<int, Value *> inputOfSource;

  int firstLine() const { return code->co_firstlineno; }

  /// Interprets the current code to its RETURN_VALUE.
  VarPtr runBody() {
    instructions = decodeInstructions(code);
    indexOfOffset.clear();
    for (size_t i = 0; i < instructions.size(); ++i)
      indexOfOffset[instructions[i].start] = int(i);
    if (!parseExceptionTable(code).empty())
      unsupported("try/except/with blocks (exception table entries)",
                  firstLine());
    for (size_t pc = 0; pc < instructions.size();) {
      if (++steps > 100000)
        unsupported("more than 100000 bytecode steps", currentLine);
      const Instruction &instruction = instructions[pc];
      currentLine = instruction.line;
      int next = step(instruction);
      if (next == kReturned)
        return returned;
      pc = next < 0 ? pc + 1 : size_t(next);
    }
    unsupported("fell off the end of the bytecode", currentLine);
  }
  Location here(int line) const { return Location{fileName, line, 0}; }

  [[noreturn]] void unsupported(const std::string &what, int line) const {
    throw Unsupported(what, here(line));
  }
  [[noreturn]] void unsupported(const std::string &what) const {
    unsupported(what, currentLine);
  }

  VarPtr pop() {
    if (stack.empty())
      unsupported("stack underflow in bytecode");
    VarPtr top = stack.back();
    stack.pop_back();
    return top;
  }
  void push(VarPtr var) { stack.push_back(std::move(var)); }
  VarPtr peek(size_t depth) {
    if (depth == 0 || depth > stack.size())
      unsupported("stack underflow in bytecode");
    return stack[stack.size() - depth];
  }

  //===--------------------------------------------------------------------===//
  // Sources and guards
  //===--------------------------------------------------------------------===//

  int addSource(Source source) {
    std::string key = std::to_string(int(source.kind)) + ":" +
                      std::to_string(source.parent) + ":" +
                      std::to_string(source.index) + ":" +
                      (source.name ? PyUnicode_AsUTF8(source.name.get()) : "");
    auto found = sourceIds.find(key);
    if (found != sourceIds.end())
      return found->second;
    result.sources.push_back(std::move(source));
    int id = int(result.sources.size()) - 1;
    sourceIds[key] = id;
    return id;
  }

  int namedSource(Source::Kind kind, int parent, PyObject *name) {
    Source source;
    source.kind = kind;
    source.parent = parent;
    source.name = PyRef::borrow(name);
    return addSource(std::move(source));
  }

  int indexedSource(Source::Kind kind, int parent, int index) {
    Source source;
    source.kind = kind;
    source.parent = parent;
    source.index = index;
    return addSource(std::move(source));
  }

  void addGuard(Guard guard) { result.guards.push_back(std::move(guard)); }

  /// Turns a concrete object read from a source into a symbolic value,
  /// guarding what the capture assumes about it.
  VarPtr classify(PyObject *object, int source) {
    VarPtr var = classifyObject(object, source);
    var->source = source;
    return var;
  }

  VarPtr classifyObject(PyObject *object, int source) {
    if (isAnyTensor(object))
      return tensorInput(object, source);
    if (isConstantObject(object)) {
      Guard guard;
      guard.kind = Guard::Kind::Equals;
      guard.source = source;
      guard.expected = PyRef::borrow(object);
      addGuard(std::move(guard));
      VarPtr var = makeVar(Var::Kind::Constant);
      var->object = PyRef::borrow(object);
      return var;
    }
    if (PyTuple_CheckExact(object) || PyList_CheckExact(object))
      return tupleOfSource(object, source);
    if (PyDict_CheckExact(object) && PyDict_Size(object) <= 64)
      if (VarPtr dict = dictOfSource(object, source))
        return dict;
    Guard guard;
    guard.kind = Guard::Kind::Identity;
    guard.source = source;
    guard.expected = PyRef::borrow(object);
    addGuard(std::move(guard));
    VarPtr var = makeVar(Var::Kind::Object);
    var->object = PyRef::borrow(object);
    return var;
  }

  /// Tuples and lists read from a source: type and length guarded, items
  /// classified one by one.
  VarPtr tupleOfSource(PyObject *sequence, int source) {
    PyRef items = PyRef::steal(PySequence_Tuple(sequence));
    Guard guard;
    guard.kind = Guard::Kind::TupleLength;
    guard.source = source;
    guard.length = size_t(PyTuple_GET_SIZE(items.get()));
    guard.expected = PyRef::borrow(reinterpret_cast<PyObject *>(Py_TYPE(sequence)));
    addGuard(std::move(guard));
    VarPtr var = makeVar(Var::Kind::Tuple);
    var->isList = PyList_CheckExact(sequence);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items.get()); ++i)
      var->items.push_back(
          classify(PyTuple_GET_ITEM(items.get(), i),
                   indexedSource(Source::Kind::Item, source, int(i))));
    return var;
  }

  /// A dict with string keys: its length and every value are guarded.
  VarPtr dictOfSource(PyObject *dict, int source) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value))
      if (!PyUnicode_CheckExact(key))
        return nullptr;
    Guard length;
    length.kind = Guard::Kind::DictLength;
    length.source = source;
    length.length = size_t(PyDict_Size(dict));
    addGuard(std::move(length));
    VarPtr var = makeVar(Var::Kind::Dict);
    pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
      var->keys.push_back(PyUnicode_AsUTF8(key));
      var->items.push_back(
          classify(value, namedSource(Source::Kind::DictItem, source, key)));
    }
    return var;
  }

  VarPtr tensorInput(PyObject *object, int source) {
    if (!isPlainTensor(object))
      unsupported(std::string("tensor subclass ") + Py_TYPE(object)->tp_name);
    VarPtr var = makeVar(Var::Kind::Tensor);
    auto known = inputOfSource.find(source);
    if (known != inputOfSource.end()) {
      var->tensor = known->second;
      return var;
    }
    TensorMeta meta = describeTensor(object);
    if (!meta.dtype)
      unsupported("tensor of unsupported dtype " + meta.dtypeName);
    if (meta.device != "cpu")
      unsupported("tensor on device " + meta.device +
                  " (the cpu backend needs cpu tensors)");
    if (meta.requiresGrad && gradModeEnabled())
      unsupported("an input requires grad while grad mode is on (training "
                  "is not supported yet; runs eagerly)");
    TensorType type;
    type.dtype = *meta.dtype;
    for (int64_t size : meta.sizes)
      type.sizes.push_back(SymExpr(size));
    std::vector<SymExpr> strides;
    for (int64_t stride : meta.strides)
      strides.push_back(SymExpr(stride));
    if (!meta.sizes.empty() && strides != contiguousStrides(type.sizes))
      type.strides = strides;
    Guard guard;
    guard.kind = Guard::Kind::Tensor;
    guard.source = source;
    guard.tensor = meta;
    guard.tensor.data = nullptr;
    addGuard(std::move(guard));
    std::string name = "arg" + std::to_string(result.graph->inputs.size());
    var->tensor = result.graph->addInput(name, type);
    inputOfSource[source] = var->tensor;
    result.inputSources.push_back(source);
    return var;
  }

  //===--------------------------------------------------------------------===//
  // Instructions
  //===--------------------------------------------------------------------===//

  /// Returns the next instruction index, -1 for the following one, or
  /// kReturned.
  int step(const Instruction &in) {
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
      std::swap(stack[stack.size() - 1], stack[stack.size() - size_t(in.arg)]);
      return -1;
    case LOAD_FAST:
      push(loadLocal(in.arg));
      return -1;
    case STORE_FAST:
      locals.at(size_t(in.arg)) = pop();
      return -1;
    case LOAD_CONST:
      push(constant(PyTuple_GET_ITEM(code->co_consts, in.arg)));
      return -1;
    case LOAD_GLOBAL:
      if (in.arg & 1)
        push(makeVar(Var::Kind::Null));
      push(loadGlobal(PyTuple_GET_ITEM(code->co_names, in.arg >> 1)));
      return -1;
    case LOAD_DEREF:
      push(loadDeref(in.arg));
      return -1;
    case LOAD_ATTR:
      push(loadAttr(pop(), PyTuple_GET_ITEM(code->co_names, in.arg)));
      return -1;
    case LOAD_METHOD: {
      VarPtr attr = loadAttr(pop(), PyTuple_GET_ITEM(code->co_names, in.arg));
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
      kwNames = PyRef::borrow(PyTuple_GET_ITEM(code->co_consts, in.arg));
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

  int jumpTarget(int offset) {
    auto found = indexOfOffset.find(offset);
    if (found == indexOfOffset.end())
      unsupported("jump to an unknown offset");
    return found->second;
  }

  /// Whether a condition var is None / truthy, decided at capture time.
  bool truthOf(const VarPtr &condition, bool noneTest) {
    if (condition->kind == Var::Kind::Tensor) {
      if (noneTest)
        return true; // A tensor is not None.
      unsupported("data-dependent branch on a tensor value");
    }
    if (condition->kind == Var::Kind::Object && noneTest)
      return true;
    if (condition->kind != Var::Kind::Constant) {
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

  int conditionalJump(const Instruction &in) {
    int op = in.opcode;
    bool backward = op == POP_JUMP_BACKWARD_IF_FALSE ||
                    op == POP_JUMP_BACKWARD_IF_TRUE ||
                    op == POP_JUMP_BACKWARD_IF_NONE ||
                    op == POP_JUMP_BACKWARD_IF_NOT_NONE;
    int target = backward ? in.nextOffset - 2 * in.arg
                          : in.nextOffset + 2 * in.arg;
    if (op == JUMP_IF_FALSE_OR_POP || op == JUMP_IF_TRUE_OR_POP) {
      bool truth = truthOf(peek(1), false);
      if (truth == (op == JUMP_IF_TRUE_OR_POP))
        return jumpTarget(target);
      pop();
      return -1;
    }
    VarPtr condition = pop();
    bool noneTest = op == POP_JUMP_FORWARD_IF_NONE ||
                    op == POP_JUMP_FORWARD_IF_NOT_NONE ||
                    op == POP_JUMP_BACKWARD_IF_NONE ||
                    op == POP_JUMP_BACKWARD_IF_NOT_NONE;
    bool value = truthOf(condition, noneTest);
    bool jumpWhen = op == POP_JUMP_FORWARD_IF_TRUE ||
                    op == POP_JUMP_BACKWARD_IF_TRUE ||
                    op == POP_JUMP_FORWARD_IF_NOT_NONE ||
                    op == POP_JUMP_BACKWARD_IF_NOT_NONE;
    return value == jumpWhen ? jumpTarget(target) : -1;
  }

  VarPtr constant(PyObject *object) {
    if (!isConstantObject(object))
      unsupported(std::string("constant of type ") + Py_TYPE(object)->tp_name);
    VarPtr var = makeVar(Var::Kind::Constant);
    var->object = PyRef::borrow(object);
    return var;
  }

  VarPtr loadLocal(int index) {
    if (locals.at(size_t(index)))
      return locals[size_t(index)];
    if (functionSource >= 0 || inlineDepth > 0)
      unsupported("read of an unbound local variable");
    PyObject *object = frame->localsplus[index];
    if (!object)
      unsupported("read of an unbound local variable");
    if (index >= code->co_nlocalsplus - code->co_nfreevars)
      unsupported("closure cell read through LOAD_FAST");
    VarPtr var =
        classify(object, indexedSource(Source::Kind::Local, -1, index));
    locals[size_t(index)] = var;
    return var;
  }

  VarPtr loadGlobal(PyObject *name) {
    PyObject *object = PyDict_GetItemWithError(globals, name);
    if (!object && !PyErr_Occurred() && PyDict_Check(frame->builtins))
      object = PyDict_GetItemWithError(frame->builtins, name);
    if (!object) {
      PyErr_Clear();
      unsupported(std::string("undefined global '") + PyUnicode_AsUTF8(name) +
                  "'");
    }
    if (inlineDepth > 0)
      return classify(object, namedSource(Source::Kind::FunctionGlobal,
                                          functionSource, name));
    return classify(object, namedSource(Source::Kind::Global, -1, name));
  }

  VarPtr loadDeref(int index) {
    int firstFree = code->co_nlocalsplus - code->co_nfreevars;
    if (index < firstFree)
      unsupported("cell variables (a local captured by an inner function)");
    int cell = index - firstFree;
    if (!closure || cell >= PyTuple_GET_SIZE(closure))
      unsupported("closure variable without a closure");
    PyObject *object = PyCell_GET(PyTuple_GET_ITEM(closure, cell));
    if (!object)
      unsupported("read of an empty closure cell");
    if (inlineDepth > 0)
      return classify(object, indexedSource(Source::Kind::FunctionClosure,
                                            functionSource, cell));
    return classify(object, indexedSource(Source::Kind::Closure, -1, cell));
  }

  /// Attributes are read only where reading cannot run user code with
  /// effects: modules, and objects whose type defines no Python-level
  /// descriptor for the name.
  VarPtr loadAttr(const VarPtr &base, PyObject *name) {
    std::string attribute = PyUnicode_AsUTF8(name);
    if (base->kind == Var::Kind::Tensor)
      return tensorAttribute(base, attribute);
    if (base->kind != Var::Kind::Object)
      unsupported("attribute '" + attribute + "' of a non-object");
    PyObject *object = base->object.get();
    if (VarPtr method = boundMethod(base, name))
      return method;
    if (!PyModule_Check(object)) {
      PyObject *descriptor = _PyType_Lookup(Py_TYPE(object), name);
      if (descriptor && Py_TYPE(descriptor)->tp_descr_get &&
          !PyFunction_Check(descriptor) && !PyCFunction_Check(descriptor) &&
          Py_TYPE(descriptor) != &PyMethodDescr_Type)
        unsupported("attribute '" + attribute +
                    "' goes through a descriptor "
                    "(property) that may have side effects");
    }
    PyRef value = PyRef::steal(PyObject_GetAttr(object, name));
    if (!value) {
      PyErr_Clear();
      unsupported("attribute '" + attribute + "' raised");
    }
    int parent = sourceOfObject(base);
    return classify(value.get(), namedSource(Source::Kind::Attr, parent, name));
  }

  /// The source a concrete object var was read from (recorded in the guard
  /// that protects it).
  int sourceOfObject(const VarPtr &var) {
    if (var->source >= 0)
      return var->source;
    for (const Guard &guard : result.guards)
      if (guard.kind == Guard::Kind::Identity &&
          guard.expected.get() == var->object.get())
        return guard.source;
    unsupported("attribute of an object with no known source");
  }

  VarPtr buildMap(int count) {
    VarPtr dict = makeVar(Var::Kind::Dict);
    std::vector<std::pair<VarPtr, VarPtr>> pairs(static_cast<size_t>(count));
    for (int i = count - 1; i >= 0; --i) {
      pairs[size_t(i)].second = pop();
      pairs[size_t(i)].first = pop();
    }
    for (auto &pair : pairs)
      setDictItem(dict, pair.first, pair.second);
    return dict;
  }

  VarPtr buildConstKeyMap(int count) {
    VarPtr keys = pop();
    std::vector<VarPtr> names = itemsOf(keys);
    VarPtr dict = makeVar(Var::Kind::Dict);
    std::vector<VarPtr> values(static_cast<size_t>(count));
    for (int i = count - 1; i >= 0; --i)
      values[size_t(i)] = pop();
    for (int i = 0; i < count; ++i)
      setDictItem(dict, names[size_t(i)], values[size_t(i)]);
    return dict;
  }

  void setDictItem(const VarPtr &dict, const VarPtr &key, const VarPtr &value) {
    if (key->kind != Var::Kind::Constant ||
        !PyUnicode_CheckExact(key->object.get()))
      unsupported("dict with a key that is not a constant string");
    std::string name = PyUnicode_AsUTF8(key->object.get());
    for (size_t i = 0; i < dict->keys.size(); ++i) {
      if (dict->keys[i] == name) {
        dict->items[i] = value;
        return;
      }
    }
    dict->keys.push_back(name);
    dict->items.push_back(value);
  }

  void mergeInto(const VarPtr &dict, const VarPtr &other) {
    if (dict->kind != Var::Kind::Dict || other->kind != Var::Kind::Dict)
      unsupported("** unpacking of a value that is not a dict");
    for (size_t i = 0; i < other->keys.size(); ++i) {
      PyRef key = PyRef::steal(PyUnicode_FromString(other->keys[i].c_str()));
      setDictItem(dict, constant(key.get()), other->items[i]);
    }
  }

  void callWithUnpacking(bool hasKeywords) {
    VarPtr keywordsVar = hasKeywords ? pop() : nullptr;
    VarPtr positional = pop();
    VarPtr callee = pop();
    VarPtr null = pop();
    if (null->kind != Var::Kind::Null)
      unsupported("CALL_FUNCTION_EX without its NULL");
    std::vector<VarPtr> args = itemsOf(positional);
    std::map<std::string, VarPtr> keywords;
    if (keywordsVar) {
      if (keywordsVar->kind != Var::Kind::Dict)
        unsupported("** unpacking of a value that is not a dict");
      for (size_t i = 0; i < keywordsVar->keys.size(); ++i)
        keywords[keywordsVar->keys[i]] = keywordsVar->items[i];
    }
    if (callee->kind == Var::Kind::BoundMethod) {
      args.insert(args.begin(), callee->self);
      callee = callee->function;
    }
    push(callAny(callee, args, keywords));
  }

  VarPtr buildTuple(int count) {
    VarPtr tuple = makeVar(Var::Kind::Tuple);
    tuple->items.resize(size_t(count));
    for (int i = count - 1; i >= 0; --i)
      tuple->items[size_t(i)] = pop();
    return tuple;
  }

  std::vector<VarPtr> itemsOf(const VarPtr &var) {
    if (var->kind == Var::Kind::Tuple)
      return var->items;
    if (var->kind == Var::Kind::Constant && PyTuple_Check(var->object.get())) {
      std::vector<VarPtr> items;
      PyObject *tuple = var->object.get();
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); ++i)
        items.push_back(constant(PyTuple_GET_ITEM(tuple, i)));
      return items;
    }
    unsupported("unpacking or indexing a value that is not a tuple");
  }

  void unpack(const VarPtr &var, int count) {
    std::vector<VarPtr> items = itemsOf(var);
    if (int(items.size()) != count)
      unsupported("unpacking a tuple of the wrong length");
    for (int i = count - 1; i >= 0; --i)
      push(items[size_t(i)]);
  }

  VarPtr subscript(const VarPtr &container, const VarPtr &index) {
    if (container->kind == Var::Kind::Tensor)
      return indexTensor(container, index);
    if (index->kind != Var::Kind::Constant ||
        !PyLong_CheckExact(index->object.get()))
      unsupported("subscript other than a constant integer index");
    std::vector<VarPtr> items = itemsOf(container);
    long position = PyLong_AsLong(index->object.get());
    if (position < 0)
      position += long(items.size());
    if (position < 0 || position >= long(items.size()))
      unsupported("tuple index out of range");
    return items[size_t(position)];
  }

  /// BUILD_SLICE of constants: a slice object, usable as an index.
  VarPtr buildSlice(int count) {
    VarPtr step = count == 3 ? pop() : nullptr;
    VarPtr stop = pop();
    VarPtr start = pop();
    for (const VarPtr &part : {start, stop, step})
      if (part && part->kind != Var::Kind::Constant)
        unsupported("slice with a non-constant bound");
    PyRef slice = PyRef::steal(PySlice_New(start->object.get(),
                                           stop->object.get(),
                                           step ? step->object.get() : nullptr));
    if (!slice) {
      PyErr_Clear();
      unsupported("invalid slice");
    }
    VarPtr var = makeVar(Var::Kind::Constant);
    var->object = slice;
    return var;
  }

  /// Basic indexing (ints, slices, None, Ellipsis) as select, slice and
  /// unsqueeze nodes.
  VarPtr indexTensor(VarPtr tensor, const VarPtr &index) {
    std::vector<VarPtr> items =
        index->kind == Var::Kind::Tuple ||
                (index->kind == Var::Kind::Constant &&
                 PyTuple_Check(index->object.get()))
            ? itemsOf(index)
            : std::vector<VarPtr>{index};
    size_t consumed = 0;
    for (const VarPtr &item : items) {
      if (item->kind != Var::Kind::Constant)
        unsupported("tensor indexing with tensors or non-constant indices");
      PyObject *object = item->object.get();
      consumed += PyLong_CheckExact(object) || PySlice_Check(object);
    }
    int64_t rank = int64_t(tensor->tensor->type.rank());
    int64_t dim = 0;
    for (const VarPtr &item : items) {
      PyObject *object = item->object.get();
      if (object == Py_Ellipsis) {
        dim += rank - int64_t(consumed);
        continue;
      }
      if (object == Py_None) {
        tensor = emit("unsqueeze", {tensor->tensor}, {{"dim", dim++}});
        continue;
      }
      if (PyLong_CheckExact(object)) {
        tensor = emit("select", {tensor->tensor},
                      {{"dim", dim}, {"index", int64_t(PyLong_AsLongLong(object))}});
        continue;
      }
      if (!PySlice_Check(object))
        unsupported(std::string("tensor index of type ") +
                    Py_TYPE(object)->tp_name);
      tensor = sliceTensor(tensor, object, dim++);
    }
    return tensor;
  }

  VarPtr sliceTensor(const VarPtr &tensor, PyObject *slice, int64_t dim) {
    auto *parts = reinterpret_cast<PySliceObject *>(slice);
    auto bound = [&](PyObject *value, int64_t fallback) {
      if (value == Py_None)
        return fallback;
      if (!PyLong_CheckExact(value))
        unsupported("slice bound that is not an integer");
      return int64_t(PyLong_AsLongLong(value));
    };
    int64_t start = bound(parts->start, 0);
    int64_t stop = bound(parts->stop, std::numeric_limits<int64_t>::max());
    int64_t step = bound(parts->step, 1);
    if (start == 0 && stop == std::numeric_limits<int64_t>::max() && step == 1)
      return tensor;
    return emit("slice", {tensor->tensor},
                {{"dim", dim}, {"start", start}, {"end", stop}, {"step", step}});
  }

  //===--------------------------------------------------------------------===//
  // Operators and calls
  //===--------------------------------------------------------------------===//

  Operand operandOf(const VarPtr &var, const std::string &what) {
    if (var->kind == Var::Kind::Tensor)
      return var->tensor;
    if (var->kind == Var::Kind::Constant) {
      PyObject *object = var->object.get();
      if (PyBool_Check(object))
        return Scalar::ofBool(object == Py_True);
      if (PyLong_CheckExact(object)) {
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(object, &overflow);
        if (overflow)
          unsupported("integer constant out of range in " + what);
        return Scalar::ofInt(value);
      }
      if (PyFloat_CheckExact(object))
        return Scalar::ofFloat(PyFloat_AS_DOUBLE(object));
    }
    unsupported("argument of " + what + " is neither a tensor nor a number");
  }

  VarPtr emit(const std::string &op, std::vector<Operand> operands,
              std::map<std::string, Attribute> attributes = {}) {
    Node *node;
    try {
      node = result.graph->addNode(op, std::move(operands),
                                   std::move(attributes), here(currentLine));
    } catch (const Unsupported &) {
      throw;
    } catch (const Error &error) {
      unsupported(error.bareMessage());
    }
    const OpInfo *info = lookupOp(op);
    if (info && info->kind == OpKind::View) {
      for (const Operand &operand : node->operands)
        if (operand.isValue())
          aliased.insert(operand.value);
      for (Value *result : node->results)
        aliased.insert(result);
    }
    if (node->results.size() == 1) {
      VarPtr var = makeVar(Var::Kind::Tensor);
      var->tensor = node->result();
      return var;
    }
    VarPtr tuple = makeVar(Var::Kind::Tuple);
    for (Value *result : node->results) {
      VarPtr item = makeVar(Var::Kind::Tensor);
      item->tensor = result;
      tuple->items.push_back(item);
    }
    return tuple;
  }

  bool bothConstantNumbers(const VarPtr &lhs, const VarPtr &rhs) {
    return lhs->kind == Var::Kind::Constant && rhs->kind == Var::Kind::Constant;
  }

  VarPtr foldPython(PyObject *value) {
    if (!value) {
      PyErr_Clear();
      unsupported("constant expression raised");
    }
    PyRef owned = PyRef::steal(value);
    return constant(owned.get());
  }

  VarPtr binaryOp(int kind, const VarPtr &lhs, const VarPtr &rhs) {
    if (bothConstantNumbers(lhs, rhs))
      return foldPython(foldBinary(kind, lhs, rhs));
    static const std::map<int, std::string> ops = {{NB_ADD, "add"},
                                                   {NB_SUBTRACT, "sub"},
                                                   {NB_MULTIPLY, "mul"},
                                                   {NB_TRUE_DIVIDE, "div"},
                                                   {NB_POWER, "pow"}, {NB_MATRIX_MULTIPLY, "matmul"}};
    bool inPlace = kind >= NB_INPLACE_ADD;
    auto found = ops.find(inPlace ? kind - (NB_INPLACE_ADD - NB_ADD) : kind);
    if (found == ops.end())
      unsupported("binary operator " + std::to_string(kind) + " on a tensor");
    VarPtr value = emit(found->second, {operandOf(lhs, found->second),
                                        operandOf(rhs, found->second)});
    if (inPlace && lhs->kind == Var::Kind::Tensor)
      return updateInPlace(lhs, value);
    return value;
  }

  /// x.op_(...) / x += y: the graph computes a new value and every reference
  /// to x's Var sees it. Refused where the graph would have to write into
  /// memory it does not own (inputs) or into aliases (views).
  VarPtr updateInPlace(const VarPtr &target, const VarPtr &value) {
    if (target->kind != Var::Kind::Tensor || value->kind != Var::Kind::Tensor)
      unsupported("in-place update of a non-tensor");
    Value *old = target->tensor;
    if (!old->producer)
      unsupported("in-place update of an input or parameter (write-back is "
                  "not supported yet)");
    if (aliased.count(old))
      unsupported("in-place update of a tensor that has views");
    if (value->tensor->type.dtype != old->type.dtype ||
        value->tensor->type.sizes != old->type.sizes)
      unsupported("in-place update that changes dtype or shape");
    target->tensor = value->tensor;
    return target;
  }

  PyObject *foldBinary(int kind, const VarPtr &lhs, const VarPtr &rhs) {
    PyObject *a = lhs->object.get(), *b = rhs->object.get();
    switch (kind) {
    case NB_ADD:
      return PyNumber_Add(a, b);
    case NB_SUBTRACT:
      return PyNumber_Subtract(a, b);
    case NB_MULTIPLY:
      return PyNumber_Multiply(a, b);
    case NB_TRUE_DIVIDE:
      return PyNumber_TrueDivide(a, b);
    case NB_FLOOR_DIVIDE:
      return PyNumber_FloorDivide(a, b);
    case NB_REMAINDER:
      return PyNumber_Remainder(a, b);
    case NB_POWER:
      return PyNumber_Power(a, b, Py_None);
    default:
      unsupported("binary operator " + std::to_string(kind) + " on constants");
    }
  }

  /// Constants, dtypes and devices compare without running user code.
  static bool comparableAtCapture(const VarPtr &var) {
    if (var->kind == Var::Kind::Constant)
      return true;
    if (var->kind != Var::Kind::Object)
      return false;
    std::string type = Py_TYPE(var->object.get())->tp_name;
    return type == "torch.dtype" || type == "torch.device";
  }

  VarPtr compareOp(int kind, const VarPtr &lhs, const VarPtr &rhs) {
    if (comparableAtCapture(lhs) && comparableAtCapture(rhs))
      return foldPython(
          PyObject_RichCompare(lhs->object.get(), rhs->object.get(), kind));
    static const char *ops[] = {"lt", "le", "eq", "ne", "gt", "ge"};
    if (kind < 0 || kind > 5)
      unsupported("comparison operator");
    return emit(ops[kind],
                {operandOf(lhs, ops[kind]), operandOf(rhs, ops[kind])});
  }

  VarPtr negate(const VarPtr &var) {
    if (var->kind == Var::Kind::Constant)
      return foldPython(PyNumber_Negative(var->object.get()));
    return emit("neg", {operandOf(var, "neg")});
  }

  VarPtr logicalNot(const VarPtr &var) {
    if (var->kind != Var::Kind::Constant)
      unsupported("'not' on a tensor (data-dependent)");
    int truth = PyObject_IsTrue(var->object.get());
    if (truth < 0) {
      PyErr_Clear();
      unsupported("truth value raised");
    }
    return constant(truth ? Py_False : Py_True);
  }

  VarPtr isOp(const VarPtr &lhs, const VarPtr &rhs, bool inverted) {
    auto concrete = [](const VarPtr &var) {
      return var->kind == Var::Kind::Constant || var->kind == Var::Kind::Object;
    };
    bool same;
    if (concrete(lhs) && concrete(rhs))
      same = lhs->object.get() == rhs->object.get();
    else if (lhs->kind == Var::Kind::Tensor && rhs->kind == Var::Kind::Tensor)
      same = lhs == rhs || (lhs->tensor == rhs->tensor
                                ? (unsupported("'is' on two references to one "
                                               "tensor value"),
                                   false)
                                : false);
    else if ((lhs->kind == Var::Kind::Tensor && concrete(rhs)) ||
             (rhs->kind == Var::Kind::Tensor && concrete(lhs)))
      same = false; // A tensor is never None or another constant.
    else
      unsupported("'is' on values the interpreter cannot compare");
    return constant(same != inverted ? Py_True : Py_False);
  }

  void call(int argc) {
    std::vector<VarPtr> args(static_cast<size_t>(argc));
    for (int i = argc - 1; i >= 0; --i)
      args[size_t(i)] = pop();
    VarPtr second = pop();
    VarPtr first = pop();
    VarPtr callee = second;
    if (first->kind != Var::Kind::Null) {
      callee = first;
      args.insert(args.begin(), second);
    }
    size_t keywordCount = kwNames ? size_t(PyTuple_GET_SIZE(kwNames.get())) : 0;
    std::map<std::string, VarPtr> keywords;
    for (size_t k = 0; k < keywordCount; ++k)
      keywords[PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwNames.get(), k))] =
          args[args.size() - keywordCount + k];
    args.resize(args.size() - keywordCount);
    kwNames = PyRef();
    if (callee->kind == Var::Kind::BoundMethod) {
      args.insert(args.begin(), callee->self);
      callee = callee->function;
    }
    push(callAny(callee, args, keywords));
  }

  VarPtr callAny(const VarPtr &callee, const std::vector<VarPtr> &args,
                 const std::map<std::string, VarPtr> &keywords) {
    if (callee->kind == Var::Kind::TensorMethod &&
        isMetadataMethod(callee->method))
      return tensorMetadata(callee->self, callee->method, args);
    if (callee->kind == Var::Kind::Object) {
      PyObject *object = callee->object.get();
      if (!opTable().function(object) && PyFunction_Check(object))
        return inlineFunction(callee, args, keywords);
      if (isModule(object))
        return inlineModule(callee, args, keywords);
    }
    return callTorch(callee, args, keywords);
  }

  VarPtr callTorch(const VarPtr &callee, std::vector<VarPtr> args,
                   const std::map<std::string, VarPtr> &keywords) {
    const OpBinding *binding = nullptr;
    std::string what;
    if (callee->kind == Var::Kind::TensorMethod) {
      binding = opTable().method(callee->method);
      args.insert(args.begin(), callee->self);
      what = "Tensor." + callee->method;
    } else if (callee->kind == Var::Kind::Object) {
      if (VarPtr folded = foldBuiltin(callee->object.get(), args, keywords))
        return folded;
      binding = opTable().function(callee->object.get());
      PyRef name = PyRef::steal(
          PyObject_GetAttrString(callee->object.get(), "__qualname__"));
      if (!name)
        PyErr_Clear();
      what = name && PyUnicode_Check(name.get()) ? PyUnicode_AsUTF8(name.get())
                                                 : "a callable";
    } else {
      unsupported("call of a value that is not a function");
    }
    if (!binding)
      unsupported("call to " + what + " (not in the op table)");
    if (binding->alternatives.empty())
      return bindAndEmit(*binding, what, args, keywords);
    std::string reasons;
    for (const OpBinding &alternative : binding->alternatives) {
      try {
        return bindAndEmit(alternative, what, args, keywords);
      } catch (const Unsupported &error) {
        reasons += std::string(reasons.empty() ? "" : "; ") +
                   error.bareMessage();
      }
    }
    unsupported("no overload of " + what + " fits (" + reasons + ")");
  }

  //===--------------------------------------------------------------------===//
  // Inlining user functions, methods and nn.Module calls
  //===--------------------------------------------------------------------===//

  static PyObject *moduleClass() {
    static PyObject *cls = [] {
      PyObject *module = PyImport_ImportModule("torch.nn");
      PyObject *found = module ? PyObject_GetAttrString(module, "Module")
                               : nullptr;
      Py_XDECREF(module);
      if (!found)
        PyErr_Clear();
      return found;
    }();
    return cls;
  }

  /// isinstance(object, torch.nn.<name>).
  static bool isInstanceOf(PyObject *object, const char *name) {
    PyRef nn = PyRef::steal(PyImport_ImportModule("torch.nn"));
    PyRef cls = PyRef::steal(nn ? PyObject_GetAttrString(nn.get(), name) : nullptr);
    int result = cls ? PyObject_IsInstance(object, cls.get()) : 0;
    if (result < 0 || !cls)
      PyErr_Clear();
    return result == 1;
  }

  static bool isModule(PyObject *object) {
    PyObject *cls = moduleClass();
    return cls && !PyType_Check(object) &&
           PyObject_TypeCheck(object, reinterpret_cast<PyTypeObject *>(cls));
  }

  /// obj.name where type(obj) defines name as a plain Python function:
  /// a method bound to obj, its function guarded through type(obj).
  VarPtr boundMethod(const VarPtr &base, PyObject *name) {
    PyObject *object = base->object.get();
    if (PyModule_Check(object) || PyType_Check(object))
      return nullptr;
    PyObject *function = _PyType_Lookup(Py_TYPE(object), name);
    if (!function || !PyFunction_Check(function))
      return nullptr;
    PyObject **dict = _PyObject_GetDictPtr(object);
    if (dict && *dict && PyDict_GetItemWithError(*dict, name))
      return nullptr;
    PyErr_Clear();
    VarPtr method = makeVar(Var::Kind::BoundMethod);
    method->self = base;
    method->function = classify(
        function, namedSource(Source::Kind::TypeAttr, sourceOfObject(base), name));
    return method;
  }

  /// The hook dictionaries a module call would run; all must be empty (and
  /// stay empty: guarded).
  void requireNoHooks(const VarPtr &module) {
    static const char *perModule[] = {
        "_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
        "_backward_pre_hooks", "_forward_hooks_with_kwargs",
        "_forward_pre_hooks_with_kwargs"};
    int source = sourceOfObject(module);
    for (const char *name : perModule) {
      PyRef key = PyRef::steal(PyUnicode_InternFromString(name));
      PyRef dict = PyRef::steal(PyObject_GetAttr(module->object.get(), key.get()));
      if (!dict) {
        PyErr_Clear();
        continue;
      }
      guardEmpty(dict.get(), namedSource(Source::Kind::Attr, source, key.get()),
                 name);
    }
    static const char *global[] = {
        "_global_forward_hooks", "_global_forward_pre_hooks",
        "_global_backward_hooks", "_global_backward_pre_hooks"};
    PyRef torchModule = PyRef::steal(PyImport_ImportModule("torch.nn.modules.module"));
    for (const char *name : global) {
      PyRef dict = PyRef::steal(
          torchModule ? PyObject_GetAttrString(torchModule.get(), name) : nullptr);
      if (!dict) {
        PyErr_Clear();
        continue;
      }
      Source fixed;
      fixed.kind = Source::Kind::Fixed;
      fixed.fixed = dict;
      fixed.name = PyRef::steal(PyUnicode_InternFromString(name));
      guardEmpty(dict.get(), addSource(std::move(fixed)), name);
    }
  }

  void guardEmpty(PyObject *dict, int source, const char *what) {
    if (!PyDict_Check(dict) || PyDict_Size(dict) != 0)
      unsupported(std::string("module call with ") + what + " registered");
    Guard guard;
    guard.kind = Guard::Kind::EmptyDict;
    guard.source = source;
    addGuard(std::move(guard));
  }

  VarPtr inlineModule(const VarPtr &module, std::vector<VarPtr> args,
                      const std::map<std::string, VarPtr> &keywords) {
    requireNoHooks(module);
    PyRef name = PyRef::steal(PyUnicode_InternFromString("forward"));
    VarPtr forward = boundMethod(module, name.get());
    if (!forward)
      unsupported(std::string("call of ") + Py_TYPE(module->object.get())->tp_name +
                  " whose forward is not a Python function");
    args.insert(args.begin(), module);
    return callAny(forward->function, args, keywords);
  }

  /// Runs a Python function's bytecode symbolically in place of the call.
  VarPtr inlineFunction(const VarPtr &function, const std::vector<VarPtr> &args,
                        const std::map<std::string, VarPtr> &keywords) {
    PyObject *object = function->object.get();
    auto *callee = reinterpret_cast<PyCodeObject *>(PyFunction_GET_CODE(object));
    const int skipped = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR;
    if (callee->co_flags & skipped)
      unsupported("call of a generator or coroutine function");
    if (inlineDepth >= kMaxInlineDepth)
      unsupported("calls nested deeper than " + std::to_string(kMaxInlineDepth));
    if (function->source < 0)
      unsupported("call of a function created during capture");
    std::vector<VarPtr> calleeLocals = bindArguments(object, callee, args, keywords);
    // Save this frame's interpretation state, run the callee, restore.
    PyCodeObject *savedCode = code;
    std::string savedFile = fileName;
    std::vector<Instruction> savedInstructions = std::move(instructions);
    std::map<int, int> savedOffsets = std::move(indexOfOffset);
    std::vector<VarPtr> savedStack = std::move(stack);
    std::vector<VarPtr> savedLocals = std::move(locals);
    PyRef savedKwNames = kwNames;
    int savedLine = currentLine;
    PyObject *savedGlobals = globals, *savedClosure = closure;
    int savedSource = functionSource;
    code = callee;
    fileName = PyUnicode_AsUTF8(callee->co_filename);
    stack.clear();
    locals = std::move(calleeLocals);
    kwNames = PyRef();
    globals = PyFunction_GET_GLOBALS(object);
    closure = PyFunction_GET_CLOSURE(object);
    functionSource = function->source;
    ++inlineDepth;
    VarPtr result = runBody();
    --inlineDepth;
    code = savedCode;
    fileName = savedFile;
    instructions = std::move(savedInstructions);
    indexOfOffset = std::move(savedOffsets);
    stack = std::move(savedStack);
    locals = std::move(savedLocals);
    kwNames = savedKwNames;
    currentLine = savedLine;
    globals = savedGlobals;
    closure = savedClosure;
    functionSource = savedSource;
    return result;
  }

  /// The callee's initial locals: parameters bound like CPython binds them
  /// (positional, keyword, defaults, *args, **kwargs).
  std::vector<VarPtr> bindArguments(PyObject *function, PyCodeObject *callee,
                                    const std::vector<VarPtr> &args,
                                    const std::map<std::string, VarPtr> &keywords) {
    std::vector<VarPtr> slots(size_t(callee->co_nlocalsplus));
    int positional = callee->co_argcount, keywordOnly = callee->co_kwonlyargcount;
    bool varargs = callee->co_flags & CO_VARARGS;
    bool varkw = callee->co_flags & CO_VARKEYWORDS;
    VarPtr extra = makeVar(Var::Kind::Dict);
    PyRef names = PyRef::steal(PyCode_GetVarnames(callee));
    auto nameOf = [&](int i) {
      return std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(names.get(), i)));
    };
    if (!varargs && int(args.size()) > positional)
      unsupported("call with too many positional arguments");
    for (int i = 0; i < positional && i < int(args.size()); ++i)
      slots[i] = args[i];
    if (varargs) {
      VarPtr rest = makeVar(Var::Kind::Tuple);
      for (size_t i = size_t(positional); i < args.size(); ++i)
        rest->items.push_back(args[i]);
      slots[positional + keywordOnly] = rest;
    }
    for (auto &keyword : keywords) {
      int slot = -1;
      for (int i = 0; i < positional + keywordOnly; ++i)
        if (nameOf(i) == keyword.first)
          slot = i;
      if (slot < 0 && varkw) {
        extra->keys.push_back(keyword.first);
        extra->items.push_back(keyword.second);
        continue;
      }
      if (slot < 0 || slots[slot])
        unsupported("call with an unexpected keyword '" + keyword.first + "'");
      slots[slot] = keyword.second;
    }
    if (varkw)
      slots[positional + keywordOnly + (varargs ? 1 : 0)] = extra;
    PyObject *defaults = PyFunction_GET_DEFAULTS(function);
    int defaultCount = defaults ? int(PyTuple_GET_SIZE(defaults)) : 0;
    for (int i = 0; i < positional; ++i) {
      if (slots[i])
        continue;
      int d = i - (positional - defaultCount);
      if (d < 0)
        unsupported("call without argument '" + nameOf(i) + "'");
      slots[i] = constant(PyTuple_GET_ITEM(defaults, d));
    }
    PyObject *kwDefaults = PyFunction_GET_KW_DEFAULTS(function);
    for (int i = positional; i < positional + keywordOnly; ++i) {
      if (slots[i])
        continue;
      PyObject *value = kwDefaults ? PyDict_GetItemString(kwDefaults, nameOf(i).c_str())
                                   : nullptr;
      if (!value)
        unsupported("call without argument '" + nameOf(i) + "'");
      slots[i] = constant(value);
    }
    return slots;
  }

  //===--------------------------------------------------------------------===//
  // Tensor metadata (static under the tensor guards)
  //===--------------------------------------------------------------------===//

  static bool isMetadataMethod(const std::string &name) {
    return name == "size" || name == "dim" || name == "numel" ||
           name == "ndimension" || name == "nelement";
  }

  VarPtr sizesTuple(const TensorType &type) {
    PyRef tuple = PyRef::steal(PyTuple_New(Py_ssize_t(type.rank())));
    for (size_t k = 0; k < type.rank(); ++k) {
      if (!type.sizes[k].isConstant())
        unsupported("symbolic size");
      PyTuple_SET_ITEM(tuple.get(), k,
                       PyLong_FromLongLong(type.sizes[k].constant()));
    }
    return constant(tuple.get());
  }

  VarPtr integerConstant(int64_t value) {
    PyRef number = PyRef::steal(PyLong_FromLongLong(value));
    return constant(number.get());
  }

  VarPtr tensorAttribute(const VarPtr &base, const std::string &attribute) {
    const TensorType &type = base->tensor->type;
    if (attribute == "shape")
      return sizesTuple(type);
    if (attribute == "ndim")
      return integerConstant(int64_t(type.rank()));
    if (attribute == "is_cuda")
      return constant(type.device.rfind("cuda", 0) == 0 ? Py_True : Py_False);
    if (attribute == "requires_grad")
      return constant(Py_False);
    if (attribute == "dtype" || attribute == "device")
      return unguardedObject(attribute == "dtype" ? dtypeObject(type.dtype)
                                                  : deviceObject(type.device));
    if (attribute == "T" || attribute == "mT") {
      if (type.rank() < 2)
        return base;
      return emit("transpose", {base->tensor},
                  {{"dim0", int64_t(type.rank() - 2)},
                   {"dim1", int64_t(type.rank() - 1)}});
    }
    if (!opTable().method(attribute) && !isMetadataMethod(attribute))
      unsupported("Tensor." + attribute);
    VarPtr method = makeVar(Var::Kind::TensorMethod);
    method->method = attribute;
    method->self = base;
    return method;
  }

  VarPtr unguardedObject(PyRef object) {
    if (!object) {
      PyErr_Clear();
      unsupported("tensor metadata object");
    }
    VarPtr var = makeVar(Var::Kind::Object);
    var->object = object;
    return var;
  }

  static PyRef dtypeObject(DType dtype) {
    static const char *names[] = {"bool",    "int32",   "int64",  "float16",
                                  "bfloat16", "float32", "float64"};
    PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
    return PyRef::steal(torch ? PyObject_GetAttrString(
                                    torch.get(), names[static_cast<int>(dtype)])
                              : nullptr);
  }

  static PyRef deviceObject(const std::string &device) {
    PyRef torch = PyRef::steal(PyImport_ImportModule("torch"));
    return PyRef::steal(torch ? PyObject_CallMethod(torch.get(), "device", "s",
                                                    device.c_str())
                              : nullptr);
  }

  VarPtr tensorMetadata(const VarPtr &tensor, const std::string &method,
                        const std::vector<VarPtr> &args) {
    const TensorType &type = tensor->tensor->type;
    if (method == "dim" || method == "ndimension")
      return integerConstant(int64_t(type.rank()));
    if (method == "numel" || method == "nelement") {
      if (!type.numel().isConstant())
        unsupported("symbolic numel");
      return integerConstant(type.numel().constant());
    }
    if (args.empty())
      return sizesTuple(type);
    if (args[0]->kind != Var::Kind::Constant ||
        !PyLong_CheckExact(args[0]->object.get()))
      unsupported("Tensor.size with a non-constant dim");
    int64_t dim = PyLong_AsLongLong(args[0]->object.get());
    int64_t rank = int64_t(type.rank());
    if (dim < -rank || dim >= rank)
      unsupported("Tensor.size: dim out of range");
    const SymExpr &size = type.sizes[size_t(dim < 0 ? dim + rank : dim)];
    if (!size.isConstant())
      unsupported("symbolic size");
    return integerConstant(size.constant());
  }

  //===--------------------------------------------------------------------===//
  // Iteration (unrolled)
  //===--------------------------------------------------------------------===//

  /// Iterators over tuples, lists, ranges and module containers
  /// (nn.Sequential, nn.ModuleList) are unrolled at capture.
  VarPtr iterate(const VarPtr &iterable) {
    VarPtr iterator = makeVar(Var::Kind::Iterator);
    if (iterable->kind == Var::Kind::Tuple) {
      iterator->items = iterable->items;
      return iterator;
    }
    if (iterable->kind == Var::Kind::Constant &&
        PyRange_Check(iterable->object.get())) {
      PyRef items = PyRef::steal(PySequence_Tuple(iterable->object.get()));
      if (!items || PyTuple_GET_SIZE(items.get()) > 4096) {
        PyErr_Clear();
        unsupported("range too long to unroll");
      }
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items.get()); ++i)
        iterator->items.push_back(constant(PyTuple_GET_ITEM(items.get(), i)));
      return iterator;
    }
    if (iterable->kind == Var::Kind::Constant &&
        PyTuple_Check(iterable->object.get())) {
      iterator->items = itemsOf(iterable);
      return iterator;
    }
    if (iterable->kind == Var::Kind::Object && isModule(iterable->object.get()))
      return iterateModules(iterable, iterator);
    unsupported("iteration over this value");
  }

  VarPtr iterateModules(const VarPtr &container, VarPtr iterator) {
    const char *type = Py_TYPE(container->object.get())->tp_name;
    if (!isInstanceOf(container->object.get(), "Sequential") &&
        !isInstanceOf(container->object.get(), "ModuleList"))
      unsupported(std::string("iteration over a ") + type);
    PyRef modules = PyRef::steal(
        PyObject_GetAttrString(container->object.get(), "_modules"));
    if (!modules || !PyDict_Check(modules.get())) {
      PyErr_Clear();
      unsupported("module container without _modules");
    }
    PyRef modulesKey = PyRef::steal(PyUnicode_InternFromString("_modules"));
    Guard length;
    length.kind = Guard::Kind::DictLength;
    length.source = namedSource(Source::Kind::Attr, sourceOfObject(container),
                                modulesKey.get());
    length.length = size_t(PyDict_Size(modules.get()));
    addGuard(std::move(length));
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    std::vector<PyRef> keys;
    while (PyDict_Next(modules.get(), &pos, &key, &value))
      keys.push_back(PyRef::borrow(key));
    for (const PyRef &name : keys) {
      PyRef child = PyRef::steal(PyObject_GetAttr(container->object.get(), name.get()));
      if (!child) {
        PyErr_Clear();
        unsupported("module container entry");
      }
      iterator->items.push_back(classify(
          child.get(),
          namedSource(Source::Kind::Attr, sourceOfObject(container), name.get())));
    }
    return iterator;
  }

  /// Pure builtins (float, int, min, ...) on constants run at capture time.
  VarPtr foldBuiltin(PyObject *callable, const std::vector<VarPtr> &args,
                     const std::map<std::string, VarPtr> &keywords) {
    static const char *pure[] = {"float", "int", "bool", "abs", "min",
                                 "max", "round", "len", "pow"};
    PyObject *builtins = frame->builtins;
    bool isPure = false;
    for (const char *name : pure)
      isPure |= PyDict_Check(builtins) &&
                PyDict_GetItemString(builtins, name) == callable;
    if (!isPure || !keywords.empty())
      return nullptr;
    PyRef tuple = PyRef::steal(PyTuple_New(Py_ssize_t(args.size())));
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i]->kind != Var::Kind::Constant)
        return nullptr;
      PyTuple_SET_ITEM(tuple.get(), i, PyRef(args[i]->object).release());
    }
    return foldPython(PyObject_Call(callable, tuple.get(), nullptr));
  }

  VarPtr bindAndEmit(const OpBinding &binding, const std::string &what,
                     const std::vector<VarPtr> &args,
                     const std::map<std::string, VarPtr> &keywords) {
    Binding bound{binding.graphOp, {}, {}};
    size_t positional = 0;
    for (const ParamSpec &param : binding.params) {
      if (param.kind == ParamSpec::Kind::IntsVararg && !param.keywordOnly &&
          positional < args.size()) {
        std::vector<VarPtr> rest(args.begin() + positional, args.end());
        positional = args.size();
        bound.attributes[param.attribute] = intsOf(rest, what, param.name);
        continue;
      }
      VarPtr arg;
      if (!param.keywordOnly && positional < args.size())
        arg = args[positional++];
      else if (keywords.count(param.name))
        arg = keywords.at(param.name);
      if (!arg && !param.hasDefault)
        unsupported(what + " without argument '" + param.name + "'");
      bindParam(param, arg, what, bound);
    }
    if (positional < args.size())
      unsupported(what + " with too many positional arguments");
    for (auto &keyword : keywords) {
      bool known = false;
      for (const ParamSpec &param : binding.params)
        known |= param.name == keyword.first;
      if (!known)
        unsupported(what + " with keyword '" + keyword.first + "'");
    }
    for (auto &extra : binding.extraAttributes) {
      if (extra.first == "__inplace__") {
        bound.inPlace = true;
        continue;
      }
      bound.attributes[extra.first] = attributeOf(extra.second.get(), what);
    }
    if (binding.graphOp == "cast" && bound.operands[0].isValue() &&
        std::get<DType>(bound.attributes["dtype"]) ==
            bound.operands[0].value->type.dtype) {
      VarPtr same = makeVar(Var::Kind::Tensor);
      same->tensor = bound.operands[0].value;
      return same;
    }
    VarPtr result = emit(binding.graphOp, bound.operands, bound.attributes);
    if (!bound.inPlace)
      return result;
    if (!bound.self)
      unsupported(what + " in place without a tensor to update");
    return updateInPlace(bound.self, result);
  }

  /// What the arguments of one call bind to.
  struct Binding {
    std::string op;
    std::vector<Operand> operands;
    std::map<std::string, Attribute> attributes;
    /// The first tensor argument, and whether the call updates it in place.
    VarPtr self;
    bool inPlace = false;
  };

  static bool isNoneVar(const VarPtr &var) {
    return var->kind == Var::Kind::Constant && var->object.get() == Py_None;
  }

  bool opAccepts(const std::string &op, const std::string &attribute) {
    const OpInfo *info = lookupOp(op);
    return info && std::find(info->attributes.begin(), info->attributes.end(),
                             attribute) != info->attributes.end();
  }

  void bindParam(const ParamSpec &param, const VarPtr &arg,
                 const std::string &what, Binding &bound) {
    switch (param.kind) {
    case ParamSpec::Kind::Operand:
      bound.operands.push_back(
          arg ? operandOf(arg, what)
              : operandOf(constant(param.defaultValue.get()), what));
      if (arg && !bound.self && arg->kind == Var::Kind::Tensor)
        bound.self = arg;
      return;
    case ParamSpec::Kind::InPlaceFlag: {
      if (!arg)
        return;
      PyObject *flag = concreteOf(arg, what, param.name);
      if (!PyBool_Check(flag))
        unsupported(what + " with a non-bool '" + param.name + "'");
      bound.inPlace = flag == Py_True;
      return;
    }
    case ParamSpec::Kind::Operands:
      if (!arg)
        unsupported(what + " without '" + param.name + "'");
      for (const VarPtr &item : itemsOf(arg))
        bound.operands.push_back(operandOf(item, what));
      return;
    case ParamSpec::Kind::OptionalOperand: {
      bool present = arg && !isNoneVar(arg);
      if (present)
        bound.operands.push_back(operandOf(arg, what));
      if (opAccepts(bound.op, "has_" + param.name))
        bound.attributes["has_" + param.name] = present;
      return;
    }
    case ParamSpec::Kind::Attr:
    case ParamSpec::Kind::IntsVararg:
      bindAttribute(param, arg, what, bound);
      return;
    case ParamSpec::Kind::Fixed:
      checkFixed(param, arg, what);
      return;
    case ParamSpec::Kind::Ignored:
      return;
    }
  }

  void bindAttribute(const ParamSpec &param, const VarPtr &arg,
                     const std::string &what, Binding &bound) {
    if (!arg && param.defaultValue.get() == Py_None)
      return;
    if (arg && isNoneVar(arg))
      return;
    Attribute value = arg ? attributeOfVar(arg, what, param.name)
                          : attributeOf(param.defaultValue.get(), what);
    std::string name = param.attribute;
    if (name == "size_or_sizes")
      name = std::holds_alternative<int64_t>(value) ? "size" : "sizes";
    bound.attributes[name] = value;
  }

  void checkFixed(const ParamSpec &param, const VarPtr &arg,
                  const std::string &what) {
    if (!arg)
      return;
    PyObject *object = concreteOf(arg, what, param.name);
    int equal =
        PyObject_RichCompareBool(object, param.defaultValue.get(), Py_EQ);
    if (equal != 1 || Py_TYPE(object) != Py_TYPE(param.defaultValue.get())) {
      PyErr_Clear();
      unsupported(what + " with " + param.name + " other than its default");
    }
  }

  /// Integer list from vararg ints or one tuple/list of ints.
  std::vector<int64_t> intsOf(const std::vector<VarPtr> &args,
                              const std::string &what,
                              const std::string &param) {
    std::vector<VarPtr> items = args;
    if (args.size() == 1 && args[0]->kind != Var::Kind::Constant)
      items = itemsOf(args[0]);
    else if (args.size() == 1 && PyTuple_Check(args[0]->object.get()))
      items = itemsOf(args[0]);
    std::vector<int64_t> values;
    for (const VarPtr &item : items) {
      if (item->kind != Var::Kind::Constant ||
          !PyLong_CheckExact(item->object.get()))
        unsupported(what + " with a non-constant '" + param + "'");
      values.push_back(PyLong_AsLongLong(item->object.get()));
    }
    return values;
  }

  Attribute attributeOfVar(const VarPtr &arg, const std::string &what,
                           const std::string &param) {
    if (arg->kind == Var::Kind::Tuple)
      return intsOf({arg}, what, param);
    return attributeOf(concreteOf(arg, what, param), what);
  }

  PyObject *concreteOf(const VarPtr &arg, const std::string &what,
                       const std::string &param) {
    if (arg->kind != Var::Kind::Constant && arg->kind != Var::Kind::Object)
      unsupported(what + " with a non-constant '" + param + "'");
    return arg->object.get();
  }

  Attribute attributeOf(PyObject *object, const std::string &what) {
    if (std::optional<DType> type = dtypeFromObject(object))
      return *type;
    if (PyBool_Check(object))
      return object == Py_True;
    if (PyLong_CheckExact(object))
      return int64_t(PyLong_AsLongLong(object));
    if (PyFloat_CheckExact(object))
      return PyFloat_AS_DOUBLE(object);
    if (PyUnicode_CheckExact(object))
      return std::string(PyUnicode_AsUTF8(object));
    if (PyTuple_Check(object) || PyList_Check(object)) {
      std::vector<int64_t> values;
      PyRef items = PyRef::steal(PySequence_Tuple(object));
      for (Py_ssize_t i = 0; items && i < PyTuple_GET_SIZE(items.get()); ++i) {
        PyObject *item = PyTuple_GET_ITEM(items.get(), i);
        if (!PyLong_CheckExact(item))
          unsupported(what + " with a sequence of non-integers");
        values.push_back(PyLong_AsLongLong(item));
      }
      return values;
    }
    unsupported(what + " with an argument of type " + Py_TYPE(object)->tp_name);
  }

  //===--------------------------------------------------------------------===//
  // Return value
  //===--------------------------------------------------------------------===//

  OutputSpec outputOf(const VarPtr &var) {
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

  OutputSpec tensorOutput(Value *value) {
    OutputSpec spec;
    Graph &graph = *result.graph;
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
};

} // namespace

bool globalStateMatches(const CapturedFrame &captured) {
  return gradModeEnabled() == captured.gradMode && defaultDtypeIsFloat32();
}

CapturedFrame captureFrame(DynafuseFrame *frame, const std::string &graphName) {
  return SymbolicInterpreter(frame, graphName).run();
}

} // namespace dynafuse

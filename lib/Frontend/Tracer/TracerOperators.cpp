//===- TracerOperators.cpp - Python operators, and emitting graph nodes ---===//
#include "BytecodeTracer.h"

#include "dynafuse/Graph/Derivatives.h"
#include "dynafuse/Graph/Passes.h"
#include "dynafuse/Graph/ViewRules.h"

namespace dynafuse {
namespace capture {

Operand BytecodeTracer::operandOf(const VarPtr &var, const std::string &what) {
  if (var->kind == Var::Kind::Tensor)
    return var->tensor;
  if (var->kind == Var::Kind::SymInt) {
    // A size in tensor arithmetic: a 0-dim i64 tensor of its value (which
    // promotes as the Python int would: the tensor operand's dtype wins).
    std::map<std::string, Attribute> attributes;
    attributes["shape"] = std::vector<int64_t>{};
    attributes["value"] = symbolic.env.canonical(var->size);
    attributes["dtype"] = DType::I64;
    return emit(Op::Full, {}, attributes)->tensor;
  }
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

VarPtr BytecodeTracer::emit(Op op, std::vector<Operand> operands,
                            std::map<std::string, Attribute> attributes) {
  for (Operand &operand : operands)
    if (operand.isValue())
      operand.value = latestValue(operand.value);
  return emitAsIs(op, std::move(operands), std::move(attributes));
}

VarPtr BytecodeTracer::emitAsIs(Op op, std::vector<Operand> operands,
                                std::map<std::string, Attribute> attributes) {
  bool differentiable = checkDifferentiable(op, operands);
  if (!symbolic.env.empty()) {
    symbolic.unifyOperandSizes(op, operands, attributes);
    if (op == Op::Reshape && !operands.empty() && operands[0].isValue())
      symbolic.resolveInferredSize(operands[0].value->type, attributes);
    if (op == Op::Expand && !operands.empty() && operands[0].isValue())
      symbolic.unifyExpandedSizes(operands[0].value->type, attributes);
    if (op == Op::Narrow && !operands.empty() && operands[0].isValue())
      if (std::optional<std::string> problem = symbolic.narrowOutOfRange(
              operands[0].value->type, attributes))
        unsupported(*problem);
  }
  auto addNode = [&](std::vector<Operand> nodeOperands,
                     std::map<std::string, Attribute> nodeAttributes) {
    try {
      return result.graph->addNode(op, std::move(nodeOperands),
                                   std::move(nodeAttributes),
                                   here(current.currentLine));
    } catch (const Unsupported &) {
      throw;
    } catch (const Error &error) {
      throw Unsupported(error.bareMessage(), here(current.currentLine));
    }
  };
  // Only an op with a symbolic attribute may be retried: only it keeps a
  // copy of its operands and attributes.
  std::set<std::string> attributeSymbols;
  if (!symbolic.env.empty())
    for (const auto &[name, attribute] : attributes)
      collectSymbols(attribute, attributeSymbols);
  Node *node = nullptr;
  if (attributeSymbols.empty()) {
    node = addNode(std::move(operands), std::move(attributes));
  } else {
    try {
      node = addNode(operands, attributes);
    } catch (const Unsupported &) {
      // An op whose rule needs an attribute constant (a dim, a count)
      // that is a size expression: the attribute's value, guarded once the
      // op takes it (an op refused anyway adds no guard).
      std::map<std::string, Attribute> atHints = attributes;
      symbolic.specializeAttributes(atHints, /*guarded=*/false);
      node = addNode(std::move(operands), std::move(atHints));
      symbolic.specializeAttributes(attributes, /*guarded=*/true);
    }
  }
  if (differentiable)
    for (Value *result : node->results)
      if (isDifferentiable(result->type.dtype))
        inputs.markRequiresGrad(result);
  const OpInfo *info = opInfoOf(*node);
  trackViews(*node);
  // split/chunk/unbind give a tuple even of one piece, as torch does.
  if (node->results.size() == 1 && !(info && info->resultsAreSequence)) {
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
  // torch.max(x, dim) returns a named tuple (torch.return_types.max).
  if (op == Op::MaxDim || op == Op::MinDim) {
    tuple->keys = {"values", "indices"};
    PyRef types = PyRef::steal(PyImport_ImportModule("torch.return_types"));
    if (types)
      tuple->object = PyRef::steal(PyObject_GetAttrString(
          types.get(), op == Op::MaxDim ? "max" : "min"));
    if (!tuple->object) {
      PyErr_Clear();
      unsupported("torch.return_types." + opName(op).substr(0, 3) +
                  " is missing");
    }
  }
  return tuple;
}

bool BytecodeTracer::bothConstantNumbers(const VarPtr &lhs, const VarPtr &rhs) {
  return lhs->kind == Var::Kind::Constant && rhs->kind == Var::Kind::Constant;
}

VarPtr BytecodeTracer::foldPython(PyObject *value) {
  if (!value) {
    PyErr_Clear();
    unsupported("constant expression raised");
  }
  PyRef owned = PyRef::steal(value);
  return constant(owned.get());
}

VarPtr BytecodeTracer::binaryOp(int kind, const VarPtr &lhs,
                                const VarPtr &rhs) {
  if (VarPtr result = objects.binaryOperator(kind, lhs, rhs))
    return result;
  if (VarPtr size = sizeArithmetic(kind, lhs, rhs))
    return size;
  // (Specialized sizes among them.) Immutable: `n += 1` is `n + 1`.
  if (bothConstantNumbers(lhs, rhs))
    return foldPython(foldBinary(plainBinaryOperator(kind), lhs, rhs));
  int plain = plainBinaryOperator(kind);
  // Tuples made during capture (sizes) concatenate: `x.size()[:-1] + (n,)`.
  bool tupleLike[2];
  int side = 0;
  for (const VarPtr &operand : {lhs, rhs})
    tupleLike[side++] =
        (operand->kind == Var::Kind::Tuple && !operand->isList &&
         !operand->isSet && operand->keys.empty()) ||
        (operand->kind == Var::Kind::Constant &&
         PyTuple_Check(operand->object.get()));
  if (plain == NB_ADD && tupleLike[0] && tupleLike[1]) {
    VarPtr joined = makeVar(Var::Kind::Tuple);
    joined->items = itemsOf(lhs);
    for (const VarPtr &item : itemsOf(rhs))
      joined->items.push_back(item);
    return joined;
  }
  if (VarPtr list = listArithmetic(kind, lhs, rhs))
    return list;
  static const std::map<int, Op> ops = {{NB_ADD, Op::Add},
                                        {NB_SUBTRACT, Op::Sub},
                                        {NB_MULTIPLY, Op::Mul},
                                        {NB_TRUE_DIVIDE, Op::Div},
                                        {NB_FLOOR_DIVIDE, Op::DivFloor},
                                        {NB_POWER, Op::Pow},
                                        {NB_MATRIX_MULTIPLY, Op::Matmul},
                                        {NB_REMAINDER, Op::Remainder},
                                        {NB_AND, Op::BitwiseAnd},
                                        {NB_OR, Op::BitwiseOr},
                                        {NB_XOR, Op::BitwiseXor}};
  bool inPlace = kind >= NB_INPLACE_ADD;
  auto found = ops.find(plain);
  if (found == ops.end())
    unsupported("binary operator " + std::to_string(kind) + " on a tensor");
  if (found->second == Op::Matmul && !inPlace && autocastCasts.state.any()) {
    // x @ y is torch.matmul, which autocast casts.
    static PyObject *slot = nullptr;
    if (PyObject *matmul = lookupOnce(slot, "torch", "matmul"))
      if (VarPtr cast = autocastCasts.castCall(
              unguardedObject(PyRef::borrow(matmul)), {lhs, rhs}, Keywords()))
        return cast;
  }
  std::vector<Operand> operands = {operandOf(lhs, opName(found->second)),
                                   operandOf(rhs, opName(found->second))};
  if (found->second == Op::DivFloor)
    refuseWithoutDerivative(operands, "x // y");
  VarPtr value = emit(found->second, operands);
  if (inPlace && lhs->kind == Var::Kind::Tensor)
    return updateInPlace(lhs, value);
  return value;
}

/// Lists as Python combines them: `a + b` of two lists is a new list,
/// `a += items` extends a list the frame made (one the caller passed in
/// would need the extension repeated by each run: refused), and `seq * n`
/// (or `n * seq`) of a list or tuple and a constant int repeats it. Null
/// for other operands.
VarPtr BytecodeTracer::listArithmetic(int kind, const VarPtr &lhs,
                                      const VarPtr &rhs) {
  auto isList = [](const VarPtr &var) {
    return var->kind == Var::Kind::Tuple && var->isList && var->keys.empty();
  };
  auto isSequence = [&](const VarPtr &var) {
    return var->kind == Var::Kind::Tuple && !var->isSet && var->keys.empty();
  };
  auto isCount = [](const VarPtr &var) {
    return var->kind == Var::Kind::Constant &&
           PyLong_CheckExact(var->object.get());
  };
  if (kind == NB_INPLACE_ADD && isList(lhs)) {
    if (lhs->source >= 0)
      unsupported("+= on a list the frame did not make");
    std::vector<VarPtr> added = itemsOf(rhs); // any iterable, as extend
    willMutate(lhs);
    lhs->items.insert(lhs->items.end(), added.begin(), added.end());
    return lhs;
  }
  if (kind == NB_ADD && isList(lhs) && isList(rhs)) {
    VarPtr joined = makeVar(Var::Kind::Tuple);
    joined->isList = true;
    joined->items = lhs->items;
    joined->items.insert(joined->items.end(), rhs->items.begin(),
                         rhs->items.end());
    return joined;
  }
  bool repeatLeft = isSequence(lhs) && isCount(rhs);
  if ((kind == NB_MULTIPLY || kind == NB_INPLACE_MULTIPLY) &&
      (repeatLeft || (isCount(lhs) && isSequence(rhs)))) {
    const VarPtr &sequence = repeatLeft ? lhs : rhs;
    long count = PyLong_AsLong((repeatLeft ? rhs : lhs)->object.get());
    if (count > 4096 || count * long(sequence->items.size()) > 65536)
      unsupported("a sequence repeated too often to unroll");
    if (kind == NB_INPLACE_MULTIPLY && isList(sequence) &&
        sequence->source >= 0)
      unsupported("*= on a list the frame did not make");
    VarPtr repeated = makeVar(Var::Kind::Tuple);
    repeated->isList = sequence->isList;
    for (long i = 0; i < count; ++i)
      repeated->items.insert(repeated->items.end(), sequence->items.begin(),
                             sequence->items.end());
    if (kind == NB_INPLACE_MULTIPLY && isList(sequence)) {
      willMutate(sequence);
      sequence->items = repeated->items;
      return sequence;
    }
    return repeated;
  }
  return nullptr;
}

void BytecodeTracer::keepDivisionChecks() {
  Graph &graph = *result.graph;
  std::set<const Value *> read = liveValues(graph);
  std::vector<Value *> checks;
  for (const auto &node : graph.nodes) {
    static const std::set<Op> divisions = {Op::DivFloor, Op::DivTrunc,
                                           Op::Remainder, Op::Fmod};
    if (!divisions.count(node->op) || node->results.size() != 1 ||
        read.count(node->result()) ||
        isFloating(node->result()->type.dtype) || node->operands.size() != 2)
      continue;
    const Operand &divisor = node->operands[1];
    if (divisor.isValue() || divisor.scalar.asDouble() == 0.0)
      checks.push_back(node->result());
  }
  for (Value *check : checks)
    graph.outputs.push_back(check);
}

void BytecodeTracer::addWriteBacks() {
  Graph &graph = *result.graph;
  // In the graph's input order (the table is keyed by address): the
  // outputs a capture adds are the same in every process.
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const Value *input = graph.inputs[i];
    auto updated = inputs.latestValues().find(input);
    if (updated == inputs.latestValues().end() || updated->second == input)
      continue;
    Value *latest = updated->second;
    int inputIndex = int(i);
    int outputIndex = -1;
    for (size_t k = 0; k < graph.outputs.size(); ++k)
      if (graph.outputs[k] == latest)
        outputIndex = int(k);
    if (outputIndex < 0) {
      graph.outputs.push_back(latest);
      outputIndex = int(graph.outputs.size()) - 1;
    }
    result.writeBacks.push_back({inputIndex, outputIndex});
    guardDisjointFromOtherInputs(input);
  }
}

void BytecodeTracer::guardDisjointFromOtherInputs(const Value *input) {
  int source = inputs.sourceOf(input);
  PyObject *object = nullptr;
  for (const auto &[candidate, entry] : inputs.byObject())
    if (entry.first == source)
      object = candidate;
  Guard guard;
  guard.kind = Guard::Kind::OtherStorage;
  guard.source = source;
  for (const auto &[other, entry] : inputs.byObject()) {
    if (entry.first == source || !object)
      continue;
    if (tensorsShareStorage(object, other))
      unsupported("an input updated in place shares memory with another "
                  "input");
    guard.group.push_back(entry.first);
  }
  // One guard over all the others: a network's batch norms update 60
  // buffers among 120 inputs, and a guard per pair cost a millisecond a call.
  // In source order (the table is keyed by address).
  std::sort(guard.group.begin(), guard.group.end());
  if (!guard.group.empty())
    guardBuilder.addGuard(std::move(guard));
}

PyObject *BytecodeTracer::foldBinary(int kind, const VarPtr &lhs,
                                     const VarPtr &rhs) {
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
  case NB_AND:
    return PyNumber_And(a, b);
  case NB_OR:
    return PyNumber_Or(a, b);
  case NB_XOR:
    return PyNumber_Xor(a, b);
  case NB_LSHIFT:
    return PyNumber_Lshift(a, b);
  case NB_RSHIFT:
    return PyNumber_Rshift(a, b);
  default:
    unsupported("binary operator " + std::to_string(kind) + " on constants");
  }
}


VarPtr BytecodeTracer::compareOp(int kind, const VarPtr &lhs,
                                 const VarPtr &rhs) {
  if ((isSymInt(lhs) || isSymInt(rhs)) && isSizeLike(lhs) && isSizeLike(rhs))
    return constant(symbolic.decide(kind, sizeOf(lhs, "comparison"),
                                sizeOf(rhs, "comparison"))
                        ? Py_True
                        : Py_False);
  if (comparableAtCapture(lhs) && comparableAtCapture(rhs))
    return foldPython(
        PyObject_RichCompare(lhs->object.get(), rhs->object.get(), kind));
  // An object made during capture with identity equality: equal only to
  // itself.
  for (const VarPtr &side : {lhs, rhs})
    if (side->kind == Var::Kind::NewObject && (kind == Py_EQ || kind == Py_NE)) {
      PyRef eq = PyRef::steal(PyUnicode_InternFromString("__eq__"));
      PyObject *equality =
          lookupInClass(side->function->object.get(), nullptr, eq.get());
      PyRef objectEq = PyRef::steal(PyObject_GetAttrString(
          reinterpret_cast<PyObject *>(&PyBaseObject_Type), "__eq__"));
      if (equality != objectEq.get())
        unsupported("== on an object made during capture that defines "
                    "__eq__");
      return constant((lhs == rhs) == (kind == Py_EQ) ? Py_True : Py_False);
    }
  // A tuple or list var, or a constant one (a static torch.Size): its
  // items and whether it is a list; false for anything else.
  auto sequence = [&](const VarPtr &var, std::vector<VarPtr> &items,
                      bool &isList) {
    if (var->kind == Var::Kind::Tuple && !var->isSet) {
      items = var->items;
      isList = var->isList;
      return true;
    }
    PyObject *object = var->object.get();
    if (var->kind != Var::Kind::Constant ||
        !(PyTuple_Check(object) || PyList_Check(object)))
      return false;
    isList = PyList_Check(object);
    PyRef fast = PyRef::steal(PySequence_Fast(object, "a sequence"));
    for (Py_ssize_t i = 0; fast && i < PySequence_Fast_GET_SIZE(fast.get());
         ++i)
      items.push_back(constant(PySequence_Fast_GET_ITEM(fast.get(), i)));
    return true;
  };
  std::vector<VarPtr> left, right;
  bool leftList = false, rightList = false;
  if ((kind == Py_EQ || kind == Py_NE) && sequence(lhs, left, leftList) &&
      sequence(rhs, right, rightList)) {
    // size() != (batch, heads, length): item by item, as Python compares
    // tuples (a list never equals a tuple; torch.Size is a tuple).
    bool equal = leftList == rightList && left.size() == right.size();
    for (size_t i = 0; equal && i < left.size(); ++i) {
      VarPtr same = left[i] == right[i] ? constant(Py_True)
                                        : compareOp(Py_EQ, left[i], right[i]);
      if (same->kind != Var::Kind::Constant ||
          !PyBool_Check(same->object.get()))
        unsupported("== of sequences whose items compare to a tensor");
      equal = same->object.get() == Py_True;
    }
    return constant(equal == (kind == Py_EQ) ? Py_True : Py_False);
  }
  static const Op ops[] = {Op::Lt, Op::Le, Op::Eq, Op::Ne, Op::Gt, Op::Ge};
  if (kind < 0 || kind > 5)
    unsupported("comparison operator");
  return emit(ops[kind], {operandOf(lhs, opName(ops[kind])),
                          operandOf(rhs, opName(ops[kind]))});
}

VarPtr BytecodeTracer::negate(const VarPtr &var) {
  if (VarPtr result = objects.negative(var))
    return result;
  if (isSymInt(var))
    return sizeVar(SymExpr(0) - sizeOf(var, "negation"));
  if (var->kind == Var::Kind::Constant)
    return foldPython(PyNumber_Negative(var->object.get()));
  return emit(Op::Neg, {operandOf(var, opName(Op::Neg))});
}

VarPtr BytecodeTracer::positive(const VarPtr &var) {
  if (var->kind == Var::Kind::Constant)
    return foldPython(PyNumber_Positive(var->object.get()));
  if (var->kind != Var::Kind::Tensor)
    unsupported("unary + of a value that is not a number or a tensor");
  return var; // +tensor is the tensor's value (a new tensor in eager)
}

VarPtr BytecodeTracer::logicalNot(const VarPtr &var) {
  if (var->kind != Var::Kind::Constant)
    unsupported("'not' on a tensor (data-dependent)");
  int truth = PyObject_IsTrue(var->object.get());
  if (truth < 0) {
    PyErr_Clear();
    unsupported("truth value raised");
  }
  return constant(truth ? Py_False : Py_True);
}

bool BytecodeTracer::sameTensorObject(const VarPtr &lhs, const VarPtr &rhs) {
  if (lhs == rhs)
    return true;
  const Value *leftInput = inputs.originalInput(lhs->tensor);
  const Value *rightInput = inputs.originalInput(rhs->tensor);
  if (leftInput && leftInput == rightInput)
    return true;
  if (lhs->tensor == rhs->tensor) {
    // One graph value: the same input object (guarded when it was read
    // through two sources), or one computed value behind two references.
    if (inputs.isInput(lhs->tensor))
      return true;
    unsupported("'is' on two references to one computed tensor value");
  }
  int left = inputs.sourceOf(leftInput);
  int right = inputs.sourceOf(rightInput);
  if (left >= 0 && right >= 0)
    guardBuilder.guardRelation(Guard::Kind::OtherObject, left, right);
  return false;
}

/// `a is b` on objects read from sources: modules are guarded by type only,
/// so the answer is guarded as a relation between the two sources.
void BytecodeTracer::guardSameness(const VarPtr &lhs, const VarPtr &rhs,
                                   bool same) {
  if (lhs->kind != Var::Kind::Object || rhs->kind != Var::Kind::Object)
    return;
  int left = knownSourceOf(lhs), right = knownSourceOf(rhs);
  if (left < 0 || right < 0 || left == right)
    return;
  guardBuilder.guardRelation(
      same ? Guard::Kind::SameObject : Guard::Kind::OtherObject, left, right);
}

/// `a is b` on two values read from sources (containers, whose vars hold
/// their items rather than the object): the objects there now, the answer
/// guarded as a relation between the two sources.
std::optional<bool> BytecodeTracer::sameAtSources(const VarPtr &lhs,
                                                  const VarPtr &rhs) {
  int left = knownSourceOf(lhs), right = knownSourceOf(rhs);
  if (left < 0 || right < 0)
    return std::nullopt;
  if (left == right)
    return true;
  SourceResolver resolver(guardBuilder.allSources(), frame);
  PyObject *leftObject = resolver.get(left);
  PyObject *rightObject = resolver.get(right);
  PyErr_Clear();
  if (!leftObject || !rightObject)
    return std::nullopt;
  bool same = leftObject == rightObject;
  guardBuilder.guardRelation(
      same ? Guard::Kind::SameObject : Guard::Kind::OtherObject, left, right);
  return same;
}

namespace {

bool isNoneConstant(const VarPtr &var) {
  return var->kind == Var::Kind::Constant && var->object.get() == Py_None;
}

} // namespace

VarPtr BytecodeTracer::isOp(const VarPtr &lhs, const VarPtr &rhs,
                            bool inverted) {
  auto concrete = [](const VarPtr &var) {
    return var->kind == Var::Kind::Constant || var->kind == Var::Kind::Object;
  };
  bool same;
  if (concrete(lhs) && concrete(rhs)) {
    same = lhs->object.get() == rhs->object.get();
    guardSameness(lhs, rhs, same);
  }
  else if (lhs->kind == Var::Kind::Tensor && rhs->kind == Var::Kind::Tensor)
    same = sameTensorObject(lhs, rhs);
  else if ((lhs->kind == Var::Kind::Tensor && concrete(rhs)) ||
           (rhs->kind == Var::Kind::Tensor && concrete(lhs)))
    same = false; // A tensor is never None or another constant.
  else if ((isNoneConstant(lhs) && rhs->kind != Var::Kind::Null) ||
           (isNoneConstant(rhs) && lhs->kind != Var::Kind::Null))
    // `x is None` of a value that is not a constant or an object read from
    // a source (a size, a tuple, an object made during capture): never.
    same = false;
  else if (madeDuringCapture(lhs) || madeDuringCapture(rhs))
    // An object, list or dict made during capture is itself and nothing
    // that existed before.
    same = lhs == rhs;
  else if (std::optional<bool> known = sameAtSources(lhs, rhs))
    same = *known;
  else
    unsupported("'is' on values the interpreter cannot compare");
  return constant(same != inverted ? Py_True : Py_False);
}

/// `item in container`, as the container's kind answers it.
VarPtr BytecodeTracer::containsOp(const VarPtr &item, const VarPtr &container,
                                  bool negated) {
  VarPtr answer = values.of(container).contains(container, item);
  return negated ? logicalNot(answer) : answer;
}

} // namespace capture
} // namespace dynafuse

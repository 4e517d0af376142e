//===- TracerSizes.cpp - Symbolic sizes: inputs, arithmetic, decisions ----===//
//
// The tracer's half of dynamic shapes (ShapeEnv.h has the model): which
// dims of a tensor input become size symbols, Python ints that are sizes
// (SymInt vars) and what the code does with them, slices with symbolic
// bounds, and the unification of symbols an op needs equal.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include <numeric>
#include <optional>

namespace dynafuse {
namespace capture {
namespace {

/// The dims a tensor attribute (torch._dynamo's mark_dynamic and
/// mark_static set _dynamo_dynamic_indices / _dynamo_static_indices) names.
std::set<int64_t> markedDims(PyObject *tensor, const char *attribute) {
  std::set<int64_t> dims;
  PyRef marked = PyRef::steal(PyObject_GetAttrString(tensor, attribute));
  if (!marked) {
    PyErr_Clear();
    return dims;
  }
  PyRef items = PyRef::steal(PySequence_Tuple(marked.get()));
  if (!items) {
    PyErr_Clear();
    return dims;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items.get()); ++i) {
    PyObject *item = PyTuple_GET_ITEM(items.get(), i);
    if (PyLong_Check(item))
      dims.insert(PyLong_AsLongLong(item));
  }
  return dims;
}

} // namespace

std::vector<bool> BytecodeTracer::symbolicDims(
    PyObject *object, int source, const std::vector<int64_t> &sizes) {
  std::vector<bool> dims(sizes.size(), false);
  std::string key = guardBuilder.describe(source);
  result.inputSizes[key] = sizes;
  if (shapePolicy.mode == ShapePolicy::Mode::Static)
    return dims;
  if (shapePolicy.mode == ShapePolicy::Mode::Dynamic) {
    // Every dim of the frame's tensor arguments (and of the lists, tuples
    // and dicts they came in); parameters and module buffers stay static,
    // as torch.compile's do.
    bool argument = true;
    for (int at = source; at >= 0; at = guardBuilder.source(at).parent) {
      Source::Kind kind = guardBuilder.source(at).kind;
      argument &= kind == Source::Kind::Local || kind == Source::Kind::Item ||
                  kind == Source::Kind::DictItem;
    }
    if (argument)
      dims.assign(sizes.size(), true);
  } else if (shapePolicy.history) {
    // Automatic: the dims whose size changed since the first capture.
    dims = shapePolicy.history->changed(key, sizes);
  }
  int64_t rank = int64_t(sizes.size());
  for (int64_t dim : markedDims(object, "_dynamo_dynamic_indices"))
    if (dim >= -rank && dim < rank)
      dims[size_t(dim < 0 ? dim + rank : dim)] = true;
  for (int64_t dim : markedDims(object, "_dynamo_static_indices"))
    if (dim >= -rank && dim < rank)
      dims[size_t(dim < 0 ? dim + rank : dim)] = false;
  // Sizes 0 and 1 are specialized: broadcasting and empty loops depend on
  // them.
  for (size_t k = 0; k < sizes.size(); ++k)
    dims[k] = dims[k] && sizes[k] >= 2;
  return dims;
}

bool BytecodeTracer::makeSymbolic(const std::vector<bool> &dims,
                                  const TensorMeta &meta, TensorType &type,
                                  Guard &guard) {
  size_t rank = meta.sizes.size();
  // A dense layout in some dim order (row-major, channels-last,
  // transposed): strides are products of the sizes inside them, which stay
  // right for every size. Other layouts (slices of bigger tensors) stay
  // static.
  std::vector<size_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return meta.strides[a] > meta.strides[b];
  });
  int64_t expected = 1;
  for (size_t i = rank; i-- > 0;) {
    size_t k = order[i];
    if (meta.sizes[k] == 1)
      continue;
    if (meta.strides[k] != expected)
      return false;
    expected *= meta.sizes[k];
  }
  std::vector<SymExpr> sizes(rank);
  for (size_t k = 0; k < rank; ++k)
    sizes[k] = dims[k] ? shapes.newSymbol(meta.sizes[k])
                       : SymExpr(meta.sizes[k]);
  std::vector<SymExpr> strides = stridesInOrder(sizes, order);
  type.sizes = sizes;
  type.strides.clear();
  if (strides != contiguousStrides(sizes))
    type.strides = strides;
  guard.symbolicSizes = sizes;
  guard.symbolicStrides = strides;
  return true;
}

VarPtr BytecodeTracer::sizeVar(const SymExpr &size) {
  SymExpr canonical = shapes.canonical(size);
  if (canonical.isConstant())
    return integerConstant(canonical.constant());
  VarPtr var = makeVar(Var::Kind::SymInt);
  var->size = canonical;
  return var;
}

bool BytecodeTracer::isSizeLike(const VarPtr &var) {
  return var->kind == Var::Kind::SymInt ||
         (var->kind == Var::Kind::Constant &&
          PyLong_CheckExact(var->object.get()));
}

SymExpr BytecodeTracer::sizeOf(const VarPtr &var, const std::string &what) {
  if (var->kind == Var::Kind::SymInt)
    return shapes.canonical(var->size);
  if (var->kind == Var::Kind::Constant && PyLong_CheckExact(var->object.get())) {
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(var->object.get(), &overflow);
    if (!overflow)
      return SymExpr(int64_t(value));
  }
  unsupported(what + " needs an integer");
}

void BytecodeTracer::addShapeGuards(std::vector<ShapeGuard> shapeGuards) {
  for (ShapeGuard &shape : shapeGuards) {
    Guard guard;
    guard.kind = Guard::Kind::Shape;
    guard.shape = std::move(shape);
    guardBuilder.addGuard(std::move(guard));
  }
}

bool BytecodeTracer::decideSizes(int relation, const SymExpr &lhs,
                                 const SymExpr &rhs) {
  std::vector<ShapeGuard> decided;
  bool outcome = shapes.decide(relation, lhs, rhs, decided);
  addShapeGuards(std::move(decided));
  return outcome;
}

VarPtr BytecodeTracer::sizeArithmetic(int kind, const VarPtr &lhs,
                                      const VarPtr &rhs) {
  if (!isSymInt(lhs) && !isSymInt(rhs))
    return nullptr;
  if (lhs->kind == Var::Kind::Tensor || rhs->kind == Var::Kind::Tensor)
    return nullptr; // tensor arithmetic: the size is a 0-dim operand
  if (!isSizeLike(lhs) || !isSizeLike(rhs))
    unsupported("arithmetic of a symbolic size with a value that is not an "
                "integer (a float of a size would need the size)");
  int plain = kind >= NB_INPLACE_ADD ? kind - (NB_INPLACE_ADD - NB_ADD) : kind;
  SymExpr a = sizeOf(lhs, "size arithmetic"),
          b = sizeOf(rhs, "size arithmetic");
  switch (plain) {
  case NB_ADD:
    return sizeVar(a + b);
  case NB_SUBTRACT:
    return sizeVar(a - b);
  case NB_MULTIPLY:
    return sizeVar(a * b);
  case NB_FLOOR_DIVIDE:
  case NB_REMAINDER:
    // Python's floor semantics are SymExpr's; a divisor that is not
    // positive at the hints is decided (and guarded) first.
    if (!decideSizes(Py_GT, b, 0))
      unsupported("// or % of a symbolic size by a divisor that is not "
                  "positive");
    return sizeVar(plain == NB_FLOOR_DIVIDE ? floorDiv(a, b) : mod(a, b));
  default:
    unsupported("binary operator " + std::to_string(kind) +
                " on a symbolic size");
  }
}

VarPtr BytecodeTracer::sizeBuiltin(PyObject *callable,
                                    const std::vector<VarPtr> &args) {
  bool symbolic = false, sizes = !args.empty();
  for (const VarPtr &arg : args) {
    symbolic |= isSymInt(arg);
    sizes &= isSizeLike(arg);
  }
  if (!symbolic)
    return nullptr;
  if (!sizes)
    unsupported("a builtin of a symbolic size and a value that is not an "
                "integer");
  if (isBuiltin(callable, "int") && args.size() == 1)
    return args[0];
  bool isMin = isBuiltin(callable, "min");
  if ((isMin || isBuiltin(callable, "max")) && args.size() >= 2) {
    // The extreme at the hints, each comparison guarded.
    SymExpr best = sizeOf(args[0], "min/max");
    for (size_t i = 1; i < args.size(); ++i) {
      SymExpr other = sizeOf(args[i], "min/max");
      if (decideSizes(isMin ? Py_LT : Py_GT, other, best))
        best = other;
    }
    return sizeVar(best);
  }
  unsupported("a builtin of a symbolic size");
}

VarPtr BytecodeTracer::sliceSymbolic(const VarPtr &tensor, const VarPtr &start,
                                     const VarPtr &stop, const VarPtr &step,
                                     int64_t dim) {
  const TensorType &type = tensor->tensor->type;
  if (dim >= int64_t(type.rank()))
    unsupported("too many indices for the tensor");
  SymExpr size = shapes.canonical(type.sizes[size_t(dim)]);
  auto isNone = [](const VarPtr &var) {
    return !var ||
           (var->kind == Var::Kind::Constant && var->object.get() == Py_None);
  };
  int64_t stride = 1;
  if (!isNone(step)) {
    if (step->kind != Var::Kind::Constant ||
        !PyLong_CheckExact(step->object.get()) ||
        PyLong_AsLongLong(step->object.get()) <= 0)
      unsupported("slice of a symbolic size with a step that is not a "
                  "positive constant");
    stride = PyLong_AsLongLong(step->object.get());
  }
  // Python's clamping, each comparison decided at the hints and guarded.
  auto bound = [&](const VarPtr &var, const SymExpr &fallback) {
    if (isNone(var))
      return fallback;
    SymExpr at = sizeOf(var, "a slice bound");
    if (decideSizes(Py_LT, at, 0)) {
      at = at + size;
      if (decideSizes(Py_LT, at, 0))
        at = 0;
    } else if (decideSizes(Py_GT, at, size)) {
      at = size;
    }
    return at;
  };
  SymExpr first = bound(start, 0);
  SymExpr last = bound(stop, size);
  if (decideSizes(Py_LT, last, first))
    last = first;
  if (first == SymExpr(0) && last == size && stride == 1)
    return tensor;
  std::map<std::string, Attribute> attributes;
  attributes["dim"] = dim;
  attributes["start"] = first;
  attributes["end"] = last;
  attributes["step"] = stride;
  return emit("slice", {tensor->tensor}, attributes);
}

void BytecodeTracer::unifyOperandSizes(const std::string &op,
                                       const std::vector<Operand> &operands) {
  std::vector<const TensorType *> types;
  for (const Operand &operand : operands)
    if (operand.isValue())
      types.push_back(&operand.value->type);
  if (types.size() < 2)
    return;
  bool unified = false;
  std::vector<ShapeGuard> decided;
  auto pair = [&](const SymExpr &lhs, const SymExpr &rhs) {
    unified |= unifyEqualSizes(lhs, rhs, decided);
  };
  const OpInfo *info = lookupOp(op);
  bool matmul = op == "matmul" || op == "bmm" || op == "mm";
  if (info && (info->kind == OpKind::Pointwise ||
               info->kind == OpKind::Composite)) {
    // Broadcasting aligns dims from the right (composites: a norm's weight
    // and bias against its input's last dims).
    for (size_t i = 1; i < types.size(); ++i) {
      const TensorType &a = *types[0], &b = *types[i];
      for (size_t k = 1; k <= std::min(a.rank(), b.rank()); ++k)
        pair(a.sizes[a.rank() - k], b.sizes[b.rank() - k]);
    }
  } else if (matmul && types.size() == 2 && types[0]->rank() >= 1 &&
             types[1]->rank() >= 1) {
    const TensorType &a = *types[0], &b = *types[1];
    pair(a.sizes.back(), b.rank() >= 2 ? b.sizes[b.rank() - 2] : b.sizes[0]);
    if (a.rank() > 2 && b.rank() > 2)
      for (size_t k = 3; k <= std::min(a.rank(), b.rank()); ++k)
        pair(a.sizes[a.rank() - k], b.sizes[b.rank() - k]);
  }
  addShapeGuards(std::move(decided));
  if (unified)
    applyUnifiedSizes();
}

bool BytecodeTracer::unifyEqualSizes(const SymExpr &lhs, const SymExpr &rhs,
                                     std::vector<ShapeGuard> &decided) {
  SymExpr a = shapes.canonical(lhs), b = shapes.canonical(rhs);
  if (a == b || a == SymExpr(1) || b == SymExpr(1))
    return false;
  if (!a.isSymbol() && !b.isSymbol())
    return false;
  if (shapes.hintOf(a) != shapes.hintOf(b))
    return false; // the op's own shape rule reports the mismatch
  if (!b.isSymbol())
    std::swap(a, b);
  if (a.isSymbol() && !b.isSymbol())
    return false;
  shapes.unify(a, b, decided);
  return true;
}

void BytecodeTracer::guardNarrowInRange(
    const TensorType &input, const std::map<std::string, Attribute> &attributes) {
  auto integer = [&](const char *name) -> std::optional<SymExpr> {
    auto found = attributes.find(name);
    if (found == attributes.end())
      return std::nullopt;
    return sizeOfAttribute(found->second);
  };
  std::optional<SymExpr> dim = integer("dim"), start = integer("start"),
                         length = integer("length");
  if (!dim || !start || !length || !dim->isConstant() || input.rank() == 0)
    return;
  int64_t rank = int64_t(input.rank());
  int64_t d = dim->constant() < 0 ? dim->constant() + rank : dim->constant();
  if (d < 0 || d >= rank || input.sizes[size_t(d)].isConstant())
    return;
  const SymExpr &size = input.sizes[size_t(d)];
  SymExpr first = *start;
  if (first.isConstant() && first.constant() < 0)
    first = first + size;
  if (!decideSizes(Py_GE, first, SymExpr(0)) ||
      !decideSizes(Py_GE, *length, SymExpr(0)) ||
      !decideSizes(Py_LE, first + *length, size))
    unsupported("narrow(" + std::to_string(d) + ", " + start->str() + ", " +
                length->str() + ") is out of range for size " + size.str());
}

void BytecodeTracer::unifyExpandedSizes(
    const TensorType &input, std::map<std::string, Attribute> &attributes) {
  auto found = attributes.find("shape");
  if (found == attributes.end())
    return;
  std::optional<std::vector<SymExpr>> listed = sizesOfAttribute(found->second);
  if (!listed)
    return;
  std::vector<SymExpr> &shape = *listed;
  bool unified = false;
  std::vector<ShapeGuard> decided;
  for (size_t k = 1; k <= std::min(input.rank(), shape.size()); ++k)
    if (shape[shape.size() - k] != SymExpr(-1))
      unified |= unifyEqualSizes(input.sizes[input.rank() - k],
                                 shape[shape.size() - k], decided);
  addShapeGuards(std::move(decided));
  if (!unified)
    return;
  applyUnifiedSizes();
  for (SymExpr &size : shape)
    size = shapes.canonical(size);
  found->second = canonicalAttribute(shape);
}

void BytecodeTracer::resolveInferredSize(
    const TensorType &input, std::map<std::string, Attribute> &attributes) {
  auto found = attributes.find("shape");
  if (found == attributes.end())
    return;
  SymExpr numel = shapes.canonical(input.numel());
  if (!std::holds_alternative<std::vector<SymExpr>>(found->second) &&
      numel.isConstant())
    return;
  std::optional<std::vector<SymExpr>> listed = sizesOfAttribute(found->second);
  if (!listed)
    return;
  std::vector<SymExpr> &sizes = *listed;
  SymExpr known(1);
  int inferred = -1;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] == SymExpr(-1))
      inferred = int(k);
    else
      known = known * shapes.canonical(sizes[k]);
  }
  if (inferred < 0 || (known.isConstant() && known.constant() == 0))
    return;
  SymExpr quotient = floorDiv(numel, known);
  if (quotient * known == numel)
    return; // the graph's shape rule infers it
  if (shapes.hintOf(quotient) * shapes.hintOf(known) != shapes.hintOf(numel))
    return; // wrong at the hints: the shape rule reports it
  if (!decideSizes(Py_EQ, quotient * known, numel))
    return;
  sizes[size_t(inferred)] = quotient;
  found->second = canonicalAttribute(sizes);
}

void BytecodeTracer::applyUnifiedSizes() {
  auto rewrite = [&](TensorType &type) {
    for (SymExpr &size : type.sizes)
      size = shapes.canonical(size);
    for (SymExpr &stride : type.strides)
      stride = shapes.canonical(stride);
  };
  Graph &graph = *result.graph;
  for (Value *input : graph.inputs)
    rewrite(input->type);
  for (auto &node : graph.nodes) {
    for (Value *value : node->results)
      rewrite(value->type);
    for (auto &entry : node->attributes) {
      if (auto *expr = std::get_if<SymExpr>(&entry.second))
        entry.second = canonicalAttribute(shapes.canonical(*expr));
      else if (auto *exprs = std::get_if<std::vector<SymExpr>>(&entry.second)) {
        std::vector<SymExpr> rewritten;
        for (const SymExpr &expr : *exprs)
          rewritten.push_back(shapes.canonical(expr));
        entry.second = canonicalAttribute(rewritten);
      }
    }
  }
}

} // namespace capture
} // namespace dynafuse

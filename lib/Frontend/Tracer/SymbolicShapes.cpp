//===- SymbolicShapes.cpp - The tracer's decisions on symbolic sizes ------===//
//
// Which dims of a tensor input become size symbols, decisions on sizes
// (each guarded), and the unification of symbols an op needs equal
// (SymbolicShapes.h).
//
//===----------------------------------------------------------------------===//
#include "SymbolicShapes.h"

#include "dynafuse/Graph/OpRegistry.h"

#include <algorithm>
#include <numeric>

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

SymbolicShapes::SymbolicShapes(const ShapePolicy &policy, GuardBuilder &guards,
                               CapturedFrame &frame)
    : policy(policy), guards(guards), frame(frame) {}

std::vector<bool>
SymbolicShapes::symbolicDims(PyObject *object, int source,
                             const std::vector<int64_t> &sizes) {
  std::vector<bool> dims(sizes.size(), false);
  std::string key = guards.describe(source);
  frame.inputSizes[key] = sizes;
  if (policy.mode == ShapePolicy::Mode::Static)
    return dims;
  if (policy.mode == ShapePolicy::Mode::Dynamic) {
    // Every dim of the frame's tensor arguments (and of the lists, tuples
    // and dicts they came in); parameters and module buffers stay static,
    // as torch.compile's do.
    bool argument = true;
    for (int at = source; at >= 0; at = guards.source(at).parent) {
      Source::Kind kind = guards.source(at).kind;
      argument &= kind == Source::Kind::Local || kind == Source::Kind::Item ||
                  kind == Source::Kind::DictItem;
    }
    if (argument)
      dims.assign(sizes.size(), true);
  } else if (policy.history) {
    // Automatic: the dims whose size changed since the first capture.
    dims = policy.history->changed(key, sizes);
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

std::optional<SymExpr> SymbolicShapes::symbolicInt(PyObject *object, int source,
                                                   bool mayVary) {
  auto known = intSymbols.find(source);
  if (known != intSymbols.end())
    return known->second;
  if (!mayVary)
    return std::nullopt;
  int overflow = 0; // an exact int: only its size can fail the read
  long long value = PyLong_AsLongLongAndOverflow(object, &overflow);
  if (overflow)
    return std::nullopt;
  // Keyed apart from tensors' sizes: a source holds an int or a tensor.
  std::string key = "int " + guards.describe(source);
  frame.inputSizes[key] = {value};
  if (policy.mode != ShapePolicy::Mode::Automatic || !policy.symbolicInts ||
      !policy.history || value < 2 || !policy.history->changed(key, {value})[0])
    return std::nullopt;
  SymExpr symbol = env.newSymbol(value);
  Guard guard;
  guard.kind = Guard::Kind::IntSymbol;
  guard.source = source;
  guard.symbolicSizes = {symbol};
  guards.addGuard(std::move(guard));
  intSymbols.emplace(source, symbol);
  return symbol;
}

bool SymbolicShapes::makeSymbolic(const std::vector<bool> &dims,
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
    sizes[k] = dims[k] ? env.newSymbol(meta.sizes[k]) : SymExpr(meta.sizes[k]);
  std::vector<SymExpr> strides = stridesInOrder(sizes, order);
  type.sizes = sizes;
  type.strides.clear();
  if (strides != contiguousStrides(sizes))
    type.strides = strides;
  guard.symbolicSizes = sizes;
  guard.symbolicStrides = strides;
  return true;
}

void SymbolicShapes::addGuards(std::vector<ShapeGuard> shapeGuards) {
  for (ShapeGuard &shape : shapeGuards) {
    Guard guard;
    guard.kind = Guard::Kind::Shape;
    guard.shape = std::move(shape);
    guards.addGuard(std::move(guard));
  }
}

bool SymbolicShapes::decide(int relation, const SymExpr &lhs,
                            const SymExpr &rhs) {
  std::vector<ShapeGuard> decided;
  bool outcome = env.decide(relation, lhs, rhs, decided);
  addGuards(std::move(decided));
  return outcome;
}

void SymbolicShapes::unifyOperandSizes(
    Op op, const std::vector<Operand> &operands,
    const std::map<std::string, Attribute> &attributes) {
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
  bool matmul = op == Op::Matmul || op == Op::Bmm || op == Op::Mm;
  if (info &&
      (info->kind == OpKind::Pointwise || info->kind == OpKind::Composite)) {
    // Broadcasting aligns dims from the right (composites: a norm's weight
    // and bias against its input's last dims).
    for (size_t i = 1; i < types.size(); ++i) {
      const TensorType &a = *types[0], &b = *types[i];
      for (size_t k = 1; k <= std::min(a.rank(), b.rank()); ++k)
        pair(a.sizes[a.rank() - k], b.sizes[b.rank() - k]);
    }
  } else if (op == Op::Cat) {
    // Every dim but the joined one, of operands of one rank.
    auto found = attributes.find("dim");
    std::optional<SymExpr> dimSize = found == attributes.end()
                                         ? std::optional<SymExpr>(SymExpr(0))
                                         : sizeOfAttribute(found->second);
    int64_t rank = int64_t(types[0]->rank());
    if (dimSize && dimSize->isConstant() && rank > 0) {
      int64_t dim = dimSize->constant();
      dim = dim < 0 ? dim + rank : dim;
      for (size_t i = 1; i < types.size(); ++i)
        if (int64_t(types[i]->rank()) == rank)
          for (int64_t k = 0; k < rank; ++k)
            if (k != dim)
              pair(types[0]->sizes[size_t(k)], types[i]->sizes[size_t(k)]);
    }
  } else if (matmul && types.size() == 2 && types[0]->rank() >= 1 &&
             types[1]->rank() >= 1) {
    const TensorType &a = *types[0], &b = *types[1];
    pair(a.sizes.back(), b.rank() >= 2 ? b.sizes[b.rank() - 2] : b.sizes[0]);
    if (a.rank() > 2 && b.rank() > 2)
      for (size_t k = 3; k <= std::min(a.rank(), b.rank()); ++k)
        pair(a.sizes[a.rank() - k], b.sizes[b.rank() - k]);
  }
  addGuards(std::move(decided));
  if (unified)
    applyUnified();
}

bool SymbolicShapes::unifyEqualSizes(const SymExpr &lhs, const SymExpr &rhs,
                                     std::vector<ShapeGuard> &decided) {
  SymExpr a = env.canonical(lhs), b = env.canonical(rhs);
  if (a == b || a == SymExpr(1) || b == SymExpr(1))
    return false;
  if (!a.isSymbol() && !b.isSymbol())
    return false;
  if (env.hintOf(a) != env.hintOf(b))
    return false; // the op's own shape rule reports the mismatch
  if (!b.isSymbol())
    std::swap(a, b);
  if (a.isSymbol() && !b.isSymbol())
    return false;
  env.unify(a, b, decided);
  return true;
}

std::optional<std::string> SymbolicShapes::narrowOutOfRange(
    const TensorType &input,
    const std::map<std::string, Attribute> &attributes) {
  auto integer = [&](const char *name) -> std::optional<SymExpr> {
    auto found = attributes.find(name);
    if (found == attributes.end())
      return std::nullopt;
    return sizeOfAttribute(found->second);
  };
  std::optional<SymExpr> dim = integer("dim"), start = integer("start"),
                         length = integer("length");
  if (!dim || !start || !length || !dim->isConstant() || input.rank() == 0)
    return std::nullopt;
  int64_t rank = int64_t(input.rank());
  int64_t d = dim->constant() < 0 ? dim->constant() + rank : dim->constant();
  if (d < 0 || d >= rank || input.sizes[size_t(d)].isConstant())
    return std::nullopt;
  const SymExpr &size = input.sizes[size_t(d)];
  SymExpr first = *start;
  if (first.isConstant() && first.constant() < 0)
    first = first + size;
  if (!decide(Py_GE, first, SymExpr(0)) ||
      !decide(Py_GE, *length, SymExpr(0)) ||
      !decide(Py_LE, first + *length, size))
    return "narrow(" + std::to_string(d) + ", " + start->str() + ", " +
           length->str() + ") is out of range for size " + size.str();
  return std::nullopt;
}

void SymbolicShapes::unifyExpandedSizes(
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
  addGuards(std::move(decided));
  if (!unified)
    return;
  applyUnified();
  for (SymExpr &size : shape)
    size = env.canonical(size);
  found->second = canonicalAttribute(shape);
}

void SymbolicShapes::resolveInferredSize(
    const TensorType &input, std::map<std::string, Attribute> &attributes) {
  auto found = attributes.find("shape");
  if (found == attributes.end())
    return;
  SymExpr numel = env.canonical(input.numel());
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
      known = known * env.canonical(sizes[k]);
  }
  if (inferred < 0 || (known.isConstant() && known.constant() == 0))
    return;
  SymExpr quotient = floorDiv(numel, known);
  if (quotient * known == numel)
    return; // the graph's shape rule infers it
  if (env.hintOf(quotient) * env.hintOf(known) != env.hintOf(numel))
    return; // wrong at the hints: the shape rule reports it
  if (!decide(Py_EQ, quotient * known, numel))
    return;
  sizes[size_t(inferred)] = quotient;
  found->second = canonicalAttribute(sizes);
}

int64_t SymbolicShapes::specialize(const SymExpr &expr) {
  SymExpr canonical = env.canonical(expr);
  if (canonical.isConstant())
    return canonical.constant();
  int64_t value = env.hintOf(canonical);
  // Of Python ints only: a later call's new value settles the code as a
  // failed value guard does (a tensor's dim recompiles up to the limit).
  std::set<std::string> symbols, ints;
  canonical.collectSymbols(symbols);
  for (const auto &entry : intSymbols)
    env.canonical(entry.second).collectSymbols(ints);
  bool ofInts =
      std::includes(ints.begin(), ints.end(), symbols.begin(), symbols.end());
  std::vector<ShapeGuard> decided;
  if (canonical.isSymbol())
    env.unify(SymExpr(value), canonical, decided);
  else
    env.decide(Py_EQ, canonical, SymExpr(value), decided);
  for (ShapeGuard &guard : decided)
    guard.specializesInt = ofInts;
  addGuards(std::move(decided));
  if (canonical.isSymbol())
    applyUnified();
  return value;
}

void SymbolicShapes::specializeAttributes(
    std::map<std::string, Attribute> &attributes, bool guarded) {
  auto value = [&](const SymExpr &expr) {
    return guarded ? specialize(expr) : env.hintOf(env.canonical(expr));
  };
  for (auto &entry : attributes) {
    if (auto *expr = std::get_if<SymExpr>(&entry.second)) {
      entry.second = value(*expr);
    } else if (auto *exprs = std::get_if<std::vector<SymExpr>>(&entry.second)) {
      std::vector<int64_t> values;
      for (const SymExpr &size : *exprs)
        values.push_back(value(size));
      entry.second = values;
    }
  }
}

void SymbolicShapes::applyUnified() {
  auto rewrite = [&](TensorType &type) {
    for (SymExpr &size : type.sizes)
      size = env.canonical(size);
    for (SymExpr &stride : type.strides)
      stride = env.canonical(stride);
  };
  Graph &graph = *frame.graph;
  for (Value *input : graph.inputs)
    rewrite(input->type);
  for (auto &node : graph.nodes) {
    for (Value *value : node->results)
      rewrite(value->type);
    if (node->op == Op::CallTorch) {
      // Its result types are declared as text (the verifier infers them
      // from it): declared anew in the unified symbols.
      std::string declared;
      for (Value *value : node->results)
        declared += (declared.empty() ? "" : ", ") + value->type.str();
      node->attributes["results"] = declared;
    }
    for (auto &entry : node->attributes) {
      if (auto *expr = std::get_if<SymExpr>(&entry.second))
        entry.second = canonicalAttribute(env.canonical(*expr));
      else if (auto *exprs = std::get_if<std::vector<SymExpr>>(&entry.second)) {
        std::vector<SymExpr> rewritten;
        for (const SymExpr &expr : *exprs)
          rewritten.push_back(env.canonical(expr));
        entry.second = canonicalAttribute(rewritten);
      }
    }
  }
}

} // namespace capture
} // namespace dynafuse

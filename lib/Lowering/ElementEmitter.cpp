//===- ElementEmitter.cpp - One element of a graph value as scalars -------===//
#include "dynafuse/Lowering/ElementEmitter.h"

#include "dynafuse/Graph/OpRegistry.h"
#include "dynafuse/Graph/ViewRules.h"
#include "dynafuse/Lowering/PointwiseRules.h"

#include <algorithm>

namespace dynafuse {
namespace {

ReduceKind reduceKindOf(Op op) {
  // From include/dynafuse/Ops/ReductionOps.py.
  static const std::map<Op, ReduceKind> kinds = [] {
    std::map<Op, ReduceKind> kinds;
#include "dynafuse/Ops/ReductionKinds.inc"
    return kinds;
  }();
  return kinds.at(op);
}

std::string indexKey(const std::vector<SymExpr> &index) {
  std::string key = "[";
  for (const SymExpr &expr : index)
    key += expr.str() + ",";
  return key + "]";
}

size_t resultIndexOf(const Value *value) {
  const auto &results = value->producer->results;
  return size_t(std::find(results.begin(), results.end(), value) -
                results.begin());
}

/// Collects the symbols of expr by how it reads them: `whole` where one
/// occurs outside any division or remainder, `divided` under a floor
/// division, `remainder` under a remainder.
void collectSymbolUses(const SymExpr &expr, SymExpr::Kind under,
                       std::set<std::string> &whole,
                       std::set<std::string> &divided,
                       std::set<std::string> &remainder) {
  if (expr.isSymbol()) {
    (under == SymExpr::Kind::FloorDiv ? divided
     : under == SymExpr::Kind::Mod    ? remainder
                                      : whole)
        .insert(expr.str());
    return;
  }
  SymExpr::Kind kind = expr.kind();
  if (kind == SymExpr::Kind::FloorDiv || kind == SymExpr::Kind::Mod)
    under = kind;
  for (const SymExpr &operand : expr.operands())
    collectSymbolUses(operand, under, whole, divided, remainder);
}

/// The symbols an index reads only divided or only as a remainder
/// (`c // 8`, not also `c % 8` or `c`): several values of each give one
/// index, so a reduction at that index placed inside its loop would be
/// computed again for each of them.
std::set<std::string> coarseSymbols(const std::vector<SymExpr> &index) {
  std::set<std::string> whole, divided, remainder, coarse;
  for (const SymExpr &expr : index)
    collectSymbolUses(expr, SymExpr::Kind::Add, whole, divided, remainder);
  for (const std::string &symbol : divided)
    if (!whole.count(symbol) && !remainder.count(symbol))
      coarse.insert(symbol);
  for (const std::string &symbol : remainder)
    if (!whole.count(symbol) && !divided.count(symbol))
      coarse.insert(symbol);
  return coarse;
}

/// argmax / argmin: only the position of the extreme element is the
/// result (max_dim / min_dim give both).
bool yieldsOnlyPosition(const Node &node, ReduceKind kind) {
  return (kind == ReduceKind::ArgMax || kind == ReduceKind::ArgMin) &&
         node.results.size() == 1;
}

} // namespace

ElementEmitter::ElementEmitter(
    Kernel &kernel, KernelBuilder &builder,
    const std::map<const Value *, std::string> &bufferOf,
    const std::map<const Value *, TensorType> &bufferTypes,
    const std::set<const Value *> &inlineHere)
    : kernel(kernel), builder(builder), bufferOf(bufferOf),
      bufferTypes(bufferTypes), inlineHere(inlineHere) {}

std::vector<SymExpr>
ElementEmitter::simplify(std::vector<SymExpr> index) const {
  SymRanges ranges = builder.openRanges();
  for (const auto &[symbol, position] : maskedPositions)
    ranges[symbol] = position.extent;
  SymExtents extents = builder.openSymbolicExtents();
  for (SymExpr &expr : index)
    expr = simplifyInRanges(expr, ranges, extents);
  return index;
}

SymExpr ElementEmitter::piecePosition(const SymExpr &position,
                                      const SymExpr &offset,
                                      const SymExpr &length) {
  SymExpr shifted = position - offset;
  std::set<std::string> symbols;
  shifted.collectSymbols(symbols);
  if (symbols.size() != 1 || !length.isConstant() ||
      !(shifted - SymExpr::symbol(*symbols.begin())).isConstant())
    return shifted;
  std::string name = "@m" + std::to_string(maskedPositions.size());
  maskedPositions[name] = MaskedPosition{resolved(shifted), length.constant()};
  return SymExpr::symbol(name);
}

SymExpr ElementEmitter::resolved(const SymExpr &expr) const {
  if (maskedPositions.empty())
    return expr;
  std::set<std::string> symbols;
  expr.collectSymbols(symbols);
  std::map<std::string, SymExpr> replacements;
  for (const std::string &symbol : symbols) {
    auto found = maskedPositions.find(symbol);
    if (found != maskedPositions.end())
      replacements[symbol] = found->second.expr;
  }
  return replacements.empty() ? expr : expr.substitute(replacements);
}

std::vector<SymExpr>
ElementEmitter::resolved(std::vector<SymExpr> index) const {
  for (SymExpr &expr : index)
    expr = resolved(expr);
  return index;
}

int ElementEmitter::emit(const Value *value, const std::vector<SymExpr> &raw) {
  if (unplaced)
    return constant(computeType(value->type.dtype), 0);
  std::vector<SymExpr> index = simplify(raw);
  std::string key = value->name + indexKey(index) + "|" +
                    std::to_string(masks.empty() ? -1 : masks.back());
  auto found = memo.find(key);
  if (found != memo.end() && builder.visible(found->second))
    return found->second;
  int id = emitUncached(value, index);
  memo[key] = id;
  return id;
}

int ElementEmitter::emitUncached(const Value *value,
                                 const std::vector<SymExpr> &index) {
  bool buffered = bufferOf.count(value) && !inlineHere.count(value);
  if (buffered || !value->producer)
    return load(value, index);
  const Node &node = *value->producer;
  const OpInfo *info = opInfoOf(node);
  if (!info)
    fail("no lowering for op '" + opName(node.op) + "'", node.location);
  switch (info->kind) {
  case OpKind::Pointwise:
    return emitPointwise(node, index);
  case OpKind::Reduction:
    return emitReduction(node, resultIndexOf(value), index);
  case OpKind::View:
    return emitView(node, resultIndexOf(value), index);
  case OpKind::Extern:
  case OpKind::Composite:
    break;
  }
  fail("op '" + opName(node.op) +
           "' reached lowering unrealized or undecomposed",
       node.location);
}

int ElementEmitter::param(const Value *value) {
  const std::string &name = bufferOf.at(value);
  int found = kernel.findParam(name);
  if (found >= 0)
    return found;
  auto chosen = bufferTypes.find(value);
  kernel.params.push_back(LoopBuffer{
      name, chosen == bufferTypes.end() ? value->type : chosen->second});
  return int(kernel.params.size()) - 1;
}

int ElementEmitter::load(const Value *value,
                         const std::vector<SymExpr> &index) {
  Instr instr;
  instr.op = ScalarOp::Load;
  instr.type = computeType(value->type.dtype);
  instr.buffer = param(value);
  instr.index = resolved(index);
  if (!masks.empty())
    instr.args.push_back(masks.back());
  return builder.append(instr);
}

void ElementEmitter::store(const Value *value,
                           const std::vector<SymExpr> &index, int scalar) {
  Instr instr;
  instr.op = ScalarOp::Store;
  instr.buffer = param(value);
  instr.index = resolved(index);
  instr.args = {cast(scalar, computeType(value->type.dtype))};
  builder.append(instr);
}

//===----------------------------------------------------------------------===//
// Scalars
//===----------------------------------------------------------------------===//

int ElementEmitter::constant(DType type, double value) {
  ScalarBuilder scalars(kernel, builder);
  return scalars.constant(type, value);
}

int ElementEmitter::indexValue(const SymExpr &expr) {
  Instr instr;
  instr.op = ScalarOp::Index;
  instr.type = DType::I64;
  instr.index = {resolved(expr)};
  return builder.append(instr);
}

int ElementEmitter::unary(ScalarOp op, int arg) {
  return ScalarBuilder(kernel, builder).unary(op, arg);
}

int ElementEmitter::binary(ScalarOp op, int lhs, int rhs) {
  return ScalarBuilder(kernel, builder).binary(op, lhs, rhs);
}

int ElementEmitter::select(int condition, int onTrue, int onFalse) {
  return ScalarBuilder(kernel, builder).select(condition, onTrue, onFalse);
}

int ElementEmitter::cast(int arg, DType type) {
  return ScalarBuilder(kernel, builder).cast(arg, type);
}

int ElementEmitter::inRange(const SymExpr &position, const SymExpr &lo,
                            const SymExpr &hi) {
  int at = indexValue(position);
  int above = binary(ScalarOp::Ge, at, indexValue(lo));
  int below = binary(ScalarOp::Lt, at, indexValue(hi));
  return binary(ScalarOp::And, above, below);
}

void ElementEmitter::symbolsOfInstr(int id, std::set<std::string> &symbols) const {
  std::vector<int> pending{id};
  std::set<int> seen;
  while (!pending.empty()) {
    int next = pending.back();
    pending.pop_back();
    if (next < 0 || !seen.insert(next).second)
      continue;
    const Instr &instr = kernel.instrs[size_t(next)];
    for (const SymExpr &expr : instr.index)
      expr.collectSymbols(symbols);
    pending.insert(pending.end(), instr.args.begin(), instr.args.end());
  }
}

int ElementEmitter::combinedMask(int extra) {
  if (masks.empty())
    return extra;
  return binary(ScalarOp::And, masks.back(), extra);
}

int ElementEmitter::emitMasked(const Value *value,
                               const std::vector<SymExpr> &index, int mask) {
  masks.push_back(combinedMask(mask));
  int result = emit(value, index);
  masks.pop_back();
  return result;
}

//===----------------------------------------------------------------------===//
// Pointwise and reductions
//===----------------------------------------------------------------------===//

int ElementEmitter::emitPointwise(const Node &node,
                                  const std::vector<SymExpr> &index) {
  const PointwiseRule *rule = findPointwiseRule(node.op);
  if (!rule)
    fail("no lowering for op '" + opName(node.op) + "'", node.location);
  ScalarBuilder scalars(kernel, builder);
  PointwiseContext context{scalars, node, operationType(node), {}};
  for (const Operand &operand : node.operands) {
    if (!operand.isValue()) {
      context.elements.push_back(-1);
      continue;
    }
    context.elements.push_back(
        emit(operand.value, broadcastIndex(index, operand.value->type.sizes)));
  }
  return cast((*rule)(context), computeType(node.result()->type.dtype));
}

int ElementEmitter::emitReduction(const Node &node, size_t result,
                                  const std::vector<SymExpr> &index) {
  const Value *x = node.operands[0].value;
  const TensorType &input = x->type;
  DType resultType = computeType(node.results[result]->type.dtype);
  ReduceKind kind = reduceKindOf(node.op);
  if (input.rank() == 0) {
    if (yieldsOnlyPosition(node, kind) || result == 1)
      return constant(DType::I64, 0);
    return cast(emit(x, {}), resultType);
  }
  std::vector<int64_t> dims = reducedDims(node);
  bool keepdim = boolAttr(node, "keepdim", false);
  std::set<std::string> outer;
  for (const SymExpr &expr : index)
    resolved(expr).collectSymbols(outer);
  std::set<std::string> coarse = coarseSymbols(resolved(index));
  // Inside a cat or pad the reduction's loads carry the active mask: the
  // reduction depends on the loop variables the mask reads too.
  std::set<std::string> maskSymbols;
  if (!masks.empty())
    symbolsOfInstr(masks.back(), maskSymbols);
  std::vector<SymExpr> extents, reduceVars;
  for (int64_t dim : dims)
    extents.push_back(input.sizes[dim]);
  if (!builder.openReduce(kind, extents, outer, coarse, maskSymbols,
                          reduceVars)) {
    unplaced = node.results[result];
    return constant(resultType, 0);
  }
  std::vector<SymExpr> inputIndex;
  size_t next = 0, reduced = 0;
  for (size_t k = 0; k < input.rank(); ++k) {
    bool isReduced =
        std::find(dims.begin(), dims.end(), int64_t(k)) != dims.end();
    if (isReduced) {
      inputIndex.push_back(reduceVars[reduced++]);
      next += keepdim;
      continue;
    }
    inputIndex.push_back(index[next++]);
  }
  int element = emit(x, inputIndex);
  std::vector<int> yields;
  if (kind == ReduceKind::ArgMax || kind == ReduceKind::ArgMin) {
    std::vector<SymExpr> reducedSizes(extents.begin(), extents.end());
    yields = {element, indexValue(linearizeIndex(reduceVars, reducedSizes))};
  } else {
    DType accumulate = kind == ReduceKind::Any || kind == ReduceKind::All
                           ? DType::Bool
                           : computeType(node.results[0]->type.dtype);
    yields = {cast(element, accumulate)};
  }
  std::vector<int> results = builder.closeReduce(yields);
  if (yieldsOnlyPosition(node, kind))
    return results[1];
  if (node.results.size() > 1) {
    // max_dim / min_dim: remember both results for this index.
    std::string mask = "|" + std::to_string(masks.empty() ? -1 : masks.back());
    for (size_t r = 0; r < 2; ++r)
      memo[node.results[r]->name + indexKey(index) + mask] = results[r];
  }
  return results[result];
}

//===----------------------------------------------------------------------===//
// Views and data movement
//===----------------------------------------------------------------------===//

int ElementEmitter::emitView(const Node &node, size_t result,
                             const std::vector<SymExpr> &index) {
  switch (opInfoOf(node)->view->form) {
  case ViewForm::Remap:
    return emit(node.operands[0].value, remapViewIndex(node, result, index));
  case ViewForm::Concat:
    return emitCat(node, index);
  case ViewForm::Pad:
    return emitPad(node, index);
  case ViewForm::Gather:
  case ViewForm::IndexSelect:
  case ViewForm::Embedding:
    return emitIndexed(node, index);
  case ViewForm::Arange:
  case ViewForm::Fill:
  case ViewForm::LowerTriangle:
  case ViewForm::UpperTriangle:
  case ViewForm::Random:
    return emitGenerator(node, index);
  }
  fail("no lowering for view op '" + opName(node.op) + "'", node.location);
}

int ElementEmitter::emitCat(const Node &node,
                            const std::vector<SymExpr> &index) {
  int64_t dim = normalizeDim(node, node.intAttr("dim", 0),
                             node.operands[0].value->type.rank());
  DType type = computeType(node.results[0]->type.dtype);
  // Where the open loops bound the position along dim (a loop split at the
  // pieces' boundaries), pieces it cannot reach are left out, and one that
  // holds all of it is read without a mask.
  SymRanges ranges = builder.openRanges();
  for (const auto &[symbol, position] : maskedPositions)
    ranges[symbol] = position.extent;
  int64_t lowest = 0, highest = -1;
  bool bounded = symRange(index[dim], ranges, lowest, highest);
  std::vector<std::pair<int, int>> pieces;
  SymExpr offset(0);
  for (size_t i = 0; i < node.operands.size(); ++i) {
    const Value *piece = node.operands[i].value;
    SymExpr length = piece->type.sizes[dim];
    SymExpr end = offset + length;
    if (bounded && offset.isConstant() && end.isConstant()) {
      if (highest < offset.constant() || lowest >= end.constant()) {
        offset = end;
        continue;
      }
      if (lowest >= offset.constant() && highest < end.constant()) {
        std::vector<SymExpr> at = index;
        at[dim] = index[dim] - offset;
        return cast(emit(piece, at), type);
      }
    }
    int mask = inRange(index[dim], offset, end);
    std::vector<SymExpr> at = index;
    at[dim] = piecePosition(index[dim], offset, length);
    pieces.push_back({mask, cast(emitMasked(piece, at, mask), type)});
    offset = end;
  }
  if (pieces.empty()) // a position in no piece: an empty loop's
    return constant(type, 0);
  int value = pieces.back().second;
  for (size_t i = pieces.size() - 1; i-- > 0;)
    value = select(pieces[i].first, pieces[i].second, value);
  return value;
}

int ElementEmitter::emitPad(const Node &node,
                            const std::vector<SymExpr> &index) {
  const Value *x = node.operands[0].value;
  std::vector<int64_t> pad = intListAttr(node, "pad", {});
  std::vector<SymExpr> at = index;
  int mask = -1;
  for (size_t p = 0; p < pad.size() / 2; ++p) {
    size_t dim = x->type.rank() - 1 - p;
    at[dim] = piecePosition(index[dim], SymExpr(pad[2 * p]), x->type.sizes[dim]);
    int inside = inRange(index[dim], SymExpr(pad[2 * p]),
                         SymExpr(pad[2 * p]) + x->type.sizes[dim]);
    mask = mask < 0 ? inside : binary(ScalarOp::And, mask, inside);
  }
  DType type = computeType(node.results[0]->type.dtype);
  if (mask < 0)
    return emit(x, at);
  int value = cast(emitMasked(x, at, mask), type);
  return select(mask, value, constant(type, floatAttr(node, "value", 0)));
}

int ElementEmitter::emitIndexed(const Node &node,
                                const std::vector<SymExpr> &index) {
  const OpInfo &info = *opInfoOf(node);
  const Value *data = node.operands[info.indexedOperand].value;
  const Value *indices = node.operands[1 - info.indexedOperand].value;
  std::vector<SymExpr> at;
  std::vector<SymExpr> where;
  ViewForm form = info.view->form;
  if (form == ViewForm::Embedding) {
    where.assign(index.begin(), index.end() - 1);
  } else if (form == ViewForm::Gather) {
    where = index;
  } else if (indices->type.rank() == 1) {
    // index_select: a 0-d input reads the index's only element; a 0-d
    // index has no dims to index.
    int64_t dim = normalizeDim(node, node.intAttr("dim", 0), data->type.rank());
    where = {data->type.rank() > 0 ? index[dim] : SymExpr(0)};
  }
  int position = cast(emit(indices, where), DType::I64);
  SymExpr indirect = SymExpr::symbol("%" + kernel.instrs[position].name);
  if (form == ViewForm::Embedding) {
    at = {indirect, index.back()};
  } else {
    at = index;
    if (data->type.rank() > 0)
      at[normalizeDim(node, node.intAttr("dim", 0), data->type.rank())] =
          indirect;
  }
  return emit(data, at);
}

int ElementEmitter::emitGenerator(const Node &node,
                                  const std::vector<SymExpr> &index) {
  DType type = computeType(node.results[0]->type.dtype);
  ViewForm form = opInfoOf(node)->view->form;
  if (form == ViewForm::Fill) {
    // A symbolic size as a value (a Python int of the captured code that
    // is a size: x * x.size(0)).
    const Attribute *value = node.attribute("value");
    if (value && std::holds_alternative<SymExpr>(*value))
      return cast(indexValue(std::get<SymExpr>(*value)), type);
    return constant(type, floatAttr(node, "value", 0));
  }
  if (form == ViewForm::Random) {
    // The counter: the stream's offset plus the element's row-major
    // position (a graph's streams take disjoint counter ranges).
    const std::vector<SymExpr> &sizes = node.results[0]->type.sizes;
    SymExpr position = symAttr(node, "offset", 0);
    SymExpr linear = 0;
    for (size_t k = 0; k < index.size(); ++k)
      linear = linear * sizes[k] + index[k];
    Instr random;
    random.op = ScalarOp::Random;
    random.type = type == DType::F64 ? DType::F64 : DType::F32;
    random.args = {emit(node.operands[0].value, {}),
                   indexValue(position + linear)};
    return cast(builder.append(random), type);
  }
  if (form == ViewForm::Arange) {
    double start = floatAttr(node, "start", 0),
           step = floatAttr(node, "step", 1);
    if (!isFloating(type) && start == int64_t(start) && step == int64_t(step))
      return cast(
          indexValue(SymExpr(int64_t(start)) + index[0] * int64_t(step)), type);
    int position = cast(indexValue(index[0]), DType::F64);
    int scaled = binary(ScalarOp::Mul, position, constant(DType::F64, step));
    return cast(binary(ScalarOp::Add, scaled, constant(DType::F64, start)),
                type);
  }
  // tril / triu: keep elements on the chosen side of the diagonal.
  size_t rank = index.size();
  SymExpr offset = index[rank - 1] - index[rank - 2];
  int64_t diagonal = node.intAttr("diagonal", 0);
  ScalarOp side = form == ViewForm::LowerTriangle ? ScalarOp::Le : ScalarOp::Ge;
  int keep =
      binary(side, indexValue(offset), constant(DType::I64, diagonal));
  int value = emit(node.operands[0].value, index);
  return select(keep, value, constant(type, 0));
}

} // namespace dynafuse

//===- TensorType.cpp - dtype, symbolic shape, strides and device ---------===//
#include "dynafuse/Graph/TensorType.h"

#include "dynafuse/Support/TextCursor.h"

namespace dynafuse {

bool isChannelsLast(const TensorType &type) {
  if (type.rank() != 4 || type.strides.empty())
    return false;
  std::vector<SymExpr> strides = channelsLastStrides(type.sizes);
  for (size_t k = 0; k < 4; ++k)
    if (type.sizes[k] != SymExpr(1) && type.strides[k] != strides[k])
      return false;
  return type.strides != contiguousStrides(type.sizes);
}

std::vector<SymExpr> channelsLastStrides(const std::vector<SymExpr> &sizes) {
  const SymExpr &c = sizes[1], &h = sizes[2], &w = sizes[3];
  return {c * h * w, SymExpr(1), w * c, c};
}

std::vector<SymExpr> contiguousStrides(const std::vector<SymExpr> &sizes) {
  std::vector<SymExpr> strides(sizes.size());
  SymExpr running(int64_t(1));
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = running;
    running = running * sizes[i];
  }
  return strides;
}

std::vector<SymExpr> stridesInOrder(const std::vector<SymExpr> &sizes,
                                    const std::vector<size_t> &order) {
  std::vector<SymExpr> strides(sizes.size(), SymExpr(int64_t(1)));
  SymExpr running(int64_t(1));
  for (size_t i = order.size(); i-- > 0;) {
    strides[order[i]] = running;
    running = running * sizes[order[i]];
  }
  return strides;
}

std::vector<SymExpr> TensorType::effectiveStrides() const {
  return strides.empty() ? contiguousStrides(sizes) : strides;
}

SymExpr TensorType::numel() const {
  SymExpr count(int64_t(1));
  for (const SymExpr &size : sizes)
    count = count * size;
  return count;
}

static std::string joinExprs(const std::vector<SymExpr> &exprs) {
  std::string text;
  for (size_t i = 0; i < exprs.size(); ++i)
    text += (i ? ", " : "") + exprs[i].str();
  return text;
}

std::string TensorType::str() const {
  std::string text =
      std::string(dtypeName(dtype)) + "[" + joinExprs(sizes) + "]";
  if (!strides.empty())
    text += "{" + joinExprs(strides) + "}";
  if (device != "cpu")
    text += "@" + device;
  return text;
}

bool TensorType::operator==(const TensorType &other) const {
  return dtype == other.dtype && sizes == other.sizes &&
         effectiveStrides() == other.effectiveStrides() &&
         device == other.device;
}

static std::vector<SymExpr> parseExprList(TextCursor &cursor,
                                          const std::string &close) {
  std::vector<SymExpr> exprs;
  if (cursor.accept(close))
    return exprs;
  do {
    exprs.push_back(cursor.symExpr());
  } while (cursor.accept(","));
  cursor.expect(close);
  return exprs;
}

TensorType parseTensorType(TextCursor &cursor) {
  Location where = cursor.location();
  std::string name = cursor.identifier("a tensor type such as f32[4, 8]");
  std::optional<DType> dtype = parseDType(name);
  if (!dtype)
    cursor.errorAt(where, "unknown dtype '" + name + "'");
  TensorType type;
  type.dtype = *dtype;
  cursor.expect("[");
  type.sizes = parseExprList(cursor, "]");
  if (cursor.accept("{")) {
    Location stridesAt = cursor.location();
    type.strides = parseExprList(cursor, "}");
    if (type.strides.size() != type.sizes.size())
      cursor.errorAt(stridesAt,
                     "type has " + std::to_string(type.sizes.size()) +
                         " sizes but " + std::to_string(type.strides.size()) +
                         " strides");
  }
  if (cursor.accept("@")) {
    type.device = cursor.identifier("a device name");
    if (cursor.accept(":"))
      type.device += ":" + std::to_string(cursor.integer());
  }
  return type;
}

} // namespace dynafuse

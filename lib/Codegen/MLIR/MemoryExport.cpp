//===- MemoryExport.cpp - Index arithmetic, loads and stores as memref ops -===//
//
// Index expressions become arith ops on `index` values: sums, products,
// arith.floordivsi and Python's modulo (a - (a floordiv b) * b; sizes and
// loop variables are far from the overflow that makes floordivsi's
// expansion trap at MIN + 1 floordiv -1); a divisor
// that is not a constant other than 0 and -1 is guarded as in the LLVM
// backend. An element access is memref.load/store with one index per
// dimension; the memref's strided layout turns them into the address.
// Bool elements are i8 in memory, f16 converts with arith.extf/truncf, bf16
// by its bit pattern (upper half of an f32, rounded to nearest even, NaN
// kept quiet), so no runtime helper is needed. A masked load and an
// indirect index (a kernel value "%7" in an expression) run inside scf.if:
//
//   %v = scf.if %mask -> (f32) {
//     %ok = arith.cmpi ult, %idx, %size : index
//     %r = scf.if %ok -> (f32) { memref.load ... } else {
//       func.call @dynafuse_index_error(%idx64, %size64); scf.yield %zero }
//     scf.yield %r
//   } else { scf.yield %zero }
//
//===----------------------------------------------------------------------===//
#include "MLIRCodegen.h"

#include "dynafuse/Support/Error.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

#include <algorithm>

namespace dynafuse {
namespace mlircg {

using mlir::Value;
namespace arith = mlir::arith;

namespace {
constexpr const char *kIndexErrorFunction = "dynafuse_index_error";
constexpr const char *kDivisionErrorFunction = "dynafuse_division_error";
} // namespace

Value KernelExporter::emitIndex(const SymExpr &expr) {
  switch (expr.kind()) {
  case SymExpr::Kind::Constant:
    return constantIndex(expr.constant());
  case SymExpr::Kind::Symbol: {
    const std::string &name = expr.symbolName();
    if (!name.empty() && name[0] == '%')
      return indirectIndex(name);
    auto found = names.find(name);
    if (found == names.end())
      failAt("uses unbound symbol '" + name + "'");
    return found->second;
  }
  case SymExpr::Kind::Add:
  case SymExpr::Kind::Mul: {
    bool add = expr.kind() == SymExpr::Kind::Add;
    Value result;
    for (const SymExpr &operand : expr.operands()) {
      Value value = emitIndex(operand);
      if (!result)
        result = value;
      else if (add)
        result = builder.create<arith::AddIOp>(loc, result, value);
      else
        result = builder.create<arith::MulIOp>(loc, result, value);
    }
    return result ? result : constantIndex(add ? 0 : 1);
  }
  case SymExpr::Kind::FloorDiv:
  case SymExpr::Kind::Mod:
    return emitFloorDivMod(expr.kind() == SymExpr::Kind::Mod,
                           emitIndex(expr.operands()[0]),
                           emitIndex(expr.operands()[1]), expr.operands()[1]);
  }
  failAt("unknown symbolic expression kind");
}

Value KernelExporter::emitFloorDivMod(bool wantMod, Value lhs, Value rhs,
                                      const SymExpr &divisor) {
  auto floorMod = [&](Value a, Value d, Value q) -> Value {
    return builder.create<arith::SubIOp>(
        loc, a, builder.create<arith::MulIOp>(loc, q, d));
  };
  if (divisor.isConstant() && divisor.constant() != 0 &&
      divisor.constant() != -1) {
    Value quotient = builder.create<arith::FloorDivSIOp>(loc, lhs, rhs);
    return wantMod ? floorMod(lhs, rhs, quotient) : quotient;
  }
  // 0 (an invalid program) must not trap; -1 is done without dividing.
  Value isZero = builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                               rhs, constantIndex(0));
  Value isMinusOne = builder.create<arith::CmpIOp>(
      loc, arith::CmpIPredicate::eq, rhs, constantIndex(-1));
  Value safe = builder.create<arith::SelectOp>(
      loc, builder.create<arith::OrIOp>(loc, isZero, isMinusOne),
      constantIndex(1), rhs);
  Value quotient = builder.create<arith::FloorDivSIOp>(loc, lhs, safe);
  Value result = wantMod ? floorMod(lhs, safe, quotient) : quotient;
  Value byMinusOne =
      wantMod ? constantIndex(0)
              : Value(builder.create<arith::SubIOp>(loc, constantIndex(0), lhs));
  return builder.create<arith::SelectOp>(loc, isMinusOne, byMinusOne, result);
}

/// Declares the runtime's error report `name` (i64, i64) -> () once.
void KernelExporter::declareErrorReport(const char *name) {
  if (module.lookupSymbol(name))
    return;
  mlir::OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(module.getBody());
  mlir::Type i64 = builder.getI64Type();
  auto declaration = builder.create<mlir::func::FuncOp>(
      loc, name, builder.getFunctionType({i64, i64}, {}));
  declaration.setPrivate();
}

void KernelExporter::declareIndexError() {
  declareErrorReport(kIndexErrorFunction);
}

void KernelExporter::declareDivisionError() {
  declareErrorReport(kDivisionErrorFunction);
}

Value KernelExporter::indirectIndex(const std::string &symbol) {
  std::string name = symbol.substr(1);
  for (size_t i = 0; i < kernel.instrs.size(); ++i) {
    if (kernel.instrs[i].name != name)
      continue;
    Value value = values[i];
    DType type = kernel.instrs[i].type;
    if (!value)
      failAt("indexes with '" + symbol +
             "', which is not a value defined before the access");
    if (type != DType::I32 && type != DType::I64)
      failAt("indexes with '" + symbol + "', which is not an i32 or i64 value");
    return builder.create<arith::IndexCastOp>(loc, builder.getIndexType(),
                                              value);
  }
  failAt("indexes with '" + symbol + "', which names no value");
}

Value KernelExporter::emitGuarded(
    const Instr &instr, Value mask, Value fallback,
    const std::function<Value(const std::vector<Value> &)> &access) {
  const LoopBuffer &param = kernel.params[instr.buffer];
  mlir::Type resultType = fallback ? fallback.getType() : mlir::Type();
  std::vector<Value> indices;
  // Each level checks one condition, then continues with the next.
  std::function<Value(size_t)> from = [&](size_t dim) -> Value {
    for (; dim < instr.index.size(); ++dim) {
      indices.push_back(emitIndex(instr.index[dim]));
      if (!isIndirectIndex(instr.index[dim]))
        continue;
      Value index = indices.back();
      Value size = emitIndex(param.type.sizes[dim]);
      // Unsigned: negative indices are out of bounds too.
      Value inBounds = builder.create<arith::CmpIOp>(
          loc, arith::CmpIPredicate::ult, index, size);
      size_t next = dim + 1;
      return emitIf(
          inBounds, resultType, [&]() { return from(next); },
          [&]() -> Value {
            mlir::Type i64 = builder.getI64Type();
            declareIndexError();
            builder.create<mlir::func::CallOp>(
                loc, kIndexErrorFunction, mlir::TypeRange{},
                mlir::ValueRange{
                    builder.create<arith::IndexCastOp>(loc, i64, index),
                    builder.create<arith::IndexCastOp>(loc, i64, size)});
            return fallback;
          });
    }
    return access(indices);
  };
  if (!mask)
    return from(0);
  return emitIf(
      mask, resultType, [&]() { return from(0); },
      [&]() { return fallback; });
}

Value KernelExporter::emitLoad(const Instr &instr) {
  if (instr.buffer < 0 || instr.buffer >= int(kernel.params.size()))
    failAt("load from a parameter the kernel does not have");
  DType dtype = kernel.params[instr.buffer].type.dtype;
  mlir::Type type = valueType(context, dtype);
  Value mask = instr.args.empty() ? Value() : values[instr.args[0]];
  bool guarded = mask || std::any_of(instr.index.begin(), instr.index.end(),
                                     isIndirectIndex);
  // What a masked-off or out-of-bounds load gives (only made when needed).
  Value zero;
  if (guarded)
    zero = isFloating(dtype) ? constantFloat(0, type) : constantInt(0, type);
  Value memref = params[instr.buffer];
  auto access = [&](const std::vector<Value> &indices) {
    Value raw = builder.create<mlir::memref::LoadOp>(loc, memref, indices);
    switch (dtype) {
    case DType::Bool:
      return Value(builder.create<arith::CmpIOp>(
          loc, arith::CmpIPredicate::ne, raw, constantInt(0, raw.getType())));
    case DType::F16:
      return Value(builder.create<arith::ExtFOp>(loc, type, raw));
    case DType::BF16: {
      // The bits of a bf16 are the upper half of an f32.
      mlir::Type i32 = builder.getI32Type();
      Value bits =
          builder.create<arith::BitcastOp>(loc, builder.getI16Type(), raw);
      Value wide = builder.create<arith::ExtUIOp>(loc, i32, bits);
      Value shifted =
          builder.create<arith::ShLIOp>(loc, wide, constantInt(16, i32));
      return Value(builder.create<arith::BitcastOp>(loc, type, shifted));
    }
    default:
      return raw;
    }
  };
  if (guarded)
    return emitGuarded(instr, mask, zero, access);
  std::vector<Value> indices;
  for (const SymExpr &index : instr.index)
    indices.push_back(emitIndex(index));
  return access(indices);
}

void KernelExporter::emitStore(const Instr &instr) {
  if (instr.buffer < 0 || instr.buffer >= int(kernel.params.size()))
    failAt("store to a parameter the kernel does not have");
  DType dtype = kernel.params[instr.buffer].type.dtype;
  Value value = values[instr.args[0]];
  if (!value)
    failAt("stores a value not defined before it");
  switch (dtype) {
  case DType::Bool:
    value = builder.create<arith::ExtUIOp>(loc, builder.getI8Type(), value);
    break;
  case DType::F16:
    value = builder.create<arith::TruncFOp>(loc, builder.getF16Type(), value);
    break;
  case DType::BF16: {
    mlir::Type i32 = builder.getI32Type();
    Value chosen = bf16RoundedBits(value);
    Value upper = builder.create<arith::TruncIOp>(
        loc, builder.getI16Type(),
        builder.create<arith::ShRUIOp>(loc, chosen, constantInt(16, i32)));
    value = builder.create<arith::BitcastOp>(loc, builder.getBF16Type(), upper);
    break;
  }
  default:
    break;
  }
  Value memref = params[instr.buffer];
  emitGuarded(instr, Value(), Value(), [&](const std::vector<Value> &indices) {
    builder.create<mlir::memref::StoreOp>(loc, value, memref, indices);
    return Value();
  });
}

Value KernelExporter::bf16RoundedBits(Value f32) {
  mlir::Type i32 = builder.getI32Type();
  Value bits = builder.create<arith::BitcastOp>(loc, i32, f32);
  Value lsb = builder.create<arith::AndIOp>(
      loc, builder.create<arith::ShRUIOp>(loc, bits, constantInt(16, i32)),
      constantInt(1, i32));
  Value rounded = builder.create<arith::AddIOp>(
      loc, builder.create<arith::AddIOp>(loc, bits, constantInt(0x7fff, i32)),
      lsb);
  Value quietNaN =
      builder.create<arith::OrIOp>(loc, bits, constantInt(0x400000, i32));
  Value isNaN = builder.create<arith::CmpIOp>(
      loc, arith::CmpIPredicate::ugt,
      builder.create<arith::AndIOp>(loc, bits, constantInt(0x7fffffff, i32)),
      constantInt(0x7f800000, i32));
  return builder.create<arith::SelectOp>(loc, isNaN, quietNaN, rounded);
}

} // namespace mlircg
} // namespace dynafuse

//===- Kernel.h - The loop-level IR -----------------------------*- C++ -*-===//
//
// A LoopModule is what lowering produces from a graph: a small program (input
// buffers, allocations, kernel calls, outputs) plus the kernels it calls.
// A Kernel takes buffer parameters and the values of its size symbols at run
// time; its body is a tree of `for` loops over symbolic extents holding
// scalar instructions in SSA form. Loads and stores index buffers with one
// symbolic expression per dimension; the buffer's strides turn them into an
// address, so views are index remappings, never copies.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_LOOP_KERNEL_H
#define DYNAFUSE_LOOP_KERNEL_H

#include "dynafuse/Graph/TensorType.h"
#include "dynafuse/Support/Error.h"

#include <string>
#include <vector>

namespace dynafuse {

/// X(enumerator, text name, operand count). Loads and stores have no value
/// operands besides the stored value; const has none.
#define DYNAFUSE_SCALAR_OPS(X)                                                 \
  X(Const, "const", 0)                                                         \
  X(Load, "load", 0)                                                           \
  X(Store, "store", 1)                                                         \
  X(Cast, "cast", 1)                                                           \
  X(Neg, "neg", 1)                                                             \
  X(Abs, "abs", 1)                                                             \
  X(Not, "not", 1)                                                             \
  X(Exp, "exp", 1)                                                             \
  X(Log, "log", 1)                                                             \
  X(Tanh, "tanh", 1)                                                           \
  X(Sigmoid, "sigmoid", 1)                                                     \
  X(Sqrt, "sqrt", 1)                                                           \
  X(Rsqrt, "rsqrt", 1)                                                         \
  X(Erf, "erf", 1)                                                             \
  X(Add, "add", 2)                                                             \
  X(Sub, "sub", 2)                                                             \
  X(Mul, "mul", 2)                                                             \
  X(Div, "div", 2)                                                             \
  X(Max, "max", 2)                                                             \
  X(Min, "min", 2)                                                             \
  X(Pow, "pow", 2)                                                             \
  X(And, "and", 2)                                                             \
  X(Or, "or", 2)                                                               \
  X(Eq, "eq", 2)                                                               \
  X(Ne, "ne", 2)                                                               \
  X(Lt, "lt", 2)                                                               \
  X(Le, "le", 2)                                                               \
  X(Gt, "gt", 2)                                                               \
  X(Ge, "ge", 2)                                                               \
  X(Select, "select", 3)

enum class ScalarOp {
#define DYNAFUSE_ENUM(name, text, arity) name,
  DYNAFUSE_SCALAR_OPS(DYNAFUSE_ENUM)
#undef DYNAFUSE_ENUM
};

const char *scalarOpName(ScalarOp op);
int scalarOpArity(ScalarOp op);
bool parseScalarOp(const std::string &name, ScalarOp &op);
bool isComparison(ScalarOp op);
/// exp, log, tanh, sigmoid, sqrt, rsqrt, erf: floating operands only.
bool isFloatMath(ScalarOp op);

/// One scalar instruction. Value-producing instructions are referenced by
/// their index in Kernel::instrs.
struct Instr {
  ScalarOp op = ScalarOp::Const;
  /// Result type (compute types only: bool, i32, i64, f32, f64). Unused for
  /// store.
  DType type = DType::F32;
  std::string name;
  std::vector<int> args;
  /// Load and store: parameter index and one index expression per dim.
  int buffer = -1;
  std::vector<SymExpr> index;
  /// Const: the literal (floatValue for floating types, intValue otherwise).
  double floatValue = 0;
  int64_t intValue = 0;
  /// Where the parser read it (not printed); used in verifier errors.
  Location where;
};

struct Stmt {
  enum class Kind { For, Instr };
  Kind kind = Kind::Instr;
  /// For: loop variable, trip count (from 0) and body.
  std::string var;
  SymExpr extent;
  std::vector<Stmt> body;
  /// Instr: index into Kernel::instrs.
  int instr = -1;
  Location where;

  static Stmt loop(std::string var, SymExpr extent, std::vector<Stmt> body);
  static Stmt instruction(int index);
};

struct LoopBuffer {
  std::string name;
  TensorType type;
};

struct Kernel {
  std::string name;
  /// The size symbols the kernel reads, in the order of its symbol argument.
  std::vector<std::string> symbols;
  std::vector<LoopBuffer> params;
  std::vector<Instr> instrs;
  std::vector<Stmt> body;

  int addInstr(Instr instr);
  int findParam(const std::string &name) const;
};

struct KernelCall {
  std::string kernel;
  /// Buffer names, one per kernel parameter.
  std::vector<std::string> args;
};

struct LoopModule {
  std::string name = "main";
  /// False for a file holding only kernels.
  bool hasProgram = false;
  std::vector<std::string> symbols;
  std::vector<LoopBuffer> inputs;
  std::vector<LoopBuffer> allocs;
  std::vector<KernelCall> calls;
  std::vector<std::string> outputs;
  std::vector<Kernel> kernels;

  const Kernel *findKernel(const std::string &name) const;
  /// An input or an allocation.
  const LoopBuffer *findBuffer(const std::string &name) const;
};

} // namespace dynafuse

#endif

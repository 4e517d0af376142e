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

#include "dynafuse/Graph/Graph.h"
#include "dynafuse/Graph/TensorType.h"
#include "dynafuse/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace dynafuse {

/// X(enumerator, text name, operand count). A load's only optional operand
/// is its mask; a store's is the stored value; const, index and reduced have
/// none.
#define DYNAFUSE_SCALAR_OPS(X)                                                 \
  X(Const, "const", 0)                                                         \
  X(Load, "load", 0)                                                           \
  X(Store, "store", 1)                                                         \
  X(Index, "index", 0)                                                         \
  X(Reduced, "reduced", 0)                                                     \
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
  X(Exp2, "exp2", 1)                                                           \
  X(Log1p, "log1p", 1)                                                         \
  X(Expm1, "expm1", 1)                                                         \
  X(Sin, "sin", 1)                                                             \
  X(Cos, "cos", 1)                                                             \
  X(Floor, "floor", 1)                                                         \
  X(Ceil, "ceil", 1)                                                           \
  X(Round, "round", 1)                                                         \
  X(Trunc, "trunc", 1)                                                         \
  X(RoundF16, "round_f16", 1)                                                  \
  X(RoundBF16, "round_bf16", 1)                                                \
  X(BitNot, "bitnot", 1)                                                       \
  X(Add, "add", 2)                                                             \
  X(Sub, "sub", 2)                                                             \
  X(Mul, "mul", 2)                                                             \
  X(Div, "div", 2)                                                             \
  X(Max, "max", 2)                                                             \
  X(Min, "min", 2)                                                             \
  X(Pow, "pow", 2)                                                             \
  X(Fmod, "fmod", 2)                                                           \
  X(Remainder, "remainder", 2)                                                 \
  X(BitAnd, "bitand", 2)                                                       \
  X(BitOr, "bitor", 2)                                                         \
  X(BitXor, "bitxor", 2)                                                       \
  X(Xor, "xor", 2)                                                             \
  X(And, "and", 2)                                                             \
  X(Or, "or", 2)                                                               \
  X(Eq, "eq", 2)                                                               \
  X(Ne, "ne", 2)                                                               \
  X(Lt, "lt", 2)                                                               \
  X(Le, "le", 2)                                                               \
  X(Gt, "gt", 2)                                                               \
  X(Ge, "ge", 2)                                                               \
  X(Select, "select", 3)                                                       \
  X(Random, "random", 2)

enum class ScalarOp {
#define DYNAFUSE_ENUM(name, text, arity) name,
  DYNAFUSE_SCALAR_OPS(DYNAFUSE_ENUM)
#undef DYNAFUSE_ENUM
};

const char *scalarOpName(ScalarOp op);
int scalarOpArity(ScalarOp op);
bool parseScalarOp(const std::string &name, ScalarOp &op);
bool isComparison(ScalarOp op);
/// exp, log, tanh, sigmoid, sqrt, rsqrt, erf, exp2, log1p, expm1, sin, cos,
/// floor, ceil, round, trunc, and round_f16 / round_bf16 (an f32 rounded to
/// the nearest f16 / bf16, as a store and load of it would: kernels compute
/// f16 and bf16 in f32): floating operands only.
bool isFloatMath(ScalarOp op);
/// bitand, bitor, bitxor, bitnot: integer (or bool) operands.
bool isBitwise(ScalarOp op);

/// How a reduce statement combines the values its body yields.
///   sum, prod, max, min (NaN-propagating), any (or), all (and): one yield.
///   argmax, argmin: two yields (value, i64 position); the first position
///   of the extreme wins and a NaN counts as the extreme, as in PyTorch.
enum class ReduceKind { Sum, Prod, Max, Min, Any, All, ArgMax, ArgMin };
const char *reduceKindName(ReduceKind kind);
bool parseReduceKind(const std::string &name, ReduceKind &kind);
int reduceYieldCount(ReduceKind kind);

/// Whether an index expression names a kernel value ("%7") as a symbol, so
/// indexes indirectly (see Instr).
bool isIndirectIndex(const SymExpr &index);

/// One scalar instruction. Value-producing instructions are referenced by
/// their index in Kernel::instrs.
///
/// Index expressions may name integer values of the kernel as symbols
/// ("%7"): indirect indexing (gather, embedding). Every dimension indexed
/// that way is bounds-checked at run time: an index outside [0, size)
/// reads 0 (or skips the store) and reports dynafuse_index_error.
struct Instr {
  ScalarOp op = ScalarOp::Const;
  /// Result type (compute types only: bool, i32, i64, f32, f64). Unused for
  /// store.
  DType type = DType::F32;
  std::string name;
  std::vector<int> args;
  /// Load and store: parameter index and one index expression per dim.
  /// Index: the single expression whose value (i64) the instruction gives.
  /// A load with one arg is masked: it reads only where the bool arg is
  /// true and gives 0 elsewhere.
  int buffer = -1;
  std::vector<SymExpr> index;
  /// Const: the literal (floatValue for floating types, intValue otherwise).
  double floatValue = 0;
  int64_t intValue = 0;
  /// Where the parser read it (not printed); used in verifier errors.
  Location where;
};

struct Stmt {
  enum class Kind { For, Instr, Reduce };
  Kind kind = Kind::Instr;
  /// For: loop variable, trip count (from 0) and body.
  std::string var;
  SymExpr extent;
  std::vector<Stmt> body;
  /// Reduce: combines what `body` yields over every point of the reduction
  /// domain (vars[k] in 0..extents[k]) into `results`, instructions of op
  /// Reduced defined by this statement. An empty domain gives the identity
  /// (0 for sum, -inf for max, ...).
  ReduceKind reduceKind = ReduceKind::Sum;
  std::vector<std::string> vars;
  std::vector<SymExpr> extents;
  std::vector<int> yields;
  std::vector<int> results;
  /// Instr: index into Kernel::instrs.
  int instr = -1;
  Location where;

  static Stmt loop(std::string var, SymExpr extent, std::vector<Stmt> body);
  static Stmt reduce(ReduceKind kind, std::vector<std::string> vars,
                     std::vector<SymExpr> extents, std::vector<Stmt> body,
                     std::vector<int> yields, std::vector<int> results);
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

/// One statement of a module's program, executed in order.
///   alloc:  `%b = alloc T [reuse %a]` new contiguous storage, or the storage
///           of an earlier allocation no longer needed;
///   view:   `%v = view %b + OFFSET : T` the same storage seen with T's
///           sizes and strides, OFFSET elements in;
///   extern: `%r, %s = extern OP(%a, %b) {attrs} : T, U` an op run by the
///           runtime's extern library (ATen, or a torch callable), defining
///           one new buffer per result;
///   call:   `call @k(%a, %b)` a kernel on buffers, one per parameter.
struct ProgramStep {
  enum class Kind { Alloc, View, Extern, Call };
  Kind kind = Kind::Call;
  /// The buffer an alloc or view defines.
  std::string result;
  TensorType type;
  /// The buffers an extern defines, one per result of its op.
  std::vector<std::string> results;
  std::vector<TensorType> types;
  std::string reuse;
  std::string source;
  SymExpr offset;
  /// An extern's graph op.
  Op op = Op::CallTorch;
  std::map<std::string, Attribute> attributes;
  std::string kernel;
  std::vector<std::string> args;
};

struct LoopModule {
  std::string name = "main";
  /// False for a file holding only kernels.
  bool hasProgram = false;
  std::vector<std::string> symbols;
  std::vector<LoopBuffer> inputs;
  std::vector<ProgramStep> steps;
  std::vector<std::string> outputs;
  std::vector<Kernel> kernels;

  const Kernel *findKernel(const std::string &name) const;
  /// The type of an input or of a buffer a step defines; null if none.
  const TensorType *findBuffer(const std::string &name) const;
  /// The step defining name; null for inputs and unknown names.
  const ProgramStep *definingStep(const std::string &name) const;
};

} // namespace dynafuse

#endif

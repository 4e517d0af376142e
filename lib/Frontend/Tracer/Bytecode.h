//===- Bytecode.h - CPython bytecode decoding, 3.11 to 3.13 -----*- C++ -*-===//
//
// Decodes a code object's co_code (the unquickened, uninstrumented copy from
// PyCode_GetCode) into instructions the bytecode tracer reads the same way
// on every supported interpreter:
//   - EXTENDED_ARG folded in, inline cache entries skipped (their sizes come
//     from the running interpreter's opcode tables, not from a copy);
//   - every relative jump resolved to an absolute byte offset (3.11 encodes
//     direction in the opcode, 3.12+ in JUMP_BACKWARD; 3.13 counts caches);
//   - COMPARE_OP's argument reduced to the comparison (3.12 and 3.13 pack
//     specialization bits below it);
//   - 3.13's superinstructions (LOAD_FAST_LOAD_FAST, STORE_FAST_STORE_FAST,
//     STORE_FAST_LOAD_FAST) split into their two halves.
// And parses the exception table (one format from 3.11 to 3.13).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_BYTECODE_H
#define DYNAFUSE_CAPTURE_BYTECODE_H

#include <Python.h>
#include <opcode.h>

#include <string>
#include <vector>

namespace dynafuse {

struct Instruction {
  int opcode = 0;
  int arg = 0;
  /// The argument as encoded (COMPARE_OP's keeps its specialization bits).
  int rawArg = 0;
  /// Offset in bytes of the instruction itself (after its EXTENDED_ARGs).
  int offset = 0;
  /// Offset of its first EXTENDED_ARG prefix (jump targets point here); -1
  /// for the second half of a split superinstruction (nothing jumps there).
  int start = 0;
  /// Offset of the next instruction (after the inline caches).
  int nextOffset = 0;
  /// Absolute byte offset a jump goes to; -1 for other instructions.
  int target = -1;
  int line = 0;
};

struct ExceptionTableEntry {
  int start = 0; ///< byte offsets
  int end = 0;
  int target = 0;
  int depth = 0;
  bool lasti = false;
};

/// Number of inline cache code units following opcode, from the running
/// interpreter's `opcode` module.
int inlineCacheEntries(int opcode);
const char *opcodeName(int opcode);
/// The stack effect of an instruction, from the running interpreter.
int stackEffect(int opcode, int arg);

/// Throws Error when the code object cannot be read.
std::vector<Instruction> decodeInstructions(PyCodeObject *code);
std::vector<ExceptionTableEntry> parseExceptionTable(PyCodeObject *code);
/// The table's encoding (the inverse of parseExceptionTable).
std::string encodeExceptionTable(const std::vector<ExceptionTableEntry> &entries);
/// Opcodes whose argument indexes the frame's local, cell or free slots
/// (the interpreter's opcode.haslocal and hasfree).
bool indexesLocalSlots(int opcode);

/// BINARY_OP's argument with its in-place form (`+=`, NB_INPLACE_ADD ...)
/// read as the plain operator's (NB_ADD ...).
inline int plainBinaryOperator(int kind) {
  return kind >= NB_INPLACE_ADD ? kind - (NB_INPLACE_ADD - NB_ADD) : kind;
}

/// The conditional jumps of every supported interpreter, by what they do.
enum class Branch {
  None,
  PopIfFalse,
  PopIfTrue,
  PopIfNone,
  PopIfNotNone,
  IfFalseOrPop,
  IfTrueOrPop
};
Branch branchOf(int opcode);

} // namespace dynafuse

#endif

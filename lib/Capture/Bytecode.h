//===- Bytecode.h - CPython 3.11 bytecode decoding --------------*- C++ -*-===//
//
// Decodes a code object's co_code (the unquickened copy from PyCode_GetCode)
// into instructions with EXTENDED_ARG folded in and inline cache entries
// skipped, each with its byte offset and source line; and parses the
// exception table.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_BYTECODE_H
#define DYNAFUSE_CAPTURE_BYTECODE_H

#include <Python.h>

#include <string>
#include <vector>

namespace dynafuse {

struct Instruction {
  int opcode = 0;
  int arg = 0;
  /// Offset in bytes of the instruction itself (after its EXTENDED_ARGs).
  int offset = 0;
  /// Offset of its first EXTENDED_ARG prefix (jump targets point here).
  int start = 0;
  /// Offset of the next instruction (after the inline caches).
  int nextOffset = 0;
  int line = 0;
};

struct ExceptionTableEntry {
  int start = 0; ///< byte offsets
  int end = 0;
  int target = 0;
  int depth = 0;
  bool lasti = false;
};

/// Number of inline cache code units following opcode in 3.11.
int inlineCacheEntries(int opcode);
const char *opcodeName(int opcode);

/// Throws Error when the code object cannot be read.
std::vector<Instruction> decodeInstructions(PyCodeObject *code);
std::vector<ExceptionTableEntry> parseExceptionTable(PyCodeObject *code);

} // namespace dynafuse

#endif

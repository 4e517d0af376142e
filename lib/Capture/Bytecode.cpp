//===- Bytecode.cpp - CPython 3.11 bytecode decoding ----------------------===//
#include "Bytecode.h"
#include "PyRef.h"

#include "dynafuse/Support/Error.h"

#include <opcode.h>

namespace dynafuse {

int inlineCacheEntries(int opcode) {
  // Include/internal/pycore_opcode.h, _PyOpcode_Caches, CPython 3.11.
  switch (opcode) {
  case BINARY_SUBSCR:
    return 4;
  case STORE_SUBSCR:
  case UNPACK_SEQUENCE:
  case BINARY_OP:
  case PRECALL:
    return 1;
  case STORE_ATTR:
  case LOAD_ATTR:
  case CALL:
    return 4;
  case COMPARE_OP:
    return 2;
  case LOAD_GLOBAL:
    return 5;
  case LOAD_METHOD:
    return 10;
  default:
    return 0;
  }
}

const char *opcodeName(int opcode) {
  static PyObject *slot = nullptr;
  PyObject *names = lookupOnce(slot, "opcode", "opname");
  if (!names || opcode < 0 || opcode >= PyList_Size(names))
    return "<unknown>";
  return PyUnicode_AsUTF8(PyList_GetItem(names, opcode));
}

std::vector<Instruction> decodeInstructions(PyCodeObject *code) {
  PyObject *bytes = PyCode_GetCode(code);
  if (!bytes) {
    PyErr_Clear();
    fail("cannot read the bytecode of a code object");
  }
  const unsigned char *units =
      reinterpret_cast<const unsigned char *>(PyBytes_AS_STRING(bytes));
  int size = int(PyBytes_GET_SIZE(bytes));
  std::vector<Instruction> instructions;
  int extended = 0;
  int start = 0;
  for (int offset = 0; offset < size;) {
    int opcode = units[offset];
    int arg = units[offset + 1] | extended;
    if (opcode == EXTENDED_ARG) {
      extended = arg << 8;
      offset += 2;
      continue;
    }
    extended = 0;
    Instruction instruction;
    instruction.start = start;
    instruction.opcode = opcode;
    instruction.arg = arg;
    instruction.offset = offset;
    instruction.nextOffset = offset + 2 + 2 * inlineCacheEntries(opcode);
    instruction.line = PyCode_Addr2Line(code, offset);
    instructions.push_back(instruction);
    offset = instruction.nextOffset;
    start = offset;
  }
  Py_DECREF(bytes);
  return instructions;
}

namespace {

/// 3.11's exception table: varints of 6-bit groups, bit 6 = continuation,
/// bit 7 marks an entry start. Values are in code units.
class TableReader {
public:
  TableReader(const unsigned char *data, int size) : data(data), size(size) {}
  bool atEnd() const { return pos >= size; }
  int next() {
    int value = data[pos] & 63;
    while (data[pos++] & 64) {
      if (pos >= size)
        fail("truncated exception table");
      value = (value << 6) | (data[pos] & 63);
    }
    return value;
  }

private:
  const unsigned char *data;
  int size;
  int pos = 0;
};

} // namespace

std::vector<ExceptionTableEntry> parseExceptionTable(PyCodeObject *code) {
  std::vector<ExceptionTableEntry> entries;
  PyObject *table = code->co_exceptiontable;
  if (!table || !PyBytes_Check(table))
    return entries;
  TableReader reader(
      reinterpret_cast<const unsigned char *>(PyBytes_AS_STRING(table)),
      int(PyBytes_GET_SIZE(table)));
  while (!reader.atEnd()) {
    ExceptionTableEntry entry;
    entry.start = reader.next() * 2;
    entry.end = entry.start + reader.next() * 2;
    entry.target = reader.next() * 2;
    int depthAndLasti = reader.next();
    entry.depth = depthAndLasti >> 1;
    entry.lasti = depthAndLasti & 1;
    entries.push_back(entry);
  }
  return entries;
}

} // namespace dynafuse

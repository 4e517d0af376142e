//===- Bytecode.cpp - CPython bytecode decoding, 3.11 to 3.13 -------------===//
#include "Bytecode.h"
#include "dynafuse/Support/PyRef.h"

#include "dynafuse/Frontend/FrameCompiler.h"
#include "dynafuse/Support/Error.h"

#include <opcode.h>

#include <array>
#include <cstring>

namespace dynafuse {

namespace {

/// What the decoder needs of the running interpreter's opcode tables, read
/// once from its `opcode` module: 3.11 and 3.12 list cache sizes by opcode,
/// 3.13 by name.
struct OpcodeTables {
  std::array<int, 256> caches{};
  std::array<bool, 256> relativeJump{};
  std::array<bool, 256> backwardJump{};
  std::array<bool, 256> localSlots{};
};

OpcodeTables readOpcodeTables() {
  OpcodeTables tables;
  PyRef module = PyRef::steal(PyImport_ImportModule("opcode"));
  PyRef caches = PyRef::steal(
      module ? PyObject_GetAttrString(module.get(), "_inline_cache_entries")
             : nullptr);
  PyRef opmap = PyRef::steal(
      module ? PyObject_GetAttrString(module.get(), "opmap") : nullptr);
  PyRef hasjrel = PyRef::steal(
      module ? PyObject_GetAttrString(module.get(), "hasjrel") : nullptr);
  PyRef opname = PyRef::steal(
      module ? PyObject_GetAttrString(module.get(), "opname") : nullptr);
  if (!caches || !opmap || !hasjrel || !opname) {
    PyErr_Clear();
    fail("the interpreter's opcode module lacks its opcode tables");
  }
  auto setCache = [&](long index, PyObject *size) {
    long units = PyLong_AsLong(size);
    if (index >= 0 && index < 256 && units >= 0)
      tables.caches[size_t(index)] = int(units);
  };
  if (PyDict_Check(caches.get())) {
    PyObject *name, *size;
    Py_ssize_t position = 0;
    while (PyDict_Next(caches.get(), &position, &name, &size))
      if (PyObject *opcode = PyDict_GetItem(opmap.get(), name))
        setCache(PyLong_AsLong(opcode), size);
  } else if (PyList_Check(caches.get())) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(caches.get()) && i < 256; ++i)
      setCache(long(i), PyList_GET_ITEM(caches.get(), i));
  } else {
    fail("the interpreter's opcode._inline_cache_entries has an unknown form");
  }
  PyRef jumps = PyRef::steal(PySequence_List(hasjrel.get()));
  for (Py_ssize_t i = 0; jumps && i < PyList_GET_SIZE(jumps.get()); ++i) {
    long opcode = PyLong_AsLong(PyList_GET_ITEM(jumps.get(), i));
    if (opcode < 0 || opcode >= 256 || opcode >= PyList_Size(opname.get()))
      continue;
    tables.relativeJump[size_t(opcode)] = true;
    const char *name = PyUnicode_AsUTF8(PyList_GetItem(opname.get(), opcode));
    tables.backwardJump[size_t(opcode)] =
        name && std::strstr(name, "BACKWARD") != nullptr;
  }
  for (const char *list : {"haslocal", "hasfree"}) {
    PyRef indexes = PyRef::steal(
        module ? PyObject_GetAttrString(module.get(), list) : nullptr);
    PyRef items = PyRef::steal(indexes ? PySequence_List(indexes.get()) : nullptr);
    for (Py_ssize_t i = 0; items && i < PyList_GET_SIZE(items.get()); ++i) {
      long opcode = PyLong_AsLong(PyList_GET_ITEM(items.get(), i));
      if (opcode >= 0 && opcode < 256)
        tables.localSlots[size_t(opcode)] = true;
    }
  }
  PyErr_Clear();
  return tables;
}

const OpcodeTables &opcodeTables() {
  // Constant for the life of the process (GIL held on first use).
  static const OpcodeTables tables = readOpcodeTables();
  return tables;
}

/// COMPARE_OP's comparison sits above the bits the interpreter uses for
/// specialization: none in 3.11, 4 in 3.12, 5 in 3.13.
constexpr int kCompareShift = PY_VERSION_HEX >= 0x030D0000   ? 5
                              : PY_VERSION_HEX >= 0x030C0000 ? 4
                                                             : 0;

/// Appends in, or its two halves when it is a 3.13 superinstruction (each
/// half's argument is one nibble of in's).
void appendSplit(std::vector<Instruction> &out, Instruction in) {
  int first = -1, second = -1;
#ifdef LOAD_FAST_LOAD_FAST
  if (in.opcode == LOAD_FAST_LOAD_FAST)
    first = LOAD_FAST, second = LOAD_FAST;
  else if (in.opcode == STORE_FAST_STORE_FAST)
    first = STORE_FAST, second = STORE_FAST;
  else if (in.opcode == STORE_FAST_LOAD_FAST)
    first = STORE_FAST, second = LOAD_FAST;
#endif
  if (first < 0) {
    out.push_back(in);
    return;
  }
  Instruction low = in;
  low.opcode = second;
  low.arg = in.arg & 15;
  low.start = -1;
  in.opcode = first;
  in.arg >>= 4;
  out.push_back(in);
  out.push_back(low);
}

} // namespace

int inlineCacheEntries(int opcode) {
  return opcode >= 0 && opcode < 256 ? opcodeTables().caches[size_t(opcode)]
                                     : 0;
}

bool indexesLocalSlots(int opcode) {
  return opcode >= 0 && opcode < 256 && opcodeTables().localSlots[size_t(opcode)];
}

const char *opcodeName(int opcode) {
  static PyObject *slot = nullptr;
  PyObject *names = lookupOnce(slot, "opcode", "opname");
  if (!names || opcode < 0 || opcode >= PyList_Size(names))
    return "<unknown>";
  return PyUnicode_AsUTF8(PyList_GetItem(names, opcode));
}

int stackEffect(int opcode, int arg) {
  return PyCompile_OpcodeStackEffect(opcode, arg);
}

std::vector<Instruction> decodeInstructions(PyCodeObject *code) {
  const OpcodeTables &tables = opcodeTables();
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
  for (int offset = 0; offset + 1 < size;) {
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
    instruction.rawArg = arg;
    instruction.offset = offset;
    instruction.nextOffset = offset + 2 + 2 * tables.caches[size_t(opcode)];
    if (tables.relativeJump[size_t(opcode)])
      instruction.target = tables.backwardJump[size_t(opcode)]
                               ? instruction.nextOffset - 2 * arg
                               : instruction.nextOffset + 2 * arg;
    if (opcode == COMPARE_OP)
      instruction.arg = arg >> kCompareShift;
    instruction.line = PyCode_Addr2Line(code, offset);
    appendSplit(instructions, instruction);
    offset = instruction.nextOffset;
    start = offset;
  }
  Py_DECREF(bytes);
  return instructions;
}

namespace {

/// The exception table: varints of 6-bit groups, bit 6 = continuation, bit 7
/// marks an entry start. Values are in code units.
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

namespace {

void appendVarint(std::string &out, int value, bool entryStart) {
  // Big-endian groups of 6 bits; bit 6 marks that another group follows.
  int shift = 0;
  while ((value >> shift) >= 64)
    shift += 6;
  bool first = true;
  for (; shift >= 0; shift -= 6) {
    unsigned char byte = (value >> shift) & 63;
    if (shift > 0)
      byte |= 64;
    if (first && entryStart)
      byte |= 128;
    first = false;
    out.push_back(char(byte));
  }
}

} // namespace

std::string
encodeExceptionTable(const std::vector<ExceptionTableEntry> &entries) {
  std::string out;
  for (const ExceptionTableEntry &entry : entries) {
    appendVarint(out, entry.start / 2, true);
    appendVarint(out, (entry.end - entry.start) / 2, false);
    appendVarint(out, entry.target / 2, false);
    appendVarint(out, entry.depth * 2 + (entry.lasti ? 1 : 0), false);
  }
  return out;
}

PyObject *decodedInstructions(PyObject *code) {
  if (!PyCode_Check(code)) {
    PyErr_SetString(PyExc_TypeError, "decode_instructions needs a code object");
    return nullptr;
  }
  std::vector<Instruction> instructions;
  try {
    instructions = decodeInstructions(reinterpret_cast<PyCodeObject *>(code));
  } catch (const Error &error) {
    PyErr_SetString(PyExc_ValueError, error.what());
    return nullptr;
  }
  PyObject *list = PyList_New(0);
  for (const Instruction &in : instructions) {
    PyObject *item = Py_BuildValue("(isii)", in.offset, opcodeName(in.opcode),
                                   in.arg, in.target);
    if (!item || PyList_Append(list, item) < 0) {
      Py_XDECREF(item);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(item);
  }
  return list;
}

Branch branchOf(int opcode) {
  switch (opcode) {
#ifdef POP_JUMP_IF_FALSE // 3.12: forward only
  case POP_JUMP_IF_FALSE:
    return Branch::PopIfFalse;
  case POP_JUMP_IF_TRUE:
    return Branch::PopIfTrue;
  case POP_JUMP_IF_NONE:
    return Branch::PopIfNone;
  case POP_JUMP_IF_NOT_NONE:
    return Branch::PopIfNotNone;
#endif
#ifdef POP_JUMP_FORWARD_IF_FALSE // 3.11: a direction in each opcode
  case POP_JUMP_FORWARD_IF_FALSE:
  case POP_JUMP_BACKWARD_IF_FALSE:
    return Branch::PopIfFalse;
  case POP_JUMP_FORWARD_IF_TRUE:
  case POP_JUMP_BACKWARD_IF_TRUE:
    return Branch::PopIfTrue;
  case POP_JUMP_FORWARD_IF_NONE:
  case POP_JUMP_BACKWARD_IF_NONE:
    return Branch::PopIfNone;
  case POP_JUMP_FORWARD_IF_NOT_NONE:
  case POP_JUMP_BACKWARD_IF_NOT_NONE:
    return Branch::PopIfNotNone;
  case JUMP_IF_FALSE_OR_POP:
    return Branch::IfFalseOrPop;
  case JUMP_IF_TRUE_OR_POP:
    return Branch::IfTrueOrPop;
#endif
  default:
    return Branch::None;
  }
}

} // namespace dynafuse

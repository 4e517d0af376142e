//===- ResumeCode.cpp - Break stubs and resume functions, 3.11 to 3.13 ----===//
#include "ResumeCode.h"

#include "dynafuse/Support/Error.h"

#include <opcode.h>

#include <algorithm>

namespace dynafuse {
namespace {

constexpr bool kNullBelowCallable = PY_VERSION_HEX < 0x030D0000;

/// A value with a NULL slot where a method load or LOAD_GLOBAL's low bit
/// puts one: below the value up to 3.12, above it from 3.13.
StackLayout valueWithNull() {
  return kNullBelowCallable ? StackLayout{true, false}
                            : StackLayout{false, true};
}

/// Emits instructions with their EXTENDED_ARG prefixes and (zeroed) inline
/// caches.
class CodeWriter {
public:
  void emit(int opcode, int arg) {
    if (arg < 0)
      fail("negative bytecode argument");
    for (int shift = 24; shift > 0; shift -= 8)
      if (arg >> shift)
        unit(EXTENDED_ARG, (arg >> shift) & 0xff);
    unit(opcode, arg & 0xff);
    for (int i = 0; i < inlineCacheEntries(opcode); ++i)
      unit(0, 0);
  }
  const std::string &bytes() const { return code; }

private:
  void unit(int opcode, int arg) {
    code.push_back(char(opcode));
    code.push_back(char(arg));
  }
  std::string code;
};

/// Location-table entries for `units` code units, each entry at most 8:
/// with no location (code 15), or on the code's first line without columns
/// (code 13 with a line delta of 0).
std::string lineEntries(int units, bool located) {
  std::string table;
  while (units > 0) {
    int length = std::min(units, 8);
    int code = located ? 13 : 15;
    table.push_back(char(0x80 | (code << 3) | (length - 1)));
    if (located)
      table.push_back(char(0)); // signed varint 0
    units -= length;
  }
  return table;
}

PyRef tupleOfStrings(const std::vector<std::string> &names) {
  PyRef tuple = PyRef::steal(PyTuple_New(Py_ssize_t(names.size())));
  for (size_t i = 0; i < names.size(); ++i)
    PyTuple_SET_ITEM(tuple.get(), Py_ssize_t(i),
                     PyUnicode_FromString(names[i].c_str()));
  return tuple;
}

/// original.replace(**fields), as a new code object; throws Error when the
/// interpreter refuses it.
PyRef replaceCode(PyCodeObject *original, PyObject *fields) {
  PyRef replace = PyRef::steal(
      PyObject_GetAttrString(reinterpret_cast<PyObject *>(original), "replace"));
  PyRef empty = PyRef::steal(PyTuple_New(0));
  PyRef code = PyRef::steal(
      replace ? PyObject_Call(replace.get(), empty.get(), fields) : nullptr);
  if (!code) {
    PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
    PyErr_Fetch(&type, &value, &traceback);
    PyRef text = PyRef::steal(value ? PyObject_Str(value) : nullptr);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    PyErr_Clear();
    fail(std::string("the interpreter refused a generated code object: ") +
         (text ? PyUnicode_AsUTF8(text.get()) : "unknown error"));
  }
  return code;
}

void setField(PyObject *fields, const char *name, PyObject *value) {
  PyDict_SetItemString(fields, name, value);
  Py_DECREF(value);
}

/// The fields every generated code object sets: its bytecode, and local
/// names that are all positional arguments.
PyRef positionalCodeFields(const std::string &code,
                           const std::vector<std::string> &names) {
  PyRef fields = PyRef::steal(PyDict_New());
  setField(fields.get(), "co_code",
           PyBytes_FromStringAndSize(code.data(), Py_ssize_t(code.size())));
  setField(fields.get(), "co_varnames", tupleOfStrings(names).release());
  setField(fields.get(), "co_argcount", PyLong_FromSize_t(names.size()));
  setField(fields.get(), "co_posonlyargcount", PyLong_FromLong(0));
  setField(fields.get(), "co_kwonlyargcount", PyLong_FromLong(0));
  setField(fields.get(), "co_nlocals", PyLong_FromSize_t(names.size()));
  return fields;
}

std::string qualifiedName(PyCodeObject *code) {
  PyObject *name = code->co_qualname ? code->co_qualname : code->co_name;
  return PyUnicode_AsUTF8(name);
}

} // namespace

std::optional<BreakInstruction> breakInstructionOf(const Instruction &in,
                                                   PyObject *kwNames,
                                                   PyObject *consts) {
  BreakInstruction result;
  result.opcode = in.opcode;
  result.rawArg = in.rawArg;
  result.outputs = {false};
  auto consumes = [&](int inputs, StackLayout outputs) {
    result.inputs = inputs;
    result.outputs = std::move(outputs);
    return std::optional<BreakInstruction>(result);
  };
  switch (in.opcode) {
  case CALL:
    if (kwNames) {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(consts); ++i)
        if (PyTuple_GET_ITEM(consts, i) == kwNames)
          result.kwNamesIndex = int(i);
      if (result.kwNamesIndex < 0)
        return std::nullopt;
    }
    return consumes(in.arg + 2, {false});
#ifdef CALL_KW // 3.13
  case CALL_KW:
    return consumes(in.arg + 3, {false});
#endif
  case CALL_FUNCTION_EX:
    return consumes(3 + (in.arg & 1), {false});
  case BINARY_OP:
  case BINARY_SUBSCR:
  case COMPARE_OP:
  case IS_OP:
  case CONTAINS_OP:
#ifdef FORMAT_WITH_SPEC // 3.13
  case FORMAT_WITH_SPEC:
#endif
    return consumes(2, {false});
  case UNARY_NEGATIVE:
  case UNARY_NOT:
  case UNARY_INVERT:
  case GET_ITER:
#ifdef TO_BOOL // 3.13
  case TO_BOOL:
  case FORMAT_SIMPLE:
  case CONVERT_VALUE:
#endif
#ifdef CALL_INTRINSIC_1 // 3.12
  case CALL_INTRINSIC_1:
#endif
    return consumes(1, {false});
#ifdef FORMAT_VALUE // 3.11 and 3.12
  case FORMAT_VALUE:
    return consumes((in.arg & 4) ? 2 : 1, {false});
#endif
#ifdef BINARY_SLICE // 3.12
  case BINARY_SLICE:
    return consumes(3, {false});
  case STORE_SLICE:
    return consumes(4, {});
#endif
  case STORE_SUBSCR:
    return consumes(3, {});
  case DELETE_SUBSCR:
  case STORE_ATTR:
    return consumes(2, {});
  case BUILD_STRING:
  case BUILD_TUPLE:
  case BUILD_LIST:
  case BUILD_SET:
    return consumes(in.arg, {false});
  case BUILD_MAP:
    return consumes(2 * in.arg, {false});
  case BUILD_CONST_KEY_MAP:
    return consumes(in.arg + 1, {false});
  case UNPACK_SEQUENCE:
    return consumes(1, StackLayout(size_t(in.arg), false));
  case BEFORE_WITH:
    return consumes(1, {false, false});
  case IMPORT_NAME:
    return consumes(2, {false});
  case IMPORT_FROM: // leaves the module under the name it imported
    return consumes(1, {false, false});
  case LOAD_GLOBAL:
    result.rawArg = in.rawArg & ~1;
    return consumes(0, (in.rawArg & 1) ? valueWithNull() : StackLayout{false});
#if PY_VERSION_HEX < 0x030C0000 // 3.11 (later a pseudo-instruction)
  case LOAD_METHOD:
    result.opcode = LOAD_ATTR;
    return consumes(1, valueWithNull());
  case LOAD_ATTR:
    return consumes(1, {false});
#else // 3.12 folded LOAD_METHOD into LOAD_ATTR's low bit
  case LOAD_ATTR:
    result.rawArg = in.rawArg & ~1;
    return consumes(1, (in.rawArg & 1) ? valueWithNull() : StackLayout{false});
#endif
  default:
    return std::nullopt;
  }
}

PyRef makeBreakStub(PyCodeObject *original, const BreakInstruction &instruction,
                    const StackLayout &inputs, int line) {
  CodeWriter writer;
  writer.emit(RESUME, 0);
  std::vector<std::string> names;
  for (bool null : inputs) {
    if (null) {
      writer.emit(PUSH_NULL, 0);
      continue;
    }
    writer.emit(LOAD_FAST, int(names.size()));
    names.push_back("___input" + std::to_string(names.size()));
  }
#ifdef KW_NAMES // 3.11 and 3.12
  if (instruction.kwNamesIndex >= 0)
    writer.emit(KW_NAMES, instruction.kwNamesIndex);
#endif
#ifdef PRECALL // 3.11
  if (instruction.opcode == CALL)
    writer.emit(PRECALL, instruction.rawArg);
#endif
  writer.emit(instruction.opcode, instruction.rawArg);
  int values = int(std::count(instruction.outputs.begin(),
                              instruction.outputs.end(), false));
  writer.emit(BUILD_TUPLE, values);
  writer.emit(RETURN_VALUE, 0);

  const std::string &code = writer.bytes();
  PyRef fields = positionalCodeFields(code, names);
  setField(fields.get(), "co_stacksize",
           PyLong_FromSize_t(std::max(inputs.size(), size_t(values)) + 2));
  setField(fields.get(), "co_flags", PyLong_FromLong(CO_OPTIMIZED | CO_NEWLOCALS));
  setField(fields.get(), "co_firstlineno", PyLong_FromLong(line));
  std::string lines = lineEntries(int(code.size() / 2), true);
  setField(fields.get(), "co_linetable",
           PyBytes_FromStringAndSize(lines.data(), Py_ssize_t(lines.size())));
  setField(fields.get(), "co_exceptiontable", PyBytes_FromString(""));
  setField(fields.get(), "co_freevars", PyTuple_New(0));
  setField(fields.get(), "co_cellvars", PyTuple_New(0));
  return replaceCode(original, fields.get());
}

std::optional<std::string> resumeRefusal(PyCodeObject *code) {
  if (code->co_ncellvars > 0)
    return std::string("the function makes closure cells (a resume function "
                       "would need the frame's own cells)");
  return std::nullopt;
}

ResumeCode makeResumeCode(PyCodeObject *original, int target,
                          const StackLayout &stack,
                          const std::vector<int> &unbound, int line) {
  if (auto refusal = resumeRefusal(original))
    fail(*refusal);
  int locals = original->co_nlocals;
  int freeVars = original->co_nfreevars;
  CodeWriter prologue;
  if (freeVars > 0)
    prologue.emit(COPY_FREE_VARS, freeVars);
  prologue.emit(RESUME, 0);
  for (int slot : unbound)
    prologue.emit(DELETE_FAST, slot);
  std::vector<std::string> stackNames;
  for (bool null : stack) {
    if (null) {
      prologue.emit(PUSH_NULL, 0);
      continue;
    }
    prologue.emit(LOAD_FAST, locals + int(stackNames.size()));
    stackNames.push_back("___stack" + std::to_string(stackNames.size()));
  }
  // JUMP_FORWARD counts from the end of the prologue, where the copy of the
  // original bytecode starts: the distance is the target's own offset.
  prologue.emit(JUMP_FORWARD, target / 2);
  int shift = int(prologue.bytes().size());

  PyRef originalBytes = PyRef::steal(PyCode_GetCode(original));
  if (!originalBytes) {
    PyErr_Clear();
    fail("cannot read the bytecode of a code object");
  }
  std::string body(PyBytes_AS_STRING(originalBytes.get()),
                   size_t(PyBytes_GET_SIZE(originalBytes.get())));
  // Free-variable slots follow the locals: the stack arguments appended to
  // the locals move them up.
  int extra = int(stackNames.size());
  if (freeVars > 0 && extra > 0) {
    int argument = 0;
    std::vector<size_t> argumentBytes;
    for (size_t at = 0; at + 1 < body.size();) {
      int opcode = (unsigned char)body[at];
      argument = (argument << 8) | (unsigned char)body[at + 1];
      argumentBytes.push_back(at + 1);
      if (opcode == EXTENDED_ARG) {
        at += 2;
        continue;
      }
      if (indexesLocalSlots(opcode)) {
#ifdef LOAD_FAST_LOAD_FAST // 3.13: two slots packed in one argument
        bool packed = opcode == LOAD_FAST_LOAD_FAST ||
                      opcode == STORE_FAST_STORE_FAST ||
                      opcode == STORE_FAST_LOAD_FAST;
        if (packed && ((argument >> 4) >= locals || (argument & 15) >= locals))
          fail("a packed instruction reads a closure cell");
#else
        bool packed = false;
#endif
        if (!packed && argument >= locals) {
          int moved = argument + extra;
          if (moved >> (8 * argumentBytes.size()))
            fail("a closure cell index outgrows its instruction");
          for (size_t i = 0; i < argumentBytes.size(); ++i)
            body[argumentBytes[i]] =
                char((moved >> (8 * (argumentBytes.size() - 1 - i))) & 0xff);
        }
      }
      argument = 0;
      argumentBytes.clear();
      at += 2 + 2 * size_t(inlineCacheEntries(opcode));
    }
  }
  std::string code = prologue.bytes() + body;

  std::vector<ExceptionTableEntry> table = parseExceptionTable(original);
  for (ExceptionTableEntry &entry : table) {
    entry.start += shift;
    entry.end += shift;
    entry.target += shift;
  }
  std::string exceptions = encodeExceptionTable(table);
  std::string lines = lineEntries(shift / 2, false);
  lines.append(PyBytes_AS_STRING(original->co_linetable),
               size_t(PyBytes_GET_SIZE(original->co_linetable)));

  std::vector<std::string> names;
  PyRef varnames = PyRef::steal(PyCode_GetVarnames(original));
  if (!varnames) {
    PyErr_Clear();
    fail("cannot read the local names of a code object");
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(varnames.get()); ++i)
    names.push_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(varnames.get(), i)));
  names.insert(names.end(), stackNames.begin(), stackNames.end());

  PyRef fields = positionalCodeFields(code, names);
  setField(fields.get(), "co_stacksize",
           PyLong_FromLong(original->co_stacksize + 1));
  setField(fields.get(), "co_flags",
           PyLong_FromLong(original->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS)));
  setField(fields.get(), "co_linetable",
           PyBytes_FromStringAndSize(lines.data(), Py_ssize_t(lines.size())));
  setField(fields.get(), "co_exceptiontable",
           PyBytes_FromStringAndSize(exceptions.data(),
                                     Py_ssize_t(exceptions.size())));
  std::string qualname =
      qualifiedName(original) + " (resumed at line " + std::to_string(line) + ")";
  setField(fields.get(), "co_qualname", PyUnicode_FromString(qualname.c_str()));
  ResumeCode result;
  result.code = replaceCode(original, fields.get());
  result.shift = shift;
  return result;
}

} // namespace dynafuse

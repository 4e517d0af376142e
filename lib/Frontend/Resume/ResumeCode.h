//===- ResumeCode.h - Code objects generated at graph breaks ---*- C++ -*-===//
//
// Decision 43. At a graph break the captured graph runs, the one instruction
// capture could not interpret runs natively, and the frame continues in a
// resume function that is captured in turn. This file makes the two kinds of
// code object that needs, for CPython 3.11 to 3.13:
//   - a break stub: runs one instruction of the original code on its inputs
//     (passed as arguments, NULL slots pushed) and returns what the
//     instruction left on the stack as a tuple. It keeps the original's
//     file, name and line, so a traceback through it reads like eager's.
//   - a resume function: the original code object from one instruction on.
//     Its arguments are the original's local slots followed by the non-NULL
//     stack slots live at that instruction; a prologue pushes the stack and
//     jumps into a verbatim copy of the original bytecode, so exception
//     table, line table and jumps keep working (shifted by the prologue).
// What an instruction consumes and leaves (BreakInstruction) is decided
// here too, since the stub's layout depends on it.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_RESUMECODE_H
#define DYNAFUSE_CAPTURE_RESUMECODE_H

#include "Tracer/Bytecode.h"
#include "dynafuse/Support/PyRef.h"

#include <optional>
#include <string>
#include <vector>

namespace dynafuse {

/// The interpreter's value stack at a resume point, bottom first: true for
/// a NULL slot (the self-or-NULL slot of a pending call), false for a value.
using StackLayout = std::vector<bool>;

/// An instruction run by a break stub: what the stub executes (a method
/// load becomes a plain attribute load: the bound method and a NULL slot
/// call the same way), how many stack slots it consumes, and the layout of
/// what it leaves (its values come back from the stub as a tuple).
struct BreakInstruction {
  int opcode = 0;
  int rawArg = 0;
  int inputs = 0;
  StackLayout outputs;
  /// 3.11/3.12: the KW_NAMES constant the call uses, emitted before it.
  int kwNamesIndex = -1;
};

/// How `in` runs in a stub, or nullopt for instructions a stub cannot run
/// (jumps, loads and stores of locals and cells, loop and generator
/// instructions). `kwNames` is the pending KW_NAMES tuple (3.11/3.12), or
/// null; `consts` the code's constants it is found in.
std::optional<BreakInstruction> breakInstructionOf(const Instruction &in,
                                                   PyObject *kwNames,
                                                   PyObject *consts);

/// The stub running `instruction` of `original` (at `line`) with its inputs
/// laid out as `inputs`. Throws Error when the interpreter refuses it.
PyRef makeBreakStub(PyCodeObject *original,
                    const BreakInstruction &instruction,
                    const StackLayout &inputs, int line);

struct ResumeCode {
  PyRef code;
  /// Bytes of prologue before the copy of the original bytecode: offset o of
  /// the original is o + shift in the resume code.
  int shift = 0;
};

/// The resume function continuing `original` at byte offset `target` with
/// `stack` on the value stack. Throws Unsupported-free Error when the code
/// cannot be resumed (cells made by the frame itself).
/// Local slots in `unbound` start unbound (the prologue deletes them).
ResumeCode makeResumeCode(PyCodeObject *original, int target,
                          const StackLayout &stack,
                          const std::vector<int> &unbound, int line);

/// Whether a break in `code` can be resumed at all (no cell variables: a
/// resume function would need the frame's own cells), with the reason.
std::optional<std::string> resumeRefusal(PyCodeObject *code);

} // namespace dynafuse

#endif

//===- TracedCode.h - The code the tracer is walking ------------*- C++ -*-===//
#ifndef DYNAFUSE_FRONTEND_TRACEDCODE_H
#define DYNAFUSE_FRONTEND_TRACEDCODE_H

#include "Bytecode.h"
#include "Var.h"

#include <Python.h>

#include <map>
#include <string>
#include <vector>

namespace dynafuse {
namespace capture {

/// The state of the code being traced (the frame's, or an inlined
/// function's): inlining a call swaps in a fresh one and restores the
/// caller's afterwards.
struct TracedCode {
  PyCodeObject *code = nullptr;
  std::string fileName;
  /// The globals and closure of the code, and its function's source (-1
  /// for the frame).
  PyObject *globals = nullptr;
  PyObject *closure = nullptr;
  int functionSource = -1;
  std::vector<Instruction> instructions;
  std::map<int, int> indexOfOffset;
  std::vector<VarPtr> stack;
  std::vector<VarPtr> locals;
  /// Closure cells of an inlined function made during capture, and where
  /// an inlined generator's yielded values go.
  std::vector<VarPtr> symbolicClosure;
  std::vector<VarPtr> *yielded = nullptr;
  PyRef kwNames;
  int currentLine = 0;
};

} // namespace capture
} // namespace dynafuse

#endif

//===- CallInliner.h - Inlining calls of Python functions and modules -*- C++
//-*-===//
//
// Call inlining for the tracer: an nn.Module call (its forward pre-hooks,
// forward and forward hooks, as Module._call_impl runs them; backward and
// global hooks guarded empty) or a Python function call is traced in
// place, by binding the
// arguments like CPython does and running the callee's bytecode through the
// tracer's loop in a fresh TracedCode (the caller's comes back after). The
// inliner owns the nesting depth; the tracer owns the traced code, and the
// inliner re-enters it (through the reference it holds).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_CALLINLINER_H
#define DYNAFUSE_CAPTURE_CALLINLINER_H

#include "Var.h"

#include <map>
#include <string>
#include <vector>

namespace dynafuse {
namespace capture {

class BytecodeTracer;

class CallInliner {
public:
  explicit CallInliner(BytecodeTracer &tracer) : tracer(tracer) {}

  /// Whether the code being traced is an inlined callee's.
  bool inlining() const { return depth > 0; }

  VarPtr inlineModule(const VarPtr &module, std::vector<VarPtr> args,
                      const Keywords &keywords);

  /// Runs a Python function's bytecode symbolically in place of the call.
  VarPtr inlineFunction(const VarPtr &function, const std::vector<VarPtr> &args,
                        const Keywords &keywords);

  /// Runs code (a function's or a comprehension's) in place of a call with
  /// the given initial locals; returns its result, or for generator code an
  /// iterator over what it yielded.
  VarPtr inlineCode(PyCodeObject *callee, std::vector<VarPtr> initialLocals,
                    PyObject *calleeGlobals, PyObject *calleeClosure,
                    int calleeSource, std::vector<VarPtr> cells);

private:
  static constexpr int kMaxInlineDepth = 24;
  BytecodeTracer &tracer;
  int depth = 0;

  /// The backward and global hook dictionaries a module call would run;
  /// all must be empty (and stay empty: guarded).
  void requireNoHooks(const VarPtr &module);

  /// A forward (pre-)hook and whether it takes the call's keywords.
  struct ForwardHook {
    VarPtr hook;
    bool withKeywords = false;
  };
  /// The hooks of module.<hooks> in its order, each read through a
  /// guarded source (the dict's and the keywords dict's lengths guarded).
  std::vector<ForwardHook> forwardHooks(const VarPtr &module, const char *hooks,
                                        const char *withKeywords);
  /// module.forward(*args, **keywords), or what the instance's forward
  /// attribute holds.
  VarPtr callForward(const VarPtr &module, std::vector<VarPtr> args,
                     const Keywords &keywords);

  void guardEmpty(PyObject *dict, int source, const char *what);

  /// The callee's initial locals: parameters bound like CPython binds them
  /// (positional, keyword, defaults, *args, **kwargs); defaults that are
  /// not constants read through the function's (guarded) source.
  std::vector<VarPtr> bindArguments(const VarPtr &function,
                                    PyCodeObject *callee,
                                    const std::vector<VarPtr> &args,
                                    const Keywords &keywords);
};

} // namespace capture
} // namespace dynafuse

#endif

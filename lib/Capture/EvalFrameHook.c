/*===- EvalFrameHook.c - The PEP 523 frame hook for CPython 3.11 ----------===//
 *
 * Installed only while a compiled call is active. Passes through untouched:
 * frames being thrown into, generator/coroutine frames, code objects that are
 * not optimized functions. Everything else goes to the C++ callback.
 *
 * CPython 3.11 only: when the hook returns without evaluating the frame, the
 * caller (_PyEval_Vector) clears and pops it, so the hook must not. 3.12
 * changed this contract; the build refuses other versions.
 *
 *===----------------------------------------------------------------------===*/
#define Py_BUILD_CORE 1
#include "EvalFrameHook.h"

#include <internal/pycore_frame.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000
#error "Dynafuse's frame hook supports CPython 3.11 only"
#endif

static DynafuseFrameCallback frameCallback = NULL;
static _PyFrameEvalFunction previousEval = NULL;
static long activeCount = 0;

static PyObject *dynafuse_eval_frame(PyThreadState *tstate,
                                     _PyInterpreterFrame *frame,
                                     int throwflag) {
  _PyFrameEvalFunction next =
      previousEval ? previousEval : _PyEval_EvalFrameDefault;
  PyCodeObject *code = frame->f_code;
  const int skippedFlags =
      CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;
  if (throwflag || frame->owner != FRAME_OWNED_BY_THREAD ||
      !(code->co_flags & CO_OPTIMIZED) || (code->co_flags & skippedFlags) ||
      frameCallback == NULL)
    return next(tstate, frame, throwflag);
  DynafuseFrame view;
  view.code = code;
  view.function = (PyObject *)frame->f_func;
  view.globals = frame->f_globals;
  view.builtins = frame->f_builtins;
  view.localsplus = frame->localsplus;
  int handled = 0;
  PyObject *result = frameCallback(&view, &handled);
  if (handled)
    return result;
  return next(tstate, frame, throwflag);
}

void dynafuse_set_frame_callback(DynafuseFrameCallback callback) {
  frameCallback = callback;
}

void dynafuse_hook_enter(void) {
  if (activeCount++ > 0)
    return;
  PyInterpreterState *interp = PyInterpreterState_Get();
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  previousEval = current == dynafuse_eval_frame ? NULL : current;
  _PyInterpreterState_SetEvalFrameFunc(interp, dynafuse_eval_frame);
}

void dynafuse_hook_exit(void) {
  if (activeCount <= 0 || --activeCount > 0)
    return;
  PyInterpreterState *interp = PyInterpreterState_Get();
  _PyInterpreterState_SetEvalFrameFunc(
      interp, previousEval ? previousEval : _PyEval_EvalFrameDefault);
  previousEval = NULL;
}

int dynafuse_hook_installed(void) { return activeCount > 0; }

/*===- EvalFrameHook.c - The PEP 523 frame hook, CPython 3.11 to 3.13 -----===//
 *
 * Installed only while a compiled call is active. Passes through untouched:
 * frames being thrown into, generator/coroutine frames, code objects that are
 * not optimized functions, frames already given a frame object, and every
 * frame while a tracer, profiler or sys.monitoring tool is active (debuggers
 * and coverage see the code they expect). Everything else goes to the C++
 * callback.
 *
 * What differs between the interpreters sits in the first section, one
 * definition per difference:
 *   - where a frame keeps its code and function (3.11 f_code/f_func, 3.12
 *     f_code/f_funcobj, 3.13 f_executable/f_funcobj);
 *   - how tracing is detected (3.11: a trace or profile function; 3.12
 *     on: PEP 669's global and per-code monitors, which sys.settrace and
 *     sys.setprofile also set);
 *   - who disposes of a frame the hook answers without evaluating: 3.11's
 *     caller (_PyEval_Vector) clears and pops it; from 3.12 on the
 *     evaluation function does, so the hook must (as ceval.c's
 *     clear_thread_frame does). _PyFrame_ClearExceptCode is not exported by
 *     3.12 or 3.13 and _PyThreadState_PopFrame not by 3.12: their few lines
 *     are spelled out below.
 * The build refuses any other interpreter, and free-threaded builds.
 *
 *===----------------------------------------------------------------------===*/
#define Py_BUILD_CORE 1
#include "EvalFrameHook.h"

#include <internal/pycore_frame.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "Dynafuse's frame hook supports CPython 3.11, 3.12 and 3.13"
#endif
#ifdef Py_GIL_DISABLED
#error "Dynafuse's frame hook does not support free-threaded CPython builds"
#endif

#if PY_VERSION_HEX >= 0x030C0000
#include <internal/pycore_interp.h>
#endif

/*---- What differs between interpreter versions ---------------------------*/

static PyCodeObject *codeOf(_PyInterpreterFrame *frame) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyCode_Check(frame->f_executable)
             ? (PyCodeObject *)frame->f_executable
             : NULL;
#else
  return frame->f_code;
#endif
}

static PyObject *functionOf(_PyInterpreterFrame *frame) {
#if PY_VERSION_HEX >= 0x030C0000
  return frame->f_funcobj;
#else
  return (PyObject *)frame->f_func;
#endif
}

/* Whether a tracer, profiler or monitoring tool would see this frame. */
static int isObserved(PyThreadState *tstate, PyCodeObject *code) {
#if PY_VERSION_HEX >= 0x030C0000
  const _Py_GlobalMonitors *global = &tstate->interp->monitors;
  for (size_t i = 0; i < sizeof(global->tools); ++i)
    if (global->tools[i])
      return 1;
  if (code->_co_monitoring) {
    const _Py_LocalMonitors *local = &code->_co_monitoring->local_monitors;
    for (size_t i = 0; i < sizeof(local->tools); ++i)
      if (local->tools[i])
        return 1;
  }
  return 0;
#else
  (void)code;
  return tstate->c_tracefunc != NULL || tstate->c_profilefunc != NULL;
#endif
}

#if PY_VERSION_HEX >= 0x030C0000
/* ceval.c's clear_thread_frame for a frame that never started: its frame
 * object is NULL (checked before the frame is handled) and its stack holds
 * only the locals _PyFrame_Initialize set up. */
static void clearAndPopFrame(PyThreadState *tstate,
                             _PyInterpreterFrame *frame) {
  tstate->c_recursion_remaining--;
  for (int i = 0; i < frame->stacktop; i++)
    Py_XDECREF(frame->localsplus[i]);
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
#if PY_VERSION_HEX >= 0x030D0000
  Py_DECREF(frame->f_executable);
  tstate->c_recursion_remaining++;
  _PyThreadState_PopFrame(tstate, frame);
#else
  Py_DECREF(frame->f_code);
  tstate->c_recursion_remaining++;
  /* pystate.c's _PyThreadState_PopFrame. */
  PyObject **base = (PyObject **)frame;
  _PyStackChunk *chunk = tstate->datastack_chunk;
  if (base == &chunk->data[0]) {
    _PyStackChunk *previous = chunk->previous;
    tstate->datastack_top = &previous->data[previous->top];
    tstate->datastack_chunk = previous;
    tstate->datastack_limit =
        (PyObject **)(((char *)previous) + previous->size);
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    arena.free(arena.ctx, chunk, chunk->size);
  } else {
    tstate->datastack_top = base;
  }
#endif
}
#endif

/* A frame the callback answered without evaluating it. */
static void finishHandledFrame(PyThreadState *tstate,
                               _PyInterpreterFrame *frame) {
#if PY_VERSION_HEX >= 0x030C0000
  clearAndPopFrame(tstate, frame);
#else
  (void)tstate;
  (void)frame; /* _PyEval_Vector clears and pops it. */
#endif
}

/*---- The hook ------------------------------------------------------------*/

static DynafuseFrameCallback frameCallback = NULL;
static DynafuseFrameReport frameReport = NULL;
static _PyFrameEvalFunction previousEval = NULL;
static long activeCount = 0;
/* Frames the callback handled so far (a report's difference). */
static long handledFrames = 0;

static PyObject *dynafuse_eval_frame(PyThreadState *tstate,
                                     _PyInterpreterFrame *frame, int throwflag);

/* The frame and everything it calls without the hook; reinstalled after
 * unless the last compiled call ended meanwhile (another thread, while
 * torch released the GIL). */
static PyObject *runUnhooked(PyThreadState *tstate, _PyInterpreterFrame *frame,
                             int throwflag, _PyFrameEvalFunction next) {
  PyInterpreterState *interp = tstate->interp;
  _PyInterpreterState_SetEvalFrameFunc(interp, next);
  PyObject *result = next(tstate, frame, throwflag);
  if (activeCount > 0 && _PyInterpreterState_GetEvalFrameFunc(interp) == next)
    _PyInterpreterState_SetEvalFrameFunc(interp, dynafuse_eval_frame);
  return result;
}

static PyObject *dynafuse_eval_frame(PyThreadState *tstate,
                                     _PyInterpreterFrame *frame,
                                     int throwflag) {
  _PyFrameEvalFunction next =
      previousEval ? previousEval : _PyEval_EvalFrameDefault;
  PyCodeObject *code = codeOf(frame);
  const int skippedFlags =
      CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;
  if (throwflag || code == NULL || frame->owner != FRAME_OWNED_BY_THREAD ||
      frame->frame_obj != NULL || !(code->co_flags & CO_OPTIMIZED) ||
      (code->co_flags & skippedFlags) || frameCallback == NULL ||
      isObserved(tstate, code))
    return next(tstate, frame, throwflag);
  DynafuseFrame view;
  view.code = code;
  view.function = functionOf(frame);
  view.globals = frame->f_globals;
  view.builtins = frame->f_builtins;
  view.localsplus = frame->localsplus;
  int handled = DYNAFUSE_FRAME_RUNS;
  PyObject *result = frameCallback(&view, &handled);
  switch (handled) {
  case DYNAFUSE_FRAME_HANDLED:
    ++handledFrames;
    finishHandledFrame(tstate, frame);
    return result;
  case DYNAFUSE_FRAME_RUNS_UNHOOKED:
    return runUnhooked(tstate, frame, throwflag, next);
  case DYNAFUSE_FRAME_RUNS_REPORTED: {
    long before = handledFrames;
    /* The frame may be freed by its run: keep its code for the report. */
    Py_INCREF(code);
    result = next(tstate, frame, throwflag);
    if (frameReport)
      frameReport(code, handledFrames - before);
    Py_DECREF(code);
    return result;
  }
  default:
    return next(tstate, frame, throwflag);
  }
}

void dynafuse_set_frame_callback(DynafuseFrameCallback callback,
                                 DynafuseFrameReport report) {
  frameCallback = callback;
  frameReport = report;
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

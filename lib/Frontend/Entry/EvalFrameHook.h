/*===- EvalFrameHook.h - The PEP 523 frame hook (C interface) ----*- C -*-===//
 *
 * The hook itself is C: CPython 3.11's internal frame header does not compile
 * as C++. It hands each eligible frame to a C++ callback, which either
 * returns the frame's result (handled) or lets the frame run: normally,
 * without the hook for everything it calls (the frame and its callees run
 * at the interpreter's full speed: CPython inlines Python-to-Python calls
 * only without an eval hook), or normally and then reports how many frames
 * under it the callback handled.
 *
 *===----------------------------------------------------------------------===*/
#ifndef DYNAFUSE_CAPTURE_EVALFRAMEHOOK_H
#define DYNAFUSE_CAPTURE_EVALFRAMEHOOK_H

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the C++ side sees of a frame about to run. */
typedef struct {
  PyCodeObject *code;
  PyObject *function; /* may be NULL */
  PyObject *globals;
  PyObject *builtins;
  PyObject **localsplus; /* arguments are the first co_argcount entries */
} DynafuseFrame;

/* What the callback decided (*handled). */
enum {
  DYNAFUSE_FRAME_RUNS = 0,          /* runs normally, its callees hooked */
  DYNAFUSE_FRAME_HANDLED = 1,       /* the callback returned its result */
  DYNAFUSE_FRAME_RUNS_UNHOOKED = 2, /* runs with the hook off meanwhile */
  DYNAFUSE_FRAME_RUNS_REPORTED = 3  /* runs normally, then is reported */
};

/* Returns a new reference (or NULL with an exception) and sets *handled to
 * DYNAFUSE_FRAME_HANDLED, or sets another of the above (leaving it at 0 is
 * DYNAFUSE_FRAME_RUNS). */
typedef PyObject *(*DynafuseFrameCallback)(DynafuseFrame *frame, int *handled);
/* After a DYNAFUSE_FRAME_RUNS_REPORTED frame: how many frames (at any
 * depth) under it the callback handled. */
typedef void (*DynafuseFrameReport)(PyCodeObject *code, long nestedHandled);

void dynafuse_set_frame_callback(DynafuseFrameCallback callback,
                                 DynafuseFrameReport report);
/* Counted across threads: the first enter installs the hook, the last exit
 * restores whatever eval function was installed before. GIL held. */
void dynafuse_hook_enter(void);
void dynafuse_hook_exit(void);
/* Whether the hook is installed now (some compiled call is active). */
int dynafuse_hook_installed(void);

#ifdef __cplusplus
}
#endif

#endif

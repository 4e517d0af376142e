/*===- EvalFrameHook.h - The PEP 523 frame hook (C interface) ----*- C -*-===//
 *
 * The hook itself is C: CPython 3.11's internal frame header does not compile
 * as C++. It hands each eligible frame to a C++ callback, which either
 * returns the frame's result (handled) or lets the frame run normally.
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

/* Returns a new reference (or NULL with an exception) and sets *handled, or
 * leaves *handled at 0 to let the frame run. */
typedef PyObject *(*DynafuseFrameCallback)(DynafuseFrame *frame, int *handled);

void dynafuse_set_frame_callback(DynafuseFrameCallback callback);
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

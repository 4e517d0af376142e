//===- RunEntry.h - Guards of an entry, and running it ----------*- C++ -*-===//
//
// Checking a cache entry's guards against a frame, and running a hit: the
// graph's inputs fetched through their sources, the compiled module run
// with ATen for storage and extern ops, in-place updates written back, and
// the frame's return value rebuilt from the graph's results.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_RUNENTRY_H
#define DYNAFUSE_CAPTURE_RUNENTRY_H

#include "CodeObjectCache.h"

#include <string>

namespace dynafuse {

/// Whether `entry` was captured under the global state `now` and every
/// guard of it holds; *failed (when given) describes the first that does
/// not.
/// *failedGuard (when given) is that guard (null when the global state
/// differs).
bool guardsHold(const CacheEntry &entry, const GlobalState &now,
                SourceResolver &resolver, std::string *failed,
                const Guard **failedGuard = nullptr);
/// What a run of an entry that ends at a graph break hands on: the frame's
/// state rebuilt as objects (a null PyRef is a NULL stack slot), for
/// continueAfterBreak to run outside the compiled run (with the frame hook
/// active again, so the code it calls is compiled in turn).
struct BreakState {
  std::shared_ptr<const CacheEntry> entry;
  const ResumePoint *point = nullptr;
  std::vector<PyRef> stack;
  std::vector<PyRef> inputs;
  std::vector<PyRef> locals;
  PyRef globals;
  PyRef closure;
};

/// Runs `entry` on `frame` (whose sources `resolver` fetches); returns the
/// frame's result (a new reference), or, for an entry that ends at a graph
/// break, fills *pending and returns None. Throws on a failure of the
/// compiled run (which has no effects: the frame can run eagerly).
PyObject *runEntry(const std::shared_ptr<const CacheEntry> &entry,
                   SourceResolver &resolver, DynafuseFrame *frame,
                   BreakState *pending);
/// Runs the break's instruction (a stub) or takes its branch, then the
/// resume function; returns its result, or null with the Python error the
/// code raised (passed to the with blocks the break was inside first).
PyObject *continueAfterBreak(BreakState &state);

} // namespace dynafuse

#endif

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
bool guardsHold(const CacheEntry &entry, const GlobalState &now,
                SourceResolver &resolver, std::string *failed);
/// Runs `entry` on the frame `resolver` fetches from; returns the frame's
/// result (a new reference).
PyObject *runEntry(const CacheEntry &entry, SourceResolver &resolver);

} // namespace dynafuse

#endif

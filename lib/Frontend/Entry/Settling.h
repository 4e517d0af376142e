//===- Settling.h - Code objects whose guards can never hold twice -*- C++
//-*-===//
//
// A compiled entry guarded on the identity of an object the caller makes
// afresh for every call (a cache object, a config view, a closure) can
// never run again once that object is gone, and each call recompiles the
// code until its recompile limit: tens of captures, each costing more than
// the whole eager call. The cache lookup notices such guards as they fail
// (the object the guard keeps is referenced by nothing but the entry) and
// drops the entry at once; when a source of the same code object has
// received fresh objects twice, the code settles: it runs eagerly from then
// on, decided by the skip flag the frame hook checks before any tracing,
// and the reason is kept for stats() and explain().
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_FRONTEND_SETTLING_H
#define DYNAFUSE_FRONTEND_SETTLING_H

#include "CodeObjectCache.h"
#include "dynafuse/Frontend/FrameCompiler.h"

#include <string>
#include <vector>

namespace dynafuse {

/// Whether guard (which just failed) compares with an object that is gone:
/// no later call can pass it, so the entry holding it can never run again.
bool canNeverHoldAgain(const Guard &guard);

/// Records a lookup during outermost call `call` (missed: it found no
/// entry); settles the code into eager (and returns true) when lookups
/// missed in kMissingCallsToSettle calls in a row (a guard that holds for
/// no later call: a value made afresh for every call that is not an object
/// taking weak references, a counter). Calls that looked the code up only
/// with hits break the row; a call counts once however often it missed
/// (the layers of one model share code and miss once each in the first
/// call only). whyMissed: the first failed guard, for the reason.
bool noteLookup(CodeCache &cache, PyCodeObject *code, long call, bool missed,
                const std::string &whyMissed = "");
constexpr int kMissingCallsToSettle = 3;

/// Records that the sources described (one per dropped entry) received an
/// object that did not outlive its call; settles the code into eager (and
/// returns true) when one of them has done so twice.
bool settleOnFreshObjects(CodeCache &cache, PyCodeObject *code,
                          const std::vector<std::string> &freshSources);

} // namespace dynafuse

#endif

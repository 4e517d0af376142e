//===- Settling.cpp - Code objects whose guards can never hold twice ------===//
//
// See Settling.h. An identity guard keeps a weak reference to an object
// that takes them (Guards.h); once the object is gone, no call can pass it
// again and the guard fails for good. An object something else of ours
// keeps alive (a constant the entry returns) is never seen as gone: that
// entry stays until the recompile limit, as before.
//
//===----------------------------------------------------------------------===//
#include "Settling.h"

#include "dynafuse/Runtime/CompilerStats.h"
#include "dynafuse/Support/Logging.h"

namespace dynafuse {

namespace {

void settle(CodeCache &cache, PyCodeObject *code, const std::string &why) {
  cache.skip = true;
  cache.entries.clear();
  ++compilerStats().settledFrames;
  std::string reason = codeName(code) + " at " + codeWhere(code) +
                       " runs eagerly from now on: " + why;
  settledReasons().push_back(reason);
  logLine("recompiles", "settled: " + reason);
}

} // namespace

bool canNeverHoldAgain(const Guard &guard) {
  return guard.kind == Guard::Kind::Identity && guard.weak && !guard.identity();
}

bool settleOnFreshObjects(CodeCache &cache, PyCodeObject *code,
                          const std::vector<std::string> &freshSources) {
  const std::string *settledBy = nullptr;
  for (const std::string &source : freshSources)
    if (++cache.freshObjects[source] >= 2 && !settledBy)
      settledBy = &source;
  if (!settledBy)
    return false;
  settle(cache, code,
         *settledBy + " is a new object on every call (a guard on its "
                      "identity can never hold twice)");
  return true;
}

bool noteLookup(CodeCache &cache, PyCodeObject *code, long call, bool missed,
                const std::string &whyMissed) {
  if (call != cache.lookupCall) {
    if (cache.lookupCall >= 0 && !cache.missedInLookupCall)
      cache.callsMissing = 0; // a call in which every lookup hit
    cache.lookupCall = call;
    cache.missedInLookupCall = false;
  }
  if (!missed || cache.missedInLookupCall)
    return false;
  cache.missedInLookupCall = true;
  if (++cache.callsMissing < kMissingCallsToSettle || cache.entries.empty())
    return false;
  settle(cache, code,
         "its guards failed in " + std::to_string(kMissingCallsToSettle) +
             " calls in a row (last: " + whyMissed + ")");
  return true;
}

std::vector<std::string> &settledReasons() {
  static auto *reasons = new std::vector<std::string>();
  return *reasons;
}

} // namespace dynafuse

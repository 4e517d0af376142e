//===- TensorAliases.h - Which traced tensors share memory ------*- C++ -*-===//
//
// The tracer's model of eager's aliasing. Graph values are functional, but
// eager tensors made by view ops (slices, selects, permutes, reshapes of
// contiguous data, split pieces, ...) share their base's memory, and an
// in-place update of one shows through all of them.
//
// Every value that is a view, has views, or was updated in place belongs to
// an alias set: one root (the base's newest value) and, per member, the
// chain of view steps that derives it from the root. An in-place update of
// any member gives the root a new value (the update scattered back through
// the member's chain) and bumps the set's version; a member of an older
// version is stale, and the tracer reads it through its chain replayed on
// the newest root (BytecodeTracer::latestValue). A set whose aliasing the
// model cannot follow (a torch call that returned a view, a reshape whose
// copy-or-view depends on eager's strides) is uncertain: in-place updates
// of its members are refused (the frame breaks and eager runs them).
//
// This only records and answers; the tracer emits the nodes.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_CAPTURE_TENSORALIASES_H
#define DYNAFUSE_CAPTURE_TENSORALIASES_H

#include "dynafuse/Graph/Graph.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dynafuse {
namespace capture {

/// One view op applied to a base: result `result` of `node` (split, chunk
/// and unbind have several), replayed on a newer base with the node's op
/// and attributes.
struct ViewStep {
  const Node *node = nullptr;
  size_t result = 0;
};

struct AliasSet {
  /// The newest value of the memory the members share, and its first
  /// value, whose layout in eager is the memory's (updates keep it).
  Value *root = nullptr;
  const Value *buffer = nullptr;
  int version = 0;
  /// Some member is a view (not only older values of the root).
  bool hasViews = false;
  /// Why in-place updates of members are refused (empty: they are not).
  std::string uncertain;
};

struct AliasMember {
  std::shared_ptr<AliasSet> set;
  std::vector<ViewStep> chain;
  /// Reached through a copy-or-view capture cannot tell apart (the set's
  /// uncertain): its chain is not its storage relation.
  bool uncertain = false;
  /// The set's version this value was computed at.
  int version = 0;
};

class TensorAliases {
public:
  const AliasMember *memberOf(const Value *value) const;
  /// Whether value is a member computed before its set's last update.
  bool isStale(const Value *value) const;
  /// Whether a and b are members of one set (they may share memory).
  bool inOneSet(const Value *a, const Value *b) const;
  /// The member's set, made with value as its root when it has none.
  std::shared_ptr<AliasSet> setOf(Value *value);
  /// result = step(base): result joins base's set.
  void addView(Value *base, Value *result, ViewStep step);
  /// result shares memory with base in a way the model cannot follow.
  void addUnknownAlias(Value *base, Value *result, const std::string &why);
  /// value joins set at its current version with chain.
  void addMember(Value *value, const std::shared_ptr<AliasSet> &set,
                 std::vector<ViewStep> chain);
  /// Gives set a new version (never one used before, so replays recorded
  /// for an update a graph break undid are never taken for another).
  void bump(AliasSet &set) { set.version = ++lastVersion; }
  /// A stale value's replay at its set's current version, or null.
  Value *refreshed(const Value *stale) const;
  void setRefreshed(const Value *stale, Value *fresh);

private:
  std::map<const Value *, AliasMember> members;
  std::map<std::pair<const Value *, int>, Value *> replays;
  int lastVersion = 0;
};

} // namespace capture
} // namespace dynafuse

#endif

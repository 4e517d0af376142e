//===- TensorAliases.cpp - Which traced tensors share memory --------------===//
#include "TensorAliases.h"

namespace dynafuse {
namespace capture {

const AliasMember *TensorAliases::memberOf(const Value *value) const {
  auto found = members.find(value);
  return found == members.end() ? nullptr : &found->second;
}

bool TensorAliases::inOneSet(const Value *a, const Value *b) const {
  const AliasMember *first = memberOf(a), *second = memberOf(b);
  return first && second && first->set == second->set;
}

bool TensorAliases::isStale(const Value *value) const {
  const AliasMember *member = memberOf(value);
  return member && member->version != member->set->version;
}

std::shared_ptr<AliasSet> TensorAliases::setOf(Value *value) {
  if (const AliasMember *member = memberOf(value))
    return member->set;
  auto set = std::make_shared<AliasSet>();
  set->root = value;
  set->buffer = value;
  addMember(value, set, {});
  return set;
}

void TensorAliases::addView(Value *base, Value *result, ViewStep step) {
  std::shared_ptr<AliasSet> set = setOf(base);
  std::vector<ViewStep> chain = memberOf(base)->chain;
  bool uncertain = memberOf(base)->uncertain;
  chain.push_back(step);
  set->hasViews = true;
  addMember(result, set, std::move(chain));
  members[result].uncertain = uncertain;
}

void TensorAliases::addUnknownAlias(Value *base, Value *result,
                                    const std::string &why) {
  std::shared_ptr<AliasSet> set = setOf(base);
  if (set->uncertain.empty())
    set->uncertain = why;
  set->hasViews = true;
  addMember(result, set, memberOf(base)->chain);
  members[result].uncertain = true;
}

void TensorAliases::addMember(Value *value,
                              const std::shared_ptr<AliasSet> &set,
                              std::vector<ViewStep> chain) {
  AliasMember &member = members[value];
  member.set = set;
  member.chain = std::move(chain);
  member.version = set->version;
  member.uncertain = false;
}

Value *TensorAliases::refreshed(const Value *stale) const {
  const AliasMember *member = memberOf(stale);
  if (!member)
    return nullptr;
  auto found = replays.find({stale, member->set->version});
  return found == replays.end() ? nullptr : found->second;
}

void TensorAliases::setRefreshed(const Value *stale, Value *fresh) {
  replays[{stale, memberOf(stale)->set->version}] = fresh;
}

} // namespace capture
} // namespace dynafuse

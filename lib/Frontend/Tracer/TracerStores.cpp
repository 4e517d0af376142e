//===- TracerStores.cpp - Stores into objects that existed before the frame ===//
//
// Library code keeps state on long-lived objects: transformers'
// CompileableContextVar sets `self.global_var` while a model runs, a
// decorator fills in the frame's **kwargs. Capture models such a store as a
// pending side effect: later reads in the trace see the stored value, and
// each run of the entry repeats the store after the graph (RunEntry.cpp),
// in the order capture saw them. Only stores the interpreter can repeat
// exactly are modelled: attributes of objects with the default __setattr__
// (no data descriptor for the name) and string-keyed items of plain dicts.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

namespace dynafuse {
namespace capture {

bool BytecodeTracer::storeIntoObject(const VarPtr &owner, PyObject *name,
                                     const VarPtr &value) {
  if (owner->kind != Var::Kind::Object || !owner->method.empty() ||
      !owner->object)
    return false;
  PyObject *object = owner->object.get();
  PyTypeObject *type = Py_TYPE(object);
  if (isModule(object) || PyType_Check(object) || PyModule_Check(object) ||
      type->tp_setattro != PyObject_GenericSetAttr ||
      !_PyObject_GetDictPtr(object))
    return false;
  PyObject *descriptor = _PyType_Lookup(type, name);
  if (descriptor && Py_TYPE(descriptor)->tp_descr_set)
    return false;
  int source = knownSourceOf(owner);
  if (source < 0)
    return false;
  // The owner is pinned by its identity, or guarded distinct from the other
  // objects of its type: the store lands on the object read every run.
  objectSources.pinStoreTarget(object, source);
  pendingStores.push_back(
      PendingStore{false, object, source, PyUnicode_AsUTF8(name), value});
  return true;
}

bool BytecodeTracer::isFramesOwnDict(const VarPtr &dict) const {
  // A dict in one of the frame's own local slots (its **kwargs): read once
  // (loadLocal keeps the var), so every later read sees the var's updates.
  // A dict reached another way (a global, an attribute) may be read again
  // as a fresh snapshot that would miss them.
  if (dict->source < 0)
    return false;
  const Source &source = guardBuilder.source(dict->source);
  return source.kind == Source::Kind::Local && source.parent < 0;
}

void BytecodeTracer::storeIntoSourceDict(const VarPtr &dict,
                                         const std::string &key,
                                         const VarPtr &value) {
  if (!isFramesOwnDict(dict))
    unsupported("item assignment into a dict the frame did not create");
  setDictEntry(dict, key, value);
  pendingStores.push_back(PendingStore{true, nullptr, dict->source, key, value});
}

VarPtr BytecodeTracer::popDictItem(const VarPtr &dict, const VarPtr &key,
                                   const VarPtr &fallback) {
  std::string name = dictKeyOf(key, "dict.pop");
  dictEntry(dict, name); // refuses keys equal across types
  for (size_t i = 0; i < dict->keys.size(); ++i) {
    if (dict->keys[i] != name)
      continue;
    VarPtr value = dict->items[i];
    if (dict->source >= 0 && !isFramesOwnDict(dict))
      unsupported("dict.pop on a dict the frame did not create");
    willMutate(dict);
    dict->keys.erase(dict->keys.begin() + long(i));
    dict->items.erase(dict->items.begin() + long(i));
    if (dict->source >= 0)
      pendingStores.push_back(
          PendingStore{true, nullptr, dict->source, name, nullptr});
    return value;
  }
  if (!fallback)
    unsupported("dict.pop of a missing key (KeyError)");
  return fallback;
}

VarPtr BytecodeTracer::storedAttribute(PyObject *owner,
                                       const std::string &name) const {
  for (auto store = pendingStores.rbegin(); store != pendingStores.rend();
       ++store)
    if (!store->item && store->owner == owner && store->name == name)
      return store->value;
  return nullptr;
}

std::vector<StoreEffect> BytecodeTracer::storeEffects(
    const std::function<OutputSpec(const VarPtr &)> &valueSpec) {
  std::vector<StoreEffect> effects;
  objectSources.guardStoreTargets();
  for (const PendingStore &store : pendingStores) {
    OutputSpec removed;
    removed.kind = OutputSpec::Kind::Null;
    effects.push_back(StoreEffect{store.item, store.ownerSource, store.name,
                                  store.value ? valueSpec(store.value)
                                              : removed});
  }
  return effects;
}

} // namespace capture
} // namespace dynafuse

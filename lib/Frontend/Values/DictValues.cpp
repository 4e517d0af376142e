//===- DictValues.cpp - Dicts with constant keys --------------------------===//
//
// A Dict var holds constant keys as text (DictKeys.h: str, int, float,
// bool, None and tuples of them) and, parallel to them, values as vars: a
// dict made during capture ({...}, dict(...), **kwargs collected by an
// inlined call) or the frame's own **kwargs (a source: stores into it are
// repeated by each run). It unpacks and iterates over its keys; d[key] is
// the entry of a constant key, and any other constant key is missing
// (KeyError), since no such key is in it.
//
//===----------------------------------------------------------------------===//
#include "ValueHandlers.h"

#include "DictKeys.h"

#include "Tracer/BytecodeTracer.h"

namespace dynafuse {
namespace capture {

DictValues::DictValues(BytecodeTracer &tracer)
    : ValueHandler(tracer, "a dict") {}

VarPtr DictValues::attribute(const VarPtr &value, PyObject *name) {
  std::string attribute = PyUnicode_AsUTF8(name);
  for (const char *method :
       {"items", "keys", "values", "copy", "get", "pop", "update"})
    if (attribute == method && !(value->object && attribute == "copy"))
      return containerMethod(value, "dict." + attribute);
  return ValueHandler::attribute(value, name);
}

std::vector<VarPtr> DictValues::items(const VarPtr &value) {
  std::vector<VarPtr> keys;
  for (const std::string &key : value->keys)
    keys.push_back(tracer.constant(dictKeyObject(key).get()));
  return keys;
}

VarPtr DictValues::iterate(const VarPtr &value) {
  VarPtr iterator = makeVar(Var::Kind::Iterator);
  iterator->items = items(value);
  return iterator;
}

VarPtr DictValues::length(const VarPtr &value) {
  return tracer.integerConstant(int64_t(value->items.size()));
}

VarPtr DictValues::subscript(const VarPtr &value, const VarPtr &index) {
  std::string key = tracer.dictKeyOf(index, "a dict read");
  if (VarPtr entry = tracer.dictEntry(value, key))
    return entry;
  // Capture knows every key (a dict it made, or a source's, guarded
  // whole): the KeyError eager raises, which a handler may catch.
  PyRef error =
      PyRef::steal(PyObject_CallOneArg(PyExc_KeyError, index->object.get()));
  PyErr_Clear();
  PyRef shown = PyRef::steal(PyObject_Repr(index->object.get()));
  PyErr_Clear();
  throw RaisedInCapture(std::string("the code raises KeyError: ") +
                            (shown ? PyUnicode_AsUTF8(shown.get()) : "?"),
                        tracer.here(tracer.current.currentLine), PyExc_KeyError,
                        error);
}

void DictValues::storeSubscript(const VarPtr &value, const VarPtr &index,
                                const VarPtr &item) {
  tracer.setDictItem(value, index, item);
}

bool DictValues::truth(const VarPtr &value) { return !value->items.empty(); }

VarPtr DictValues::type(const VarPtr &value) {
  if (value->object) // an OrderedDict made during capture
    return classVar(value->object.get());
  PyObject *type = reinterpret_cast<PyObject *>(&PyDict_Type);
  if (value->source >= 0)
    tracer.guardBuilder.guardObject(Guard::Kind::TypeIs, value->source, type);
  return classVar(type);
}

VarPtr DictValues::isInstance(const VarPtr &value, PyObject *classes) {
  if (!value->object) {
    // Exactly a dict (one made during capture, or a source's, which only
    // an exact dict becomes): what isinstance answers for any dict.
    PyRef dict = PyRef::steal(PyDict_New());
    return objectIsInstance(dict.get(), classes);
  }
  // An OrderedDict made during capture.
  return builtinIsInstance(
      reinterpret_cast<PyTypeObject *>(value->object.get()), classes);
}

int DictValues::callable(const VarPtr &) { return 0; }

OutputSpec DictValues::output(const VarPtr &value, const ItemSpec &itemSpec) {
  if (value->object && value->source < 0)
    tracer.unsupported("returning an OrderedDict made during capture");
  return liveState(value, itemSpec);
}

OutputSpec DictValues::liveState(const VarPtr &value,
                                 const ItemSpec &itemSpec) {
  if (value->source >= 0) // the caller's own dict, as eager returns it
    return sourceSpec(value->source);
  if (value->object)
    throw CannotResume{"an OrderedDict made during capture is live"};
  return SequenceValues::containerSpec(tracer, value, itemSpec);
}

} // namespace capture
} // namespace dynafuse

//===- TracerObjects.cpp - Dict entries, exceptions, identities in outputs ===//
//
// The tracer's own pieces of its object model (PythonObjects.h has the
// instances of Python classes): entries of Dict vars, exceptions the traced
// code makes and raises, and the ids by which an output spells out each
// list, dict and object made during capture once.
//
//===----------------------------------------------------------------------===//
#include "BytecodeTracer.h"

#include "Values/DictKeys.h"

namespace dynafuse {
namespace capture {
namespace {
/// The position of a key's text among a dict's. `mixed`: absent, while a
/// key Python calls equal is there under another type's spelling (1 and
/// 1.0, True), which the caller refuses rather than miss.
std::optional<size_t> keyPosition(const VarPtr &dict, const std::string &key,
                                  bool &mixed) {
  auto found = std::find(dict->keys.begin(), dict->keys.end(), key);
  if (found != dict->keys.end())
    return size_t(found - dict->keys.begin());
  for (const std::string &twin : equalKeyTexts(key))
    mixed = mixed || std::find(dict->keys.begin(), dict->keys.end(), twin) !=
                         dict->keys.end();
  return std::nullopt;
}

constexpr const char *kMixedKeys =
    "a dict whose keys mix equal numbers of different types (1, 1.0, True)";
} // namespace

VarPtr BytecodeTracer::dictEntry(const VarPtr &dict, const std::string &key) {
  bool mixed = false;
  std::optional<size_t> at = keyPosition(dict, key, mixed);
  if (mixed)
    unsupported(kMixedKeys);
  return at ? dict->items[*at] : nullptr;
}

void BytecodeTracer::setDictEntry(const VarPtr &dict, const std::string &key,
                                  const VarPtr &value) {
  bool mixed = false;
  std::optional<size_t> at = keyPosition(dict, key, mixed);
  if (mixed)
    unsupported(kMixedKeys);
  willMutate(dict);
  if (at) {
    dict->items[*at] = value;
    return;
  }
  dict->keys.push_back(key);
  dict->items.push_back(value);
}

std::string BytecodeTracer::dictKeyOf(const VarPtr &key,
                                      const std::string &what) {
  std::optional<std::string> text;
  if (key->kind == Var::Kind::Constant)
    text = dictKeyText(key->object.get());
  if (!text)
    unsupported(what + " with a key that is not a constant str, int, float, "
                       "bool, None or tuple of str, int and None");
  return *text;
}

VarPtr BytecodeTracer::makeException(
    PyObject *callable, const std::vector<VarPtr> &args,
    const Keywords &keywords) {
  if (!PyExceptionClass_Check(callable) ||
      (reinterpret_cast<PyTypeObject *>(callable)->tp_flags &
       Py_TPFLAGS_HEAPTYPE) ||
      !keywords.empty())
    return nullptr;
  PyRef arguments = PyRef::steal(PyTuple_New(Py_ssize_t(args.size())));
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i]->kind != Var::Kind::Constant)
      return nullptr;
    PyTuple_SET_ITEM(arguments.get(), Py_ssize_t(i),
                     Py_NewRef(args[i]->object.get()));
  }
  PyRef exception = PyRef::steal(PyObject_Call(callable, arguments.get(), nullptr));
  if (!exception) {
    PyErr_Clear();
    return nullptr;
  }
  VarPtr var = makeVar(Var::Kind::Object);
  var->object = exception;
  var->method = "exception"; // made during capture: never rebuilt
  return var;
}

void BytecodeTracer::raiseException(const VarPtr &exception) {
  PyObject *object = exception->object.get();
  bool instance = exception->kind == Var::Kind::Object &&
                  exception->method == "exception" && object;
  bool builtinClass = exception->kind == Var::Kind::Object && object &&
                      PyExceptionClass_Check(object) &&
                      !(reinterpret_cast<PyTypeObject *>(object)->tp_flags &
                        Py_TPFLAGS_HEAPTYPE);
  if (!instance && !builtinClass)
    unsupported("raise of an exception capture did not make");
  PyObject *type =
      instance ? reinterpret_cast<PyObject *>(Py_TYPE(object)) : object;
  PyRef text = PyRef::steal(instance ? PyObject_Str(object) : nullptr);
  PyErr_Clear();
  std::string message = std::string("the code raises ") +
                        reinterpret_cast<PyTypeObject *>(type)->tp_name;
  if (text && PyUnicode_GET_LENGTH(text.get()) > 0)
    message += std::string(": ") + PyUnicode_AsUTF8(text.get());
  PyRef made = instance ? PyRef::borrow(object)
                        : PyRef::steal(PyObject_CallNoArgs(type));
  PyErr_Clear();
  throw RaisedInCapture(message, here(current.currentLine), type, made);
}

int BytecodeTracer::objectIdOf(const VarPtr &var) {
  auto found = objectIds.find(var.get());
  if (found != objectIds.end())
    return found->second.second;
  int id = int(objectIds.size());
  objectIds[var.get()] = {var, id};
  return id;
}

bool BytecodeTracer::seenInThisOutput(const VarPtr &var, OutputSpec &spec) {
  int id = objectIdOf(var);
  if (!emittedObjects.insert(id).second) {
    spec.kind = OutputSpec::Kind::SameObject;
    spec.index = id;
    return true;
  }
  spec.objectId = id;
  return false;
}

} // namespace capture
} // namespace dynafuse

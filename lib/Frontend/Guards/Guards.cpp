//===- Guards.cpp - Where captured values come from and what was assumed -===//
#include "Guards.h"

#include "Tracer/ModuleAttributes.h"
#include "dynafuse/Torch/TorchBridge.h"

#include "dynafuse/Support/Error.h"

#include <algorithm>
#include <cstring>

namespace dynafuse {

/// Whether two constants (isConstantObject) are the same value: of one
/// type, floats with the same bit pattern (-0.0 is not 0.0, a NaN matches
/// the same NaN), tuples item by item, the rest by ==.
std::string keyText(PyObject *key, bool quoted) {
  if (PyUnicode_Check(key)) {
    std::string text = PyUnicode_AsUTF8(key);
    return quoted ? "'" + text + "'" : text;
  }
  PyRef repr = PyRef::steal(PyObject_Repr(key));
  std::string text = repr ? PyUnicode_AsUTF8(repr.get()) : "?";
  PyErr_Clear();
  // Unquoted (a dedup key): marked so that no string key spells it.
  return quoted ? text
                : "\x01" + std::string(Py_TYPE(key)->tp_name) + ":" + text;
}

bool sameConstant(PyObject *value, PyObject *expected) {
  if (PyList_CheckExact(expected)) {
    // A set guarded by its members in iteration order (setOfSource: the
    // only Equals guard whose expected value is a list).
    if (!PySet_CheckExact(value) ||
        PySet_GET_SIZE(value) != PyList_GET_SIZE(expected))
      return false;
    PyRef iterator = PyRef::steal(PyObject_GetIter(value));
    for (Py_ssize_t at = 0; iterator && at < PyList_GET_SIZE(expected); ++at) {
      PyRef member = PyRef::steal(PyIter_Next(iterator.get()));
      if (!member ||
          !sameConstant(member.get(), PyList_GET_ITEM(expected, at))) {
        PyErr_Clear();
        return false;
      }
    }
    PyErr_Clear();
    return bool(iterator);
  }
  if (Py_TYPE(value) != Py_TYPE(expected))
    return false;
  if (PyFloat_CheckExact(value)) {
    double a = PyFloat_AS_DOUBLE(value), b = PyFloat_AS_DOUBLE(expected);
    return std::memcmp(&a, &b, sizeof a) == 0;
  }
  if (PyTuple_CheckExact(value)) {
    Py_ssize_t size = PyTuple_GET_SIZE(value);
    if (size != PyTuple_GET_SIZE(expected))
      return false;
    for (Py_ssize_t i = 0; i < size; ++i)
      if (!sameConstant(PyTuple_GET_ITEM(value, i),
                        PyTuple_GET_ITEM(expected, i)))
        return false;
    return true;
  }
  int equal = PyObject_RichCompareBool(value, expected, Py_EQ);
  if (equal < 0) {
    PyErr_Clear();
    return false;
  }
  return equal == 1;
}

PyObject *lookupInClass(PyObject *type, PyObject *after, PyObject *name) {
  PyObject *mro =
      PyType_Check(type) ? reinterpret_cast<PyTypeObject *>(type)->tp_mro
                         : nullptr;
  if (!mro || !PyTuple_Check(mro))
    return nullptr;
  Py_ssize_t count = PyTuple_GET_SIZE(mro);
  Py_ssize_t i = 0;
  if (after) {
    while (i < count && PyTuple_GET_ITEM(mro, i) != after)
      ++i;
    ++i;
  }
  for (; i < count; ++i) {
    auto *klass = reinterpret_cast<PyTypeObject *>(PyTuple_GET_ITEM(mro, i));
#if PY_VERSION_HEX >= 0x030C0000
    // 3.12 keeps static builtin types' dicts in the interpreter state:
    // tp_dict is null there. The type keeps its dict alive.
    PyRef owned = PyRef::steal(PyType_GetDict(klass));
    PyObject *dict = owned.get();
#else
    PyObject *dict = klass->tp_dict;
#endif
    PyObject *found = dict ? PyDict_GetItemWithError(dict, name) : nullptr;
    if (found)
      return found; // the class dict keeps it alive
    PyErr_Clear();
  }
  return nullptr;
}

PyObject *lookupPastClass(PyObject *object, PyObject *cls, PyObject *name) {
  return lookupInClass(reinterpret_cast<PyObject *>(Py_TYPE(object)), cls,
                       name);
}

std::string Source::describe(const std::vector<Source> &all) const {
  switch (kind) {
  case Kind::Local:
    return "local[" + std::to_string(index) + "]";
  case Kind::Global:
    return std::string("global '") + PyUnicode_AsUTF8(name.get()) + "'";
  case Kind::Attr:
    return all[parent].describe(all) + "." + PyUnicode_AsUTF8(name.get());
  case Kind::Closure:
    return "closure[" + std::to_string(index) + "]";
  case Kind::Item:
    return all[parent].describe(all) + "[" + std::to_string(index) + "]";
  case Kind::FunctionGlobal:
    return all[parent].describe(all) + ".__globals__['" +
           PyUnicode_AsUTF8(name.get()) + "']";
  case Kind::FunctionClosure:
    return all[parent].describe(all) + ".__closure__[" + std::to_string(index) +
           "]";
  case Kind::TypeAttr:
    return "type(" + all[parent].describe(all) + ")." +
           PyUnicode_AsUTF8(name.get());
  case Kind::SuperAttr:
    return std::string("super(") +
           reinterpret_cast<PyTypeObject *>(fixed.get())->tp_name + ", " +
           all[parent].describe(all) + ")." + PyUnicode_AsUTF8(name.get());
  case Kind::Fixed:
    return std::string("<") + Py_TYPE(fixed.get())->tp_name + ">";
  case Kind::DictItem:
    return all[parent].describe(all) + "[" + keyText(name.get(), true) + "]";
  case Kind::Environ:
    return std::string("os.environ['") + PyUnicode_AsUTF8(name.get()) + "']";
  case Kind::RandomSeed:
    return std::string("a seed from torch's generator on ") +
           PyUnicode_AsUTF8(name.get());
  case Kind::ClassEntry:
    return all[parent].describe(all) + ".__mro__ entry '" +
           PyUnicode_AsUTF8(name.get()) + "'" +
           (fixed ? std::string(" past ") +
                        reinterpret_cast<PyTypeObject *>(fixed.get())->tp_name
                  : "");
  }
  return "?";
}

PyObject *Guard::identity() const {
  if (!weak)
    return expected.get();
#if PY_VERSION_HEX >= 0x030D0000
  PyObject *object = nullptr;
  if (PyWeakref_GetRef(expected.get(), &object) <= 0)
    return nullptr;
  Py_DECREF(object); // the caller compares it and keeps no reference
  return object;
#else
  PyObject *object = PyWeakref_GetObject(expected.get());
  return object == Py_None ? nullptr : object;
#endif
}

std::string Guard::describe(const std::vector<Source> &sources) const {
  if (kind == Kind::Shape)
    return shape.str();
  std::string where = sources[source].describe(sources);
  switch (kind) {
  case Kind::Tensor: {
    std::string sizes;
    for (int64_t size : tensor.sizes)
      sizes += (sizes.empty() ? "" : ", ") + std::to_string(size);
    std::string ranges;
    if (!symbolicSizes.empty()) {
      sizes.clear();
      for (const SymExpr &size : symbolicSizes) {
        sizes += (sizes.empty() ? "" : ", ") + size.str();
        if (size.isSymbol())
          ranges += ", " + size.str() + " >= 2";
      }
    }
    return where + " is a " + tensor.dtypeName + " tensor of size [" + sizes +
           "] on " + tensor.device +
           (tensor.requiresGrad ? " requiring grad" : "") + ranges;
  }
  case Kind::Equals: {
    PyRef text = PyRef::steal(PyObject_Repr(expected.get()));
    if (!text) {
      PyErr_Clear();
      return where + " == <constant>";
    }
    return where + " == " + PyUnicode_AsUTF8(text.get());
  }
  case Kind::TypeIs:
    return where + " is a " +
           reinterpret_cast<PyTypeObject *>(expected.get())->tp_name;
  case Kind::IntSymbol: {
    std::string symbol = symbolicSizes.at(0).str();
    return where + " is an int " + symbol + ", " + symbol + " >= 2";
  }
  case Kind::Identity:
    return where + " is the object seen at capture (" +
           (identity() ? Py_TYPE(identity())->tp_name : "gone since") + ")";
  case Kind::NoAttribute:
    return where + " has no attribute '" + PyUnicode_AsUTF8(expected.get()) +
           "'";
  case Kind::NoInstanceAttribute:
    return where + " has no instance attribute '" +
           PyUnicode_AsUTF8(expected.get()) + "'";
  case Kind::NoKey:
  case Kind::HasKey: {
    PyRef key = PyRef::steal(PyObject_Repr(expected.get()));
    PyErr_Clear();
    return where + (kind == Kind::NoKey ? " has no key " : " has the key ") +
           (key ? PyUnicode_AsUTF8(key.get()) : std::string("?"));
  }
  case Kind::Distinct: {
    std::string text = where;
    for (int member : group)
      text += ", " + sources[size_t(member)].describe(sources);
    return text + " are distinct objects";
  }
  case Kind::SameObject:
    return where + " is " + sources[size_t(other)].describe(sources);
  case Kind::OtherObject:
    return where + " is not " + sources[size_t(other)].describe(sources);
  case Kind::OtherStorage: {
    std::string text = where + " shares no memory with ";
    for (size_t k = 0; k < group.size() && k < 3; ++k)
      text += (k ? ", " : "") + sources[size_t(group[k])].describe(sources);
    if (group.size() > 3)
      text += " or " + std::to_string(group.size() - 3) + " other inputs";
    return text;
  }
  case Kind::TupleLength:
    return where + " is a tuple or list of length " + std::to_string(length);
  case Kind::EmptyDict:
    return where + " is empty";
  case Kind::DictLength:
    return where + " has " + std::to_string(length) + " entries";
  case Kind::Shape:
    break; // described above
  }
  return where;
}

PyRef SourceResolver::fetch(const Source &source) {
  switch (source.kind) {
  case Source::Kind::Local:
    return PyRef::borrow(frame->localsplus[source.index]);
  case Source::Kind::Global: {
    PyObject *value =
        PyDict_GetItemWithError(frame->globals, source.name.get());
    if (!value && !PyErr_Occurred() && PyDict_Check(frame->builtins))
      value = PyDict_GetItemWithError(frame->builtins, source.name.get());
    return PyRef::borrow(value);
  }
  case Source::Kind::Attr: {
    PyObject *parent = get(source.parent);
    if (!parent)
      return PyRef();
    return getAttribute(parent, source.name.get());
  }
  case Source::Kind::Closure: {
    PyObject *closure =
        frame->function ? PyFunction_GetClosure(frame->function) : nullptr;
    if (!closure || source.index >= PyTuple_GET_SIZE(closure))
      return PyRef();
    return PyRef::borrow(PyCell_GET(PyTuple_GET_ITEM(closure, source.index)));
  }
  case Source::Kind::FunctionGlobal: {
    PyObject *function = get(source.parent);
    if (!function || !PyFunction_Check(function))
      return PyRef();
    PyObject *value = PyDict_GetItemWithError(PyFunction_GET_GLOBALS(function),
                                              source.name.get());
    if (!value && !PyErr_Occurred() && PyDict_Check(frame->builtins))
      value = PyDict_GetItemWithError(frame->builtins, source.name.get());
    return PyRef::borrow(value);
  }
  case Source::Kind::FunctionClosure: {
    PyObject *function = get(source.parent);
    PyObject *closure = function && PyFunction_Check(function)
                            ? PyFunction_GET_CLOSURE(function)
                            : nullptr;
    if (!closure || source.index >= PyTuple_GET_SIZE(closure))
      return PyRef();
    return PyRef::borrow(PyCell_GET(PyTuple_GET_ITEM(closure, source.index)));
  }
  case Source::Kind::TypeAttr: {
    PyObject *parent = get(source.parent);
    if (!parent)
      return PyRef();
    return PyRef::steal(PyObject_GetAttr(
        reinterpret_cast<PyObject *>(Py_TYPE(parent)), source.name.get()));
  }
  case Source::Kind::SuperAttr: {
    PyObject *parent = get(source.parent);
    if (!parent)
      return PyRef();
    return PyRef::borrow(
        lookupPastClass(parent, source.fixed.get(), source.name.get()));
  }
  case Source::Kind::ClassEntry: {
    PyObject *parent = get(source.parent);
    if (!parent)
      return PyRef();
    return PyRef::borrow(
        lookupInClass(parent, source.fixed.get(), source.name.get()));
  }
  case Source::Kind::Environ: {
    PyRef osName = PyRef::steal(PyUnicode_FromString("os"));
    PyRef module = PyRef::steal(PyImport_GetModule(osName.get()));
    PyRef environ = PyRef::steal(
        module ? PyObject_GetAttrString(module.get(), "environ") : nullptr);
    PyRef value = PyRef::steal(
        environ ? PyObject_CallMethod(environ.get(), "get", "O",
                                      source.name.get())
                : nullptr);
    if (!value)
      PyErr_Clear();
    return value;
  }
  case Source::Kind::Fixed:
    return source.fixed;
  case Source::Kind::RandomSeed:
    return PyRef::steal(newRandomSeed(PyUnicode_AsUTF8(source.name.get())));
  case Source::Kind::DictItem: {
    PyObject *parent = get(source.parent);
    // A dict or a dict subclass (its own storage, as dict.get reads it).
    if (!parent || !PyDict_Check(parent))
      return PyRef();
    return PyRef::borrow(PyDict_GetItemWithError(parent, source.name.get()));
  }
  case Source::Kind::Item: {
    PyObject *parent = get(source.parent);
    if (parent && PyList_CheckExact(parent) &&
        source.index < PyList_GET_SIZE(parent))
      return PyRef::borrow(PyList_GET_ITEM(parent, source.index));
    if (!parent || !PyTuple_CheckExact(parent) ||
        source.index >= PyTuple_GET_SIZE(parent))
      return PyRef();
    return PyRef::borrow(PyTuple_GET_ITEM(parent, source.index));
  }
  }
  return PyRef();
}

PyObject *SourceResolver::get(int index) {
  if (index < 0 || size_t(index) >= sources.size())
    return nullptr; // A malformed source chain fails its guard.
  if (!resolved[index]) {
    values[index] = fetch(sources[index]);
    if (!values[index])
      PyErr_Clear();
    resolved[index] = true;
  }
  return values[index].get();
}

namespace {

/// A size symbol's value here: the first guard to meet it binds it (to a
/// size >= 2: sizes 0 and 1 are specialized), later ones compare.
bool bindsOrMatches(const std::string &symbol, int64_t value,
                    std::map<std::string, int64_t> &symbols) {
  auto bound = symbols.find(symbol);
  if (bound != symbols.end())
    return bound->second == value;
  if (value < 2)
    return false;
  symbols[symbol] = value;
  return true;
}

/// A tensor guard with symbolic dims: same dtype, device, rank and
/// requires_grad; each constant size equal; each symbol bound by its first
/// dim (to a size >= 2: sizes 0 and 1 are specialized) and equal at the
/// others; each stride equal where its dim is not 1.
bool symbolicTensorMatches(PyObject *value, const Guard &guard,
                           std::map<std::string, int64_t> &symbols) {
  std::vector<int64_t> sizes, strides;
  if (!tensorKindMatches(value, guard.tensor, sizes, strides) ||
      sizes.size() != guard.symbolicSizes.size())
    return false;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const SymExpr &expected = guard.symbolicSizes[k];
    if (expected.isConstant()) {
      if (expected.constant() != sizes[k])
        return false;
      continue;
    }
    if (!bindsOrMatches(expected.symbolName(), sizes[k], symbols))
      return false;
  }
  for (size_t k = 0; k < strides.size(); ++k)
    if (sizes[k] != 1 &&
        guard.symbolicStrides[k].evaluate(symbols) != strides[k])
      return false;
  return true;
}

} // namespace

bool checkGuard(const Guard &guard, SourceResolver &resolver) {
  if (guard.kind == Guard::Kind::Shape) {
    try {
      return guard.shape.holds(resolver.symbols);
    } catch (const Error &) {
      return false; // a symbol no tensor guard bound: fail closed
    }
  }
  PyObject *value = resolver.get(guard.source);
  if (!value)
    return false;
  switch (guard.kind) {
  case Guard::Kind::Tensor:
    return guard.symbolicSizes.empty()
               ? tensorMatches(value, guard.tensor)
               : symbolicTensorMatches(value, guard, resolver.symbols);
  case Guard::Kind::IntSymbol: {
    if (!PyLong_CheckExact(value))
      return false;
    int overflow = 0;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    return !overflow && bindsOrMatches(guard.symbolicSizes.at(0).symbolName(),
                                       number, resolver.symbols);
  }
  case Guard::Kind::Identity:
    return value == guard.identity();
  case Guard::Kind::NoAttribute: {
    int present = PyObject_HasAttr(value, guard.expected.get());
    return present == 0;
  }
  case Guard::Kind::NoInstanceAttribute: {
    PyObject **dict = _PyObject_GetDictPtr(value);
    PyObject *found = dict && *dict
                          ? PyDict_GetItemWithError(*dict, guard.expected.get())
                          : nullptr;
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    return found == nullptr;
  }
  case Guard::Kind::NoKey:
  case Guard::Kind::HasKey: {
    int present =
        PyDict_Check(value)     ? PyDict_Contains(value, guard.expected.get())
        : PyAnySet_Check(value) ? PySet_Contains(value, guard.expected.get())
                                : -1;
    if (present < 0)
      PyErr_Clear();
    return present == (guard.kind == Guard::Kind::HasKey ? 1 : 0);
  }
  case Guard::Kind::Distinct: {
    std::vector<PyObject *> objects{value};
    for (int member : guard.group)
      objects.push_back(resolver.get(member));
    std::sort(objects.begin(), objects.end());
    return std::adjacent_find(objects.begin(), objects.end()) ==
               objects.end() &&
           objects.front() != nullptr;
  }
  case Guard::Kind::SameObject:
    return value == resolver.get(guard.other);
  case Guard::Kind::OtherObject:
    return value != resolver.get(guard.other);
  case Guard::Kind::OtherStorage:
    for (int member : guard.group) {
      PyObject *other = resolver.get(member);
      if (!other || tensorsShareStorage(value, other))
        return false;
    }
    return true;
  case Guard::Kind::TypeIs:
    return reinterpret_cast<PyObject *>(Py_TYPE(value)) == guard.expected.get();
  case Guard::Kind::TupleLength:
    if (guard.expected &&
        reinterpret_cast<PyObject *>(Py_TYPE(value)) != guard.expected.get())
      return false;
    if (PyList_CheckExact(value))
      return size_t(PyList_GET_SIZE(value)) == guard.length;
    return PyTuple_CheckExact(value) &&
           size_t(PyTuple_GET_SIZE(value)) == guard.length;
  case Guard::Kind::EmptyDict:
    return PyDict_Check(value) && PyDict_Size(value) == 0;
  case Guard::Kind::DictLength:
    return PyDict_Check(value) && size_t(PyDict_Size(value)) == guard.length;
  case Guard::Kind::Equals:
    return sameConstant(value, guard.expected.get());
  case Guard::Kind::Shape:
    break; // checked above
  }
  return false;
}

} // namespace dynafuse

//===- DictKeys.cpp - The text a Dict var keeps for each key --------------===//
//
// Encoding and decoding of dict keys as text (DictKeys.h). Escaped texts:
// \x1f then N (None), b0/b1 (bool), i<decimal> (int), f<repr> (float),
// s<str> (a str starting with \x1f), t<len>:<item>... (a tuple, each item
// a length-prefixed text).
//
//===----------------------------------------------------------------------===//
#include "DictKeys.h"

#include <cmath>

namespace dynafuse {
namespace capture {
namespace {

constexpr char kEscape = '\x1f';

std::optional<std::string> reprText(PyObject *object) {
  PyRef text = PyRef::steal(PyObject_Repr(object));
  if (!text) {
    PyErr_Clear();
    return std::nullopt;
  }
  return std::string(PyUnicode_AsUTF8(text.get()));
}

std::optional<std::string> tupleItemText(PyObject *item) {
  // Only items without cross-type twins: (1,) == (1.0,) == (True,).
  if (PyBool_Check(item) || PyFloat_Check(item))
    return std::nullopt;
  return dictKeyText(item);
}

} // namespace

std::optional<std::string> dictKeyText(PyObject *key) {
  std::string escape(1, kEscape);
  if (PyUnicode_CheckExact(key)) {
    const char *utf8 = PyUnicode_AsUTF8(key);
    if (!utf8) {
      PyErr_Clear();
      return std::nullopt;
    }
    return stringKeyText(utf8);
  }
  if (key == Py_None)
    return escape + "N";
  if (PyBool_Check(key))
    return escape + (key == Py_True ? "b1" : "b0");
  if (PyLong_CheckExact(key)) {
    std::optional<std::string> digits = reprText(key);
    if (!digits)
      return std::nullopt;
    return escape + "i" + *digits;
  }
  if (PyFloat_CheckExact(key)) {
    double value = PyFloat_AS_DOUBLE(key);
    if (std::isnan(value) || (value == 0.0 && std::signbit(value)))
      return std::nullopt; // NaN is no key by value; -0.0 is 0.0's key
    std::optional<std::string> digits = reprText(key);
    if (!digits)
      return std::nullopt;
    return escape + "f" + *digits;
  }
  if (PyTuple_CheckExact(key)) {
    std::string text = escape + "t" + std::to_string(PyTuple_GET_SIZE(key));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); ++i) {
      std::optional<std::string> item = tupleItemText(PyTuple_GET_ITEM(key, i));
      if (!item)
        return std::nullopt;
      text += ":" + std::to_string(item->size()) + ":" + *item;
    }
    return text;
  }
  return std::nullopt;
}

std::string stringKeyText(const std::string &name) {
  return !name.empty() && name[0] == kEscape
             ? std::string(1, kEscape) + "s" + name
             : name;
}

std::optional<std::string> stringOfKeyText(const std::string &text) {
  if (text.empty() || text[0] != kEscape)
    return text;
  if (text.compare(0, 2, std::string(1, kEscape) + "s") == 0)
    return text.substr(2);
  return std::nullopt;
}

VarPtr dictOfKeywords(const Keywords &keywords) {
  VarPtr dict = makeVar(Var::Kind::Dict);
  for (const auto &[name, value] : keywords) {
    dict->keys.push_back(stringKeyText(name));
    dict->items.push_back(value);
  }
  return dict;
}

std::optional<Keywords> keywordsOfDict(const Var &dict) {
  Keywords keywords;
  for (size_t i = 0; i < dict.keys.size(); ++i) {
    std::optional<std::string> name = stringOfKeyText(dict.keys[i]);
    if (!name)
      return std::nullopt;
    keywords[*name] = dict.items[i];
  }
  return keywords;
}

PyRef dictKeyObject(const std::string &text) {
  if (text.empty() || text[0] != kEscape)
    return PyRef::steal(PyUnicode_FromString(text.c_str()));
  char type = text.size() > 1 ? text[1] : '\0';
  std::string rest = text.substr(std::min<size_t>(2, text.size()));
  switch (type) {
  case 's':
    return PyRef::steal(PyUnicode_FromString(rest.c_str()));
  case 'N':
    return PyRef::borrow(Py_None);
  case 'b':
    return PyRef::borrow(rest == "1" ? Py_True : Py_False);
  case 'i':
    return PyRef::steal(PyLong_FromString(rest.c_str(), nullptr, 10));
  case 'f': {
    PyRef digits = PyRef::steal(PyUnicode_FromString(rest.c_str()));
    return digits ? PyRef::steal(PyFloat_FromString(digits.get())) : PyRef();
  }
  case 't': {
    size_t at = rest.find(':');
    long count = std::stol(rest.substr(0, at));
    PyRef tuple = PyRef::steal(PyTuple_New(count));
    for (long i = 0; i < count; ++i) {
      size_t lengthEnd = rest.find(':', at + 1);
      size_t length = std::stoul(rest.substr(at + 1, lengthEnd - at - 1));
      PyRef item = dictKeyObject(rest.substr(lengthEnd + 1, length));
      if (!item)
        return PyRef();
      PyTuple_SET_ITEM(tuple.get(), i, item.release());
      at = lengthEnd + 1 + length;
    }
    return tuple;
  }
  default:
    PyErr_Format(PyExc_ValueError, "not a dict key's text: %s", text.c_str());
    return PyRef();
  }
}

std::vector<std::string> equalKeyTexts(const std::string &text) {
  if (text.size() < 2 || text[0] != kEscape ||
      (text[1] != 'b' && text[1] != 'i' && text[1] != 'f'))
    return {};
  PyRef key = dictKeyObject(text);
  if (!key) {
    PyErr_Clear();
    return {};
  }
  std::vector<std::string> twins;
  auto add = [&](PyRef twin) {
    if (!twin) {
      PyErr_Clear();
      return;
    }
    int equal = PyObject_RichCompareBool(twin.get(), key.get(), Py_EQ);
    if (equal < 0)
      PyErr_Clear();
    std::optional<std::string> twinText = dictKeyText(twin.get());
    if (equal == 1 && twinText && *twinText != text)
      twins.push_back(*twinText);
  };
  if (PyFloat_Check(key.get())) {
    double value = PyFloat_AS_DOUBLE(key.get());
    if (std::isfinite(value) && std::floor(value) == value)
      add(PyRef::steal(PyLong_FromDouble(value)));
  } else {
    add(PyRef::steal(PyNumber_Long(key.get())));
    add(PyRef::steal(PyNumber_Float(key.get())));
  }
  add(PyRef::borrow(Py_False));
  add(PyRef::borrow(Py_True));
  return twins;
}

} // namespace capture
} // namespace dynafuse

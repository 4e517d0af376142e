//===- RuntimeSettings.cpp - Settings dynafuse.config changes -------------===//
#include "RuntimeSettings.h"

#include <cstdint>
#include <type_traits>

namespace dynafuse {
namespace {

/// Run-time settings are text, counts or switches; any other field type
/// given a Python name in Settings.def fails to compile here.
template <typename T> constexpr bool isRuntimeKind() {
  return std::is_same_v<T, std::string> || std::is_same_v<T, bool> ||
         std::is_same_v<T, int>;
}

template <typename T> PyObject *toPython(const T &value) {
  static_assert(isRuntimeKind<T>(), "a run-time setting of another type");
  if constexpr (std::is_same_v<T, std::string>)
    return PyUnicode_FromStringAndSize(value.data(), Py_ssize_t(value.size()));
  else if constexpr (std::is_same_v<T, bool>)
    return PyBool_FromLong(value);
  else
    return PyLong_FromLong(value);
}

template <typename T>
bool fromPython(PyObject *object, const char *name, T &field) {
  static_assert(isRuntimeKind<T>(), "a run-time setting of another type");
  if constexpr (std::is_same_v<T, std::string>) {
    if (object == Py_None) {
      field.clear();
      return true;
    }
    if (PyUnicode_Check(object)) {
      field = PyUnicode_AsUTF8(object);
      return true;
    }
    PyErr_Format(PyExc_TypeError, "dynafuse setting '%s' must be str or None",
                 name);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (PyBool_Check(object)) {
      field = object == Py_True;
      return true;
    }
    PyErr_Format(PyExc_TypeError, "dynafuse setting '%s' must be bool", name);
  } else {
    long value = PyLong_Check(object) && !PyBool_Check(object)
                     ? PyLong_AsLong(object)
                     : -1;
    if (value >= 0 && value <= INT32_MAX) {
      field = int(value);
      return true;
    }
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "dynafuse setting '%s' must be an int >= 0",
                 name);
  }
  return false;
}

template <typename T> std::string keyText(const T &value) {
  static_assert(isRuntimeKind<T>(), "a run-time setting of another type");
  if constexpr (std::is_same_v<T, std::string>)
    return std::to_string(value.size()) + ":" + value;
  else
    return std::to_string(value);
}

/// Calls visit(pythonName, field) for each run-time setting of `options`
/// (an Options, const or not) in Settings.def's order, until a visit
/// returns false. The other settings' statements are discarded unseen
/// (a template's `if constexpr`), so fields of any type may stand there.
template <typename OptionsT, typename Visit>
bool forEachRuntimeSetting(OptionsT &options, Visit visit) {
#define DYNAFUSE_SETTING_MEMBER_options(field) options.field
#define DYNAFUSE_SETTING_MEMBER_codegen(field) options.codegen.field
#define DYNAFUSE_SETTING_MEMBER_none(field) options.field
#define DYNAFUSE_SETTING(variable, group, field, type, initial, reader,       \
                         defaultText, pythonName, meaning)                     \
  if constexpr (sizeof(pythonName) > 1)                                        \
    if (!visit(pythonName, DYNAFUSE_SETTING_MEMBER_##group(field)))            \
      return false;
#include "dynafuse/Support/Settings.def"
#undef DYNAFUSE_SETTING_MEMBER_options
#undef DYNAFUSE_SETTING_MEMBER_codegen
#undef DYNAFUSE_SETTING_MEMBER_none
  return true;
}

} // namespace

PyObject *runtimeSettingsOf(const Options &options) {
  PyObject *settings = PyDict_New();
  if (!settings)
    return nullptr;
  bool filled = forEachRuntimeSetting(
      options, [&](const char *name, const auto &field) {
        PyObject *value = toPython(field);
        bool stored = value && PyDict_SetItemString(settings, name, value) == 0;
        Py_XDECREF(value);
        return stored;
      });
  if (!filled) {
    Py_DECREF(settings);
    return nullptr;
  }
  return settings;
}

bool applyRuntimeSettings(PyObject *settings, Options &options) {
  if (!PyDict_Check(settings)) {
    PyErr_SetString(PyExc_TypeError, "settings must be a dict");
    return false;
  }
  Options updated = options;
  bool applied =
      forEachRuntimeSetting(updated, [&](const char *name, auto &field) {
        PyObject *value = PyDict_GetItemString(settings, name);
        if (!value) {
          PyErr_Format(PyExc_KeyError, "settings lack '%s'", name);
          return false;
        }
        return fromPython(value, name, field);
      });
  if (applied)
    options = updated;
  return applied;
}

std::string runtimeSettingsKey(const Options &options) {
  std::string key;
  forEachRuntimeSetting(options, [&](const char *, const auto &field) {
    key += keyText(field) + ";";
    return true;
  });
  return key;
}

} // namespace dynafuse

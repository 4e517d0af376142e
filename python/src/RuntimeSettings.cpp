//===- RuntimeSettings.cpp - Settings dynafuse.config changes -------------===//
#include "RuntimeSettings.h"

#include <type_traits>

namespace dynafuse {
namespace {

template <typename T> PyObject *toPython(const T &value) {
  if constexpr (std::is_same_v<T, std::string>)
    return PyUnicode_FromStringAndSize(value.data(), Py_ssize_t(value.size()));
  else if constexpr (std::is_same_v<T, bool>)
    return PyBool_FromLong(value);
  else if constexpr (std::is_same_v<T, int>)
    return PyLong_FromLong(value);
  else
    return nullptr; // not a run-time kind (Settings.def allows none other)
}

template <typename T>
bool fromPython(PyObject *object, const char *name, T &field) {
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
  } else if constexpr (std::is_same_v<T, int>) {
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
  } else {
    PyErr_Format(PyExc_TypeError, "'%s' is not a run-time setting", name);
  }
  return false;
}

template <typename T> std::string keyText(const T &value) {
  if constexpr (std::is_same_v<T, std::string>)
    return std::to_string(value.size()) + ":" + value;
  else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int>)
    return std::to_string(value);
  else
    return "";
}

/// A setting's field in `object` (an Options). Settings of the none group
/// have no field and no Python name: their (never taken) branches below
/// name a stand-in.
std::string noField;
#define DYNAFUSE_SETTING_MEMBER_options(object, field) object.field
#define DYNAFUSE_SETTING_MEMBER_codegen(object, field) object.codegen.field
#define DYNAFUSE_SETTING_MEMBER_none(object, field) noField

} // namespace

PyObject *runtimeSettingsOf(const Options &options) {
  PyObject *settings = PyDict_New();
  if (!settings)
    return nullptr;
#define DYNAFUSE_SETTING(variable, group, field, type, initial, reader,        \
                         defaultText, pythonName, meaning)                     \
  if constexpr (sizeof(pythonName) > 1) {                                      \
    PyObject *value =                                                          \
        toPython(DYNAFUSE_SETTING_MEMBER_##group(options, field));             \
    if (!value || PyDict_SetItemString(settings, pythonName, value) < 0) {     \
      Py_XDECREF(value);                                                       \
      Py_DECREF(settings);                                                     \
      return nullptr;                                                          \
    }                                                                          \
    Py_DECREF(value);                                                          \
  }
#include "dynafuse/Support/Settings.def"
  return settings;
}

bool applyRuntimeSettings(PyObject *settings, Options &options) {
  if (!PyDict_Check(settings)) {
    PyErr_SetString(PyExc_TypeError, "settings must be a dict");
    return false;
  }
  Options updated = options;
#define DYNAFUSE_SETTING(variable, group, field, type, initial, reader,        \
                         defaultText, pythonName, meaning)                     \
  if constexpr (sizeof(pythonName) > 1) {                                      \
    PyObject *value = PyDict_GetItemString(settings, pythonName);              \
    if (!value) {                                                              \
      PyErr_Format(PyExc_KeyError, "settings lack '%s'", pythonName);          \
      return false;                                                            \
    }                                                                          \
    if (!fromPython(value, pythonName,                                         \
                    DYNAFUSE_SETTING_MEMBER_##group(updated, field)))          \
      return false;                                                            \
  }
#include "dynafuse/Support/Settings.def"
  options = updated;
  return true;
}

std::string runtimeSettingsKey(const Options &options) {
  std::string key;
#define DYNAFUSE_SETTING(variable, group, field, type, initial, reader,        \
                         defaultText, pythonName, meaning)                     \
  if constexpr (sizeof(pythonName) > 1)                                        \
    key += keyText(DYNAFUSE_SETTING_MEMBER_##group(options, field)) + ";";
#include "dynafuse/Support/Settings.def"
  return key;
}

} // namespace dynafuse

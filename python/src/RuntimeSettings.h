//===- RuntimeSettings.h - Settings dynafuse.config changes -----*- C++ -*-===//
//
// The settings of Settings.def that have a Python name cross the boundary
// as a dict keyed by those names, both ways: dynafuse.config starts from the
// environment's values, and hands its current ones (or compile(options=...)
// over them) back to configure() and compiler_config().
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_PYTHON_RUNTIMESETTINGS_H
#define DYNAFUSE_PYTHON_RUNTIMESETTINGS_H

#include "dynafuse/Support/Options.h"

#include <Python.h>

#include <string>

namespace dynafuse {

/// {python name: value} of options' run-time settings (new reference).
PyObject *runtimeSettingsOf(const Options &options);

/// Sets options' run-time settings from `settings`, a dict holding each by
/// its Python name (text: str or None; counts: int >= 0; switches: bool).
/// False with a Python error set when one is missing or of the wrong type.
bool applyRuntimeSettings(PyObject *settings, Options &options);

/// A text that two Options share exactly when their run-time settings are
/// equal (configurations are interned by it).
std::string runtimeSettingsKey(const Options &options);

} // namespace dynafuse

#endif

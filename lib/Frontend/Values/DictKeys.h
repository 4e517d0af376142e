//===- DictKeys.h - The text a Dict var keeps for each key ------*- C++ -*-===//
//
// A Dict var, and a dict an output spells out, keeps its keys as text: a
// str key as itself; None, bool, int, float and tuples of str, int and
// None in an escaped form (a leading \x1f, then a type letter). A str that
// itself starts with \x1f is escaped too, so texts and keys are one to
// one. Keys Python calls equal though their types differ (1, 1.0, True)
// have different texts; equalKeyTexts names the other spellings so that a
// lookup can refuse a dict that mixes them rather than miss an entry.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_FRONTEND_DICTKEYS_H
#define DYNAFUSE_FRONTEND_DICTKEYS_H

#include "Tracer/Var.h"
#include "dynafuse/Support/PyRef.h"

#include <Python.h>

#include <optional>
#include <string>
#include <vector>

namespace dynafuse {
namespace capture {

/// The text of a dict key; nullopt for keys a Dict var cannot hold
/// (objects, NaN and -0.0, tuples holding floats or bools).
std::optional<std::string> dictKeyText(PyObject *key);

/// The key a text spells (a new reference; null with a Python error set
/// for a text dictKeyText never makes).
PyRef dictKeyObject(const std::string &text);

/// The text of a str key given by its characters (a keyword's name), and
/// the str a text spells (nullopt for keys of other types).
std::string stringKeyText(const std::string &name);
std::optional<std::string> stringOfKeyText(const std::string &text);

/// A call's keywords as a Dict var (a hook's kwargs, a **kwargs
/// parameter's dict), and a Dict var's entries as keywords: nullopt when
/// a key is not a str (Python raises TypeError).
VarPtr dictOfKeywords(const Keywords &keywords);
std::optional<Keywords> keywordsOfDict(const Var &dict);

/// The texts of the keys of other types Python's == calls equal to this
/// one (1 for 1.0 and True, and so on); empty for str, None and tuples.
std::vector<std::string> equalKeyTexts(const std::string &text);

} // namespace capture
} // namespace dynafuse

#endif

//===- Error.h - Errors with a location -------------------------*- C++ -*-===//
//
// Dynafuse reports every failure as a dynafuse::Error: a message plus, where
// known, the place it refers to (line:column of IR text, or file:line of user
// code). Layers throw; the Python boundary and tools catch and print.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_ERROR_H
#define DYNAFUSE_SUPPORT_ERROR_H

#include <stdexcept>
#include <string>

namespace dynafuse {

/// A position in a text: IR source (line:column) or user code (file:line).
struct Location {
  std::string file;
  int line = 0;
  int column = 0;

  bool known() const { return line > 0; }
  /// "file:line:col", "line:col" or "" when unknown.
  std::string str() const;
};

class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message, Location where = {});
  const Location &location() const { return where; }
  /// The message without the location prefix.
  const std::string &bareMessage() const { return bare; }

private:
  Location where;
  std::string bare;
};

/// Throws an Error whose message is the concatenation of the arguments.
[[noreturn]] void fail(const std::string &message, Location where = {});

} // namespace dynafuse

#endif

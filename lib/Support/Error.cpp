//===- Error.cpp - Errors with a location ---------------------------------===//
#include "dynafuse/Support/Error.h"

namespace dynafuse {

std::string Location::str() const {
  if (!known())
    return "";
  std::string out = file.empty() ? "" : file + ":";
  out += std::to_string(line);
  if (column > 0)
    out += ":" + std::to_string(column);
  return out;
}

static std::string withLocation(const std::string &message,
                                const Location &where) {
  if (!where.known())
    return message;
  return where.str() + ": " + message;
}

Error::Error(const std::string &message, Location where)
    : std::runtime_error(withLocation(message, where)), where(where),
      bare(message) {}

void fail(const std::string &message, Location where) {
  throw Error(message, where);
}

} // namespace dynafuse

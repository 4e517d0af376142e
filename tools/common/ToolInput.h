//===- ToolInput.h - Reading IR text for the command-line tools -*- C++ -*-===//
//
// What dynafuse-opt and dynafuse-run share to read their input: a file's
// text, its "// -----" chunks (--split-input-file) and the keyword that
// says which IR a chunk holds.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_TOOLS_TOOLINPUT_H
#define DYNAFUSE_TOOLS_TOOLINPUT_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dynafuse::tools {

/// The whole text of the file at `path`; nullopt when it cannot be opened.
std::optional<std::string> readTextFile(const std::string &path);

/// Splits `text` at lines starting with "// -----"; each chunk keeps its
/// line numbers by being prefixed with the newlines that precede it.
std::vector<std::string> splitInputChunks(const std::string &text);

/// The comma-separated items of `text` ("a,b,,c" -> a, b, c).
std::vector<std::string> splitList(const std::string &text);

/// `--sizes=s0=37,s1=5`'s list into `sizes`; the first entry without '='
/// is returned ("" when every entry parses).
std::string parseSizeList(const std::string &text,
                          std::map<std::string, int64_t> &sizes);

/// The first word of `text` ("graph", "module", "kernel"), skipping blank
/// and comment lines; empty when there is none.
std::string firstKeyword(const std::string &text);

} // namespace dynafuse::tools

#endif // DYNAFUSE_TOOLS_TOOLINPUT_H

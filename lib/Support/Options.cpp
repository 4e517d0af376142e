//===- Options.cpp - Reading every setting from the environment ----------===//
//
// readOptions() and optionVariables() from Settings.def: one reader per kind
// of value, named by the list.
//
//===----------------------------------------------------------------------===//
#include "dynafuse/Support/Options.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace dynafuse {
namespace {

/// Any value, the empty one included.
void readText(std::string &field, const char *value,
              const EnvironmentLookup &) {
  if (value)
    field = value;
}

void readNonEmptyText(std::string &field, const char *value,
                      const EnvironmentLookup &) {
  if (value && *value)
    field = value;
}

void readOptionalText(std::optional<std::string> &field, const char *value,
                      const EnvironmentLookup &) {
  if (value)
    field = std::string(value);
}

/// Like Python's int(): surrounding spaces allowed, nothing else; a
/// malformed value keeps the default.
void readCount(int &field, const char *value, const EnvironmentLookup &) {
  if (!value || !*value)
    return;
  char *end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  while (end && std::isspace(static_cast<unsigned char>(*end)))
    ++end;
  if (end != value && end && *end == 0)
    field = int(parsed);
}

/// "0" turns it off; any other non-empty value on.
void readSwitch(bool &field, const char *value, const EnvironmentLookup &) {
  if (value && *value)
    field = std::string(value) != "0";
}

/// A number of threads; negative ones read as 0 (the default's meaning).
void readThreads(int &field, const char *value, const EnvironmentLookup &) {
  if (value)
    field = std::max(0, std::atoi(value));
}

/// A positive integer; anything else keeps the default.
void readPositive(int64_t &field, const char *value,
                  const EnvironmentLookup &) {
  if (!value)
    return;
  long long parsed = std::atoll(value);
  if (parsed > 0)
    field = parsed;
}

/// A non-negative number; a malformed one keeps the default.
void readNumber(double &field, const char *value, const EnvironmentLookup &) {
  if (!value || !*value)
    return;
  char *end = nullptr;
  double parsed = std::strtod(value, &end);
  if (end && *end == 0 && parsed >= 0)
    field = parsed;
}

/// DYNAFUSE_CACHE_DIR, unless DYNAFUSE_DISK_CACHE=0 turns the cache off
/// (""); unset, $XDG_CACHE_HOME/dynafuse, else $HOME/.cache/dynafuse.
void readCacheDirectory(std::string &field, const char *value,
                        const EnvironmentLookup &lookup) {
  auto nonEmpty = [&](const char *name) -> const char * {
    const char *text = lookup(name);
    return text && *text ? text : nullptr;
  };
  const char *off = lookup("DYNAFUSE_DISK_CACHE");
  if (off && std::string(off) == "0")
    field = "";
  else if (value && *value)
    field = value;
  else if (const char *xdg = nonEmpty("XDG_CACHE_HOME"))
    field = std::string(xdg) + "/dynafuse";
  else if (const char *home = nonEmpty("HOME"))
    field = std::string(home) + "/.cache/dynafuse";
  else
    field = "";
}

void readGuardPages(GuardPages &field, const char *value,
                    const EnvironmentLookup &) {
  if (!value || !*value || std::string(value) == "0")
    field = GuardPages::Off;
  else
    field =
        std::string(value) == "all" ? GuardPages::All : GuardPages::Dynafuse;
}

void readHugePages(HugePages &field, const char *value,
                   const EnvironmentLookup &) {
  std::string text = value ? value : "off";
  field = text == "thp"       ? HugePages::Transparent
          : text == "hugetlb" ? HugePages::Reserved
                              : HugePages::Off;
}

void readGemmLibrary(GemmLibrary &field, const char *value,
                     const EnvironmentLookup &) {
  std::string text = value ? value : "auto";
  field = text == "mkl"      ? GemmLibrary::Mkl
          : text == "onednn" ? GemmLibrary::OneDnn
                             : GemmLibrary::Auto;
}

} // namespace

Options readOptions(const EnvironmentLookup &lookup) {
  Options options;
#define DYNAFUSE_SETTING(variable, group, field, type, initial, reader, ...)   \
  DYNAFUSE_SETTING_READ_##group(variable, field, reader)
#define DYNAFUSE_SETTING_READ_options(variable, field, reader)                 \
  reader(options.field, lookup(variable), lookup);
#define DYNAFUSE_SETTING_READ_codegen(variable, field, reader)                 \
  reader(options.codegen.field, lookup(variable), lookup);
#define DYNAFUSE_SETTING_READ_none(variable, field, reader)
#include "dynafuse/Support/Settings.def"
#undef DYNAFUSE_SETTING_READ_options
#undef DYNAFUSE_SETTING_READ_codegen
#undef DYNAFUSE_SETTING_READ_none
  return options;
}

const std::vector<OptionVariable> &optionVariables() {
  static const std::vector<OptionVariable> variables = {
#define DYNAFUSE_SETTING(variable, group, field, type, initial, reader,        \
                         defaultText, pythonName, meaning)                     \
  {variable, defaultText, meaning, pythonName},
#include "dynafuse/Support/Settings.def"
  };
  return variables;
}

} // namespace dynafuse

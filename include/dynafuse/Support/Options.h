//===- Options.h - Every setting of Dynafuse, as one value ------*- C++ -*-===//
//
// Decision 39. Options are one value, read from the environment once at the
// boundary (the Python module's init, a tool's main()) and passed
// explicitly from there. Nothing below the boundary reads the environment:
// readOptions() parses the variables through the lookup it is given, so the
// boundary is the only caller of getenv. The settings themselves, their
// variables, defaults and meanings are listed once, in Settings.def.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_OPTIONS_H
#define DYNAFUSE_SUPPORT_OPTIONS_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dynafuse {

/// Guard-page mode of the caching allocator (a debugging aid for JIT code).
enum class GuardPages {
  Off,
  /// Every block Dynafuse allocates gets its own mapping with guard pages.
  Dynafuse,
  /// As Dynafuse, and torch's CPU allocations are made by that allocator.
  All,
};

enum class HugePages { Off, Reserved, Transparent };

/// The library computing the float32 matrix products of inference graphs:
/// MKL (its packed sgemm for linear layers, ATen's sgemm for the rest) or
/// oneDNN (inner product and matmul); Auto picks by the CPU
/// (TorchPackedGemms.cpp).
enum class GemmLibrary { Auto, Mkl, OneDnn };

/// What the code generators need (a backend's compile() gets it through
/// CompileOptions): the codegen group of Settings.def.
struct CodegenOptions {
#define DYNAFUSE_SETTING(variable, group, field, type, initial, ...)          \
  DYNAFUSE_SETTING_FIELD_##group(field, type, initial)
#define DYNAFUSE_SETTING_FIELD_options(field, type, initial)
#define DYNAFUSE_SETTING_FIELD_codegen(field, type, initial)                   \
  type field = initial;
#define DYNAFUSE_SETTING_FIELD_none(field, type, initial)
#include "dynafuse/Support/Settings.def"
#undef DYNAFUSE_SETTING_FIELD_codegen
#undef DYNAFUSE_SETTING_FIELD_options
#undef DYNAFUSE_SETTING_FIELD_none
};

/// Every setting (Settings.def: the options group, and the codegen group
/// in `codegen`).
struct Options {
#define DYNAFUSE_SETTING(variable, group, field, type, initial, ...)          \
  DYNAFUSE_SETTING_FIELD_##group(field, type, initial)
#define DYNAFUSE_SETTING_FIELD_options(field, type, initial)                   \
  type field = initial;
#define DYNAFUSE_SETTING_FIELD_codegen(field, type, initial)
#define DYNAFUSE_SETTING_FIELD_none(field, type, initial)
#include "dynafuse/Support/Settings.def"
#undef DYNAFUSE_SETTING_FIELD_codegen
#undef DYNAFUSE_SETTING_FIELD_options
#undef DYNAFUSE_SETTING_FIELD_none
  CodegenOptions codegen;
};

/// Returns the value of an environment variable, or null when it is unset.
using EnvironmentLookup = std::function<const char *(const char *name)>;

/// The options the environment sets, seen through `lookup` (the boundary
/// passes std::getenv); unset or malformed variables keep their defaults.
Options readOptions(const EnvironmentLookup &lookup);

/// One documented variable: its name, its default as text, its meaning,
/// and for a setting changed at run time, its dynafuse.config name ("" for
/// the others).
struct OptionVariable {
  const char *name;
  const char *defaultValue;
  const char *meaning;
  const char *pythonName;
};
/// Every DYNAFUSE_* variable readOptions() reads, in Settings.def's order.
const std::vector<OptionVariable> &optionVariables();

} // namespace dynafuse

#endif

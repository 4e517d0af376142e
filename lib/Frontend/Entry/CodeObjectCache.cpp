//===- CodeObjectCache.cpp - Compiled entries kept on code objects --------===//
#include "CodeObjectCache.h"

#include <algorithm>

namespace dynafuse {
namespace {

/// The co_extra slot holding each code object's CodeCache.
Py_ssize_t extraIndex = -1;

/// Every cache made, for resetCodeCaches().
std::vector<CodeCache *> &allCaches() {
  static auto *caches = new std::vector<CodeCache *>(); // Leaked on purpose.
  return *caches;
}

bool interpreterIsFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing(); // public from 3.13
#else
  return _Py_IsFinalizing();
#endif
}

void freeCodeCache(void *pointer) {
  // At interpreter shutdown compiled code may already be unusable: leak.
  if (!pointer || interpreterIsFinalizing())
    return;
  auto *cache = static_cast<CodeCache *>(pointer);
  auto &caches = allCaches();
  caches.erase(std::remove(caches.begin(), caches.end(), cache), caches.end());
  delete cache;
}

bool isSkippedFile(PyCodeObject *code, const CompilerConfig &config) {
  // torchvision's API-usage logging: no tensor work, and its attribute reads
  // would break (calls to it inside captured code are skipped too).
  // The attribute protocol's own methods (a config's __getattribute__)
  // run on every attribute access: plain Python, not worth a capture.
  // 3.11's comprehension functions take a live iterator as their argument:
  // they run inside the frame that makes them (inlined there) or eagerly.
  for (const char *name :
       {"_log_api_usage_once", "__getattribute__", "__getattr__",
        "__setattr__", "__delattr__", "<listcomp>", "<dictcomp>", "<setcomp>"})
    if (PyUnicode_CompareWithASCIIString(code->co_name, name) == 0)
      return true;
  std::string file = PyUnicode_AsUTF8(code->co_filename);
  if (file.rfind("<frozen", 0) == 0)
    return true;
  for (const std::string &prefix : config.skipPrefixes)
    if (file.rfind(prefix, 0) == 0)
      return true;
  return false;
}

} // namespace

void initializeCodeObjectCache() {
  extraIndex = _PyEval_RequestCodeExtraIndex(freeCodeCache);
}

CodeCache *cacheOf(PyCodeObject *code, const CompilerConfig &config) {
  void *extra = nullptr;
  if (_PyCode_GetExtra(reinterpret_cast<PyObject *>(code), extraIndex, &extra) <
      0) {
    PyErr_Clear();
    return nullptr;
  }
  if (extra)
    return static_cast<CodeCache *>(extra);
  auto *cache = new CodeCache();
  cache->skippedFile = isSkippedFile(code, config);
  cache->skip = cache->skippedFile;
  cache->importMachinery = std::string(PyUnicode_AsUTF8(code->co_filename))
                               .rfind("<frozen importlib", 0) == 0;
  cache->unhooked = cache->importMachinery;
  if (_PyCode_SetExtra(reinterpret_cast<PyObject *>(code), extraIndex, cache) <
      0) {
    PyErr_Clear();
    delete cache;
    return nullptr;
  }
  allCaches().push_back(cache);
  return cache;
}

void resetCodeCaches() {
  for (CodeCache *cache : allCaches()) {
    cache->entries.clear();
    cache->skip = cache->skippedFile;
    cache->unhooked = cache->importMachinery;
    cache->eagerRunsWithoutCompiled = 0;
    cache->compiles = 0;
    cache->shapes = ShapeHistory();
    cache->freshObjects.clear();
    cache->lookupCall = -1;
    cache->missedInLookupCall = false;
    cache->callsMissing = 0;
  }
}

std::string codeName(PyCodeObject *code) {
  return PyUnicode_AsUTF8(code->co_qualname);
}

std::string codeWhere(PyCodeObject *code) {
  return std::string(PyUnicode_AsUTF8(code->co_filename)) + ":" +
         std::to_string(code->co_firstlineno);
}

} // namespace dynafuse

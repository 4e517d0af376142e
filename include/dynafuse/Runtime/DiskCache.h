//===- DiskCache.h - Compiled code cached on disk ---------------*- C++ -*-===//
//
// One file per key under the cache directory (CodegenOptions::diskCacheDir:
// $DYNAFUSE_CACHE_DIR, else $XDG_CACHE_HOME/dynafuse, else
// ~/.cache/dynafuse; DYNAFUSE_DISK_CACHE=0 turns it off). A backend's key holds
// everything the payload depends on (for LLVM: the module's IR text, the target
// CPU and features, the Dynafuse version and a code generation revision); the
// file name is a 128-bit hash of it and the file repeats the key, so a hash
// collision is a miss, not wrong code.
//
// File: "DYNAFUSE-CACHE-1\n", key size, payload size and a 64-bit checksum
// of key and payload (little-endian u64 each), then the key and payload.
// An entry that is truncated, has the wrong sizes or checksum or another
// key is ignored (a miss) and rewritten by the next store. Stores write a
// temporary file in the same directory and rename it over the entry, so
// concurrent processes never see a partial file; every I/O failure is a
// silent miss.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_RUNTIME_DISKCACHE_H
#define DYNAFUSE_RUNTIME_DISKCACHE_H

#include <cstdint>
#include <optional>
#include <string>

namespace dynafuse {

struct DiskCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  /// Entries found but rejected (corrupt, truncated, other key).
  int64_t rejected = 0;
  int64_t stores = 0;
};

class DiskCache {
public:
  explicit DiskCache(std::string directory) : directory(std::move(directory)) {}
  /// `directory` is CodegenOptions::diskCacheDir ("" turns the cache off:
  /// every load misses, stores do nothing).

  std::optional<std::string> load(const std::string &key) const;
  void store(const std::string &key, const std::string &payload) const;
  /// The entry's path for `key`.
  std::string pathFor(const std::string &key) const;

  /// Counters over every DiskCache of the process.
  static DiskCacheStats stats();

private:
  std::string directory;
};

} // namespace dynafuse

#endif

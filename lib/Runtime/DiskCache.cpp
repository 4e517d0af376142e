//===- DiskCache.cpp - Compiled code cached on disk -----------------------===//
#include "dynafuse/Runtime/DiskCache.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace dynafuse {
namespace {

const char kMagic[] = "DYNAFUSE-CACHE-1\n";
const size_t kMagicSize = sizeof(kMagic) - 1;
const size_t kHeaderSize = kMagicSize + 3 * 8;

std::mutex statsMutex;
DiskCacheStats counters;

void count(int64_t DiskCacheStats::*counter) {
  std::lock_guard<std::mutex> lock(statsMutex);
  ++(counters.*counter);
}

uint64_t fnv1a(const std::string &text, uint64_t hash) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

uint64_t checksum(const std::string &key, const std::string &payload) {
  return fnv1a(payload, fnv1a(key, 0xcbf29ce484222325ULL));
}

void putU64(std::string &out, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    out.push_back(char((value >> (8 * i)) & 0xff));
}

uint64_t getU64(const std::string &in, size_t at) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i)
    value |= uint64_t(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return value;
}

std::string hex(uint64_t value) {
  static const char digits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4)
    text[i] = digits[value & 15];
  return text;
}

} // namespace

std::string DiskCache::pathFor(const std::string &key) const {
  // Two independent 64-bit hashes: a 128-bit name.
  std::string name = hex(fnv1a(key, 0xcbf29ce484222325ULL)) +
                     hex(fnv1a(key, 0x84222325cbf29ce4ULL));
  return (std::filesystem::path(directory) / (name + ".o")).string();
}

std::optional<std::string> DiskCache::load(const std::string &key) const {
  if (directory.empty())
    return std::nullopt;
  std::ifstream file(pathFor(key), std::ios::binary);
  if (!file) {
    count(&DiskCacheStats::misses);
    return std::nullopt;
  }
  std::string data((std::istreambuf_iterator<char>(file)),
                   std::istreambuf_iterator<char>());
  auto reject = [&]() -> std::optional<std::string> {
    count(&DiskCacheStats::rejected);
    count(&DiskCacheStats::misses);
    return std::nullopt;
  };
  if (data.size() < kHeaderSize ||
      std::memcmp(data.data(), kMagic, kMagicSize) != 0)
    return reject();
  uint64_t keySize = getU64(data, kMagicSize);
  uint64_t payloadSize = getU64(data, kMagicSize + 8);
  uint64_t sum = getU64(data, kMagicSize + 16);
  if (keySize != key.size() || payloadSize > data.size() ||
      data.size() != kHeaderSize + keySize + payloadSize)
    return reject();
  if (data.compare(kHeaderSize, keySize, key) != 0)
    return reject();
  std::string payload = data.substr(kHeaderSize + keySize);
  if (checksum(key, payload) != sum)
    return reject();
  count(&DiskCacheStats::hits);
  return payload;
}

void DiskCache::store(const std::string &key,
                      const std::string &payload) const {
  if (directory.empty())
    return;
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  std::string path = pathFor(key);
  static std::atomic<uint64_t> serial{0};
  std::ostringstream temporary;
  temporary << path << ".tmp." << getpid() << "." << serial++;
  std::string header(kMagic, kMagicSize);
  putU64(header, key.size());
  putU64(header, payload.size());
  putU64(header, checksum(key, payload));
  {
    std::ofstream file(temporary.str(), std::ios::binary | std::ios::trunc);
    file << header << key << payload;
    file.flush();
    if (!file) {
      std::filesystem::remove(temporary.str(), error);
      return;
    }
  }
  std::filesystem::rename(temporary.str(), path, error);
  if (error) {
    std::filesystem::remove(temporary.str(), error);
    return;
  }
  count(&DiskCacheStats::stores);
}

DiskCacheStats DiskCache::stats() {
  std::lock_guard<std::mutex> lock(statsMutex);
  return counters;
}

} // namespace dynafuse

//===- Logging.cpp - Topic-based diagnostic logging -----------------------===//
#include "dynafuse/Support/Logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <sstream>

namespace dynafuse {
namespace {

std::mutex topicsMutex;
/// How many topics are enabled: with none, logEnabled answers without the
/// lock (it runs on every compiled call).
std::atomic<int> topicCount{0};

std::set<std::string> parseTopics(const std::string &text) {
  std::set<std::string> topics;
  std::stringstream stream(text);
  std::string topic;
  while (std::getline(stream, topic, ','))
    if (!topic.empty())
      topics.insert(topic);
  return topics;
}

/// Process-wide, set by the boundary from Options::logChannels.
std::set<std::string> &topics() {
  static std::set<std::string> enabled;
  return enabled;
}

} // namespace

bool logEnabled(const std::string &topic) {
  if (topicCount.load(std::memory_order_acquire) == 0)
    return false;
  std::lock_guard<std::mutex> lock(topicsMutex);
  return topics().count(topic) || topics().count("all");
}

void setLogTopics(const std::string &text) {
  std::lock_guard<std::mutex> lock(topicsMutex);
  topics() = parseTopics(text);
  topicCount.store(int(topics().size()), std::memory_order_release);
}

void logLine(const std::string &topic, const std::string &message) {
  if (!logEnabled(topic))
    return;
  std::fprintf(stderr, "[dynafuse:%s] %s\n", topic.c_str(), message.c_str());
}

} // namespace dynafuse

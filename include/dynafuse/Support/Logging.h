//===- Logging.h - Topic-based diagnostic logging ---------------*- C++ -*-===//
//
// Options::logChannels (DYNAFUSE_LOG=topic1,topic2, or "all"), handed over
// by the boundary through setLogTopics, enables log lines on stderr for the
// named topics: graph_breaks, guards, recompiles, compile, steps (every
// program step as it runs), profile (the time each step took). None is
// enabled until then.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_LOGGING_H
#define DYNAFUSE_SUPPORT_LOGGING_H

#include <string>

namespace dynafuse {

bool logEnabled(const std::string &topic);
/// Enables exactly these topics (comma-separated; Options::logChannels).
void setLogTopics(const std::string &topics);
void logLine(const std::string &topic, const std::string &message);

} // namespace dynafuse

#endif

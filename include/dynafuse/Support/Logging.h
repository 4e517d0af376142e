//===- Logging.h - Topic-based diagnostic logging ---------------*- C++ -*-===//
//
// DYNAFUSE_LOG=topic1,topic2 (or "all") enables log lines on stderr for the
// named topics: graph_breaks, guards, recompiles, compile, steps (every
// program step as it runs), profile (the time each step took).
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_LOGGING_H
#define DYNAFUSE_SUPPORT_LOGGING_H

#include <string>

namespace dynafuse {

bool logEnabled(const std::string &topic);
/// Overrides the topics read from DYNAFUSE_LOG (comma-separated).
void setLogTopics(const std::string &topics);
void logLine(const std::string &topic, const std::string &message);

} // namespace dynafuse

#endif

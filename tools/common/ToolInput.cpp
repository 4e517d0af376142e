//===- ToolInput.cpp - Reading IR text for the command-line tools ---------===//
//
// File reading, --split-input-file chunking and IR-kind detection shared by
// dynafuse-opt, dynafuse-run and dynafuse-diff; option lists.
//
//===----------------------------------------------------------------------===//
#include "ToolInput.h"

#include <fstream>
#include <sstream>

namespace dynafuse::tools {

std::vector<std::string> splitList(const std::string &text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ','))
    if (!item.empty())
      items.push_back(item);
  return items;
}

std::string parseSizeList(const std::string &text,
                          std::map<std::string, int64_t> &sizes) {
  for (const std::string &item : splitList(text)) {
    size_t equals = item.find('=');
    if (equals == std::string::npos)
      return item;
    sizes[item.substr(0, equals)] = std::stoll(item.substr(equals + 1));
  }
  return "";
}

std::optional<std::string> readTextFile(const std::string &path) {
  std::ifstream file(path);
  if (!file)
    return std::nullopt;
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

std::vector<std::string> splitInputChunks(const std::string &text) {
  std::vector<std::string> chunks(1);
  std::stringstream stream(text);
  std::string line;
  int lineCount = 0;
  while (std::getline(stream, line)) {
    ++lineCount;
    if (line.rfind("// -----", 0) == 0) {
      chunks.push_back(std::string(lineCount, '\n'));
      continue;
    }
    chunks.back() += line + "\n";
  }
  return chunks;
}

std::string firstKeyword(const std::string &text) {
  std::stringstream stream(text);
  std::string line;
  while (std::getline(stream, line)) {
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line.compare(start, 2, "//") == 0)
      continue;
    size_t end = line.find_first_of(" @(", start);
    return line.substr(start, end - start);
  }
  return "";
}

} // namespace dynafuse::tools

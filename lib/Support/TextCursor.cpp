//===- TextCursor.cpp - Character cursor for the IR parsers ---------------===//
#include "dynafuse/Support/TextCursor.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace dynafuse {

TextCursor::TextCursor(std::string text, std::string fileName)
    : text(std::move(text)), fileName(std::move(fileName)) {}

void TextCursor::advance() {
  if (text[pos] == '\n') {
    ++line;
    column = 1;
  } else {
    ++column;
  }
  ++pos;
}

void TextCursor::skipTrivia() {
  while (pos < text.size()) {
    char c = text[pos];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      advance();
      continue;
    }
    if (c == '/' && pos + 1 < text.size() && text[pos + 1] == '/') {
      while (pos < text.size() && text[pos] != '\n')
        advance();
      continue;
    }
    return;
  }
}

bool TextCursor::atEnd() {
  skipTrivia();
  return pos >= text.size();
}

char TextCursor::peek() {
  skipTrivia();
  return pos < text.size() ? text[pos] : '\0';
}

bool TextCursor::accept(const std::string &token) {
  skipTrivia();
  if (text.compare(pos, token.size(), token) != 0)
    return false;
  for (size_t i = 0; i < token.size(); ++i)
    advance();
  return true;
}

static bool isIdentifierChar(char c) {
  return std::isalnum((unsigned char)c) || c == '_' || c == '.';
}

bool TextCursor::acceptWord(const std::string &word) {
  skipTrivia();
  if (text.compare(pos, word.size(), word) != 0)
    return false;
  size_t end = pos + word.size();
  if (end < text.size() && isIdentifierChar(text[end]))
    return false;
  for (size_t i = 0; i < word.size(); ++i)
    advance();
  return true;
}

void TextCursor::expect(const std::string &token) {
  if (!accept(token))
    error("expected '" + token + "'");
}

std::string TextCursor::identifier(const std::string &what) {
  skipTrivia();
  if (pos >= text.size() ||
      !(std::isalpha((unsigned char)text[pos]) || text[pos] == '_'))
    error("expected " + what);
  size_t start = pos;
  while (pos < text.size() && isIdentifierChar(text[pos]))
    advance();
  return text.substr(start, pos - start);
}

std::string TextCursor::sigilName(char sigil, const std::string &what) {
  skipTrivia();
  if (pos >= text.size() || text[pos] != sigil)
    error("expected " + what + " ('" + std::string(1, sigil) + "name')");
  advance();
  size_t start = pos;
  while (pos < text.size() && isIdentifierChar(text[pos]))
    advance();
  if (pos == start)
    error("expected a name after '" + std::string(1, sigil) + "'");
  return text.substr(start, pos - start);
}

std::string TextCursor::stringLiteral() {
  skipTrivia();
  if (pos >= text.size() || text[pos] != '"')
    error("expected a string literal");
  advance();
  std::string value;
  while (pos < text.size() && text[pos] != '"') {
    if (text[pos] == '\n')
      error("unterminated string literal");
    if (text[pos] == '\\' && pos + 1 < text.size())
      advance();
    value += text[pos];
    advance();
  }
  if (pos >= text.size())
    error("unterminated string literal");
  advance();
  return value;
}

bool TextCursor::peekNumber() {
  skipTrivia();
  if (pos >= text.size())
    return false;
  char c = text[pos];
  if (std::isdigit((unsigned char)c))
    return true;
  if (text.compare(pos, 3, "inf") == 0 || text.compare(pos, 3, "nan") == 0)
    return true;
  return c == '-' && pos + 1 < text.size() &&
         (std::isdigit((unsigned char)text[pos + 1]) ||
          text.compare(pos + 1, 3, "inf") == 0);
}

TextCursor::Number TextCursor::number() {
  if (!peekNumber())
    error("expected a number");
  size_t start = pos;
  Number result;
  if (text[pos] == '-')
    advance();
  if (text.compare(pos, 3, "inf") == 0 || text.compare(pos, 3, "nan") == 0) {
    bool negative = text[start] == '-';
    bool isNan = text[pos] == 'n';
    for (int i = 0; i < 3; ++i)
      advance();
    result.isFloat = true;
    result.floatValue = isNan ? std::numeric_limits<double>::quiet_NaN()
                              : std::numeric_limits<double>::infinity();
    if (negative)
      result.floatValue = -result.floatValue;
    return result;
  }
  while (pos < text.size() &&
         !(text[pos] == '.' && pos + 1 < text.size() && text[pos + 1] == '.') &&
         (std::isalnum((unsigned char)text[pos]) || text[pos] == '.' ||
          ((text[pos] == '-' || text[pos] == '+') &&
           (text[pos - 1] == 'e' || text[pos - 1] == 'E')))) {
    if (text[pos] == '.' || text[pos] == 'e' || text[pos] == 'E')
      result.isFloat = true;
    advance();
  }
  std::string literal = text.substr(start, pos - start);
  char *end = nullptr;
  errno = 0;
  if (result.isFloat)
    result.floatValue = std::strtod(literal.c_str(), &end);
  else
    result.intValue = std::strtoll(literal.c_str(), &end, 10);
  if (end != literal.c_str() + literal.size() || errno == ERANGE)
    error("malformed number '" + literal + "'");
  return result;
}

int64_t TextCursor::integer() {
  Location where = location();
  Number value = number();
  if (value.isFloat)
    errorAt(where, "expected an integer");
  return value.intValue;
}

SymExpr TextCursor::symExpr() {
  skipTrivia();
  Location where = location();
  size_t start = pos;
  int depth = 0;
  while (pos < text.size()) {
    char c = text[pos];
    if (c == '\n')
      break;
    if (depth == 0 &&
        (c == ',' || c == ']' || c == ')' || c == '}' || c == '{' || c == ':'))
      break;
    if (c == '(' || c == '[')
      ++depth;
    if (c == ')' || c == ']')
      --depth;
    advance();
  }
  std::string expression = text.substr(start, pos - start);
  while (!expression.empty() && expression.back() == ' ')
    expression.pop_back();
  if (expression.empty())
    errorAt(where, "expected a symbolic integer expression");
  try {
    return parseSymExpr(expression);
  } catch (const Error &error) {
    errorAt(where, error.bareMessage());
  }
}

Location TextCursor::location() const {
  return Location{fileName, line, column};
}

void TextCursor::error(const std::string &message) const {
  errorAt(location(), message);
}

void TextCursor::errorAt(const Location &where,
                         const std::string &message) const {
  throw Error(message, where);
}

std::string formatFloatLiteral(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  char buffer[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  std::string text = buffer;
  if (text.find_first_of(".e") == std::string::npos)
    text += ".0";
  return text;
}

} // namespace dynafuse

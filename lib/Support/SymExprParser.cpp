//===- SymExprParser.cpp - SymExpr from its text --------------------------===//
#include "dynafuse/Support/SymExpr.h"

#include "dynafuse/Support/Error.h"

#include <cctype>

namespace dynafuse {

//===----------------------------------------------------------------------===//
// Parsing: expr := term (('+'|'-') term)*; term := unary (('*'|'//'|'%')
// unary)*; unary := '-' unary | INT | NAME | '(' expr ')'.
//===----------------------------------------------------------------------===//

namespace {

class SymExprParser {
public:
  explicit SymExprParser(const std::string &text) : text(text) {}

  SymExpr parseAll() {
    SymExpr result = parseSum();
    skipSpace();
    if (pos != text.size())
      error("unexpected '" + std::string(1, text[pos]) + "'");
    return result;
  }

private:
  const std::string &text;
  size_t pos = 0;

  [[noreturn]] void error(const std::string &what) {
    fail("bad symbolic expression '" + text + "' at column " +
         std::to_string(pos + 1) + ": " + what);
  }

  void skipSpace() {
    while (pos < text.size() && text[pos] == ' ')
      ++pos;
  }

  bool accept(const std::string &token) {
    skipSpace();
    if (text.compare(pos, token.size(), token) != 0)
      return false;
    pos += token.size();
    return true;
  }

  SymExpr parseSum() {
    SymExpr result = parseProduct();
    while (true) {
      if (accept("+"))
        result = result + parseProduct();
      else if (accept("-"))
        result = result - parseProduct();
      else
        return result;
    }
  }

  SymExpr parseProduct() {
    SymExpr result = parseUnary();
    while (true) {
      if (accept("*"))
        result = result * parseUnary();
      else if (accept("//"))
        result = floorDiv(result, parseUnary());
      else if (accept("%"))
        result = mod(result, parseUnary());
      else
        return result;
    }
  }

  SymExpr parseUnary() {
    if (accept("-"))
      return SymExpr(int64_t(-1)) * parseUnary();
    if (accept("(")) {
      SymExpr inner = parseSum();
      if (!accept(")"))
        error("expected ')'");
      return inner;
    }
    skipSpace();
    if (pos < text.size() && std::isdigit((unsigned char)text[pos]))
      return parseInteger();
    if (pos < text.size() && (std::isalpha((unsigned char)text[pos]) ||
                              text[pos] == '_' || text[pos] == '%'))
      return parseName();
    error("expected an integer, a symbol or '('");
  }

  SymExpr parseInteger() {
    size_t start = pos;
    while (pos < text.size() && std::isdigit((unsigned char)text[pos]))
      ++pos;
    try {
      return SymExpr(int64_t(std::stoll(text.substr(start, pos - start))));
    } catch (const std::out_of_range &) {
      error("integer out of range");
    }
  }

  /// A size or loop symbol, or "%name": an integer value of the kernel.
  SymExpr parseName() {
    size_t start = pos;
    if (text[pos] == '%')
      ++pos;
    while (pos < text.size() &&
           (std::isalnum((unsigned char)text[pos]) || text[pos] == '_'))
      ++pos;
    return SymExpr::symbol(text.substr(start, pos - start));
  }
};

} // namespace

SymExpr parseSymExpr(const std::string &text) {
  return SymExprParser(text).parseAll();
}

} // namespace dynafuse

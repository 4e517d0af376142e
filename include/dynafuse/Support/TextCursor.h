//===- TextCursor.h - Character cursor for the IR parsers -------*- C++ -*-===//
//
// Both text IRs (.graph, .loop) are read with a TextCursor: a position in the
// text with line:column tracking, whitespace and "//" comment skipping, and
// small token readers. Every failure throws an Error at the cursor's
// line:column.
//
//===----------------------------------------------------------------------===//
#ifndef DYNAFUSE_SUPPORT_TEXTCURSOR_H
#define DYNAFUSE_SUPPORT_TEXTCURSOR_H

#include "dynafuse/Support/Error.h"
#include "dynafuse/Support/SymExpr.h"

#include <string>

namespace dynafuse {

class TextCursor {
public:
  TextCursor(std::string text, std::string fileName);

  /// Skips blanks, newlines and "//" comments.
  void skipTrivia();
  bool atEnd();
  char peek();
  /// Consumes token when the text continues with it (after trivia).
  bool accept(const std::string &token);
  void expect(const std::string &token);
  /// Like accept, but only when the token is a whole word (not a prefix of
  /// an identifier).
  bool acceptWord(const std::string &word);

  /// [A-Za-z_][A-Za-z0-9_.]*
  std::string identifier(const std::string &what);
  /// "%name" or "@name": returns the name without its sigil.
  std::string sigilName(char sigil, const std::string &what);
  std::string stringLiteral();
  int64_t integer();
  /// A number literal: integer (isFloat false) or float (".", "e", inf, nan).
  struct Number {
    bool isFloat = false;
    int64_t intValue = 0;
    double floatValue = 0;
  };
  bool peekNumber();
  Number number();
  /// A symbolic integer expression running until ',' ']' ')' '}' '{' or
  /// ':' at bracket depth zero, or the end of the line.
  SymExpr symExpr();

  Location location() const;
  [[noreturn]] void error(const std::string &message) const;
  [[noreturn]] void errorAt(const Location &where,
                            const std::string &message) const;

private:
  void advance();
  std::string text;
  std::string fileName;
  size_t pos = 0;
  int line = 1;
  int column = 1;
};

/// Prints a double so that parsing it back gives the same bits, always with a
/// '.', 'e', "inf" or "nan" so that it reads back as a float.
std::string formatFloatLiteral(double value);

} // namespace dynafuse

#endif

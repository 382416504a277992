// Lexer of the IR text format (docs/ir.md): tokens, their positions, whitespace and comments.
//
// Whitespace and newlines are insignificant; '#' starts a comment to the end of the line. Tokens
// are string_views into the text (no per-token allocation), and the parser (parser.cc) reads them
// one at a time through current()/advance(). advance() is defined here, inline, because it runs
// once per token and the parser is a different translation unit; its error paths are in
// lexer.cc, out of line.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "dtensor/core/error.h"

namespace dt::ir {

enum class Tok : uint8_t { ident, value, number, string, lbrace, rbrace, lparen, rparen, lbrack, rbrack, comma, colon, equal, eof };

struct Token {
  Tok kind = Tok::eof;
  std::string_view text;  // ident/value: the name (value without '%'); string: raw contents
  int line = 1;
  int col = 1;
};

// How an error message names a token: 'graph', %x, number 3, string "a", end of file.
std::string describe(const Token& t);

namespace lex {
constexpr bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }
constexpr bool is_name_char(char c) { return is_ident_start(c) || is_digit(c) || c == '.'; }

// is_name_char as a table, for the inner loops.
constexpr auto kNameChar = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[size_t(c)] = is_name_char(char(c));
  return t;
}();

// What a token starting with a given character is.
enum class CharClass : uint8_t { other, punct, value, ident, number, quote };
constexpr auto kCharClass = [] {
  std::array<CharClass, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const char ch = char(c);
    if (is_ident_start(ch)) t[size_t(c)] = CharClass::ident;
    else if (is_digit(ch) || ch == '-' || ch == '+') t[size_t(c)] = CharClass::number;
  }
  for (char ch : std::string_view("{}()[],:=")) t[uint8_t(ch)] = CharClass::punct;
  t[uint8_t('%')] = CharClass::value;
  t[uint8_t('"')] = CharClass::quote;
  return t;
}();

// The token kind of each single-character punctuation.
constexpr auto kPunctTok = [] {
  std::array<Tok, 256> t{};
  t.fill(Tok::eof);
  t[uint8_t('{')] = Tok::lbrace;
  t[uint8_t('}')] = Tok::rbrace;
  t[uint8_t('(')] = Tok::lparen;
  t[uint8_t(')')] = Tok::rparen;
  t[uint8_t('[')] = Tok::lbrack;
  t[uint8_t(']')] = Tok::rbrack;
  t[uint8_t(',')] = Tok::comma;
  t[uint8_t(':')] = Tok::colon;
  t[uint8_t('=')] = Tok::equal;
  return t;
}();
}  // namespace lex

class Lexer {
 public:
  // `filename` prefixes error messages. The lexer starts before the first token: call advance().
  Lexer(std::string_view text, std::string filename) : src_(text), file_(std::move(filename)) {}

  // The current token (end of file after the last one).
  const Token& current() const { return tok_; }
  // Moves to the next token; throws ParseError at a character that starts none, an unterminated
  // string, a '%' without a name or a sign without a digit.
  inline void advance();

  // Where an error is: DT_PARSE_FAIL(lexer.at(tok)) << "message" throws the ParseError.
  ::dt::detail::ParseAt at(const Token& t) const { return at(t.line, t.col); }
  ::dt::detail::ParseAt at(int line, int col) const { return {file_, line, col, {}}; }
  const std::string& file() const { return file_; }

  // The number of newlines in the text (memchr, vectorized): an upper bound on the statements.
  size_t count_lines() const;

 private:
  // Error paths, out of line: an inlined message builder puts an ostringstream in the caller's
  // frame, whose setup then runs for every token.
  [[noreturn, gnu::noinline, gnu::cold]] void fail(std::string_view a, std::string_view b = {},
                                                   std::string_view c = {}) const;
  [[noreturn, gnu::noinline, gnu::cold]] void fail_unexpected_char(char c) const;

  std::string_view src_;
  std::string file_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
  Token tok_;
};

// Scans with local pointers: stores to the members (pos_, tok_) inside the loops would be reloaded
// on every character (char loads may alias them). Each character's class is one table lookup.
inline void Lexer::advance() {
  using namespace lex;
  const char* const begin = src_.data();
  const char* const end = begin + src_.size();
  const char* p = begin + pos_;
  // The common case first: punctuation after at most one space (", " "] " "(" ...), which is
  // half of all tokens in printed IR.
  if (p < end && *p == ' ') ++p;
  if (p < end && kCharClass[uint8_t(*p)] == CharClass::punct) {
    tok_.kind = kPunctTok[uint8_t(*p)];
    tok_.text = std::string_view(p, 1);
    tok_.line = line_;
    tok_.col = int(size_t(p - begin) - line_start_) + 1;
    pos_ = size_t(p + 1 - begin);
    return;
  }
  int line = line_;
  const char* line_start = begin + line_start_;
  // Whitespace and comments.
  while (p < end) {
    const char c = *p;
    if (c == ' ') {
      ++p;
    } else if (c == '\n') {
      ++p;
      ++line;
      line_start = p;
    } else if (c == '\t' || c == '\r') {
      ++p;
    } else if (c == '#') {
      while (p < end && *p != '\n') ++p;
    } else {
      break;
    }
  }
  line_ = line;
  line_start_ = size_t(line_start - begin);
  Token t;
  t.line = line;
  t.col = int(p - line_start) + 1;
  if (p == end) {
    pos_ = size_t(p - begin);
    t.kind = Tok::eof;
    tok_ = t;
    return;
  }
  const char* const start = p;
  const char c = *p;
  switch (kCharClass[uint8_t(c)]) {
    case CharClass::punct:
      t.kind = kPunctTok[uint8_t(c)];
      ++p;
      t.text = std::string_view(start, 1);
      break;
    case CharClass::value:
      ++p;
      while (p < end && kNameChar[uint8_t(*p)]) ++p;
      if (p == start + 1) {
        tok_ = t;
        pos_ = size_t(start - begin);
        fail("expected a value name after '%'");
      }
      t.kind = Tok::value;
      t.text = std::string_view(start + 1, size_t(p - start - 1));
      break;
    case CharClass::ident:
      ++p;
      while (p < end && kNameChar[uint8_t(*p)]) ++p;
      t.kind = Tok::ident;
      t.text = std::string_view(start, size_t(p - start));
      break;
    case CharClass::number:
      ++p;
      if (c == '+' || c == '-') {
        if (end - p >= 3 && p[0] == 'i' && p[1] == 'n' && p[2] == 'f') {
          p += 3;
          t.kind = Tok::number;
          t.text = std::string_view(start, size_t(p - start));
          break;
        }
        if (p == end || !is_digit(*p)) {
          tok_ = t;
          pos_ = size_t(p - begin);
          fail("expected a digit after '", std::string_view(start, 1), "'");
        }
      }
      while (p < end) {
        const char d = *p;
        if (is_digit(d) || d == '.') {
          ++p;
        } else if (d == 'e' || d == 'E') {
          ++p;
          if (p < end && (*p == '-' || *p == '+')) ++p;
        } else {
          break;
        }
      }
      t.kind = Tok::number;
      t.text = std::string_view(start, size_t(p - start));
      break;
    case CharClass::quote:
      ++p;
      while (p < end && *p != '"') {
        if (*p == '\n') break;
        if (*p == '\\' && p + 1 < end) ++p;  // an escaped character, never past the end
        ++p;
      }
      if (p >= end || *p != '"') {
        tok_ = t;
        pos_ = size_t(p - begin);
        fail("unterminated string");
      }
      t.kind = Tok::string;
      t.text = std::string_view(start + 1, size_t(p - start - 1));
      ++p;
      break;
    case CharClass::other:
      tok_ = t;
      pos_ = size_t(p - begin);
      fail_unexpected_char(c);
  }
  tok_ = t;
  pos_ = size_t(p - begin);
}

}  // namespace dt::ir

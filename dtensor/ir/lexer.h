// Lexer of the IR text format (docs/ir.md): tokens, their positions, whitespace and comments.
//
// Whitespace and newlines are insignificant; '#' starts a comment to the end of the line. Tokens
// are string_views into the lexer's copy of the text (no per-token allocation; valid while the
// lexer lives).
//
// The grammar (parser.cc) pulls from the lexer the token it expects next: accept(',') or
// expect_value("an operand") read one token of a known kind, and next() reads whatever comes.
// Each token is read once, by one of these; a failed expectation reads the token that is there
// (with next(), so a bad character is reported as such) and says "expected X, found Y" at it.
// Asking for the expected kind is what keeps the lexer cheap: most tokens of printed IR are
// punctuation, and accept(',') is a compare, with no token built and no class dispatch.
//
// The hot functions are defined here, inline, because they run once per token and the parser is
// a different translation unit; error paths and rare tokens are in lexer.cc, out of line.
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
  int col = 1;  // of the token's first character ('%' of a value, '"' of a string)
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

// Characters that start whitespace or a comment.
constexpr auto kTrivia = [] {
  std::array<bool, 256> t{};
  for (char c : std::string_view(" \n\t\r#")) t[uint8_t(c)] = true;
  return t;
}();

// The token kind of each single-character punctuation (eof: not punctuation).
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
  // `filename` prefixes error messages.
  Lexer(std::string_view text, std::string filename)
      : text_(text), begin_(text_.data()), end_(begin_ + text_.size()), p_(begin_), line_start_(begin_),
        file_(std::move(filename)) {}

  // The next character after whitespace and comments, not consumed; '\0' at the end of the text.
  char peek() {
    skip();
    return *p_;
  }
  bool at_end() { return peek() == '\0' && p_ == end_; }

  // Consumes the punctuation character `c` if it comes next.
  bool accept(char c) {
    skip();
    if (*p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  // Consumes `c`, or throws "expected <what>, found <the token there>".
  void expect(char c, const char* what) {
    if (!accept(c)) fail_expected(what);
  }

  // Consumes `a` or `b`, whichever comes next, and returns it, or throws "expected <what>, found
  // ...". For a list's separator or end (',' or ']'): one skip of whitespace instead of two.
  char expect_either(char a, char b, const char* what) {
    skip();
    if (*p_ == a || *p_ == b) return *p_++;
    fail_expected(what);
  }

  // Consumes a value name (%x) or an identifier, or throws "expected <what>, found ...".
  Token expect_value(const char* what) {
    skip();
    const char* p = p_;
    if (*p == '%') {
      const char* const name = ++p;
      while (lex::kNameChar[uint8_t(*p)]) ++p;
      if (p != name) return take(Tok::value, name, p, name - 1);
    }
    fail_expected(what);
  }
  Token expect_ident(const char* what) {
    skip();
    const char* p = p_;
    if (lex::is_ident_start(*p)) {
      const char* const start = p;
      while (lex::kNameChar[uint8_t(*++p)]) {
      }
      return take(Tok::ident, start, p, start);
    }
    fail_expected(what);
  }

  // Consumes and returns the next token, whatever it is (eof at the end); throws ParseError at a
  // character that starts none, an unterminated string, a '%' without a name or a sign without
  // a digit.
  Token next() {
    skip();
    const char* p = p_;
    if (p == end_) return take(Tok::eof, p, p, p);
    const char c = *p;
    if (lex::kPunctTok[uint8_t(c)] != Tok::eof) return take(lex::kPunctTok[uint8_t(c)], p, p + 1, p);
    if (lex::is_ident_start(c)) return expect_ident("");
    if (lex::is_digit(c)) {
      const char* const start = p;
      while (lex::is_digit(*++p) || *p == '.') {
      }
      if (*p != 'e' && *p != 'E') return take(Tok::number, start, p, start);
    }
    return next_rare();
  }

  // Where an error is: DT_PARSE_FAIL(lexer.at(tok)) << "message" throws the ParseError.
  ::dt::detail::ParseAt at(const Token& t) const { return at(t.line, t.col); }
  ::dt::detail::ParseAt at(int line, int col) const { return {file_, line, col, {}}; }
  const std::string& file() const { return file_; }

  // Throws "expected <what>, found <the next token>" at that token.
  [[noreturn, gnu::noinline, gnu::cold]] void fail_expected(const char* what);

  // The number of newlines in the text (memchr, vectorized): an upper bound on the statements.
  size_t count_lines() const;

 private:
  // Moves past whitespace and comments. Between tokens of printed IR there is at most one space,
  // so the loop (and the newline counting) is out of line.
  void skip() {
    if (*p_ == ' ') ++p_;
    if (lex::kTrivia[uint8_t(*p_)]) skip_rest();
  }
  void skip_rest();

  // Consumes [start, end) as a token of `kind` whose text is [text, end) and whose first
  // character is at `first`.
  Token take(Tok kind, const char* text, const char* end, const char* first) {
    p_ = end;
    return {kind, std::string_view(text, size_t(end - text)), line_, int(first - line_start_) + 1};
  }

  // next() for strings, signed numbers, numbers with an exponent and bad characters.
  Token next_rare();
  [[noreturn]] void fail(const char* at, std::string_view a, std::string_view b = {}, std::string_view c = {}) const;

  // A copy of the text: a std::string ends in '\0', which no token, whitespace or punctuation
  // test accepts, so the hot loops stop there without comparing against the end (only a '\0'
  // inside the text is told apart from the end, by next(), as an unexpected character).
  std::string text_;
  const char* begin_;
  const char* end_;
  const char* p_;  // the next unread character
  int line_ = 1;
  const char* line_start_;
  std::string file_;
};

}  // namespace dt::ir

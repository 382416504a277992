// Out-of-line parts of the IR lexer (lexer.h): whitespace runs, rare tokens, error paths, token
// descriptions, line counting.
#include "dtensor/ir/lexer.h"

#include <fmt/format.h>

#include <cstring>

namespace dt::ir {

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::ident: return fmt::format("'{}'", t.text);
    case Tok::value: return fmt::format("%{}", t.text);
    case Tok::number: return fmt::format("number {}", t.text);
    case Tok::string: return fmt::format("string \"{}\"", t.text);
    case Tok::eof: return "end of file";
    default: return fmt::format("'{}'", t.text);
  }
}

// Scans with local pointers: stores to the members inside the loop would be reloaded on every
// character (char loads may alias them).
void Lexer::skip_rest() {
  const char* p = p_;
  const char* const end = end_;
  int line = line_;
  const char* line_start = line_start_;
  while (p < end) {
    const char c = *p;
    if (c == ' ' || c == '\t' || c == '\r') {
      ++p;
    } else if (c == '\n') {
      ++p;
      ++line;
      line_start = p;
    } else if (c == '#') {
      while (p < end && *p != '\n') ++p;
    } else {
      break;
    }
  }
  p_ = p;
  line_ = line;
  line_start_ = line_start;
}

Token Lexer::next_rare() {
  using namespace lex;
  const char* const start = p_;
  const char* p = start;
  const char* const end = end_;
  const char c = *p;
  if (c == '%') {
    ++p;
    while (p < end && kNameChar[uint8_t(*p)]) ++p;
    if (p == start + 1) fail(start, "expected a value name after '%'");
    return take(Tok::value, start + 1, p, start);
  }
  if (c == '"') {
    ++p;
    while (p < end && *p != '"') {
      if (*p == '\n') break;
      if (*p == '\\' && p + 1 < end) ++p;  // an escaped character, never past the end
      ++p;
    }
    if (p >= end || *p != '"') fail(start, "unterminated string");
    Token t = take(Tok::string, start + 1, p, start);
    p_ = p + 1;
    return t;
  }
  if (is_digit(c) || c == '-' || c == '+') {
    ++p;
    if (c == '+' || c == '-') {
      if (end - p >= 3 && p[0] == 'i' && p[1] == 'n' && p[2] == 'f') return take(Tok::number, start, p + 3, start);
      if (p == end || !is_digit(*p)) fail(start, "expected a digit after '", std::string_view(start, 1), "'");
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
    return take(Tok::number, start, p, start);
  }
  if (uint8_t(c) < 0x20 || uint8_t(c) >= 0x7f)
    fail(start, "unexpected character 0x", fmt::format("{:02x}", uint8_t(c)));
  fail(start, "unexpected character '", std::string_view(start, 1), "'");
}

void Lexer::fail(const char* at_char, std::string_view a, std::string_view b, std::string_view c) const {
  DT_PARSE_FAIL(at(line_, int(at_char - line_start_) + 1)) << a << b << c;
}

void Lexer::fail_expected(const char* what) {
  const Token t = next();
  DT_PARSE_FAIL(at(t)) << "expected " << what << ", found " << describe(t);
}

size_t Lexer::count_lines() const {
  size_t n = 0;
  const char* p = begin_;
  while ((p = static_cast<const char*>(std::memchr(p, '\n', size_t(end_ - p)))) != nullptr) {
    ++n;
    ++p;
  }
  return n;
}

}  // namespace dt::ir

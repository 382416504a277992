// Out-of-line parts of the IR lexer (lexer.h): error paths, token descriptions, line counting.
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

void Lexer::fail(std::string_view a, std::string_view b, std::string_view c) const {
  DT_PARSE_FAIL(at(tok_)) << a << b << c;
}

void Lexer::fail_unexpected_char(char c) const {
  if (uint8_t(c) < 0x20 || uint8_t(c) >= 0x7f)
    DT_PARSE_FAIL(at(tok_)) << "unexpected character 0x" << fmt::format("{:02x}", uint8_t(c));
  DT_PARSE_FAIL(at(tok_)) << "unexpected character '" << c << "'";
}

size_t Lexer::count_lines() const {
  size_t n = 0;
  const char* p = src_.data();
  const char* const end = p + src_.size();
  while ((p = static_cast<const char*>(std::memchr(p, '\n', size_t(end - p)))) != nullptr) {
    ++n;
    ++p;
  }
  return n;
}

}  // namespace dt::ir

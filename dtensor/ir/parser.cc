// Recursive-descent parser of the IR text format. Grammar (docs/ir.md has the full description):
//
//   file   := 'graph' IDENT '{' stmt* 'return' [value (',' value)*] '}'
//   stmt   := 'group' IDENT '=' '[' [INT (',' INT)*] ']'
//           | ('input' | 'param') value ':' type
//           | value (',' value)* '=' IDENT '(' [value (',' value)*] ')' ['{' attr (',' attr)* '}']
//             ':' type (',' type)*
//   attr   := IDENT '=' (INT | FLOAT | STRING | IDENT | '[' [scalar (',' scalar)*] ']')
//   type   := IDENT '[' [INT (',' INT)*] ']'
//   value  := '%' [A-Za-z0-9_.]+        (names may contain dots: %layers.0.fc1.weight)
//
// Whitespace and newlines are insignificant; '#' starts a comment to the end of the line. The
// lexer works on string_views into the text (no per-token allocation).
#include "dtensor/ir/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <optional>
#include <sstream>

#include "dtensor/core/error.h"
#include "dtensor/core/input_file.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/verifier.h"

namespace dt::ir {
namespace {

// Bounds that keep shape arithmetic far from int64 overflow. The element bound applies to the
// product of the sizes with 0 counted as 1 (the largest stride), so [0, 2^40, 2^40] is refused
// although it has no elements: its strides would overflow.
constexpr int64_t kMaxDim = int64_t(1) << 40;
constexpr int64_t kMaxNumel = int64_t(1) << 50;

enum class Tok : uint8_t { ident, value, number, string, lbrace, rbrace, lparen, rparen, lbrack, rbrack, comma, colon, equal, eof };

struct Token {
  Tok kind = Tok::eof;
  std::string_view text;  // ident/value: the name (value without '%'); string: raw contents
  int line = 1;
  int col = 1;
};

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

std::string with_article(AttrKind kind) {
  std::string_view name = attr_kind_name(kind);
  return std::string(name[0] == 'i' ? "an " : "a ") + std::string(name);
}

constexpr bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }
constexpr bool is_name_char(char c) { return is_ident_start(c) || is_digit(c) || c == '.'; }

// is_name_char as a table, for the lexer's inner loop.
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

class Parser {
 public:
  Parser(std::string_view text, const std::string& filename) : src_(text), file_(filename) {}

  Graph run() {
    advance();
    expect_keyword("graph");
    Token name = expect(Tok::ident, "a graph name");
    Graph g{std::string(name.text)};
    g.set_source(file_);
    g.reserve(count_lines());
    g_ = &g;
    expect(Tok::lbrace, "'{'");
    while (true) {
      if (tok_.kind == Tok::ident && tok_.text == "return") {
        parse_return();
        break;
      }
      if (tok_.kind == Tok::ident && tok_.text == "group") parse_group();
      else if (tok_.kind == Tok::ident && (tok_.text == "input" || tok_.text == "param")) parse_signature_value();
      else if (tok_.kind == Tok::value) parse_node();
      else DT_PARSE_FAIL(fail(tok_)) << "expected 'group', 'input', 'param', a node or 'return', found " << describe(tok_);
    }
    expect(Tok::rbrace, "'}' after return");
    if (tok_.kind != Tok::eof) DT_PARSE_FAIL(fail(tok_)) << "expected end of file after '}', found " << describe(tok_);
    return g;
  }

 private:
  // Where an error is: DT_PARSE_FAIL(fail(tok)) << "message" throws the ParseError.
  ::dt::detail::ParseAt fail(const Token& at) const { return fail(at.line, at.col); }
  ::dt::detail::ParseAt fail(int line, int col) const { return {std::string(file_), line, col, {}}; }

  // Error paths of the per-token functions, kept out of line: an inlined message builder puts an
  // ostringstream in the caller's frame, whose setup then runs for every token.
  [[noreturn, gnu::noinline, gnu::cold]] void fail_here(std::string_view a, std::string_view b = {},
                                                        std::string_view c = {}) {
    DT_PARSE_FAIL(fail(tok_)) << a << b << c;
  }
  [[noreturn, gnu::noinline, gnu::cold]] void fail_expected(const char* what) {
    DT_PARSE_FAIL(fail(tok_)) << "expected " << what << ", found " << describe(tok_);
  }
  [[noreturn, gnu::noinline, gnu::cold]] void fail_unexpected_char(char c) {
    if (uint8_t(c) < 0x20 || uint8_t(c) >= 0x7f)
      DT_PARSE_FAIL(fail(tok_)) << "unexpected character 0x" << fmt::format("{:02x}", uint8_t(c));
    DT_PARSE_FAIL(fail(tok_)) << "unexpected character '" << c << "'";
  }

  // Counts newlines with memchr (vectorized), an upper bound on the number of statements.
  size_t count_lines() const {
    size_t n = 0;
    const char* p = src_.data();
    const char* const end = p + src_.size();
    while ((p = static_cast<const char*>(std::memchr(p, '\n', size_t(end - p)))) != nullptr) {
      ++n;
      ++p;
    }
    return n;
  }

  // ---- lexer ----
  // Scans with local pointers: stores to the members (pos_, tok_) inside the loops would be
  // reloaded on every character (char loads may alias them), which made the lexer the hottest
  // function. Each character's class comes from one table lookup (kCharClass).
  void advance() {
    const char* const begin = src_.data();
    const char* const end = begin + src_.size();
    const char* p = begin + pos_;
    // Whitespace and comments.
    while (p < end) {
      const char c = *p;
      if (c == ' ') {
        ++p;
      } else if (c == '\n') {
        ++p;
        ++line_;
        line_start_ = size_t(p - begin);
      } else if (c == '\t' || c == '\r') {
        ++p;
      } else if (c == '#') {
        while (p < end && *p != '\n') ++p;
      } else {
        break;
      }
    }
    tok_.line = line_;
    tok_.col = int(size_t(p - begin) - line_start_) + 1;
    if (p == end) {
      pos_ = size_t(p - begin);
      tok_.kind = Tok::eof;
      tok_.text = {};
      return;
    }
    const char* const start = p;
    const char c = *p;
    const CharClass cls = kCharClass[uint8_t(c)];
    switch (cls) {
      case CharClass::punct:
        tok_.kind = kPunctTok[uint8_t(c)];
        ++p;
        break;
      case CharClass::value:
        ++p;
        while (p < end && kNameChar[uint8_t(*p)]) ++p;
        if (p == start + 1) {
          pos_ = size_t(start - begin);
          fail_here("expected a value name after '%'");
        }
        tok_.kind = Tok::value;
        tok_.text = std::string_view(start + 1, size_t(p - start - 1));
        pos_ = size_t(p - begin);
        return;
      case CharClass::ident:
        ++p;
        while (p < end && kNameChar[uint8_t(*p)]) ++p;
        tok_.kind = Tok::ident;
        break;
      case CharClass::number:
        ++p;
        if (c == '+' || c == '-') {
          if (end - p >= 3 && std::string_view(p, 3) == "inf") {
            p += 3;
            tok_.kind = Tok::number;
            break;
          }
          if (p == end || !is_digit(*p)) {
            pos_ = size_t(p - begin);
            fail_here("expected a digit after '", std::string_view(&c, 1), "'");
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
        tok_.kind = Tok::number;
        break;
      case CharClass::quote:
        ++p;
        while (p < end && *p != '"') {
          if (*p == '\n') break;
          if (*p == '\\' && p + 1 < end) ++p;  // an escaped character, never past the end
          ++p;
        }
        if (p >= end || *p != '"') {
          pos_ = size_t(p - begin);
          fail_here("unterminated string");
        }
        tok_.kind = Tok::string;
        tok_.text = std::string_view(start + 1, size_t(p - start - 1));
        pos_ = size_t(p + 1 - begin);
        return;
      case CharClass::other:
        pos_ = size_t(p - begin);
        fail_unexpected_char(c);
    }
    tok_.text = std::string_view(start, size_t(p - start));
    pos_ = size_t(p - begin);
  }

  Token expect(Tok kind, const char* what) {
    if (tok_.kind != kind) fail_expected(what);
    Token t = tok_;
    advance();
    return t;
  }

  void expect_keyword(std::string_view kw) {
    if (tok_.kind != Tok::ident || tok_.text != kw) DT_PARSE_FAIL(fail(tok_)) << "expected '" << kw << "', found " << describe(tok_);
    advance();
  }

  bool accept(Tok kind) {
    if (tok_.kind != kind) return false;
    advance();
    return true;
  }

  // ---- literals ----
  int64_t parse_int(const Token& t, const char* what) {
    if (t.kind != Tok::number) DT_PARSE_FAIL(fail(t)) << "expected " << what << ", found " << describe(t);
    std::string_view s = t.text;
    if (!s.empty() && s[0] == '+') s.remove_prefix(1);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) DT_PARSE_FAIL(fail(t)) << "integer " << t.text << " is out of range";
    if (ec != std::errc() || end != s.data() + s.size()) DT_PARSE_FAIL(fail(t)) << "expected " << what << ", found " << describe(t);
    return v;
  }

  double parse_float(const Token& t) {
    std::string_view s = t.text;
    if (t.kind == Tok::ident && (s == "inf" || s == "nan")) return s == "inf" ? HUGE_VAL : std::nan("");
    if (t.kind != Tok::number) DT_PARSE_FAIL(fail(t)) << "expected a float, found " << describe(t);
    if (!s.empty() && s[0] == '+') s.remove_prefix(1);
    if (s == "-inf") return -HUGE_VAL;
    if (s == "inf") return HUGE_VAL;
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size()) DT_PARSE_FAIL(fail(t)) << "expected a float, found " << describe(t);
    return v;
  }

  std::string unescape(const Token& t) {
    std::string out;
    out.reserve(t.text.size());
    for (size_t i = 0; i < t.text.size(); ++i) {
      char c = t.text[i];
      if (c == '\\' && i + 1 < t.text.size()) {
        char e = t.text[++i];
        if (e == 'n') out += '\n';
        else if (e == '"' || e == '\\') out += e;
        else DT_PARSE_FAIL(fail(t.line, t.col + int(i))) << "unknown escape '\\" << e << "' in string";
      } else {
        out += c;
      }
    }
    return out;
  }

  // Reads the dims of a shape in its printed spelling, "8, 256]" (p is just after the '['),
  // into dims_ and moves p past the ']'. Returns false at anything else (signs, other spacing,
  // newlines, comments, out-of-range sizes): the token path then parses it or reports the error.
  bool scan_dims(const char*& p, const char* end) {
    dims_.clear();
    int64_t numel = 1;
    if (p < end && *p == ']') {
      ++p;
      return true;
    }
    while (true) {
      const char* const digits = p;
      int64_t v = 0;
      // At most 14 digits: v stays far below int64 overflow; longer runs take the token path.
      while (p < end && is_digit(*p) && p - digits < 14) v = v * 10 + (*p++ - '0');
      if (p == digits || p == end) return false;
      // numel * v > kMaxNumel, the token path's test, without its division.
      if (v > kMaxDim || __builtin_mul_overflow(numel, std::max<int64_t>(v, 1), &numel) || numel > kMaxNumel)
        return false;
      dims_.push_back(v);
      if (*p == ']') {
        ++p;
        return true;
      }
      if (*p != ',') return false;
      ++p;
      if (p < end && *p == ' ') ++p;
    }
  }

  // Reads a type in its printed spelling, " f32[8, 256]", straight from the text into `t` (tok_
  // is the ':' or ',' before it), sets `loc` to the dtype's location and moves tok_ past the ']'.
  // Returns false, having moved nothing, at anything else: the token path then parses it or
  // reports the error. Types are on two of every three lines, and this skips the seven tokens of
  // ": f32[8, 256]".
  bool scan_type_fast(TensorType& t, SourceLoc& loc) {
    const char* const begin = src_.data();
    const char* const end = begin + src_.size();
    const char* p = begin + pos_;
    if (p < end && *p == ' ') ++p;
    const char* const name = p;
    while (p < end && kNameChar[uint8_t(*p)]) ++p;
    if (p == name || p == end || *p != '[' || !is_ident_start(*name)) return false;
    const std::optional<DType> dtype = printed_dtype(std::string_view(name, size_t(p - name)));
    if (!dtype) return false;
    ++p;
    if (!scan_dims(p, end)) return false;
    t.dtype = *dtype;
    t.shape.assign(dims_.begin(), dims_.end());
    loc = {line_, int(size_t(name - begin) - line_start_) + 1};
    pos_ = size_t(p - begin);
    advance();
    return true;
  }

  // Returns the dtype printed as `name` (dtype_name's spelling), or nullopt for anything else,
  // including the aliases parse_dtype accepts (the token path reads those).
  // Names are compared as the integers of their (at most 4) bytes, without a memcmp call.
  static std::optional<DType> printed_dtype(std::string_view name) {
    auto code = [](std::string_view n) {
      uint32_t c = 0;
      std::memcpy(&c, n.data(), std::min<size_t>(n.size(), 4));
      return c;
    };
    static const std::array<uint32_t, kNumDTypes> codes = [&] {
      std::array<uint32_t, kNumDTypes> c{};
      for (int i = 0; i < kNumDTypes; ++i) {
        DT_CHECK(dtype_name(DType(i)).size() <= 4) << "dtype name longer than 4 bytes: " << dtype_name(DType(i));
        c[size_t(i)] = code(dtype_name(DType(i)));
      }
      return c;
    }();
    if (name.size() > 4) return std::nullopt;
    const uint32_t c = code(name);
    for (int i = 0; i < kNumDTypes; ++i)
      if (codes[size_t(i)] == c) return DType(i);
    return std::nullopt;
  }

  // Reads an operand list in its printed spelling, "(%a, %b)" (tok_ is its '('), straight from the
  // text into operands_, and moves tok_ past the ')'. Returns false, having moved nothing, at
  // anything else (other spacing, newlines, comments, undefined names): the token path then
  // parses it or reports the error.
  bool scan_operands_fast() {
    const char* const begin = src_.data();
    const char* const end = begin + src_.size();
    const char* p = begin + pos_;
    if (p < end && *p == ')') {
      ++p;
    } else {
      while (true) {
        if (p == end || *p != '%') return bail_operands();
        const char* const name = ++p;
        while (p < end && kNameChar[uint8_t(*p)]) ++p;
        if (p == name || p == end) return bail_operands();
        Value* v = g_->find(std::string_view(name, size_t(p - name)));
        if (!v) return bail_operands();
        operands_.push_back(v);
        if (*p == ')') {
          ++p;
          break;
        }
        if (*p != ',') return bail_operands();
        ++p;
        if (p < end && *p == ' ') ++p;
      }
    }
    pos_ = size_t(p - begin);
    advance();
    return true;
  }
  bool bail_operands() {
    operands_.clear();
    return false;
  }

  // Parses a type into `t` (whose shape is replaced).
  void parse_type(TensorType& t) {
    Token dt = expect(Tok::ident, "a type like f32[8, 64]");
    try {
      t.dtype = parse_dtype(dt.text);
    } catch (const ValueError&) {
      DT_PARSE_FAIL(fail(dt)) << "unknown dtype '" << dt.text << "' (expected f32, f64, bf16, f16, i64, i32 or bool)";
    }
    if (tok_.kind == Tok::lbrack) {
      const char* p = src_.data() + pos_;
      if (scan_dims(p, src_.data() + src_.size())) {
        t.shape.assign(dims_.begin(), dims_.end());
        pos_ = size_t(p - src_.data());
        advance();
        return;
      }
    }
    expect(Tok::lbrack, "'[' after the dtype");
    int64_t numel = 1;
    // Dims are collected in a reused scratch vector so the shape is allocated once, at its size.
    dims_.clear();
    if (tok_.kind != Tok::rbrack) {
      while (true) {
        Token d = tok_;
        int64_t v = parse_int(d, "a dim size");
        if (v < 0 || v > kMaxDim) DT_PARSE_FAIL(fail(d)) << "dim size " << v << " out of range [0, " << kMaxDim << "]";
        if (v != 0 && numel > kMaxNumel / v)
          DT_PARSE_FAIL(fail(d)) << "shape has more than " << kMaxNumel << " elements (counting size 0 as 1)";
        numel *= std::max<int64_t>(v, 1);
        dims_.push_back(v);
        advance();
        if (accept(Tok::rbrack)) break;
        expect(Tok::comma, "',' or ']' in the shape");
      }
    } else {
      advance();
    }
    t.shape.assign(dims_.begin(), dims_.end());
  }

  // ---- statements ----
  void parse_group() {
    Token kw = tok_;
    advance();
    Token name = expect(Tok::ident, "a group name");
    if (g_->find_group(name.text)) DT_PARSE_FAIL(fail(name)) << "group " << name.text << " is already declared";
    expect(Tok::equal, "'=' after the group name");
    expect(Tok::lbrack, "'[' before the group's ranks");
    std::vector<int> ranks;
    if (!accept(Tok::rbrack)) {
      while (true) {
        Token r = tok_;
        int64_t v = parse_int(r, "a rank");
        if (v < 0 || v > (int64_t(1) << 30)) DT_PARSE_FAIL(fail(r)) << "rank " << v << " out of range";
        for (int x : ranks)
          if (x == v) DT_PARSE_FAIL(fail(r)) << "rank " << v << " appears twice in group " << name.text;
        ranks.push_back(int(v));
        advance();
        if (accept(Tok::rbrack)) break;
        expect(Tok::comma, "',' or ']' in the rank list");
      }
    }
    if (ranks.empty()) DT_PARSE_FAIL(fail(name)) << "group " << name.text << " has no ranks";
    g_->add_group(std::string(name.text), std::move(ranks), {kw.line, kw.col});
  }

  // Fails with "already defined" for name token `t` (called when the graph refused a duplicate).
  [[noreturn]] void fail_redefined(const Token& t) {
    const Value* prev = g_->find(t.text);
    DT_PARSE_FAIL(fail(t)) << "value %" << t.text << " is already defined at line " << (prev ? prev->loc.line : 0);
  }

  void parse_signature_value() {
    const bool is_input = tok_.text == "input";
    advance();
    Token v = expect(Tok::value, "a value name like %x");
    if (tok_.kind != Tok::colon) fail_expected("':' before the type");
    TensorType t;
    SourceLoc type_loc;
    if (!scan_type_fast(t, type_loc)) {
      advance();
      parse_type(t);
    }
    // The graph refuses duplicate names; checking through it saves a lookup per line.
    try {
      if (is_input) g_->add_input(v.text, std::move(t), {v.line, v.col});
      else g_->add_param(v.text, std::move(t), {v.line, v.col});
    } catch (const ValueError&) {
      fail_redefined(v);
    }
  }

  Value* lookup(const Token& t) {
    Value* v = g_->find(t.text);
    if (!v) DT_PARSE_FAIL(fail(t)) << "undefined value %" << t.text;
    return v;
  }

  void parse_return() {
    advance();
    std::vector<Value*> outs;
    if (tok_.kind == Tok::value) {
      while (true) {
        Token v = expect(Tok::value, "a value");
        outs.push_back(lookup(v));
        if (!accept(Tok::comma)) break;
      }
    }
    g_->set_outputs(std::move(outs));
  }

  // Parses one attribute value of the kind the schema expects.
  Attr parse_attr_value(const OpDef& def, const AttrSpec& spec) {
    const Token t = tok_;
    auto bad = [&]() {
      DT_PARSE_FAIL(fail(t)) << "attribute " << spec.name << " of " << def.name() << " expects " << with_article(spec.kind)
              << ", found " << describe(t);
    };
    switch (spec.kind) {
      case AttrKind::i64: {
        if (t.kind != Tok::number || t.text.find_first_of(".eEn") != std::string_view::npos) bad();
        int64_t v = parse_int(t, "an int");
        advance();
        return v;
      }
      case AttrKind::f64: {
        if (t.kind != Tok::number && !(t.kind == Tok::ident && (t.text == "inf" || t.text == "nan"))) bad();
        double v = parse_float(t);
        advance();
        return v;
      }
      case AttrKind::boolean:
        if (t.kind != Tok::ident || (t.text != "true" && t.text != "false")) bad();
        advance();
        return t.text == "true";
      case AttrKind::str:
        if (t.kind != Tok::string) bad();
        advance();
        return unescape(t);
      case AttrKind::dtype: {
        if (t.kind != Tok::ident) bad();
        std::optional<DType> d;
        try {
          d = parse_dtype(t.text);
        } catch (const ValueError&) {
        }
        if (!d) DT_PARSE_FAIL(fail(t)) << "unknown dtype '" << t.text << "' for attribute " << spec.name << " of " << def.name();
        advance();
        return *d;
      }
      case AttrKind::group:
        if (t.kind != Tok::ident) bad();
        if (!g_->find_group(t.text)) DT_PARSE_FAIL(fail(t)) << "undeclared group " << t.text << " (declare it with `group " << t.text << " = [...]`)";
        advance();
        return std::string(t.text);
      case AttrKind::reduce_op:
        if (t.kind != Tok::ident) bad();
        if (t.text != "sum" && t.text != "avg" && t.text != "max" && t.text != "min")
          DT_PARSE_FAIL(fail(t)) << "unknown reduce op '" << t.text << "' (expected sum, avg, max or min)";
        advance();
        return std::string(t.text);
      case AttrKind::ints:
      case AttrKind::floats: {
        if (t.kind != Tok::lbrack) bad();
        advance();
        std::vector<int64_t> ints;
        std::vector<double> floats;
        if (!accept(Tok::rbrack)) {
          while (true) {
            if (spec.kind == AttrKind::ints) {
              if (tok_.kind != Tok::number)
                DT_PARSE_FAIL(fail(tok_)) << "attribute " << spec.name << " of " << def.name() << " expects ints, found " << describe(tok_);
              ints.push_back(parse_int(tok_, "an int"));
            } else {
              floats.push_back(parse_float(tok_));
            }
            advance();
            if (accept(Tok::rbrack)) break;
            expect(Tok::comma, "',' or ']' in the list");
          }
        }
        if (spec.kind == AttrKind::ints) return ints;
        return floats;
      }
    }
    bad();
    return {};
  }

  // Reads " = linear(" after a single result name in its printed spelling (tok_ is the result's
  // value token), straight from the text: records the result, sets `op_tok` and leaves tok_ at the
  // '('. Returns false, having moved nothing, at anything else.
  bool scan_header_fast(Token& op_tok) {
    const char* const begin = src_.data();
    const char* const end = begin + src_.size();
    const char* p = begin + pos_;
    if (end - p < 4 || p[0] != ' ' || p[1] != '=' || p[2] != ' ' || !is_ident_start(p[3])) return false;
    const char* const name = p + 3;
    p = name + 1;
    while (p < end && kNameChar[uint8_t(*p)]) ++p;
    if (p == end || *p != '(') return false;
    results_.push_back(tok_);
    op_tok = Token{Tok::ident, std::string_view(name, size_t(p - name)), line_,
                   int(size_t(name - begin) - line_start_) + 1};
    tok_ = Token{Tok::lparen, std::string_view(p, 1), line_, op_tok.col + int(op_tok.text.size())};
    pos_ = size_t(p + 1 - begin);
    return true;
  }

  void parse_node() {
    results_.clear();
    Token op_tok;
    if (!(tok_.kind == Tok::value && scan_header_fast(op_tok))) {
      while (true) {
        Token r = expect(Tok::value, "a result name");
        for (const Token& prev : results_)
          if (prev.text == r.text) DT_PARSE_FAIL(fail(r)) << "value %" << r.text << " is already defined at line " << prev.line;
        results_.push_back(r);
        if (!accept(Tok::comma)) break;
      }
      expect(Tok::equal, "'=' after the result names");
      op_tok = expect(Tok::ident, "an op name");
    }
    std::optional<OpKind> op = find_op(op_tok.text);
    if (!op) DT_PARSE_FAIL(fail(op_tok)) << "unknown op '" << op_tok.text << "'";
    const OpDef& def = op_def(*op);
    operands_.clear();
    if (!(tok_.kind == Tok::lparen && scan_operands_fast())) {
      expect(Tok::lparen, "'(' after the op name");
      if (!accept(Tok::rparen)) {
        while (true) {
          Token v = expect(Tok::value, "an operand like %x");
          operands_.push_back(lookup(v));
          if (accept(Tok::rparen)) break;
          expect(Tok::comma, "',' or ')' after an operand");
        }
      }
    }
    const int n = int(operands_.size());
    const int max_operands = def.max_operands();
    if (n < def.min_operands() || (max_operands >= 0 && n > max_operands)) {
      ::dt::detail::Message f("");
      f << def.name() << " expects ";
      if (def.max_operands() < 0) f << "at least " << def.min_operands();
      else if (def.min_operands() == def.max_operands()) f << def.min_operands();
      else f << def.min_operands() << " to " << def.max_operands();
      f << " operands (" << def.operand_signature() << "), got " << n;
      fail(op_tok) & f;
    }
    // Attributes: fill in schema order, defaults for the absent ones.
    std::vector<Attr> attrs(def.attrs.size());
    set_.assign(def.attrs.size(), false);
    if (accept(Tok::lbrace)) {
      while (true) {
        Token name = expect(Tok::ident, "an attribute name");
        int i = def.attr_index(name.text);
        if (i < 0) {
          ::dt::detail::Message f("");
          f << def.name() << " has no attribute '" << name.text << "'";
          if (def.attrs.empty()) f << " (it takes none)";
          else {
            f << " (expected one of";
            for (size_t k = 0; k < def.attrs.size(); ++k) f << (k ? ", " : " ") << def.attrs[k].name;
            f << ")";
          }
          fail(name) & f;
        }
        if (set_[size_t(i)]) DT_PARSE_FAIL(fail(name)) << "attribute " << name.text << " is given twice";
        expect(Tok::equal, "'=' after the attribute name");
        attrs[size_t(i)] = parse_attr_value(def, def.attrs[size_t(i)]);
        set_[size_t(i)] = true;
        if (accept(Tok::rbrace)) break;
        expect(Tok::comma, "',' or '}' after an attribute");
      }
    }
    for (size_t i = 0; i < def.attrs.size(); ++i) {
      if (set_[i]) continue;
      if (!def.attrs[i].default_value) DT_PARSE_FAIL(fail(op_tok)) << def.name() << " needs attribute " << def.attrs[i].name;
      attrs[i] = *def.attrs[i].default_value;
    }
    if (tok_.kind != Tok::colon) fail_expected("':' before the result types");
    // types_ keeps its capacity; append moves each shape out of it into the result value.
    types_.clear();
    type_locs_.clear();
    while (true) {
      // tok_ is the ':' or ',' before a type.
      TensorType& t = types_.emplace_back();
      SourceLoc& loc = type_locs_.emplace_back();
      if (!scan_type_fast(t, loc)) {
        advance();
        loc = {tok_.line, tok_.col};
        parse_type(t);
      }
      if (tok_.kind != Tok::comma) break;
    }
    if (types_.size() != results_.size())
      DT_PARSE_FAIL(fail(type_locs_.back().line, type_locs_.back().col))
          << "expected " << results_.size() << " result types, found " << types_.size();
    names_.clear();
    for (const Token& r : results_) names_.push_back(r.text);
    // A result name already in use makes append throw (after defining the results before it,
    // which are ours: their location is this op's).
    Node* node = nullptr;
    try {
      node = g_->append(NodeParts{.op = *op,
                                  .operands = operands_,
                                  .attrs = std::move(attrs),
                                  .result_types = types_,
                                  .result_names = names_,
                                  .loc = {op_tok.line, op_tok.col}});
    } catch (const ValueError&) {
      for (const Token& r : results_) {
        const Value* prev = g_->find(r.text);
        if (prev && !(prev->kind == ValueKind::result && prev->loc.line == op_tok.line && prev->loc.col == op_tok.col))
          fail_redefined(r);
      }
      throw;
    }
    for (size_t i = 0; i < node->results.size(); ++i) node->results[i]->loc = type_locs_[i];
  }

  std::string_view src_;
  std::string file_;
  size_t pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
  Token tok_;
  Graph* g_ = nullptr;
  // Scratch reused across nodes.
  std::vector<Token> results_;
  std::vector<Value*> operands_;
  std::vector<int64_t> dims_;
  std::vector<TensorType> types_;
  std::vector<SourceLoc> type_locs_;
  std::vector<std::string_view> names_;
  std::vector<bool> set_;
};

}  // namespace

Graph parse(std::string_view text, const std::string& filename, const ParseOptions& options) {
  Graph g = Parser(text, filename).run();
  if (options.verify) verify(g);
  return g;
}

Graph parse_file(const std::string& path, const ParseOptions& options) {
  return parse(read_input_file(path, "IR file"), path, options);
}

}  // namespace dt::ir

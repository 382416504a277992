// Recursive-descent grammar of the IR text format, over the tokens of the lexer (lexer.h). Grammar
// (docs/ir.md has the full description):
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
// There is one path through the text: every statement is read token by token, and every error
// is reported at the token that is wrong.
#include "dtensor/ir/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "dtensor/core/error.h"
#include "dtensor/core/input_file.h"
#include "dtensor/ir/lexer.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/verifier.h"

namespace dt::ir {
namespace {

// Bounds that keep shape arithmetic far from int64 overflow. The element bound applies to the
// product of the sizes with 0 counted as 1 (the largest stride), so [0, 2^40, 2^40] is refused
// although it has no elements: its strides would overflow.
constexpr int64_t kMaxDim = int64_t(1) << 40;
constexpr int64_t kMaxNumel = int64_t(1) << 50;

std::string with_article(AttrKind kind) {
  std::string_view name = attr_kind_name(kind);
  return std::string(name[0] == 'i' ? "an " : "a ") + std::string(name);
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& filename) : lx_(text, filename) {}

  Graph run() {
    lx_.advance();
    expect_keyword("graph");
    Token name = expect(Tok::ident, "a graph name");
    Graph g{std::string(name.text)};
    g.set_source(lx_.file());
    g.reserve(lx_.count_lines());
    g_ = &g;
    expect(Tok::lbrace, "'{'");
    while (true) {
      const Token& t = tok();
      if (t.kind == Tok::value) parse_node();
      else if (t.kind == Tok::ident && t.text == "return") {
        parse_return();
        break;
      } else if (t.kind == Tok::ident && t.text == "group") parse_group();
      else if (t.kind == Tok::ident && (t.text == "input" || t.text == "param")) parse_signature_value();
      else DT_PARSE_FAIL(fail(t)) << "expected 'group', 'input', 'param', a node or 'return', found " << describe(t);
    }
    expect(Tok::rbrace, "'}' after return");
    if (tok().kind != Tok::eof) DT_PARSE_FAIL(fail(tok())) << "expected end of file after '}', found " << describe(tok());
    return g;
  }

 private:
  const Token& tok() const { return lx_.current(); }
  void advance() { lx_.advance(); }

  // Where an error is: DT_PARSE_FAIL(fail(tok)) << "message" throws the ParseError.
  ::dt::detail::ParseAt fail(const Token& at) const { return lx_.at(at); }
  ::dt::detail::ParseAt fail(int line, int col) const { return lx_.at(line, col); }

  // Error path of the per-token functions, kept out of line: an inlined message builder puts an
  // ostringstream in the caller's frame, whose setup then runs for every token.
  [[noreturn, gnu::noinline, gnu::cold]] void fail_expected(const char* what) {
    DT_PARSE_FAIL(fail(tok())) << "expected " << what << ", found " << describe(tok());
  }

  Token expect(Tok kind, const char* what) {
    if (tok().kind != kind) fail_expected(what);
    Token t = tok();
    advance();
    return t;
  }

  void expect_keyword(std::string_view kw) {
    if (tok().kind != Tok::ident || tok().text != kw)
      DT_PARSE_FAIL(fail(tok())) << "expected '" << kw << "', found " << describe(tok());
    advance();
  }

  bool accept(Tok kind) {
    if (tok().kind != kind) return false;
    advance();
    return true;
  }

  // ---- literals ----
  [[noreturn, gnu::noinline, gnu::cold]] void fail_int(const Token& t, const char* what, bool out_of_range) {
    if (out_of_range) DT_PARSE_FAIL(fail(t)) << "integer " << t.text << " is out of range";
    DT_PARSE_FAIL(fail(t)) << "expected " << what << ", found " << describe(t);
  }

  int64_t parse_int(const Token& t, const char* what) {
    if (t.kind != Tok::number) fail_int(t, what, false);
    std::string_view s = t.text;
    // Plain digits (every dim size in printed IR), at most 18 of them: no overflow possible.
    if (s.size() <= 18) {
      int64_t v = 0;
      size_t i = 0;
      while (i < s.size() && lex::is_digit(s[i])) v = v * 10 + (s[i++] - '0');
      if (i == s.size()) return v;
    }
    if (!s.empty() && s[0] == '+') s.remove_prefix(1);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) fail_int(t, what, true);
    if (ec != std::errc() || end != s.data() + s.size()) fail_int(t, what, false);
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

  [[noreturn, gnu::noinline, gnu::cold]] void fail_dtype(const Token& t) {
    DT_PARSE_FAIL(fail(t)) << "unknown dtype '" << t.text << "' (expected f32, f64, bf16, f16, i64, i32 or bool)";
  }
  [[noreturn, gnu::noinline, gnu::cold]] void fail_dim(const Token& d, int64_t v) {
    if (v < 0 || v > kMaxDim) DT_PARSE_FAIL(fail(d)) << "dim size " << v << " out of range [0, " << kMaxDim << "]";
    DT_PARSE_FAIL(fail(d)) << "shape has more than " << kMaxNumel << " elements (counting size 0 as 1)";
  }

  // Parses a type into `t` (whose shape is replaced); tok() is its dtype.
  void parse_type(TensorType& t) {
    const Token dt = expect(Tok::ident, "a type like f32[8, 64]");
    try {
      t.dtype = parse_dtype(dt.text);
    } catch (const ValueError&) {
      fail_dtype(dt);
    }
    expect(Tok::lbrack, "'[' after the dtype");
    int64_t numel = 1;
    // Dims are collected in a reused scratch vector so the shape is allocated once, at its size.
    dims_.clear();
    if (tok().kind != Tok::rbrack) {
      while (true) {
        const Token& d = tok();
        const int64_t v = parse_int(d, "a dim size");
        if (v < 0 || v > kMaxDim || (v != 0 && numel > kMaxNumel / v)) fail_dim(d, v);
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
    Token kw = tok();
    advance();
    Token name = expect(Tok::ident, "a group name");
    if (g_->find_group(name.text)) DT_PARSE_FAIL(fail(name)) << "group " << name.text << " is already declared";
    expect(Tok::equal, "'=' after the group name");
    expect(Tok::lbrack, "'[' before the group's ranks");
    std::vector<int> ranks;
    if (!accept(Tok::rbrack)) {
      while (true) {
        Token r = tok();
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
    const bool is_input = tok().text == "input";
    advance();
    Token v = expect(Tok::value, "a value name like %x");
    expect(Tok::colon, "':' before the type");
    TensorType t;
    parse_type(t);
    // The graph refuses duplicate names; checking through it saves a lookup per line.
    try {
      if (is_input) g_->add_input(v.text, std::move(t), {v.line, v.col});
      else g_->add_param(v.text, std::move(t), {v.line, v.col});
    } catch (const ValueError&) {
      fail_redefined(v);
    }
  }

  [[noreturn, gnu::noinline, gnu::cold]] void fail_undefined(const Token& t) {
    DT_PARSE_FAIL(fail(t)) << "undefined value %" << t.text;
  }

  Value* lookup(const Token& t) {
    Value* v = g_->find(t.text);
    if (!v) fail_undefined(t);
    return v;
  }

  void parse_return() {
    advance();
    std::vector<Value*> outs;
    if (tok().kind == Tok::value) {
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
    const Token t = tok();
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
              if (tok().kind != Tok::number)
                DT_PARSE_FAIL(fail(tok())) << "attribute " << spec.name << " of " << def.name() << " expects ints, found " << describe(tok());
              ints.push_back(parse_int(tok(), "an int"));
            } else {
              floats.push_back(parse_float(tok()));
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

  [[noreturn, gnu::noinline, gnu::cold]] void fail_operand_count(const OpDef& def, const Token& op_tok, int n) {
    ::dt::detail::Message f("");
    f << def.name() << " expects ";
    if (def.max_operands() < 0) f << "at least " << def.min_operands();
    else if (def.min_operands() == def.max_operands()) f << def.min_operands();
    else f << def.min_operands() << " to " << def.max_operands();
    f << " operands (" << def.operand_signature() << "), got " << n;
    fail(op_tok) & f;
  }

  [[noreturn, gnu::noinline, gnu::cold]] void fail_no_attr(const OpDef& def, const Token& name) {
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

  void parse_node() {
    results_.clear();
    while (true) {
      Token r = expect(Tok::value, "a result name");
      for (const Token& prev : results_)
        if (prev.text == r.text) DT_PARSE_FAIL(fail(r)) << "value %" << r.text << " is already defined at line " << prev.line;
      results_.push_back(r);
      if (!accept(Tok::comma)) break;
    }
    expect(Tok::equal, "'=' after the result names");
    const Token op_tok = expect(Tok::ident, "an op name");
    std::optional<OpKind> op = find_op(op_tok.text);
    if (!op) DT_PARSE_FAIL(fail(op_tok)) << "unknown op '" << op_tok.text << "'";
    const OpDef& def = op_def(*op);
    operands_.clear();
    expect(Tok::lparen, "'(' after the op name");
    if (!accept(Tok::rparen)) {
      while (true) {
        const Token v = expect(Tok::value, "an operand like %x");
        operands_.push_back(lookup(v));
        if (accept(Tok::rparen)) break;
        expect(Tok::comma, "',' or ')' after an operand");
      }
    }
    const int n = int(operands_.size());
    const int max_operands = def.max_operands();
    if (n < def.min_operands() || (max_operands >= 0 && n > max_operands)) fail_operand_count(def, op_tok, n);
    // Attributes: fill in schema order, defaults for the absent ones.
    std::vector<Attr> attrs(def.attrs.size());
    set_.assign(def.attrs.size(), false);
    if (accept(Tok::lbrace)) {
      while (true) {
        Token name = expect(Tok::ident, "an attribute name");
        int i = def.attr_index(name.text);
        if (i < 0) fail_no_attr(def, name);
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
    expect(Tok::colon, "':' before the result types");
    // types_ keeps its capacity; append moves each shape out of it into the result value.
    types_.clear();
    type_locs_.clear();
    while (true) {
      type_locs_.push_back({tok().line, tok().col});
      parse_type(types_.emplace_back());
      if (!accept(Tok::comma)) break;
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

  Lexer lx_;
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

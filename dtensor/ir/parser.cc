// Recursive-descent grammar of the IR text format, over the tokens of the lexer (lexer.h). Grammar
// (docs/ir.md has the full description):
//
//   file   := 'graph' IDENT '{' stmt* 'return' [value (',' value)*] '}'
//   stmt   := 'group' IDENT '=' '[' [INT (',' INT)*] ']'
//           | ('input' | 'param' | 'const') value ':' type
//           | value (',' value)* '=' IDENT '(' [value (',' value)*] ')' ['{' attr (',' attr)* '}']
//             ':' type (',' type)*
//   attr   := IDENT '=' (INT | FLOAT | STRING | IDENT | '[' [scalar (',' scalar)*] ']')
//   type   := IDENT '[' [INT (',' INT)*] ']'
//   value  := '%' [A-Za-z0-9_.]+        (names may contain dots: %layers.0.fc1.weight)
//
// There is one path through the text: every statement is read token by token, pulling from the
// lexer the token the grammar expects next, and every error is reported at the token that is wrong.
#include "dtensor/ir/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
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
    expect_keyword("graph");
    Token name = lx_.expect_ident("a graph name");
    Graph g{std::string(name.text)};
    g.set_source(lx_.file());
    g.reserve(lx_.count_lines());
    g_ = &g;
    lx_.expect('{', "'{'");
    while (true) {
      if (lx_.peek() == '%') {
        parse_node();
        continue;
      }
      const Token t = lx_.next();
      if (t.kind == Tok::ident && t.text == "return") {
        parse_return();
        break;
      }
      if (t.kind == Tok::ident && t.text == "group") parse_group(t);
      else if (t.kind == Tok::ident && (t.text == "input" || t.text == "param" || t.text == "const")) parse_signature_value(t);
      else DT_PARSE_FAIL(fail(t)) << "expected 'group', 'input', 'param', 'const', a node or 'return', found " << describe(t);
    }
    lx_.expect('}', "'}' after return");
    if (!lx_.at_end()) lx_.fail_expected("end of file after '}'");
    return g;
  }

 private:
  // Where an error is: DT_PARSE_FAIL(fail(tok)) << "message" throws the ParseError.
  ::dt::detail::ParseAt fail(const Token& at) const { return lx_.at(at); }
  ::dt::detail::ParseAt fail(int line, int col) const { return lx_.at(line, col); }

  void expect_keyword(std::string_view kw) {
    const Token t = lx_.next();
    if (t.kind != Tok::ident || t.text != kw) DT_PARSE_FAIL(fail(t)) << "expected '" << kw << "', found " << describe(t);
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

  // The dtype named by `t`: a printed name (dtype_name's spelling) is found in a table of them,
  // compared as one integer of its (at most 4) bytes; parse_dtype reads the aliases.
  DType dtype_of(const Token& t) {
    static const std::array<uint32_t, kNumDTypes> codes = [] {
      std::array<uint32_t, kNumDTypes> c{};
      for (int i = 0; i < kNumDTypes; ++i) {
        DT_CHECK(dtype_name(DType(i)).size() <= 4) << "dtype name longer than 4 bytes: " << dtype_name(DType(i));
        c[size_t(i)] = name_code(dtype_name(DType(i)));
      }
      return c;
    }();
    if (t.text.size() <= 4) {
      const uint32_t c = name_code(t.text);
      for (int i = 0; i < kNumDTypes; ++i)
        if (codes[size_t(i)] == c) return DType(i);
    }
    try {
      return parse_dtype(t.text);
    } catch (const ValueError&) {
      fail_dtype(t);
    }
  }
  // The bytes of a name of at most 4 characters as one integer (a loop, not a memcpy call of a
  // variable size).
  static uint32_t name_code(std::string_view n) {
    uint32_t c = 0;
    for (size_t i = 0; i < n.size() && i < 4; ++i) c |= uint32_t(uint8_t(n[i])) << (8 * i);
    return c;
  }

  // Parses a type into `t` (whose shape is replaced); returns where it starts (its dtype).
  SourceLoc parse_type(TensorType& t) {
    const Token dt = lx_.expect_ident("a type like f32[8, 64]");
    t.dtype = dtype_of(dt);
    lx_.expect('[', "'[' after the dtype");
    int64_t numel = 1;
    // Dims are collected in a reused scratch vector so the shape is allocated once, at its size.
    dims_.clear();
    if (!lx_.accept(']')) {
      while (true) {
        const Token d = lx_.next();
        const int64_t v = parse_int(d, "a dim size");
        // numel * v > kMaxNumel, tested without a division (numel <= 2^50, v <= 2^40: the product
        // can overflow int64, which the builtin reports).
        if (v < 0 || v > kMaxDim || __builtin_mul_overflow(numel, std::max<int64_t>(v, 1), &numel) || numel > kMaxNumel)
          fail_dim(d, v);
        dims_.push_back(v);
        if (lx_.expect_either(']', ',', "',' or ']' in the shape") == ']') break;
      }
    }
    t.shape.assign(dims_.begin(), dims_.end());
    return {dt.line, dt.col};
  }

  // ---- statements ----
  // `kw` is the 'group' keyword, read.
  void parse_group(const Token& kw) {
    Token name = lx_.expect_ident("a group name");
    if (g_->find_group(name.text)) DT_PARSE_FAIL(fail(name)) << "group " << name.text << " is already declared";
    lx_.expect('=', "'=' after the group name");
    lx_.expect('[', "'[' before the group's ranks");
    std::vector<int> ranks;
    if (!lx_.accept(']')) {
      while (true) {
        const Token r = lx_.next();
        int64_t v = parse_int(r, "a rank");
        if (v < 0 || v > (int64_t(1) << 30)) DT_PARSE_FAIL(fail(r)) << "rank " << v << " out of range";
        for (int x : ranks)
          if (x == v) DT_PARSE_FAIL(fail(r)) << "rank " << v << " appears twice in group " << name.text;
        ranks.push_back(int(v));
        if (lx_.expect_either(']', ',', "',' or ']' in the rank list") == ']') break;
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

  // `kw` is the 'input', 'param' or 'const' keyword, read (a const is a frozen param).
  void parse_signature_value(const Token& kw) {
    const bool is_input = kw.text == "input";
    Token v = lx_.expect_value("a value name like %x");
    lx_.expect(':', "':' before the type");
    TensorType t;
    parse_type(t);
    // The graph refuses duplicate names; checking through it saves a lookup per line.
    try {
      if (is_input) g_->add_input(v.text, std::move(t), {v.line, v.col});
      else g_->add_param(v.text, std::move(t), {v.line, v.col})->frozen = kw.text == "const";
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

  // After the 'return' keyword.
  void parse_return() {
    std::vector<Value*> outs;
    if (lx_.peek() == '%') {
      while (true) {
        Token v = lx_.expect_value("a value");
        outs.push_back(lookup(v));
        if (!lx_.accept(',')) break;
      }
    }
    g_->set_outputs(std::move(outs));
  }

  // Parses one attribute value of the kind the schema expects.
  Attr parse_attr_value(const OpDef& def, const AttrSpec& spec) {
    const Token t = lx_.next();
    auto bad = [&]() {
      DT_PARSE_FAIL(fail(t)) << "attribute " << spec.name << " of " << def.name() << " expects " << with_article(spec.kind)
              << ", found " << describe(t);
    };
    switch (spec.kind) {
      case AttrKind::i64: {
        if (t.kind != Tok::number || t.text.find_first_of(".eEn") != std::string_view::npos) bad();
        int64_t v = parse_int(t, "an int");
        return v;
      }
      case AttrKind::f64: {
        if (t.kind != Tok::number && !(t.kind == Tok::ident && (t.text == "inf" || t.text == "nan"))) bad();
        double v = parse_float(t);
        return v;
      }
      case AttrKind::boolean:
        if (t.kind != Tok::ident || (t.text != "true" && t.text != "false")) bad();
        return t.text == "true";
      case AttrKind::str:
        if (t.kind != Tok::string) bad();
        return unescape(t);
      case AttrKind::dtype: {
        if (t.kind != Tok::ident) bad();
        std::optional<DType> d;
        try {
          d = parse_dtype(t.text);
        } catch (const ValueError&) {
        }
        if (!d) DT_PARSE_FAIL(fail(t)) << "unknown dtype '" << t.text << "' for attribute " << spec.name << " of " << def.name();
        return *d;
      }
      case AttrKind::group:
        if (t.kind != Tok::ident) bad();
        if (!g_->find_group(t.text)) DT_PARSE_FAIL(fail(t)) << "undeclared group " << t.text << " (declare it with `group " << t.text << " = [...]`)";
        return std::string(t.text);
      case AttrKind::reduce_op:
        if (t.kind != Tok::ident) bad();
        if (t.text != "sum" && t.text != "avg" && t.text != "max" && t.text != "min" && t.text != "prod")
          DT_PARSE_FAIL(fail(t)) << "unknown reduce op '" << t.text << "' (expected sum, avg, max, min or prod)";
        return std::string(t.text);
      case AttrKind::ints:
      case AttrKind::floats: {
        if (t.kind != Tok::lbrack) bad();
        std::vector<int64_t> ints;
        std::vector<double> floats;
        if (!lx_.accept(']')) {
          while (true) {
            const Token e = lx_.next();
            if (spec.kind == AttrKind::ints) {
              if (e.kind != Tok::number)
                DT_PARSE_FAIL(fail(e)) << "attribute " << spec.name << " of " << def.name() << " expects ints, found " << describe(e);
              ints.push_back(parse_int(e, "an int"));
            } else {
              floats.push_back(parse_float(e));
            }
            if (lx_.expect_either(']', ',', "',' or ']' in the list") == ']') break;
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
      Token r = lx_.expect_value("a result name");
      for (const Token& prev : results_)
        if (prev.text == r.text) DT_PARSE_FAIL(fail(r)) << "value %" << r.text << " is already defined at line " << prev.line;
      results_.push_back(r);
      if (!lx_.accept(',')) break;
    }
    lx_.expect('=', "'=' after the result names");
    const Token op_tok = lx_.expect_ident("an op name");
    std::optional<OpKind> op = find_op(op_tok.text);
    if (!op) DT_PARSE_FAIL(fail(op_tok)) << "unknown op '" << op_tok.text << "'";
    const OpDef& def = op_def(*op);
    operands_.clear();
    lx_.expect('(', "'(' after the op name");
    if (!lx_.accept(')')) {
      while (true) {
        const Token v = lx_.expect_value("an operand like %x");
        operands_.push_back(lookup(v));
        if (lx_.expect_either(')', ',', "',' or ')' after an operand") == ')') break;
      }
    }
    const int n = int(operands_.size());
    const int max_operands = def.max_operands();
    if (n < def.min_operands() || (max_operands >= 0 && n > max_operands)) fail_operand_count(def, op_tok, n);
    // Attributes: fill in schema order, defaults for the absent ones.
    std::vector<Attr> attrs(def.attrs.size());
    set_.assign(def.attrs.size(), false);
    if (lx_.accept('{')) {
      while (true) {
        Token name = lx_.expect_ident("an attribute name");
        int i = def.attr_index(name.text);
        if (i < 0) fail_no_attr(def, name);
        if (set_[size_t(i)]) DT_PARSE_FAIL(fail(name)) << "attribute " << name.text << " is given twice";
        lx_.expect('=', "'=' after the attribute name");
        attrs[size_t(i)] = parse_attr_value(def, def.attrs[size_t(i)]);
        set_[size_t(i)] = true;
        if (lx_.expect_either('}', ',', "',' or '}' after an attribute") == '}') break;
      }
    }
    for (size_t i = 0; i < def.attrs.size(); ++i) {
      if (set_[i]) continue;
      if (!def.attrs[i].default_value) DT_PARSE_FAIL(fail(op_tok)) << def.name() << " needs attribute " << def.attrs[i].name;
      attrs[i] = *def.attrs[i].default_value;
    }
    lx_.expect(':', "':' before the result types");
    // types_ keeps its capacity; append moves each shape out of it into the result value.
    types_.clear();
    type_locs_.clear();
    while (true) {
      type_locs_.push_back(parse_type(types_.emplace_back()));
      if (!lx_.accept(',')) break;
    }
    if (types_.size() != results_.size())
      DT_PARSE_FAIL(fail(type_locs_.back().line, type_locs_.back().col))
          << "expected " << results_.size() << " result types, found " << types_.size();
    // `loc("ONNX node Gather '/x'")`: the node of an imported model this one was made from. No
    // statement starts with 'l', so one character tells.
    const char* origin = nullptr;
    if (lx_.peek() == 'l') {
      const Token kw = lx_.expect_ident("loc");
      if (kw.text != "loc") DT_PARSE_FAIL(fail(kw)) << "expected loc(\"...\") or a new line after the result types, found " << describe(kw);
      lx_.expect('(', "'(' after loc");
      const Token s = lx_.next();
      if (s.kind != Tok::string) DT_PARSE_FAIL(fail(s)) << "loc takes a string, found " << describe(s);
      origin = intern_origin(unescape(s));
      lx_.expect(')', "')' after loc's string");
    }
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
                                  .loc = {op_tok.line, op_tok.col, origin}});
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
  std::vector<uint8_t> set_;  // bytes, not vector<bool>: the bit arithmetic showed in profiles
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

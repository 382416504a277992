#include "dtensor/ir/attr.h"

#include <fmt/format.h>

#include <cmath>

namespace dt::ir {

std::string_view attr_kind_name(AttrKind kind) {
  switch (kind) {
    case AttrKind::i64: return "int";
    case AttrKind::f64: return "float";
    case AttrKind::boolean: return "bool";
    case AttrKind::str: return "string";
    case AttrKind::dtype: return "dtype";
    case AttrKind::ints: return "int list";
    case AttrKind::floats: return "float list";
    case AttrKind::group: return "group";
    case AttrKind::reduce_op: return "reduce op";
  }
  return "?";
}

void append_double(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "nan";
    return;
  }
  if (std::isinf(v)) {
    out += v < 0 ? "-inf" : "inf";
    return;
  }
  size_t start = out.size();
  fmt::format_to(std::back_inserter(out), "{}", v);
  // fmt prints 1.0 as "1": add ".0" so the parser reads a float back.
  if (out.find_first_of(".e", start) == std::string::npos) out += ".0";
}

namespace {
void append_string_literal(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out += '"';
}

// Appends "[a, b, c]", each element written by append(out, x).
template <typename T, typename Append>
void append_list(std::string& out, const std::vector<T>& v, Append append) {
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    append(out, v[i]);
  }
  out += ']';
}
}  // namespace

void append_attr(std::string& out, const Attr& value, AttrKind kind) {
  switch (kind) {
    case AttrKind::i64:
      fmt::format_to(std::back_inserter(out), "{}", std::get<int64_t>(value));
      break;
    case AttrKind::f64:
      append_double(out, std::get<double>(value));
      break;
    case AttrKind::boolean:
      out += std::get<bool>(value) ? "true" : "false";
      break;
    case AttrKind::str:
      append_string_literal(out, std::get<std::string>(value));
      break;
    case AttrKind::group:
    case AttrKind::reduce_op:
      out += std::get<std::string>(value);
      break;
    case AttrKind::dtype:
      out += dtype_name(std::get<DType>(value));
      break;
    case AttrKind::ints:
      append_list(out, std::get<std::vector<int64_t>>(value),
                  [](std::string& o, int64_t x) { fmt::format_to(std::back_inserter(o), "{}", x); });
      break;
    case AttrKind::floats:
      append_list(out, std::get<std::vector<double>>(value), append_double);
      break;
  }
}

}  // namespace dt::ir

// Node attributes: typed constants stored on a node (ints, floats, bools, strings, dtypes, lists,
// and references to process groups and reduce ops, which are spelled as bare identifiers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dtensor/core/dtype.h"

namespace dt::ir {

enum class AttrKind : uint8_t {
  i64,        // 3, -1
  f64,        // 1e-05, 0.5, 1.0 (always printed with a '.' or exponent)
  boolean,    // true | false
  str,        // "tanh"
  dtype,      // f32 | i64 | ...
  ints,       // [8, 64]
  floats,     // [0.5, 1.0]
  group,      // tp (the name of a `group` declaration); stored as std::string
  reduce_op,  // sum | avg | max | min; stored as std::string
};

// Returns "int", "float", "bool", "string", "dtype", "int list", "float list", "group", "reduce op".
std::string_view attr_kind_name(AttrKind kind);

using Attr = std::variant<int64_t, double, bool, std::string, DType, std::vector<int64_t>,
                          std::vector<double>>;

// Returns the variant index that holds values of `kind`.
constexpr size_t attr_index(AttrKind kind) {
  switch (kind) {
    case AttrKind::i64: return 0;
    case AttrKind::f64: return 1;
    case AttrKind::boolean: return 2;
    case AttrKind::str: case AttrKind::group: case AttrKind::reduce_op: return 3;
    case AttrKind::dtype: return 4;
    case AttrKind::ints: return 5;
    case AttrKind::floats: return 6;
  }
  return 0;
}

// One attribute of an op's schema. An attribute without a default is required.
struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  std::optional<Attr> default_value;
};

// Appends the text form of `value` (as a `kind` attribute) to `out`: the parser reads it back
// to the same value (floats use the shortest round-trip form).
void append_attr(std::string& out, const Attr& value, AttrKind kind);
// Appends the shortest round-trip text of a double, always with '.', 'e', "inf" or "nan".
void append_double(std::string& out, double v);

}  // namespace dt::ir

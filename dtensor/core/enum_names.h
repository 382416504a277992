// The spelling of an enum's values in text (IR attributes, plans, CLI flags): one table per enum
// gives both directions, so a name and its parse cannot drift apart, and the parse error lists
// every accepted spelling in the table's order.
#pragma once

#include <cstddef>
#include <string_view>

#include "dtensor/core/error.h"

namespace dt {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

// The name of `v` in `table`; "?" for a value the table lacks.
template <typename E, size_t N>
std::string_view enum_name(const EnumName<E> (&table)[N], E v) {
  for (const EnumName<E>& e : table)
    if (e.value == v) return e.name;
  return "?";
}

// The value spelled `s`; otherwise ValueError "unknown <what> 's' (expected a, b or c)".
template <typename E, size_t N>
E parse_enum(const EnumName<E> (&table)[N], std::string_view s, std::string_view what) {
  for (const EnumName<E>& e : table)
    if (e.name == s) return e.value;
  std::ostringstream expected;
  for (size_t i = 0; i < N; ++i) expected << (i == 0 ? "" : i + 1 == N ? " or " : ", ") << table[i].name;
  DT_THROW(ValueError) << "unknown " << what << " '" << s << "' (expected " << expected.str() << ")";
}

}  // namespace dt

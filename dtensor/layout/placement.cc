#include "dtensor/layout/placement.h"

#include <cctype>
#include <charconv>

#include "dtensor/core/error.h"

namespace dt {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

[[noreturn]] void throw_bad_placement(std::string_view text) {
  DT_THROW(ValueError) << "bad placement '" << text << "': expected S(d), S(d,blocks=b), SS(d), R or P(sum|avg|max|min|prod)";
}

// Returns the text between "(" and ")" when s is name(...), else nullopt-like empty with ok=false.
bool split_call(std::string_view s, std::string_view& name, std::string_view& arg) {
  size_t open = s.find('(');
  if (open == std::string_view::npos) return false;
  if (s.back() != ')') return false;
  name = trim(s.substr(0, open));
  arg = trim(s.substr(open + 1, s.size() - open - 2));
  return true;
}

}  // namespace

Placement Placement::parse(std::string_view text) {
  std::string_view s = trim(text);
  if (s == "R" || s == "Replicate()" || s == "Replicate") return replicate();
  if (s == "P" || s == "Partial()" || s == "Partial") return partial(ReduceOp::sum);
  std::string_view name, arg;
  if (!split_call(s, name, arg)) throw_bad_placement(text);
  if (name == "S" || name == "Shard" || name == "SS" || name == "StridedShard") {
    const bool strided = name == "SS" || name == "StridedShard";
    if (arg.substr(0, 4) == "dim=") arg = trim(arg.substr(4));
    int64_t blocks = 1;
    if (size_t comma = arg.find(','); comma != std::string_view::npos && !strided) {
      std::string_view b = trim(arg.substr(comma + 1));
      arg = trim(arg.substr(0, comma));
      if (b.substr(0, 7) != "blocks=") throw_bad_placement(text);
      b = trim(b.substr(7));
      auto [bp, bec] = std::from_chars(b.data(), b.data() + b.size(), blocks);
      if (b.empty() || bec != std::errc() || bp != b.data() + b.size() || blocks < 1) throw_bad_placement(text);
    }
    int64_t d = 0;
    auto [p, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), d);
    if (arg.empty() || ec != std::errc() || p != arg.data() + arg.size()) throw_bad_placement(text);
    return strided ? strided_shard(d) : blocked_shard(d, blocks);
  }
  if (name == "P" || name == "Partial") {
    if (arg == "sum" || arg == "avg" || arg == "max" || arg == "min" || arg == "prod") return partial(parse_reduce_op(arg));
    throw_bad_placement(text);
  }
  throw_bad_placement(text);
}

Placement Placement::normalized(int64_t rank) const {
  if (!is_shard()) return *this;
  int64_t d = dim_ < 0 ? dim_ + rank : dim_;
  if (d < 0 || d >= rank)
    DT_THROW(DimError) << "shard dim " << dim_ << " out of range for tensor of rank " << rank;
  return with_dim(d);
}

std::string Placement::str() const {
  switch (kind_) {
    case Kind::replicate: return "R";
    case Kind::shard:
      return "S(" + std::to_string(dim_) + (blocks_ > 1 ? ",blocks=" + std::to_string(blocks_) : "") + ")";
    case Kind::partial: return "P(" + std::string(reduce_op_name(op_)) + ")";
    case Kind::strided_shard: return "SS(" + std::to_string(dim_) + ")";
  }
  return "?";
}

Placements parse_placements(std::string_view text) {
  Placements out;
  // PyTorch prints a tuple: "(Shard(dim=0), Replicate())" -> strip the outer parentheses.
  text = trim(text);
  if (text.size() >= 2 && text.front() == '(' && text.back() == ')') text = text.substr(1, text.size() - 2);
  // Split on commas that are not inside parentheses ("Shard(dim=0), R").
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '(') ++depth;
    if (i < text.size() && text[i] == ')') --depth;
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      std::string_view item = trim(text.substr(start, i - start));
      if (item.empty() && i == text.size() && !out.empty()) break;  // trailing comma: "(S(0),)"
      out.push_back(Placement::parse(item));
      start = i + 1;
    }
  }
  return out;
}

std::string placements_str(const Placements& placements) {
  std::string s;
  for (size_t i = 0; i < placements.size(); ++i) {
    if (i) s += ',';
    s += placements[i].str();
  }
  return s;
}

}  // namespace dt

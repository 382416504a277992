#include "dtensor/ir/op_registry.h"

#include <array>
#include <cstdint>
#include <utility>

#include "dtensor/core/error.h"

namespace dt::ir {

namespace {

// Op names are looked up once per parsed line: a 256-slot open-addressing table hashed on the
// length and three characters costs a fraction of std::hash over the whole name.
constexpr size_t kOpSlots = 256;
static_assert(kNumOps < kOpSlots / 2, "op name table too full");

size_t op_slot(std::string_view s) {
  return (s.size() * 31 + uint8_t(s.front()) * 7 + uint8_t(s[s.size() / 2]) * 13 + uint8_t(s.back())) &
         (kOpSlots - 1);
}

}  // namespace

std::optional<OpKind> find_op(std::string_view name) {
  static const std::array<int16_t, kOpSlots> slots = [] {
    std::array<int16_t, kOpSlots> t;
    t.fill(-1);
    for (size_t i = 0; i < kNumOps; ++i) {
      size_t k = op_slot(kOpNames[i]);
      while (t[k] >= 0) k = (k + 1) & (kOpSlots - 1);
      t[k] = int16_t(i);
    }
    return t;
  }();
  if (name.empty()) return std::nullopt;
  for (size_t k = op_slot(name); slots[k] >= 0; k = (k + 1) & (kOpSlots - 1))
    if (kOpNames[size_t(slots[k])] == name) return OpKind(slots[k]);
  return std::nullopt;
}

int OpDef::min_operands() const {
  int n = 0;
  for (const OperandSpec& o : operands)
    if (!o.optional) ++n;
  return n;
}

int OpDef::max_operands() const {
  for (const OperandSpec& o : operands)
    if (o.variadic) return -1;
  return int(operands.size());
}

int OpDef::attr_index(std::string_view name) const {
  for (size_t i = 0; i < attrs.size(); ++i)
    if (attrs[i].name == name) return int(i);
  return -1;
}

std::string OpDef::operand_signature() const {
  std::string s;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) s += ", ";
    s += operands[i].name;
    if (operands[i].optional) s += '?';
    if (operands[i].variadic) s += "...";
  }
  return s;
}

void OpTable::add(OpDef def) {
  DT_CHECK(def.kind != OpKind::count) << "op without kind";
  OpDef& slot = defs_[size_t(def.kind)];
  DT_CHECK(slot.kind == OpKind::count) << op_name(def.kind) << " registered twice";
  DT_CHECK(def.infer && def.kernel) << op_name(def.kind) << " lacks inference or kernel";
  const bool has_offset = !def.attrs.empty() && def.attrs.back().name == "arena_offset";
  DT_CHECK(has_offset == def.writes_preallocated_out)
      << op_name(def.kind) << ": arena_offset must be the last attribute exactly of ops that write preallocated outputs";
  slot = std::move(def);
}

void OpTable::set_sharding_rules(const std::vector<RuleEntry>& rules) {
  for (const RuleEntry& e : rules) {
    OpDef& def = at(e.op);
    DT_CHECK(def.kind == e.op) << "sharding rule for " << op_name(e.op) << " before the op is registered";
    DT_CHECK(def.sharding_rule == nullptr) << op_name(e.op) << " has two sharding rules";
    def.sharding_rule = e.rule;
    def.expand = e.expand;
    def.row_mean = e.row_mean;
  }
}

namespace {
OpTable& table() {
  static OpTable* t = [] {
    auto* tab = new OpTable();
    register_linear_ops(*tab);
    register_elementwise_ops(*tab);
    register_norm_ops(*tab);
    register_shape_ops(*tab);
    register_attention_ops(*tab);
    register_reduce_ops(*tab);
    register_loss_ops(*tab);
    register_collective_ops(*tab);
    register_collective_variant_ops(*tab);
    register_bucketing_ops(*tab);
    register_grad_ops(*tab);
    register_optim_ops(*tab);
    register_index_ops(*tab);
    register_conv_ops(*tab);
    register_p2p_ops(*tab);
    for (size_t i = 0; i < kNumOps; ++i)
      DT_CHECK(tab->at(OpKind(i)).kind == OpKind(i)) << "op " << kOpNames[i] << " is not registered";
    return tab;
  }();
  return *t;
}
}  // namespace

const OpDef& op_def(OpKind op) {
  DT_CHECK(op != OpKind::count) << "op_def(count)";
  return table().defs_[size_t(op)];
}

RuleFn replace_sharding_rule_for_test(OpKind op, RuleFn rule) {
  return std::exchange(table().defs_[size_t(op)].sharding_rule, rule);
}

AttrSpec arena_offset_attr() { return {"arena_offset", AttrKind::i64, Attr(int64_t(-1))}; }
AttrSpec group_attr() { return {"group", AttrKind::group, std::nullopt}; }
AttrSpec reduce_op_attr() { return {"op", AttrKind::reduce_op, Attr(std::string("sum"))}; }

ProcessGroup& kernel_group(const KernelArgs& a) {
  DT_CHECK(a.comm) << op_name(a.node.op) << " run without a communication context";
  return a.comm->group(a.node.attr_str("group"));
}

int64_t arena_offset(const Node& node) {
  return op_def(node.op).writes_preallocated_out ? std::get<int64_t>(node.attrs.back()) : -1;
}

Tensor output_buffer(const KernelArgs& a, size_t k) {
  const TensorType& want = a.node.results[k]->type;
  const Tensor& pre = a.out[k];
  if (!pre.defined()) return Tensor::uninitialized(want.shape, want.dtype);
  DT_CHECK(pre.dtype() == want.dtype && pre.shape() == want.shape && pre.is_contiguous())
      << op_name(a.node.op) << ": preallocated output " << pre.str() << " does not match " << type_str(want);
  return pre;
}

namespace localize_util {
void shape_attr(const LocalizeContext& ctx, OpKind& op, std::vector<Attr>& attrs) {
  attrs[size_t(op_def(op).attr_index("shape"))] = ctx.local_results[0].shape;
}
}  // namespace localize_util

namespace infer_util {

void require_same_dtype(const Node& node) {
  for (size_t i = 1; i < node.operands.size(); ++i)
    if (node.operands[i]->type.dtype != node.operands[0]->type.dtype)
      DT_THROW(DTypeError) << op_name(node.op) << " operands have different dtypes "
                           << dtype_name(node.operands[0]->type.dtype) << " and "
                           << dtype_name(node.operands[i]->type.dtype);
}

void require_floating(const Node& node, int i) {
  DType t = node.operands[size_t(i)]->type.dtype;
  if (!is_floating(t))
    DT_THROW(DTypeError) << op_name(node.op) << " expects a floating operand "
                         << op_def(node.op).operands[std::min(size_t(i), op_def(node.op).operands.size() - 1)].name
                         << ", got " << dtype_name(t);
}

void require_rank(const Node& node, int i, int64_t rank) {
  const TensorType& t = node.operands[size_t(i)]->type;
  if (t.rank() != rank)
    DT_THROW(ShapeError) << op_name(node.op) << " expects operand "
                         << op_def(node.op).operands[std::min(size_t(i), op_def(node.op).operands.size() - 1)].name
                         << " of rank " << rank << ", got " << type_str(t);
}

int group_size(const Node& node, const Graph& graph) {
  const std::string& g = node.attr_str("group");
  const int n = graph.group_size(g);
  if (n < 0) DT_THROW(ValueError) << op_name(node.op) << " names undeclared group " << g;
  if (n == 0) DT_THROW(ValueError) << "group " << g << " is empty";
  return n;
}

void check_arena_offset(const Node& node) {
  const int64_t offset = arena_offset(node);
  if (offset < -1 || (offset >= 0 && offset % 64 != 0))
    DT_THROW(ValueError) << op_name(node.op) << " arena_offset must be -1 or a non-negative multiple of 64, got "
                         << offset;
}

}  // namespace infer_util

namespace comm_bytes {
namespace {
int64_t operand_bytes(const Node& node, size_t count) {
  int64_t b = 0;
  for (size_t i = 0; i < count && i < node.operands.size(); ++i) b += int64_t(node.operands[i]->type.nbytes());
  return b;
}
int64_t all_operand_bytes(const Node& node) { return operand_bytes(node, node.operands.size()); }
}  // namespace

// The out variant's second operand is the destination, not data sent.
int64_t gather(const Node& node, int64_t n, int64_t) {
  const size_t data = node.op == OpKind::all_gather_into_tensor_out ? 1 : node.operands.size();
  return (n - 1) * operand_bytes(node, data);
}
int64_t gather_inplace(const Node& node, int64_t n, int64_t) { return n > 0 ? (n - 1) * all_operand_bytes(node) / n : 0; }
int64_t reduce(const Node& node, int64_t n, int64_t) { return n > 0 ? 2 * (n - 1) * all_operand_bytes(node) / n : 0; }
int64_t reduce_scatter(const Node& node, int64_t n, int64_t) {
  return n > 0 ? (n - 1) * all_operand_bytes(node) / n : 0;
}
int64_t broadcast(const Node& node, int64_t, int64_t index) {
  return index == node.attr_int("src") ? all_operand_bytes(node) : 0;
}
int64_t all_to_all(const Node& node, int64_t n, int64_t index) {
  const int64_t in = all_operand_bytes(node);
  const auto& splits = node.attr_ints("in_split_sizes");
  if (splits.empty() || index < 0 || index >= int64_t(splits.size())) return n > 0 ? (n - 1) * in / n : 0;
  int64_t rows = 0;
  for (int64_t v : splits) rows += v;
  const int64_t shape0 = node.operands[0]->type.shape.empty() ? 0 : node.operands[0]->type.shape[0];
  const int64_t row_bytes = shape0 > 0 ? in / shape0 : 0;
  return (rows - splits[size_t(index)]) * row_bytes;
}
int64_t point_to_point(const Node& node, int64_t, int64_t) { return all_operand_bytes(node); }
}  // namespace comm_bytes

}  // namespace dt::ir

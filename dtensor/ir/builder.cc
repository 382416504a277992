#include "dtensor/ir/builder.h"

#include "dtensor/core/error.h"

namespace dt::ir {

std::vector<Attr> complete_attrs(OpKind op, const NamedAttrs& attrs) {
  const OpDef& def = op_def(op);
  std::vector<Attr> out(def.attrs.size());
  std::vector<bool> set(def.attrs.size(), false);
  for (const auto& [name, value] : attrs) {
    int i = def.attr_index(name);
    if (i < 0) DT_THROW(ValueError) << op_name(op) << " has no attribute " << name;
    const AttrSpec& spec = def.attrs[size_t(i)];
    Attr v = value;
    // An int where a float is expected is the same number (eps = 0 is eps = 0.0).
    if (spec.kind == AttrKind::f64 && v.index() == 0) v = double(std::get<int64_t>(v));
    if (v.index() != attr_index(spec.kind))
      DT_THROW(ValueError) << op_name(op) << " attribute " << name << " must be of kind " << attr_kind_name(spec.kind);
    out[size_t(i)] = std::move(v);
    set[size_t(i)] = true;
  }
  for (size_t i = 0; i < def.attrs.size(); ++i) {
    if (set[i]) continue;
    if (!def.attrs[i].default_value)
      DT_THROW(ValueError) << op_name(op) << " needs attribute " << def.attrs[i].name;
    out[i] = *def.attrs[i].default_value;
  }
  return out;
}

Value* Builder::input(const std::string& name, DType dtype, const Shape& shape) {
  return g_.add_input(name, {dtype, shape});
}
Value* Builder::param(const std::string& name, DType dtype, const Shape& shape) {
  return g_.add_param(name, {dtype, shape});
}
void Builder::group(const std::string& name, std::vector<int> ranks) { g_.add_group(name, std::move(ranks)); }
void Builder::outputs(std::vector<Value*> values) { g_.set_outputs(std::move(values)); }
Builder& Builder::named(std::string name) {
  next_name_ = std::move(name);
  return *this;
}

std::vector<Value*> Builder::record(OpKind op, std::vector<Value*> operands, const NamedAttrs& attrs) {
  const OpDef& def = op_def(op);
  const int n = int(operands.size());
  if (n < def.min_operands() || (def.max_operands() >= 0 && n > def.max_operands()))
    DT_THROW(ValueError) << op_name(op) << " expects operands (" << def.operand_signature() << "), got " << n;
  for (Value* v : operands) DT_CHECK(v) << op_name(op) << " given a null operand";
  // Infer on a temporary node so that a failure leaves the graph unchanged.
  Node probe;
  probe.op = op;
  probe.operands = std::move(operands);
  probe.attrs = complete_attrs(op, attrs);
  types_.clear();
  def.infer(probe, g_, types_);
  std::vector<std::string> names;
  if (!next_name_.empty()) names.push_back(std::exchange(next_name_, {}));
  Node* node = g_.append(op, std::move(probe.operands), std::move(probe.attrs), types_, std::move(names));
  return node->results;
}

Value* Builder::one(OpKind op, std::vector<Value*> operands, const NamedAttrs& attrs) {
  return record(op, std::move(operands), attrs)[0];
}

Value* Builder::linear(Value* x, Value* weight, Value* bias) {
  return bias ? one(OpKind::linear, {x, weight, bias}) : one(OpKind::linear, {x, weight});
}
Value* Builder::matmul(Value* a, Value* b) { return one(OpKind::matmul, {a, b}); }
Value* Builder::bmm(Value* a, Value* b) { return one(OpKind::bmm, {a, b}); }
Value* Builder::add(Value* a, Value* b) { return one(OpKind::add, {a, b}); }
Value* Builder::sub(Value* a, Value* b) { return one(OpKind::sub, {a, b}); }
Value* Builder::mul(Value* a, Value* b) { return one(OpKind::mul, {a, b}); }
Value* Builder::div(Value* a, Value* b) { return one(OpKind::div, {a, b}); }
Value* Builder::relu(Value* x) { return one(OpKind::relu, {x}); }
Value* Builder::gelu(Value* x, const std::string& approximate) {
  return one(OpKind::gelu, {x}, {{"approximate", approximate}});
}
Value* Builder::silu(Value* x) { return one(OpKind::silu, {x}); }
Value* Builder::cast(Value* x, DType dtype) { return one(OpKind::cast, {x}, {{"dtype", dtype}}); }

Value* Builder::layer_norm(Value* x, const Shape& normalized_shape, Value* weight, Value* bias, double eps) {
  DT_CHECK(weight || !bias) << "layer_norm with a bias needs a weight";
  std::vector<Value*> ops{x};
  if (weight) ops.push_back(weight);
  if (bias) ops.push_back(bias);
  return one(OpKind::layer_norm, std::move(ops), {{"normalized_shape", normalized_shape}, {"eps", eps}});
}
Value* Builder::rms_norm(Value* x, const Shape& normalized_shape, Value* weight, double eps) {
  std::vector<Value*> ops{x};
  if (weight) ops.push_back(weight);
  return one(OpKind::rms_norm, std::move(ops), {{"normalized_shape", normalized_shape}, {"eps", eps}});
}
Value* Builder::softmax(Value* x, int64_t dim) { return one(OpKind::softmax, {x}, {{"dim", dim}}); }
Value* Builder::embedding(Value* indices, Value* weight) { return one(OpKind::embedding, {indices, weight}); }
Value* Builder::view(Value* x, const Shape& shape) { return one(OpKind::view, {x}, {{"shape", shape}}); }
Value* Builder::reshape(Value* x, const Shape& shape) { return one(OpKind::reshape, {x}, {{"shape", shape}}); }
Value* Builder::transpose(Value* x, int64_t dim0, int64_t dim1) {
  return one(OpKind::transpose, {x}, {{"dim0", dim0}, {"dim1", dim1}});
}
Value* Builder::permute(Value* x, const std::vector<int64_t>& dims) {
  return one(OpKind::permute, {x}, {{"dims", dims}});
}
Value* Builder::slice(Value* x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return one(OpKind::slice, {x}, {{"dim", dim}, {"start", start}, {"end", end}, {"step", step}});
}
std::vector<Value*> Builder::split(Value* x, int64_t split_size, int64_t dim) {
  return record(OpKind::split, {x}, {{"split_size", split_size}, {"dim", dim}});
}
std::vector<Value*> Builder::split_sizes(Value* x, const std::vector<int64_t>& sizes, int64_t dim) {
  return record(OpKind::split, {x}, {{"sizes", sizes}, {"dim", dim}});
}
Value* Builder::cat(const std::vector<Value*>& xs, int64_t dim) { return one(OpKind::cat, xs, {{"dim", dim}}); }
Value* Builder::arange(int64_t end, int64_t start, int64_t step, DType dtype) {
  return one(OpKind::arange, {}, {{"start", start}, {"end", end}, {"step", step}, {"dtype", dtype}});
}
Value* Builder::scaled_dot_product_attention(Value* q, Value* k, Value* v, bool causal, Value* mask, double scale) {
  std::vector<Value*> operands = {q, k, v};
  if (mask) operands.push_back(mask);
  return one(OpKind::scaled_dot_product_attention, operands, {{"causal", causal}, {"scale", scale}});
}
Value* Builder::sum(Value* x, const std::vector<int64_t>& dims, bool keepdim) {
  return one(OpKind::sum, {x}, {{"dims", dims}, {"keepdim", keepdim}});
}
Value* Builder::mean(Value* x, const std::vector<int64_t>& dims, bool keepdim) {
  return one(OpKind::mean, {x}, {{"dims", dims}, {"keepdim", keepdim}});
}
Value* Builder::mse_loss(Value* input, Value* target) { return one(OpKind::mse_loss, {input, target}); }
Value* Builder::cross_entropy(Value* logits, Value* target) { return one(OpKind::cross_entropy, {logits, target}); }
Value* Builder::all_gather_into_tensor(Value* x, const std::string& group) {
  return one(OpKind::all_gather_into_tensor, {x}, {{"group", group}});
}
Value* Builder::reduce_scatter_tensor(Value* x, const std::string& group, const std::string& op) {
  return one(OpKind::reduce_scatter_tensor, {x}, {{"group", group}, {"op", op}});
}
Value* Builder::all_reduce(Value* x, const std::string& group, const std::string& op) {
  return one(OpKind::all_reduce, {x}, {{"group", group}, {"op", op}});
}
Value* Builder::all_to_all_single(Value* x, const std::string& group, const std::vector<int64_t>& out_split_sizes,
                                  const std::vector<int64_t>& in_split_sizes) {
  return one(OpKind::all_to_all_single, {x},
             {{"group", group}, {"out_split_sizes", out_split_sizes}, {"in_split_sizes", in_split_sizes}});
}
Value* Builder::broadcast(Value* x, const std::string& group, int64_t src) {
  return one(OpKind::broadcast, {x}, {{"group", group}, {"src", src}});
}
Value* Builder::wait_tensor(Value* x) { return one(OpKind::wait_tensor, {x}); }
Value* Builder::send(Value* x, const std::string& group, int64_t peer, int64_t tag) {
  return one(OpKind::send, {x}, {{"group", group}, {"peer", peer}, {"tag", tag}});
}
Value* Builder::recv(const std::string& group, int64_t peer, DType dtype, const Shape& shape, int64_t tag) {
  return one(OpKind::recv, {}, {{"group", group}, {"peer", peer}, {"tag", tag},
                                {"shape", std::vector<int64_t>(shape.begin(), shape.end())}, {"dtype", dtype}});
}

}  // namespace dt::ir

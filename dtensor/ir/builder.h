// The graph-building API: one verb-named function per op that records a node (its result types
// come from the op's inference) and returns its result. Nothing is computed.
//
//   Graph g("mlp");
//   Builder b(g);
//   Value* x = b.input("input", DType::f32, {8, 64});
//   Value* w = b.param("fc1.weight", DType::f32, {256, 64});
//   Value* h = b.relu(b.linear(x, w));
//   b.outputs({h});
//
// Errors (bad shapes, missing attributes) throw the op's dt::Error at the call that records it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {

using NamedAttrs = std::vector<std::pair<std::string_view, Attr>>;

class Builder {
 public:
  explicit Builder(Graph& graph) : g_(graph) {}
  Graph& graph() { return g_; }

  Value* input(const std::string& name, DType dtype, const Shape& shape);
  Value* param(const std::string& name, DType dtype, const Shape& shape);
  void group(const std::string& name, std::vector<int> ranks);
  void outputs(std::vector<Value*> values);
  // Names the next recorded result (instead of a fresh number).
  Builder& named(std::string name);

  // Records any op: checks arity, fills attribute defaults, infers result types.
  std::vector<Value*> record(OpKind op, std::vector<Value*> operands, const NamedAttrs& attrs = {});

  Value* linear(Value* x, Value* weight, Value* bias = nullptr);
  Value* matmul(Value* a, Value* b);
  Value* bmm(Value* a, Value* b);
  Value* add(Value* a, Value* b);
  Value* sub(Value* a, Value* b);
  Value* mul(Value* a, Value* b);
  Value* div(Value* a, Value* b);
  Value* relu(Value* x);
  Value* gelu(Value* x, const std::string& approximate = "none");
  Value* silu(Value* x);
  Value* cast(Value* x, DType dtype);
  Value* layer_norm(Value* x, const Shape& normalized_shape, Value* weight = nullptr, Value* bias = nullptr,
                    double eps = 1e-5);
  Value* rms_norm(Value* x, const Shape& normalized_shape, Value* weight = nullptr, double eps = 1e-6);
  Value* softmax(Value* x, int64_t dim);
  Value* embedding(Value* indices, Value* weight);
  Value* view(Value* x, const Shape& shape);
  Value* reshape(Value* x, const Shape& shape);
  Value* transpose(Value* x, int64_t dim0, int64_t dim1);
  Value* permute(Value* x, const std::vector<int64_t>& dims);
  Value* slice(Value* x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
  std::vector<Value*> split(Value* x, int64_t split_size, int64_t dim = 0);
  std::vector<Value*> split_sizes(Value* x, const std::vector<int64_t>& sizes, int64_t dim = 0);
  Value* cat(const std::vector<Value*>& xs, int64_t dim = 0);
  Value* arange(int64_t end, int64_t start = 0, int64_t step = 1, DType dtype = DType::i64);
  // mask: null for none; scale 0: 1/sqrt(D) (ir/ops/attention.cc).
  Value* scaled_dot_product_attention(Value* q, Value* k, Value* v, bool causal = false, Value* mask = nullptr,
                                      double scale = 0);
  Value* sum(Value* x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
  Value* mean(Value* x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
  Value* mse_loss(Value* input, Value* target);
  Value* cross_entropy(Value* logits, Value* target);
  Value* all_gather_into_tensor(Value* x, const std::string& group);
  Value* reduce_scatter_tensor(Value* x, const std::string& group, const std::string& op = "sum");
  Value* all_reduce(Value* x, const std::string& group, const std::string& op = "sum");
  Value* all_to_all_single(Value* x, const std::string& group, const std::vector<int64_t>& out_split_sizes = {},
                           const std::vector<int64_t>& in_split_sizes = {});
  Value* broadcast(Value* x, const std::string& group, int64_t src = 0);
  Value* wait_tensor(Value* x);
  // Point-to-point (ops/p2p.cc): `peer` is the other side's index in `group`.
  Value* send(Value* x, const std::string& group, int64_t peer, int64_t tag = 0);
  Value* recv(const std::string& group, int64_t peer, DType dtype, const Shape& shape, int64_t tag = 0);

 private:
  Value* one(OpKind op, std::vector<Value*> operands, const NamedAttrs& attrs = {});

  Graph& g_;
  std::string next_name_;
  std::vector<TensorType> types_;  // scratch for inference
};

// Returns the complete attribute list of `op` (schema order, defaults filled) from named values;
// throws ValueError for an unknown name, a value of the wrong kind or a missing required one.
std::vector<Attr> complete_attrs(OpKind op, const NamedAttrs& attrs);

}  // namespace dt::ir

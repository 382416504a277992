// Bucketing of all_gather_into_tensor, reduce_scatter_tensor and all_reduce (Inductor's
// bucketing.py, with its gaps fixed: the cap is looked up per bucket index for every kind, the
// group of each bucket is its own, a dependent collective starts a new bucket instead of being
// left out, and all_reduce is bucketed too).
//
// Step 1 (assign): collectives whose only reader is their wait_tensor are grouped by key,
// (group, dtype) for all_gather and (group, reduce op, dtype) for the others, in graph order.
// Per key, a bucket fills until adding the next collective would pass the cap of the bucket's
// index (caps[min(index, caps.size() - 1)] MiB; all_gather counts output bytes, the others input
// bytes), or until the next collective is a transitive reader of one already in the bucket
// (merging them would make a cycle). Buckets of one collective are left alone.
//
// Step 2 (rewrite), per bucket of k collectives on a group of n ranks:
//   all_gather:     bucket_copy_in(x_1..x_k) -> all_gather -> wait -> k bucket_split_out (copies)
//   reduce_scatter: chunk_cat(x_1..x_k) {chunks = n} -> reduce_scatter -> wait -> k flat_view
//   all_reduce:     bucket_copy_in(x_1..x_k) -> all_reduce -> wait -> k flat_view
// A cast whose only reader is a bucketed all_gather is folded into the copy-in (one batched
// cast-and-copy for the bucket). The merged collective takes the position key of the bucket's
// first member and the merged wait the earliest member wait's; GraphEdit's stable topological
// order then issues it right after the last input is ready. Data lands by group-local index
// because the ProcessGroup places rank i's block at i: groups like [0,2,4,6] need nothing more.
#include <fmt/format.h>

#include <map>
#include <unordered_map>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/graph_edit.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {
namespace {

enum class Kind { all_gather, reduce_scatter, all_reduce };

ir::OpKind op_of(Kind k) {
  switch (k) {
    case Kind::all_gather: return ir::OpKind::all_gather_into_tensor;
    case Kind::reduce_scatter: return ir::OpKind::reduce_scatter_tensor;
    case Kind::all_reduce: return ir::OpKind::all_reduce;
  }
  return ir::OpKind::count;
}

struct Member {
  const ir::Node* coll;
  const ir::Node* wait;
};

class BucketPass : public Pass {
 public:
  BucketPass(Kind kind, const PassOptions& options) : kind_(kind), caps_(options.bucket_cap_mb) {
    if (caps_.empty()) caps_ = {4.0};
  }
  std::string_view name() const override {
    switch (kind_) {
      case Kind::all_gather: return "bucket-all-gather";
      case Kind::reduce_scatter: return "bucket-reduce-scatter";
      case Kind::all_reduce: return "bucket-all-reduce";
    }
    return "";
  }
  std::string_view summary() const override { return "merge collectives of one group and dtype into capped buckets"; }

  bool run(ir::Graph& graph) override {
    UseLists uses(graph);
    std::vector<std::vector<Member>> buckets = assign(graph, uses);
    if (buckets.empty()) return false;
    GraphEdit edit(graph);
    int serial = 0;
    for (const auto& b : buckets) rewrite(edit, uses, b, serial++);
    return edit.commit();
  }

 private:
  size_t cap_bytes(size_t index) const {
    double mb = caps_[std::min(index, caps_.size() - 1)];
    return size_t(mb * 1024.0 * 1024.0);
  }

  size_t bytes_of(const ir::Node* coll) const {
    return kind_ == Kind::all_gather ? coll->result()->type.nbytes() : coll->operands[0]->type.nbytes();
  }

  std::vector<std::vector<Member>> assign(const ir::Graph& graph, const UseLists& uses) const {
    const ir::OpKind op = op_of(kind_);
    // Candidates per key, in graph order; keys in order of first appearance.
    std::map<std::string, size_t> key_index;
    std::vector<std::vector<Member>> per_key;
    std::unordered_map<const ir::Node*, size_t> node_index;
    node_index.reserve(graph.nodes().size() * 2);
    for (size_t i = 0; i < graph.nodes().size(); ++i) node_index.emplace(graph.nodes()[i], i);
    for (const auto& n : graph.nodes()) {
      if (n->op != op) continue;
      const auto& readers = uses.users(n->result());
      if (readers.size() != 1 || readers[0]->op != ir::OpKind::wait_tensor || uses.is_output(n->result())) continue;
      std::string key = n->attr_str("group");
      key += '|';
      if (kind_ != Kind::all_gather) key += n->attr_str("op");
      key += '|';
      key += dtype_name(n->result()->type.dtype);
      auto [it, inserted] = key_index.emplace(key, per_key.size());
      if (inserted) per_key.emplace_back();
      per_key[it->second].push_back({n, readers[0]});
    }

    std::vector<std::vector<Member>> buckets;
    // mark[i] == stamp: node i transitively reads a member of the open bucket.
    std::vector<int> mark(graph.nodes().size(), -1);
    int stamp = 0;
    std::vector<const ir::Node*> stack;
    for (const auto& members : per_key) {
      std::vector<Member> cur;
      size_t cur_bytes = 0, index = 0;
      auto close = [&] {
        if (cur.size() > 1) buckets.push_back(cur);
        if (!cur.empty()) ++index;
        cur.clear();
        cur_bytes = 0;
        ++stamp;
      };
      ++stamp;
      for (const Member& m : members) {
        size_t bytes = bytes_of(m.coll);
        bool depends = mark[node_index.at(m.coll)] == stamp;
        if (!cur.empty() && (depends || cur_bytes + bytes > cap_bytes(index))) close();
        cur.push_back(m);
        cur_bytes += bytes;
        // Mark every transitive reader of the new member.
        stack.assign(1, m.coll);
        while (!stack.empty()) {
          const ir::Node* x = stack.back();
          stack.pop_back();
          for (const ir::Value* r : x->results)
            for (const ir::Node* u : uses.users(r)) {
              int& mk = mark[node_index.at(u)];
              if (mk == stamp) continue;
              mk = stamp;
              stack.push_back(u);
            }
        }
      }
      close();
    }
    return buckets;
  }

  // Returns the cast feeding an all_gather when the all_gather is its only reader.
  static const ir::Node* foldable_cast(const ir::Node* coll, const UseLists& uses) {
    const ir::Value* x = coll->operands[0];
    if (!x->producer || x->producer->op != ir::OpKind::cast) return nullptr;
    if (uses.users(x).size() != 1 || uses.is_output(x)) return nullptr;
    return x->producer;
  }

  void rewrite(GraphEdit& edit, const UseLists& uses, const std::vector<Member>& bucket, int serial) const {
    ir::Graph& g = edit.graph();
    const ir::Node* first = bucket.front().coll;
    const std::string& group = first->attr_str("group");
    const int n = g.group_size(group);
    const DType dtype = first->result()->type.dtype;
    double coll_key = edit.key(first), wait_key = edit.key(bucket.front().wait);
    for (const Member& m : bucket) {
      coll_key = std::min(coll_key, edit.key(m.coll));
      wait_key = std::min(wait_key, edit.key(m.wait));
    }
    std::vector<ir::Value*> inputs;
    for (const Member& m : bucket) {
      ir::Value* x = m.coll->operands[0];
      if (kind_ == Kind::all_gather) {
        if (const ir::Node* cast = foldable_cast(m.coll, uses)) {
          edit.drop(cast);
          x = cast->operands[0];
        }
      }
      inputs.push_back(edit.resolve(x));
    }
    const std::string tag = kind_ == Kind::all_gather ? "ag" : kind_ == Kind::reduce_scatter ? "rs" : "ar";
    const std::string base = fmt::format("{}_bucket{}", tag, serial);
    ir::Value* flat = nullptr;
    ir::Value* coll = nullptr;
    if (kind_ == Kind::reduce_scatter) {
      flat = edit.add(ir::OpKind::chunk_cat, inputs, {{"chunks", int64_t(n)}}, coll_key, base + "_in");
      coll = edit.add(ir::OpKind::reduce_scatter_tensor, {flat}, {{"group", group}, {"op", first->attr_str("op")}},
                      coll_key, base);
    } else {
      flat = edit.add(ir::OpKind::bucket_copy_in, inputs, {{"dtype", dtype}}, coll_key, base + "_in");
      if (kind_ == Kind::all_gather)
        coll = edit.add(ir::OpKind::all_gather_into_tensor, {flat}, {{"group", group}}, coll_key, base);
      else
        coll = edit.add(ir::OpKind::all_reduce, {flat}, {{"group", group}, {"op", first->attr_str("op")}}, coll_key,
                        base);
    }
    ir::Value* waited = edit.add(ir::OpKind::wait_tensor, {coll}, {}, wait_key, base + "_w");
    int64_t offset = 0;
    for (const Member& m : bucket) {
      const ir::TensorType& out = m.wait->result()->type;
      const ir::TensorType& in = m.coll->operands[0]->type;
      ir::Value* piece = nullptr;
      if (kind_ == Kind::all_gather) {
        piece = edit.add(ir::OpKind::bucket_split_out, {waited},
                         {{"chunks", int64_t(n)}, {"offset", offset}, {"shape", out.shape}}, edit.key(m.wait),
                         piece_name(base, m));
        offset += in.numel();
      } else if (kind_ == Kind::reduce_scatter) {
        piece = edit.add(ir::OpKind::flat_view, {waited}, {{"offset", offset}, {"shape", out.shape}}, edit.key(m.wait),
                         piece_name(base, m));
        int64_t d0 = in.shape[0], inner = d0 ? in.numel() / d0 : 0;
        offset += chunk_size(d0, n) * inner;
      } else {
        piece = edit.add(ir::OpKind::flat_view, {waited}, {{"offset", offset}, {"shape", out.shape}}, edit.key(m.wait),
                         piece_name(base, m));
        offset += in.numel();
      }
      edit.drop(m.coll);
      edit.drop(m.wait);
      edit.replace(m.wait->result(), piece);
    }
  }

  // Names a bucket's output piece (it takes the replaced wait's name at commit; an explicit
  // name avoids scanning for a fresh numeric one).
  static std::string piece_name(const std::string& base, const Member& m) {
    return base + "_" + m.wait->result()->name;
  }

  Kind kind_;
  std::vector<double> caps_;
};

}  // namespace

PassPtr make_bucket_all_gather_pass(const PassOptions& o) { return std::make_unique<BucketPass>(Kind::all_gather, o); }
PassPtr make_bucket_reduce_scatter_pass(const PassOptions& o) {
  return std::make_unique<BucketPass>(Kind::reduce_scatter, o);
}
PassPtr make_bucket_all_reduce_pass(const PassOptions& o) { return std::make_unique<BucketPass>(Kind::all_reduce, o); }

}  // namespace dt::passes

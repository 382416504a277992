// Bucketing of all_gather_into_tensor, reduce_scatter_tensor and all_reduce (Inductor's
// bucketing.py, with its gaps fixed: the cap is looked up per bucket index for every kind, the
// group of each bucket is its own, a dependent collective starts a new bucket instead of being
// left out, and all_reduce is bucketed too).
//
// Step 1 (assign): collectives whose only reader is their wait_tensor are grouped by key,
// (group, dtype) for all_gather and (group, reduce op, dtype) for the others, in graph order.
// Per key, a bucket fills until adding the next collective would pass the cap of the bucket's
// index (caps[min(index, caps.size() - 1)] MiB; all_gather counts output bytes, the others input
// bytes), would pass the bucket byte limit (all_gather only, see assign()), or until the next
// collective is a transitive reader of one already in the bucket (merging them would make a
// cycle). Buckets of one collective are left alone. Membership only depends on the group's own
// collectives, so every member of a group forms the same buckets although per-rank programs
// differ.
//
// Step 2 (place, all_gather only): FSDP-style prefetch within a memory budget. Bucket j is
// issued about one bucket ahead of its first use (at the first use of bucket j-1) or later if the
// live-bytes estimate would pass PassOptions::memory_budget_bytes (see place()). Without this,
// every parameter bucket of a program is issued at its start (parameters are ready there) and all
// gathered parameters are live at once: on the example gpt with fsdp x tp on 2x2, 2.7 MB of peak
// memory instead of 0.43 MB without passes.
//
// Step 3 (rewrite), per bucket of k collectives on a group of n ranks:
//   all_gather:     bucket_copy_in(x_1..x_k) -> all_gather -> wait -> k bucket_split_out (copies)
//   reduce_scatter: chunk_cat(x_1..x_k) {chunks = n} -> reduce_scatter -> wait -> k flat_view
//   all_reduce:     bucket_copy_in(x_1..x_k) -> all_reduce -> wait -> k flat_view
// A cast whose only reader is a bucketed all_gather is folded into the copy-in (one batched
// cast-and-copy for the bucket). Each member's wait node becomes its piece in place (its value,
// name and readers stay). The merged collective takes the placed key (all_gather) or the first
// member's (the others), the merged wait the earliest member wait's; GraphEdit's stable
// topological order issues it once its inputs are ready, pulling their producers up if needed.
// Data lands by group-local index because the ProcessGroup places rank i's block at i: groups
// like [0,2,4,6] need nothing more.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/graph_edit.h"
#include "dtensor/passes/memory_estimate.h"
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

// Gathers below this size are latency-bound (at ~10 GB/s, 64 KiB moves in ~6 us, the order of a
// collective's fixed cost): by default a bucket may always grow to this size.
constexpr size_t kLatencyBoundBytes = 64 * 1024;

struct Member {
  const ir::Node* coll;
  const ir::Node* wait;
  size_t pos = 0;        // position of the collective
  size_t ready = 0;      // first position after its input (or the folded cast's input) is produced
  size_t first_use = 0;  // first reader of its wait (the graph end when only returned or unread)
  size_t last_use = 0;   // last reader of its buffer (through the wait)
  size_t bytes = 0;      // bytes counted against the cap
};

struct Bucket {
  std::vector<Member> members;
  double issue_key = 0;  // position key of the merged collective (and its copy-in)
};

class BucketPass : public Pass {
 public:
  BucketPass(Kind kind, const PassOptions& options)
      : kind_(kind), caps_(options.bucket_cap_mb), budget_(options.memory_budget_bytes) {
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
    GraphEdit edit(graph);
    std::vector<Bucket> buckets = assign(graph, uses, edit);
    if (buckets.empty()) return false;
    int serial = 0;
    for (const Bucket& b : buckets) rewrite(edit, uses, b, serial++);
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

  // Collectives whose only reader is their wait, per key, with their positions; keys in order
  // of first appearance, members in graph order.
  std::vector<std::vector<Member>> candidates(const ir::Graph& graph, const UseLists& uses,
                                              const GraphEdit& edit) const {
    const ir::OpKind op = op_of(kind_);
    const size_t n = graph.nodes().size();
    std::map<std::string, size_t> key_index;
    std::vector<std::vector<Member>> per_key;
    std::string key;
    std::vector<size_t> ready_of(n, SIZE_MAX);  // by collective position, for every candidate seen so far
    for (size_t i = 0; i < n; ++i) {
      const ir::Node* c = graph.nodes()[i];
      if (c->op != op) continue;
      const auto& readers = uses.users(c->result());
      if (readers.size() != 1 || readers[0]->op != ir::OpKind::wait_tensor || uses.is_output(c->result())) continue;
      key = c->attr_str("group");
      key += '|';
      if (kind_ != Kind::all_gather) key += c->attr_str("op");
      key += '|';
      key += dtype_name(c->result()->type.dtype);
      auto it = key_index.find(key);  // find first: emplace would allocate a node per candidate
      if (it == key_index.end()) {
        it = key_index.emplace(key, per_key.size()).first;
        per_key.emplace_back();
      }
      Member m{c, readers[0]};
      m.pos = i;
      const ir::Value* x = c->operands[0];
      if (kind_ == Kind::all_gather)
        if (const ir::Node* cast = foldable_cast(c, uses)) x = cast->operands[0];
      m.ready = x->producer ? edit.index(x->producer) + 1 : 0;
      // Reading the wait of an earlier gather (tp then dp on a 2-d mesh): that wait moves up with
      // its own bucket, so this member is ready when that gather's input is.
      if (x->producer && x->producer->op == ir::OpKind::wait_tensor) {
        const ir::Node* gather = x->producer->operands[0]->producer;
        if (gather && gather->op == op && ready_of[edit.index(gather)] != SIZE_MAX) m.ready = ready_of[edit.index(gather)];
      }
      ready_of[i] = m.ready;
      const ir::Value* w = m.wait->result();
      m.first_use = uses.is_output(w) ? n - 1 : n;
      for (const ir::Node* u : uses.users(w)) m.first_use = std::min(m.first_use, edit.index(u));
      if (m.first_use == n) m.first_use = edit.index(m.wait);
      m.last_use = last_use(c->result(), uses, [&](const ir::Node* u) { return edit.index(u); }, n, i);
      m.bytes = bytes_of(c);
      per_key[it->second].push_back(m);
    }
    return per_key;
  }

  // Fills buckets per key, in graph order: a bucket closes when the next member would pass the
  // cap of the bucket's index, would pass the bucket byte limit, or reads a member (transitively).
  //
  // Every member of a process group must form the same buckets, yet per-rank programs differ
  // (a rowwise bias is added on one tp rank only), so membership uses only what all members of
  // the group see alike: the group's collectives in order and their sizes. The byte limit is what
  // makes all_gather memory-aware: by default the larger of the key's largest single gather and
  // an eighth of all its gathered bytes (about a layer's parameters rather than the whole model,
  // and at least 8 buckets to prefetch one by one when the model has many small parameters) and
  // kLatencyBoundBytes (small gathers cost latency, not memory: always merge those), or a
  // quarter of memory_budget_bytes when one is set (two buckets in flight, each counted twice:
  // see place()). reduce_scatter and all_reduce have
  // no byte limit beyond the cap.
  std::vector<Bucket> assign(const ir::Graph& graph, const UseLists& uses, const GraphEdit& edit) const {
    std::vector<std::vector<Member>> per_key = candidates(graph, uses, edit);
    if (per_key.empty()) return {};
    const size_t n = graph.nodes().size();
    const bool memory_aware = kind_ == Kind::all_gather;
    std::vector<std::vector<Bucket>> per_key_buckets(per_key.size());
    // mark[i] == stamp: node i must run after the open bucket's collective: it reads a member's
    // result (transitively), or it is a collective issued after a marked one on its group (each
    // group's collectives keep their order: GraphEdit chains them), or reads such a collective.
    // A member is dependent when one of its operands is produced by a marked node: merging it
    // would issue the bucket both before and after that node (a cycle). Being marked only through
    // the group order is no dependence for a member itself (all members of a group move alike).
    // Marks are computed in one forward sweep per key (readers come after what they read): a
    // node's mark is known once every node before it is swept, and a new bucket's members all
    // come after the node it starts at, so the sweep never goes back (linear in the graph per
    // key, where marking each member's readers again per bucket was quadratic).
    std::vector<int> mark(n, -1), member(n, -1);
    std::vector<size_t> prev_on_group(n, SIZE_MAX);
    {
      std::map<std::string, size_t> last;
      for (size_t i = 0; i < n; ++i) {
        const ir::Node* c = graph.nodes()[i];
        if (!ir::op_def(c->op).is_collective()) continue;
        auto [it, fresh] = last.try_emplace(c->attr_str("group"), i);
        if (!fresh) prev_on_group[i] = it->second;
        it->second = i;
      }
    }
    int stamp = 0;
    auto after_bucket = [&](size_t p) { return mark[p] == stamp || member[p] == stamp; };
    for (size_t k = 0; k < per_key.size(); ++k) {
      const std::vector<Member>& members = per_key[k];
      size_t limit = SIZE_MAX;
      if (memory_aware) {
        size_t largest = 0, total = 0;
        for (const Member& m : members) {
          largest = std::max(largest, m.bytes);
          total += m.bytes;
        }
        limit = budget_ ? budget_ / 4 : std::max({largest, total / 8, kLatencyBoundBytes});
      }
      std::vector<Member> cur;
      size_t cur_bytes = 0, index = 0, swept = 0;
      auto close = [&] {
        if (!cur.empty()) per_key_buckets[k].push_back({cur, double(cur.front().pos)});
        if (!cur.empty()) ++index;
        cur.clear();
        cur_bytes = 0;
        ++stamp;
      };
      ++stamp;
      for (const Member& m : members) {
        // Marks of every node before the member, for the open bucket.
        for (; swept < m.pos; ++swept) {
          const ir::Node* x = graph.nodes()[swept];
          bool marked = prev_on_group[swept] != SIZE_MAX && after_bucket(prev_on_group[swept]);
          for (size_t j = 0; !marked && j < x->operands.size(); ++j)
            marked = x->operands[j]->producer && after_bucket(edit.index(x->operands[j]->producer));
          if (marked) mark[swept] = stamp;
        }
        bool depends = false;
        for (const ir::Value* x : m.coll->operands)
          depends = depends || (x->producer && mark[edit.index(x->producer)] == stamp);
        size_t bytes = cur_bytes + m.bytes;
        if (!cur.empty() && (depends || bytes > cap_bytes(index) || bytes > limit)) close();
        cur.push_back(m);
        cur_bytes += m.bytes;
        member[m.pos] = stamp;
      }
      close();
    }
    if (memory_aware) place(graph, uses, edit, per_key_buckets);
    std::vector<Bucket> buckets;
    for (auto& kb : per_key_buckets)
      for (Bucket& b : kb)
        if (b.members.size() > 1) buckets.push_back(std::move(b));
    return buckets;
  }

  // Chooses where each all_gather bucket is issued (this may differ between ranks: only the
  // order of a group's collectives must agree). As FSDP2's forward prefetch, bucket j of a key is
  // issued no earlier than the first use of bucket j-1, so about one bucket is in flight while
  // the previous one is used (nor later than its first member was; bucket 0 stays there). Within
  // the window [max(ready, min(first use of bucket j-1, first member)), first use of bucket j]
  // the earliest position is taken at
  // which the live-bytes estimate stays within the budget up to the bucket's last use, counting
  // the bucket twice (gathered flat buffer plus split-out copies). The estimate starts from the
  // input's profile (memory_estimate.h) with every candidate gather taken out, and each placed
  // bucket (or member left alone) is put back before the next is placed. When nothing fits the
  // bucket is issued just before its first use. Default budget: the input's estimated peak plus
  // twice its largest gather (the bucket in use and the one in flight).
  void place(const ir::Graph& graph, const UseLists& uses, const GraphEdit& edit,
             std::vector<std::vector<Bucket>>& per_key_buckets) const {
    const size_t n = graph.nodes().size();
    std::vector<int64_t> live = live_bytes_profile(graph, uses, edit);
    int64_t peak = 0, largest = 0;
    for (int64_t v : live) peak = std::max(peak, v);
    std::vector<int64_t> delta(n + 1, 0);
    for (const auto& kb : per_key_buckets)
      for (const Bucket& b : kb)
        for (const Member& m : b.members) {
          delta[m.pos] -= int64_t(m.bytes);
          delta[m.last_use + 1] += int64_t(m.bytes);
          largest = std::max(largest, int64_t(m.bytes));
        }
    int64_t acc = 0;
    for (size_t i = 0; i < n; ++i) live[i] += acc += delta[i];
    const int64_t budget = budget_ ? int64_t(budget_) : peak + 2 * largest;
    MaxSegmentTree profile(live);
    for (auto& kb : per_key_buckets) {
      size_t prev_first_use = 0;
      for (size_t j = 0; j < kb.size(); ++j) {
        Bucket& b = kb[j];
        size_t bytes = 0, ready = 0, first_use = SIZE_MAX, last = 0;
        for (const Member& m : b.members) {
          bytes += m.bytes;
          ready = std::max(ready, m.ready);
          first_use = std::min(first_use, m.first_use);
          last = std::max(last, m.last_use);
        }
        if (b.members.size() == 1) {
          profile.add(b.members[0].pos, last, int64_t(bytes));
        } else {
          const int64_t need = 2 * int64_t(bytes);
          size_t lo = b.members.front().pos;
          if (j > 0) lo = std::min(lo, prev_first_use);
          lo = std::max(lo, ready);
          size_t hi = std::max(lo, first_use);
          // profile.max(q, last) only shrinks as q grows: binary search the first q that fits.
          size_t a = lo, z = hi;
          while (a < z) {
            size_t mid = (a + z) / 2;
            if (profile.max(mid, last) + need <= budget) z = mid;
            else a = mid + 1;
          }
          profile.add(a, last, need);
          b.issue_key = double(a) - 0.75;  // ahead of the node there (and of the previous bucket's wait)
        }
        prev_first_use = first_use;
      }
    }
  }

  // Returns the cast feeding an all_gather when the all_gather is its only reader.
  static const ir::Node* foldable_cast(const ir::Node* coll, const UseLists& uses) {
    const ir::Value* x = coll->operands[0];
    if (!x->producer || x->producer->op != ir::OpKind::cast) return nullptr;
    if (uses.users(x).size() != 1 || uses.is_output(x)) return nullptr;
    return x->producer;
  }

  void rewrite(GraphEdit& edit, const UseLists& uses, const Bucket& b, int serial) const {
    const std::vector<Member>& bucket = b.members;
    ir::Graph& g = edit.graph();
    const ir::Node* first = bucket.front().coll;
    const std::string& group = first->attr_str("group");
    const int n = g.group_size(group);
    const DType dtype = first->result()->type.dtype;
    const double coll_key = b.issue_key;
    double wait_key = edit.key(bucket.front().wait);
    for (const Member& m : bucket) wait_key = std::min(wait_key, edit.key(m.wait));
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
    // In its group's order the merged collective stands where its first member stood (membership
    // is the same on every member of the group; the issue position may differ per rank).
    edit.set_order(coll, double(bucket.front().pos));
    ir::Value* waited = edit.add(ir::OpKind::wait_tensor, {coll}, {}, wait_key, base + "_w");
    // Each member's wait becomes its piece in place (same result value, so its name and readers
    // stay and no node is created or freed per member). The pieces' attributes are completed once
    // per bucket; per member only the offset and the shape differ.
    const ir::OpKind piece_op = kind_ == Kind::all_gather ? ir::OpKind::bucket_split_out : ir::OpKind::flat_view;
    const std::vector<ir::Attr> piece =
        kind_ == Kind::all_gather
            ? ir::complete_attrs(piece_op, {{"chunks", int64_t(n)}, {"offset", int64_t(0)}, {"shape", std::vector<int64_t>{}}})
            : ir::complete_attrs(piece_op, {{"offset", int64_t(0)}, {"shape", std::vector<int64_t>{}}});
    const size_t offset_at = size_t(ir::op_def(piece_op).attr_index("offset"));
    const size_t shape_at = size_t(ir::op_def(piece_op).attr_index("shape"));
    int64_t offset = 0;
    for (const Member& m : bucket) {
      const ir::TensorType& in = m.coll->operands[0]->type;
      std::vector<ir::Attr> attrs = piece;
      attrs[offset_at] = offset;
      attrs[shape_at] = std::vector<int64_t>(m.wait->result()->type.shape);
      edit.morph_complete(m.wait, piece_op, {waited}, std::move(attrs));
      if (kind_ == Kind::reduce_scatter) {
        int64_t d0 = in.shape[0], inner = d0 ? in.numel() / d0 : 0;
        offset += chunk_size(d0, n) * inner;
      } else {
        offset += in.numel();
      }
      edit.drop(m.coll);
    }
  }

  Kind kind_;
  std::vector<double> caps_;
  size_t budget_;
};

}  // namespace

PassPtr make_bucket_all_gather_pass(const PassOptions& o) { return std::make_unique<BucketPass>(Kind::all_gather, o); }
PassPtr make_bucket_reduce_scatter_pass(const PassOptions& o) {
  return std::make_unique<BucketPass>(Kind::reduce_scatter, o);
}
PassPtr make_bucket_all_reduce_pass(const PassOptions& o) { return std::make_unique<BucketPass>(Kind::all_reduce, o); }

}  // namespace dt::passes

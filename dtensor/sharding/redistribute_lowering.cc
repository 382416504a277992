#include "dtensor/sharding/redistribute_lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "dtensor/comm/reduce_kernel.h"
#include "dtensor/core/error.h"
#include "dtensor/layout/dtensor_spec.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/redistribute/executor.h"

namespace dt::sharding {
namespace {

using ir::Value;

class StepLowering {
 public:
  StepLowering(LoweringContext& ctx, const RedistributePlan& plan, const Placements& state, const RedistributeStep& step,
               const Value* stem_of, const std::string& stem)
      : ctx_(ctx), b_(ctx.graph), plan_(plan), state_(state), step_(step), stem_of_(stem_of), stem_(stem),
        m_(size_t(step.mesh_dim)),
        n_(ctx.mesh.size(step.mesh_dim)), i_(ctx.coord[m_]), group_(ctx.group_names[m_]) {
    if (step.flattened()) {
      DT_CHECK(step.kind == StepKind::all_reduce || step.kind == StepKind::all_gather ||
               step.kind == StepKind::reduce_scatter)
          << "flattened " << step_kind_name(step.kind);
      group_ = ctx.flat_group(step.flat_dims);
      n_ = int64_t(ctx.graph.find_group(group_)->ranks.size());
      i_ = ctx.mesh.flat_group_index(step.flat_dims, ctx.coord);
    }
  }

  Value* run(Value* x) {
    switch (step_.kind) {
      case StepKind::keep: return x;
      case StepKind::all_reduce: return all_reduce(x);
      case StepKind::chunk: return chunk(x);
      case StepKind::all_gather: return all_gather(x);
      case StepKind::reduce_scatter: return reduce_scatter(x);
      case StepKind::all_to_all: return all_to_all(x);
      case StepKind::zero: return zero(x);
    }
    DT_THROW(InternalError) << "the partitioner cannot lower a " << step_kind_name(step_.kind) << " step ("
                            << step_.src.str() << " -> " << step_.dst.str() << ")";
    return x;
  }

 private:
  // Returns the local shape at group index j of mesh dim m in `placements`.
  Shape member_shape(const Placements& placements, int64_t j) const {
    std::vector<int64_t> c = ctx_.coord;
    c[m_] = j;
    return local_shape_at(plan_.mesh_shape, placements, plan_.shape, c);
  }
  std::vector<int64_t> member_extents(const Placements& placements, int64_t d) const {
    std::vector<int64_t> out(static_cast<size_t>(n_));
    for (int64_t j = 0; j < n_; ++j) out[size_t(j)] = member_shape(placements, j)[size_t(d)];
    return out;
  }
  static bool all_equal(const std::vector<int64_t>& v) {
    for (int64_t e : v)  // true for an empty list
      if (e != v[0]) return false;
    return true;
  }
  Value* named(const char* tag, Value* base) {
    b_.named(ctx_.fresh((base == stem_of_ && !stem_.empty() ? stem_ : base->name) + tag));
    return base;
  }
  Value* wait(Value* c) {
    named(".w", c);
    return b_.wait_tensor(c);
  }
  Value* swap_front(Value* x, int64_t d) {
    if (d == 0) return x;
    named(".t", x);
    return b_.transpose(x, 0, d);
  }

  // A gather or scatter along a dim d != 0 runs on whole contiguous blocks, one per group member,
  // stacked along dim 0 (what the collectives take), and one copy moves the members' axis to just
  // before d: that copy moves runs of every dim from d on (PyTorch's all_gather + cat). Swapping d
  // to the front instead (swap_front) copies with the last dim as the only contiguous run, which
  // for a [batch, seq, vocab/n] logits shard gathered along vocab is one element at a time, and
  // leaves a transposed view that the next op copies again.
  //
  // stacked_to_dim: [n*p0, p1, ...] (member j's block p in rows [j*p0, (j+1)*p0)) -> p with
  // p[d] *= n, member j's block at [j*p[d], (j+1)*p[d]) along d.
  Value* stacked_to_dim(Value* stacked, const Shape& p, int64_t d, Value* x) {
    Shape members = p;
    members.insert(members.begin(), n_);
    named(".members", x);
    Value* v = b_.view(stacked, members);
    std::vector<int64_t> dims;
    for (int64_t k = 1; k <= d; ++k) dims.push_back(k);
    dims.push_back(0);
    for (int64_t k = d + 1; k < int64_t(members.size()); ++k) dims.push_back(k);
    named(".perm", x);
    Value* moved = b_.permute(v, dims);
    Shape out = p;
    out[size_t(d)] *= n_;
    named(".join", x);
    return b_.reshape(moved, out);
  }
  // The inverse: s with s[d] = n*c -> [n*s0, ..., c, ...], member j's chunk of d as block j.
  Value* dim_to_stacked(Value* x, int64_t d) {
    const Shape& s = x->type.shape;
    Shape split = s;
    split[size_t(d)] = s[size_t(d)] / n_;
    split.insert(split.begin() + d, n_);
    named(".members", x);
    Value* v = b_.view(x, split);
    std::vector<int64_t> dims = {d};
    for (int64_t k = 0; k < int64_t(split.size()); ++k)
      if (k != d) dims.push_back(k);
    named(".perm", x);
    Value* moved = b_.permute(v, dims);
    Shape stacked = s;
    stacked[size_t(d)] /= n_;
    stacked[0] *= n_;
    named(".blocks", x);
    return b_.reshape(moved, stacked);
  }

  Value* all_reduce(Value* x) {
    named(".ar", x);
    return wait(b_.all_reduce(x, group_, std::string(reduce_op_name(step_.src.op()))));
  }

  // R -> P(sum): group index 0 keeps the value, the others hold zeros. S(t) -> P(op): this
  // member's chunk inside the unsharded extent, the rest the op's identity (0, -inf, +inf). The
  // planner takes these before a flattened all_reduce of a tiny tensor (one latency, not two).
  Value* zero(Value* x) {
    const ReduceOp op = step_.dst.op();
    if (step_.src.is_replicate()) {  // sum or prod: the others hold 0 or 1
      if (i_ == 0) return x;
      named(".zero", x);
      return full(x->type.dtype, x->type.shape, identity_of(op, x->type.dtype));
    }
    // `full` takes a double: an integer limit for max/min would not survive it.
    if ((op == ReduceOp::max || op == ReduceOp::min) && !is_floating(x->type.dtype))
      DT_THROW(InternalError) << "the partitioner cannot fill an integer tensor for P(" << reduce_op_name(op) << ")";
    const double fill = identity_of(op, x->type.dtype);
    const int64_t t = step_.src.dim();
    const std::vector<int64_t> lens = member_extents(state_, t);
    int64_t before = 0, total = 0;
    for (int64_t j = 0; j < n_; ++j) {
      if (j < i_) before += lens[size_t(j)];
      total += lens[size_t(j)];
    }
    // Every member builds the same shapes but for its own chunk length: `total - len` rows of the
    // identity on both sides of its chunk, then the `total` rows that put the chunk at its place,
    // a slice whose start (an attribute, the one coordinate-dependent thing) counts the rows
    // before it. Padding `before` rows in front would give each member its own shapes, and no
    // member could stand for another (sharding/rank_orbits.h): gpt_fsdp_tp's logits on 4x4.
    const int64_t len = lens[size_t(i_)], pad = total - len;
    if (pad == 0) return x;
    Shape s = x->type.shape;
    s[size_t(t)] = pad;
    named(".zero", x);
    Value* fill_rows = full(x->type.dtype, s, fill);
    named(".zero", x);
    Value* padded = b_.cat({fill_rows, x, fill_rows}, t);
    named(".zero", x);
    return b_.slice(padded, t, pad - before, pad - before + total);
  }
  Value* full(DType dtype, const Shape& shape, double value) {
    return b_.record(ir::OpKind::full, {},
                     {{"shape", std::vector<int64_t>(shape.begin(), shape.end())}, {"value", value}, {"dtype", dtype}})[0];
  }

  Value* chunk(Value* x) {
    const int64_t d = step_.dst.dim();
    const int64_t extent = x->type.shape[size_t(d)];
    const int64_t off = chunk_offset(extent, n_, i_), len = chunk_length(extent, n_, i_);
    named(".chunk", x);
    return b_.slice(x, d, off, off + len);
  }

  Value* all_gather(Value* x) {
    const int64_t d = step_.src.dim();
    // A flattened gather's pieces are even (the planner takes one only then).
    std::vector<int64_t> lens = step_.flattened() ? std::vector<int64_t>{} : member_extents(state_, d);
    if (all_equal(lens)) {
      named(".ag", x);
      Value* stacked = wait(b_.all_gather_into_tensor(x, group_));
      return d == 0 ? stacked : stacked_to_dim(stacked, x->type.shape, d, x);
    }
    Value* t = swap_front(x, d);
    Value* y;
    {
      Shape ts = t->type.shape;
      int64_t rest = 1;
      for (size_t k = 1; k < ts.size(); ++k) rest *= ts[k];
      named(".flat", x);
      Value* flat = b_.reshape(t, {t->type.numel()});
      named(".rep", x);
      Value* rep = b_.cat(std::vector<Value*>(size_t(n_), flat), 0);
      std::vector<int64_t> out_splits, in_splits(size_t(n_), t->type.numel());
      int64_t total = 0;
      for (int64_t l : lens) {
        out_splits.push_back(l * rest);
        total += l;
      }
      named(".ag", x);
      Value* got = wait(b_.all_to_all_single(rep, group_, out_splits, in_splits));
      ts[0] = total;
      named(".view", x);
      y = b_.view(got, ts);
    }
    return swap_front(y, d);
  }

  Value* reduce_scatter(Value* x) {
    const int64_t d = step_.dst.dim();
    Placements after = state_;
    after[m_] = step_.dst;
    // A flattened reduce_scatter's chunks are even (the planner takes one only then).
    std::vector<int64_t> lens = step_.flattened() ? std::vector<int64_t>(size_t(n_), x->type.shape[size_t(d)] / n_)
                                                  : member_extents(after, d);
    const int64_t extent = x->type.shape[size_t(d)], c = *std::max_element(lens.begin(), lens.end());
    if (d != 0 && all_equal(lens)) {
      Value* stacked = dim_to_stacked(x, d);
      named(".rs", x);
      return wait(b_.reduce_scatter_tensor(stacked, group_, std::string(reduce_op_name(step_.src.op()))));
    }
    Value* t = swap_front(x, d);
    if (!all_equal(lens)) {
      // Uneven chunks (torch.chunk: ceil-sized, the last ones short or empty): pad with zeros to
      // n equal chunks, reduce-scatter, keep this member's rows. The executor does the same, so
      // no member ever holds the whole reduced tensor (an FSDP gradient stays a shard).
      Shape pad_shape = t->type.shape;
      pad_shape[0] = n_ * c - extent;
      named(".pad", x);
      Value* zeros = full(t->type.dtype, pad_shape, 0.0);
      named(".pad", x);
      t = b_.cat({t, zeros}, 0);
    }
    named(".rs", x);
    Value* y = wait(b_.reduce_scatter_tensor(t, group_, std::string(reduce_op_name(step_.src.op()))));
    if (lens[size_t(i_)] != c) {
      named(".unpad", x);
      y = b_.slice(y, 0, 0, lens[size_t(i_)]);
    }
    return swap_front(y, d);
  }

  Value* all_to_all(Value* x) {
    const int64_t t = step_.src.dim(), u = step_.dst.dim();
    Placements after = state_;
    after[m_] = step_.dst;
    const std::vector<int64_t> a = member_extents(state_, t);  // each member's extent of t now
    const std::vector<int64_t> bl = member_extents(after, u);  // each member's extent of u after
    // Transposed layout: u first; t moves to where u was when t was the front dim.
    Value* p = swap_front(x, u);
    const int64_t tp = t == 0 ? u : t;
    Shape ps = p->type.shape;
    int64_t other = 1;
    for (size_t k = 0; k < ps.size(); ++k)
      if (int64_t(k) != 0 && int64_t(k) != tp) other *= ps[k];
    std::vector<int64_t> in_splits, out_splits;
    for (int64_t j = 0; j < n_; ++j) {
      in_splits.push_back(bl[size_t(j)] * a[size_t(i_)] * other);
      out_splits.push_back(bl[size_t(i_)] * a[size_t(j)] * other);
    }
    named(".flat", x);
    Value* flat = b_.reshape(p, {p->type.numel()});
    named(".a2a", x);
    Value* got = wait(b_.all_to_all_single(flat, group_, out_splits, in_splits));
    std::vector<Value*> pieces;
    int64_t at = 0;
    for (int64_t j = 0; j < n_; ++j) {
      Shape s = ps;
      s[0] = bl[size_t(i_)];
      s[size_t(tp)] = a[size_t(j)];
      named(".piece", x);
      Value* piece = b_.slice(got, 0, at, at + out_splits[size_t(j)]);
      at += out_splits[size_t(j)];
      named(".piece", x);
      pieces.push_back(b_.view(piece, s));
    }
    Value* joined;
    if (pieces.size() == 1) {
      joined = pieces[0];
    } else {
      named(".cat", x);
      joined = b_.cat(pieces, tp);
    }
    return swap_front(joined, u);
  }

  LoweringContext& ctx_;
  ir::Builder b_;
  const RedistributePlan& plan_;
  const Placements& state_;
  const RedistributeStep& step_;
  const Value* stem_of_;  // the value whose new names start with stem_ (the redistributed one)
  std::string stem_;
  size_t m_;
  int64_t n_, i_;
  std::string group_;
};

}  // namespace

std::string LoweringContext::fresh(const std::string& base) {
  if (!graph.find(base) && (!source || !source->find(base))) return base;
  for (;;) {
    std::string s = fmt::format("{}.{}", base, counter++);
    if (!graph.find(s) && (!source || !source->find(s))) return s;
  }
}

const std::string& LoweringContext::flat_group(uint32_t dims_mask) {
  std::string name;
  for (int64_t m : mesh_dims_of(dims_mask)) {
    if (!name.empty()) name += '_';
    name += group_names[size_t(m)];
  }
  std::vector<int> ranks = mesh.flat_group_ranks(dims_mask, mesh.rank_at(coord));
  if (const ir::GroupDecl* g = graph.find_group(name)) {
    DT_CHECK(g->ranks == ranks) << "group " << name << " is declared with other ranks";
    return g->name;
  }
  graph.add_group(name, std::move(ranks));
  return graph.find_group(name)->name;
}

std::string module_stem(const ir::Value* v) {
  const bool numbered = !v->name.empty() && std::all_of(v->name.begin(), v->name.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
  if (!numbered || !v->producer) return v->name;
  auto module_of = [](const ir::Node* n) -> std::string {
    for (const Value* o : n->operands)
      if (o->kind == ir::ValueKind::param) {
        const size_t dot = o->name.rfind('.');
        return dot == std::string::npos ? o->name : o->name.substr(0, dot);
      }
    return {};
  };
  if (std::string m = module_of(v->producer); !m.empty()) return m + ".out";
  // Breadth-first up the operands, a few steps: the nearest node that reads a parameter.
  std::vector<const ir::Node*> frontier = {v->producer};
  for (int depth = 0; depth < 4 && !frontier.empty(); ++depth) {
    std::vector<const ir::Node*> next;
    for (const ir::Node* n : frontier)
      for (const Value* o : n->operands) {
        if (!o->producer) continue;
        if (std::string m = module_of(o->producer); !m.empty())
          return m + "." + std::string(ir::op_name(v->producer->op));
        next.push_back(o->producer);
      }
    frontier = std::move(next);
  }
  return v->name;
}

Value* lower_redistribution(LoweringContext& ctx, Value* x, const RedistributePlan& plan, const std::string& stem) {
  Placements state = plan.src;
  const Value* stem_of = x;
  for (const RedistributeStep& step : plan.steps) {
    DT_CHECK(state[size_t(step.mesh_dim)] == step.src) << "step expects " << step.src.str();
    x = StepLowering(ctx, plan, state, step, stem_of, stem).run(x);
    for (int64_t m : step.mesh_dims()) state[size_t(m)] = step.dst;
  }
  DT_CHECK(state == plan.dst) << placements_str(state) << " vs " << placements_str(plan.dst);
  return x;
}

}  // namespace dt::sharding

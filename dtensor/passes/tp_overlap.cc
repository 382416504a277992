// tp-overlap: tensor parallelism's all_reduce overlapped with its GEMM (PyTorch's async-TP,
// Megatron's comm-GEMM overlap). A rowwise linear (or a matmul against a matrix) whose Partial
// result is read only by an all_reduce, itself read only by its wait:
//
//   %y = linear(%x, %w, %b) : f32[B, S, N]          (the bias on one rank only)
//   %r = all_reduce(%y) {group = tp}
//   %z = wait_tensor(%r)
//
// or whose result an add of a tensor of its type reads first (add_rule: on group index 0 the
// residual added once before the reduction, `%s = add(%y, %h)`; the other ranks reduce %y itself),
// becomes, for k chunks of the flattened rows (B·S; each output row of a GEMM depends on its own
// input row only, and rows are summed over ranks one element at a time in rank order, so every
// element of %z is the same sum of the same products as before: bitwise equal, given chunks cut
// where BLAS computes the rows as the whole call does, kernels/gemm_panels.h):
//
//   %x.rows = reshape(%x) {shape = [B·S, K]}
//   %x.c0 = slice(%x.rows) {dim = 0, start = 0, end = m}   %y.c0 = linear(%x.c0, %w, %b)
//   %r.c0 = all_reduce(%y.c0)                               ... chunk 1, 2, ... likewise
//   %z.c0 = wait_tensor(%r.c0) ...  %z.rows = cat(%z.c0, ...)  %z = reshape(%z.rows)
//
// Chunk i's all_reduce is issued right after its GEMM, so the group's progress thread reduces it
// while the rank computes chunk i+1 (comm/threads/endpoint.h: one progress thread per rank and
// group; MPI progresses it in the library). The cost model (tp_overlap.h) chooses k per node, from
// shapes alone, so every member of a group makes the same choice (the bias and the residual, on
// one rank only, play no part; each chunk adds the residual's same rows, %h.c0 ...) and the
// collective order stays the same on every rank. The pass runs after bucket-all-reduce (which
// would merge the chunks back into one collective) and before comm-lowering (which makes each
// chunk's all_reduce in place).
#include "dtensor/passes/tp_overlap.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "dtensor/ir/graph_edit.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/kernels/gemm_panels.h"

namespace dt::passes {

using ir::GraphEdit;
using ir::UseLists;

namespace {

// Pipeline time of k chunks (see tp_overlap.h).
double split_time_us(double gemm_us, double alpha_us, double bytes_us, double copy_us, int k) {
  const double g = gemm_us / k, a = alpha_us + bytes_us / k;
  return g + (k - 1) * std::max(g, a) + a + copy_us;
}

}  // namespace

TpOverlapChoice choose_tp_overlap(double flops, int64_t rows, int64_t bytes, const PassOptions& o) {
  TpOverlapChoice c;
  c.gemm_us = flops / (o.gemm_gflops * 1e3);
  c.all_reduce_us = o.comm.us(bytes);
  const double bytes_us = c.all_reduce_us - o.comm.alpha_us;
  c.copy_us = 2.0 * double(bytes) / (o.mem_gbs * 1e3);
  c.plain_us = c.split_us = c.gemm_us + c.all_reduce_us;
  if (o.tp_overlap == PassOptions::TpOverlap::off) {
    c.reason = "off";
    return c;
  }
  // Chunks of ceil(rows / k) rows rounded up to whole quanta (so fewer chunks may remain); the
  // last, smallest one must stay above the one-shot threshold and the small-GEMM limit.
  const double row_flops = flops / double(rows);
  auto chunk_rows = [&](int k) {
    const int64_t q = kGemmPanelQuantum;
    return ((rows + k - 1) / k + q - 1) / q * q;
  };
  auto usable = [&](int64_t per, int k) {
    const int64_t last = rows - per * (k - 1);
    return k >= 2 && last > 0 && size_t(bytes / rows * last) > o.one_shot_threshold_bytes &&
           row_flops * double(last) >= double(kGemmPanelFlops);
  };
  int best = 0;
  int64_t best_per = 0;
  double best_us = 0;
  const int lo = o.tp_overlap_chunks > 0 ? o.tp_overlap_chunks : 2;
  const int hi = o.tp_overlap_chunks > 0 ? o.tp_overlap_chunks : kMaxTpOverlapChunks;
  for (int k = lo; k <= hi && k <= rows; ++k) {
    const int64_t per = chunk_rows(k);
    const int kk = int((rows + per - 1) / per);
    if (!usable(per, kk)) continue;
    const double t = split_time_us(c.gemm_us, o.comm.alpha_us, bytes_us, c.copy_us, kk);
    if (best == 0 || t < best_us) best = kk, best_per = per, best_us = t;
  }
  const std::string costs = fmt::format("gemm {:.0f} us, all_reduce {:.0f} us, concat {:.0f} us", c.gemm_us,
                                        c.all_reduce_us, c.copy_us);
  if (best == 0) {
    c.reason = fmt::format("kept: no chunks of whole {}-row quanta of at least {} flops above the one-shot threshold "
                           "({} bytes; {})",
                           kGemmPanelQuantum, kGemmPanelFlops, o.one_shot_threshold_bytes, costs);
    return c;
  }
  const bool pays = best_us < c.plain_us;
  if (!pays && o.tp_overlap == PassOptions::TpOverlap::automatic && o.tp_overlap_chunks == 0) {
    c.reason = fmt::format("kept: {} chunks would take {:.0f} us against {:.0f} us plain ({})", best, best_us,
                           c.plain_us, costs);
    return c;
  }
  c.chunks = best;
  c.chunk_rows = best_per;
  c.split_us = best_us;
  c.reason = fmt::format("{} chunks: {:.0f} us against {:.0f} us plain ({}){}", best, best_us, c.plain_us, costs,
                         pays ? "" : "; forced, the model says it does not pay");
  return c;
}

namespace {

// What feeds an all_reduce the pattern applies to: the GEMM, and the add of a residual between
// them if there is one (its operand `residual` is the residual).
struct RowwiseGemm {
  const ir::Node* gemm = nullptr;
  const ir::Node* add = nullptr;
  int residual = -1;
};

// The pattern at `ar`, or no gemm: a linear, or a matmul against a matrix, of rank >= 2, whose
// result only the all_reduce (or the residual's add, which only the all_reduce reads) reads, whose
// all_reduce only its wait reads.
RowwiseGemm rowwise_gemm(const ir::Node* ar, const UseLists& uses) {
  RowwiseGemm r;
  const ir::Value* y = ar->operands[0];
  const ir::Node* p = y->producer;
  if (p && p->op == ir::OpKind::add && p->operands.size() == 2 && uses.users(y).size() == 1 && !uses.is_output(y)) {
    for (int k : {0, 1}) {
      const ir::Value* g = p->operands[size_t(k)];
      if (g->producer && (g->producer->op == ir::OpKind::linear || g->producer->op == ir::OpKind::matmul) &&
          g->type == y->type && p->operands[size_t(1 - k)]->type == y->type) {
        r.add = p;
        r.residual = 1 - k;
        y = g;
        p = g->producer;
        break;
      }
    }
  }
  if (!p || (p->op != ir::OpKind::linear && p->op != ir::OpKind::matmul)) return {};
  if (p->op == ir::OpKind::matmul && p->operands[1]->type.rank() != 2) return {};
  if (y->type.rank() < 2 || p->operands[0]->type.rank() != y->type.rank()) return {};
  if (uses.users(y).size() != 1 || uses.is_output(y)) return {};
  const auto& readers = uses.users(ar->result());
  if (readers.size() != 1 || readers[0]->op != ir::OpKind::wait_tensor || uses.is_output(ar->result())) return {};
  r.gemm = p;
  return r;
}

class TpOverlapPass final : public Pass {
 public:
  explicit TpOverlapPass(const PassOptions& o) : options_(o) {}
  std::string_view name() const override { return "tp-overlap"; }
  std::string_view summary() const override {
    return "split a rowwise GEMM into row chunks and all_reduce chunk i while computing chunk i+1 (cost model)";
  }

  bool run(ir::Graph& graph) override {
    if (options_.tp_overlap == PassOptions::TpOverlap::off) return false;
    UseLists uses(graph);
    GraphEdit edit(graph);
    const size_t n = graph.nodes().size();
    for (size_t i = 0; i < n; ++i) {
      const ir::Node* ar = graph.nodes()[i];
      if (ar->op != ir::OpKind::all_reduce) continue;
      const RowwiseGemm rg = rowwise_gemm(ar, uses);
      const ir::Node* gemm = rg.gemm;
      if (!gemm) continue;
      const ir::Value* y = gemm->result();
      const int64_t cols = y->type.shape.back(), rows = cols == 0 ? 0 : y->type.numel() / cols;
      if (rows < 2) continue;
      const TpOverlapChoice c =
          choose_tp_overlap(ir::op_def(gemm->op).flops(*gemm), rows, int64_t(y->type.nbytes()), options_);
      log(fmt::format("tp-overlap: {} ({} rows on group {}): {}", ar->result()->name, rows, ar->attr_str("group"),
                      c.reason));
      if (c.chunks > 1) split(edit, uses, rg, ar, rows, c.chunks, c.chunk_rows);
    }
    return edit.commit();
  }

 private:
  void log(const std::string& line) {
    if (options_.log && logged_.insert(line).second) *options_.log << line << "\n";
  }

  static void split(GraphEdit& edit, const UseLists& uses, const RowwiseGemm& rg, const ir::Node* ar, int64_t rows,
                    int k, int64_t per) {
    const ir::Node* gemm = rg.gemm;
    const ir::Node* wait = uses.users(ar->result())[0];
    const ir::Value* y = gemm->result();
    const Shape& xs = gemm->operands[0]->type.shape;
    const std::string& base = ar->result()->name;
    // Keys: the chunks' GEMMs and collectives in the GEMM's slot, the waits and the concat in the
    // wait's (wait-placement and overlap-scheduling move them from there).
    const double g0 = edit.key(gemm), step = 0.5 / double(3 * k + 1), w0 = edit.key(wait) - 0.5;
    ir::Value* x = edit.resolve(gemm->operands[0]);
    if (xs.size() > 2) x = edit.add(ir::OpKind::reshape, {x}, {{"shape", std::vector<int64_t>{rows, xs.back()}}}, g0 - 0.5, base + ".rows");
    // The residual's rows, as x's.
    ir::Value* h = nullptr;
    if (rg.add) {
      h = edit.resolve(rg.add->operands[size_t(rg.residual)]);
      if (xs.size() > 2)
        h = edit.add(ir::OpKind::reshape, {h}, {{"shape", std::vector<int64_t>{rows, y->type.shape.back()}}}, g0 - 0.5,
                     base + ".h.rows");
    }
    std::vector<ir::Value*> rest;
    for (size_t j = 1; j < gemm->operands.size(); ++j) rest.push_back(edit.resolve(gemm->operands[j]));
    std::vector<ir::Value*> pieces;
    for (int c = 0; c < k; ++c) {
      const double key = g0 + step * double(3 * c);
      const std::string tag = fmt::format("{}.c{}", base, c);
      ir::Value* xc = edit.add(ir::OpKind::slice, {x}, {{"dim", int64_t(0)}, {"start", per * c}, {"end", std::min(rows, per * (c + 1))}},
                               key, tag + ".x");
      std::vector<ir::Value*> operands = {xc};
      operands.insert(operands.end(), rest.begin(), rest.end());
      ir::Value* yc = edit.add(gemm->op, operands, {}, key + step, tag + ".y");
      if (h) {  // the residual's add, its operands in their order
        ir::Value* hc = edit.add(ir::OpKind::slice, {h},
                                 {{"dim", int64_t(0)}, {"start", per * c}, {"end", std::min(rows, per * (c + 1))}},
                                 key + step, tag + ".h");
        std::vector<ir::Value*> sum = rg.residual == 1 ? std::vector<ir::Value*>{yc, hc} : std::vector<ir::Value*>{hc, yc};
        yc = edit.add(ir::OpKind::add, sum, {}, key + 1.5 * step, tag + ".s");
      }
      ir::Value* rc = edit.add(ir::OpKind::all_reduce, {yc}, {{"group", ar->attr_str("group")}, {"op", ar->attr_str("op")}},
                               key + 2 * step, tag);
      edit.set_order(rc, double(edit.index(ar)) + double(c) / double(k));
      pieces.push_back(edit.add(ir::OpKind::wait_tensor, {rc}, {}, w0 + step * double(c), tag + ".w"));
    }
    ir::Value* z = edit.add(ir::OpKind::cat, pieces, {{"dim", int64_t(0)}}, w0 + 0.25, base + ".cat");
    if (xs.size() > 2) z = edit.add(ir::OpKind::reshape, {z}, {{"shape", std::vector<int64_t>(y->type.shape.begin(), y->type.shape.end())}}, w0 + 0.3, base + ".view");
    edit.drop(gemm);
    if (rg.add) edit.drop(rg.add);
    edit.drop(ar);
    edit.drop(wait);
    edit.replace(wait->result(), z);
  }

  PassOptions options_;
  std::set<std::string> logged_;
};

}  // namespace

PassPtr make_tp_overlap_pass(const PassOptions& options) { return std::make_unique<TpOverlapPass>(options); }

}  // namespace dt::passes

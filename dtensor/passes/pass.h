// A pass on a per-rank program (MLIR style): a name, a one-line summary and run(Graph&). Printing,
// verifying and timing after each pass are PassManager hooks, never pass code.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <ostream>
#include <string_view>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/redistribute/cost_model.h"

namespace dt::passes {

// Knobs shared by the pass factories (CLI flags map onto these).
struct PassOptions {
  // Bucket cap in MiB per bucket index (per group/dtype key); the last entry repeats:
  // {1, 4} caps bucket 0 at 1 MiB and every later bucket at 4 MiB.
  std::vector<double> bucket_cap_mb = {4.0};
  // all_reduce of at most this many bytes is lowered to a blocking one-shot; above: in-place
  // two-shot. 0 disables one-shot lowering.
  size_t one_shot_threshold_bytes = 256 * 1024;
  // Peak live bytes (memory_estimate.h) a rank's schedule may reach. Bucketing of all_gathers
  // sizes buckets to a quarter of it and issues each as early as it allows (bucketing.cc); the
  // overlap scheduler moves collectives earlier only within it. 0: bucketing uses the input's
  // peak plus twice its largest all_gather (the bucket in use and the one in flight), and the
  // overlap scheduler the peak of the schedule it is given (so it never raises peak memory).
  size_t memory_budget_bytes = 0;
  // all_gathers of different dtypes on one group share buckets (PyTorch's multi-dtype bucketing):
  // the flat buffer holds each input's bytes and each piece is read back at its own dtype, so
  // the results are bitwise those of the separate gathers (bucketing.cc). Off: one key per dtype.
  bool bucket_mixed_dtypes = false;
  // tp-overlap (tp_overlap.h): split a rowwise GEMM whose Partial result is all_reduced into row
  // chunks and reduce chunk i while computing chunk i+1. auto: where the cost model says it pays;
  // on: wherever a chunk's all_reduce stays asynchronous; off: never.
  enum class TpOverlap { automatic, on, off };
  TpOverlap tp_overlap = TpOverlap::automatic;
  int tp_overlap_chunks = 0;  // > 0: split into this many chunks (0: the cost model's choice)
  // The machine constants of the cost model: a collective's α–β as the redistribution planner
  // prices it (redistribute/cost_model.h), and the plan search's GEMM rate and copy bandwidth
  // defaults (autoplan/machine.h: 20 GFLOP/s, 5 GB/s).
  AlphaBeta comm;
  double gemm_gflops = 20.0, mem_gbs = 5.0;
  // Where passes that decide by a cost model write one line per decision (each distinct line once
  // per pass, however many rank programs share it); null: nowhere.
  std::ostream* log = nullptr;
};

class Pass {
 public:
  virtual ~Pass() = default;
  // The pass's name (as --passes spells it) and one-line summary, declared here only: the
  // registry (pass_manager.h) reads them from an instance. Both must return string literals.
  virtual std::string_view name() const = 0;
  virtual std::string_view summary() const = 0;
  // Rewrites the graph; returns whether anything changed. Throws dt::Error on unsupported input.
  virtual bool run(ir::Graph& graph) = 0;
};
using PassPtr = std::unique_ptr<Pass>;

// A pass whose work is one function of the graph (most passes; options are captured by `run`).
// `name` and `summary` must be string literals, as Pass requires.
PassPtr make_pass(std::string_view name, std::string_view summary, std::function<bool(ir::Graph&)> run);

// Factories, one per pass (each defined in its own file).
PassPtr make_wait_placement_pass();
PassPtr make_bucket_all_gather_pass(const PassOptions& options);
PassPtr make_bucket_reduce_scatter_pass(const PassOptions& options);
PassPtr make_bucket_all_reduce_pass(const PassOptions& options);
PassPtr make_overlap_scheduling_pass(const PassOptions& options);
PassPtr make_tp_overlap_pass(const PassOptions& options);  // tp_overlap.cc
PassPtr make_comm_lowering_pass(const PassOptions& options);
PassPtr make_dce_pass();
PassPtr make_cse_pass();
PassPtr make_reshard_after_forward_pass();
PassPtr make_plan_comm_buffers_pass();  // buffer_planner.cc

}  // namespace dt::passes

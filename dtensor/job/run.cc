// Job::run: every rank's program on the threads backend, or this process's rank under mpirun with
// the outputs and per-rank numbers gathered to every process.
#include <cstring>
#include <functional>

#include "dtensor/core/error.h"
#include "dtensor/job/job.h"
#include "dtensor/job/train_pipeline.h"
#include "dtensor/sharding/compiler.h"

namespace dt::job {
namespace {

runtime::LaunchOptions launch_options(const JobOptions& job, const RunOptions& run) {
  runtime::LaunchOptions lo;
  lo.repeat = run.repeat;
  lo.comm = job.comm;
  lo.comm_arena = job.comm_arena;
  lo.node_hook = run.node_hook;
  return lo;
}

// Gathers output tensors on every rank: all_gather of the local shards padded to the largest
// shard (local shapes come from the compiled programs, which every process has). Returns rank
// r's local shard of every output at [k][r].
std::vector<std::vector<Tensor>> gather_outputs(const Job& job, const std::vector<Tensor>& mine, ProcessGroup& world) {
  const int n = world.size();
  std::vector<std::vector<Tensor>> all(mine.size());
  for (size_t k = 0; k < mine.size(); ++k) {
    const Tensor local = mine[k].contiguous();
    const DType dtype = local.dtype();
    std::vector<Shape> shapes;
    size_t max_numel = 0;
    for (int r = 0; r < n; ++r) {
      shapes.push_back(job.program(r).outputs()[k]->type.shape);
      max_numel = std::max(max_numel, size_t(dt::numel(shapes.back())));
    }
    DT_CHECK(size_t(local.numel()) <= max_numel) << "output " << k << " of rank " << world.rank() << " has "
                                                  << local.numel() << " elements, more than the compiled " << max_numel;
    const size_t item = itemsize(dtype);
    std::vector<std::byte> send(max_numel * item), recv(max_numel * item * size_t(n));
    std::memcpy(send.data(), local.raw_data(), local.nbytes());
    world.all_gather(send.data(), recv.data(), max_numel, dtype)->wait();
    for (int r = 0; r < n; ++r) {
      Tensor t = Tensor::uninitialized(shapes[size_t(r)], dtype);
      std::memcpy(t.raw_data(), recv.data() + size_t(r) * max_numel * item, t.nbytes());
      all[k].push_back(t);
    }
  }
  return all;
}

// Every rank's stats on every rank (as f64: exact for byte counts below 2^53).
std::vector<RankStats> gather_stats(const RankStats& mine, ProcessGroup& world) {
  std::vector<double> row = {mine.time_ms, double(mine.peak_bytes), double(mine.param_bytes), double(mine.bytes_sent),
                             double(mine.collectives)};
  std::vector<double> rows(row.size() * size_t(world.size()));
  world.all_gather(row.data(), rows.data(), row.size(), DType::f64)->wait();
  std::vector<RankStats> out;
  for (int q = 0; q < world.size(); ++q) {
    const double* v = rows.data() + size_t(q) * row.size();
    out.push_back({q, v[0], size_t(v[1]), int64_t(v[2]), int64_t(v[3]), int(v[4])});
  }
  return out;
}

// Fills outputs from locals.
void assemble_outputs(const Job& job, RunResult& r) {
  r.outputs.clear();
  for (size_t k = 0; k < r.locals.size(); ++k) r.outputs.push_back(job.assemble_output(k, r.locals[k]));
}

RunResult run_threads(const Job& job, const Weights& weights, const TensorMap& inputs, const RunOptions& options) {
  const int n = int(job.mesh().size());
  const std::vector<runtime::RankResult> results = runtime::launch(
      job.programs_by_rank(), job.bindings_by_rank(weights, inputs), launch_options(job.options(), options));
  RunResult out;
  out.locals.resize(job.graph().outputs().size());
  for (size_t k = 0; k < out.locals.size(); ++k)
    for (const runtime::RankResult& r : results) out.locals[k].push_back(r.outputs[k]);
  for (int r = 0; r < n; ++r) out.ranks.push_back(job.rank_stats(r, results[size_t(r)].stats));
  out.collectives_per_kind = sharding::collective_stats(job.program(0), 0).count;
  assemble_outputs(job, out);
  return out;
}

// Runs body(world) on this process's rank of the MPI world, then RunOptions::in_world with rank 0's
// verdict sent to every rank, so that they all exit alike.
RunResult run_in_world(const Job& job, const RunOptions& options, const std::function<RunResult(ProcessGroup&)>& body) {
  RunResult out;
  runtime::run_world(
      runtime::Backend::mpi, int(job.mesh().size()),
      [&](ProcessGroup& world) {
        out = body(world);
        if (!options.in_world) return;
        const bool mine = options.in_world(out, world);
        double verdict = mine ? 1 : 0;
        world.broadcast(&verdict, 1, DType::f64, /*root=*/0)->wait();
        out.verdict = verdict != 0;
      },
      job.options().comm);
  return out;
}

RunResult run_mpi(const Job& job, const Weights& weights, const TensorMap& inputs, const RunOptions& options) {
  return run_in_world(job, options, [&](ProcessGroup& world) {
    RunResult out;
    const int r = world.rank();
    runtime::LaunchOptions lo = launch_options(job.options(), options);
    // Every process records its own rank's track from the same moment.
    if (lo.node_hook) world.barrier()->wait();
    const runtime::RankResult res = runtime::run_rank(job.program(r), job.bindings(r, weights, inputs), world, lo);
    out.ranks = gather_stats(job.rank_stats(r, res.stats), world);
    out.locals = gather_outputs(job, res.outputs, world);
    out.collectives_per_kind = sharding::collective_stats(job.program(0), 0).count;
    out.root = r == 0;
    assemble_outputs(job, out);
    return out;
  });
}

}  // namespace

RunResult Job::run(const Weights& weights, const TensorMap& inputs, const RunOptions& options) const {
  if (!options_.ranks.empty())
    DT_THROW(ValueError) << "this job was compiled for some ranks only; compile it for every rank to run it";
  if (pipeline_) {
    const std::map<std::string, Tensor> full = weights.full_tensors();
    if (options_.backend != runtime::Backend::mpi)
      return run_pipeline(*pipeline_, graph_, full, inputs, options_, options, nullptr);
    return run_in_world(*this, options, [&](ProcessGroup& world) {
      return run_pipeline(*pipeline_, graph_, full, inputs, options_, options, &world);
    });
  }
  programs_by_rank();  // checks that the mesh's ranks are the runtime's 0..size-1
  if (options_.backend == runtime::Backend::mpi) return run_mpi(*this, weights, inputs, options);
  return run_threads(*this, weights, inputs, options);
}

}  // namespace dt::job

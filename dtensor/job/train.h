// The training loop: builds the step graph of a forward model (autodiff/train_step.h) and runs it
// for a number of steps on one device or sharded as a Job, rebinding the updated parameters and
// optimizer state after each step.
//
// Data: `input` and `target` (every data input of the model, by name). A tensor with exactly the
// input's declared shape is one batch reused every step; a tensor with one extra leading dim of
// size K holds K batches, and step s uses batch s mod K.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dtensor/autodiff/train_step.h"
#include "dtensor/core/tensor.h"
#include "dtensor/io/sharded_checkpoint.h"
#include "dtensor/ir/graph.h"
#include "dtensor/job/job.h"

namespace dt::job {

struct TrainOptions {
  int steps = 1;
  autodiff::OptimizerConfig optimizer;
  bool keep_first_grads = false;  // fill TrainResult::first_grads
  // blocks: recompute each block's activations in the backward (autodiff/recompute.h).
  autodiff::Recompute recompute = autodiff::Recompute::none;
  // Called after each step (1-based step, its loss, its wall time in ms).
  std::function<void(int step, double loss, double ms)> on_step;
  // A step whose loss is NaN or infinite stops training before its update is applied: the
  // result holds the state after the last good step and names the step (non_finite_step).
  bool stop_on_non_finite = true;
};

// Sharded training: the step graph is compiled as a Job (job/job.h) with the options' mesh, plan
// and passes (the partitioner gives every gradient and optimizer state tensor its placement), and
// every step runs all ranks. Parameters and optimizer state stay sharded between steps: each rank
// rebinds its own updated shards.
struct ShardedTrainOptions {
  JobOptions job;
  // mpi backend (job.backend): this process runs its own rank (under mpirun -np <mesh size>); the
  // result then holds this rank's numbers (`root` says whether it is rank 0). Rank 0 also holds
  // the first step's full gradients when asked (keep_first_grads: they are replicated outputs of
  // the first step's program) and, with gather_state, every rank's trained shards (sent to it
  // after the last step) and the full tensors assembled from them.
  bool gather_state = false;  // mpi only: the threads backend always fills state and rank_state
  // Called once with the compiled step before the first step (e.g. a benchmark reading a program).
  std::function<void(const Job& job)> on_compiled;
};

struct TrainResult {
  std::vector<double> losses;   // the loss computed by each step (before its update)
  std::vector<double> step_ms;  // wall time of each step
  size_t peak_bytes = 0;        // the largest live-result peak of any step
  std::map<std::string, Tensor> first_grads;  // gradients of the first step, named like the params
  std::map<std::string, Tensor> state;         // trained parameters and optimizer state (full tensors)
  // Sharded runs: every rank's shards of `state` (by rank), its bytes sent per step and the
  // collectives of rank 0's step program by op name.
  std::vector<std::map<std::string, Tensor>> rank_state;
  std::map<std::string, std::string> placements;  // of each state tensor, "S(0),R" (sharded runs)
  // Pipelines: each state tensor's stage, as the sub-mesh its placements are over.
  std::map<std::string, io::SubMesh> sub_meshes;
  std::vector<int64_t> bytes_sent_per_step;
  std::map<std::string, int> collectives;
  bool root = true;  // false on the processes of an mpi run other than rank 0
  std::vector<std::string> warnings;  // the sharding's (sharded runs): nodes that fell back to R
  int non_finite_step = 0;  // the 1-based step whose loss was not finite (training stopped there), or 0
};

// Returns batch `step` of `data` for input `v` (the whole tensor, or slice step mod K of its
// leading dim); ValueError when the tensor fits neither form.
Tensor batch_for_step(const ir::Value& v, const Tensor& data, int step);

// Trains on one device. `weights` holds every parameter and, to resume, the optimizer state
// (missing state starts at zero; state present for a different optimizer is an error); `data`
// holds every data input. Inputs are never modified.
TrainResult train_single_device(ir::Graph forward, const std::map<std::string, Tensor>& weights,
                                const std::map<std::string, Tensor>& data, const TrainOptions& options);

// Trains on the ranks of sharded.job.mesh. Same inputs and results as train_single_device, plus
// the per-rank numbers. A plan with a `pipeline` section trains the pipeline (train_pipeline.h).
TrainResult train_sharded(ir::Graph forward, const std::map<std::string, Tensor>& weights,
                          const std::map<std::string, Tensor>& data, const TrainOptions& options,
                          const ShardedTrainOptions& sharded);

}  // namespace dt::job

// A model cut into pipeline stages (the plan's `pipeline` section, sharding/parallel_plan.h), each
// stage's work for one micro-batch as a graph of its own: PyTorch's PipelineStage, built from the
// whole model's graph instead of a hand-split module.
//
// Cutting: stage s > 0 starts at the first node that reads a parameter of its first module
// (`split_before`), or, with `stages`: N, at block boundaries (the first reader of each numbered
// module such as h.3) chosen so that the stages' FLOP estimates (OpDef::flops, one per element
// for other nodes) come closest to equal. Nodes run in the stage their position falls in.
//
// Values crossing a cut: a value computed in stage s and read in a later stage t travels along
// every link s..t-1 (stages in between relay it); a value that depends on no input and no
// parameter (an arange of positions) is recomputed in each stage that reads it instead. A graph
// output is read by the last stage. A parameter is bound in every stage that reads it (a Llama's
// RoPE tables in every layer); a trained one read in several stages (tied embeddings) is trained
// in each, and the pipeline programs sum its gradients across them (program.h).
//
// Each stage's graph (StageGraph::graph) holds its forward for one micro-batch (every data input's
// dim 0 divided by the micro-batch count: rebatch()) and, for training, its backward: the last
// stage differentiates loss * seed (an input bound to 1); an earlier stage differentiates
// sum_i sum(y_i * gy_i) over its outgoing values y_i, where gy_i (inputs "grad_in.<y_i>") are the
// gradients the next stage sends back, so every gradient equals the whole model's chain rule term
// for term (d/dy of that sum is gy exactly). The backward is then exactly the nodes that depend on
// the seed or a gy, which stays true of the stage's programs after partitioning.
//
// Recomputation (autodiff/recompute.h, `recompute` blocks): each stage graph's blocks are
// recomputed within its own backward as a whole training step's are, so a stage keeps each
// micro-batch's block inputs (and the values it sends on) from its forward to its backward instead
// of every activation: what a schedule holds in flight shrinks to those. The clones depend on no
// seed or gy, so a recomputed stage's backward (program.h's stage_work) also takes every node after
// its first seed- or gy-dependent node that the forward's products (the values sent on, the loss)
// do not need.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dtensor/autodiff/train_step.h"
#include "dtensor/ir/graph.h"
#include "dtensor/sharding/parallel_plan.h"

namespace dt::pipeline {

// The plan's pipeline section checked against a model and a pp dim of `stages` ranks.
struct StageSplit {
  int stages = 1;          // stage graphs: the pp size p times virtual_stages
  int virtual_stages = 1;  // stages per rank (interleaved-1f1b): stage x runs on pipeline rank x mod p
  int ranks() const { return stages / virtual_stages; }
  int microbatches = 1;
  std::vector<size_t> first_node;  // [stage]: the index in the model's nodes() where it starts
  std::vector<std::string> first_module;  // [stage]: its first module ("" for stage 0)
};

// Cuts the model into `ranks` (the pp size) times plan.virtual_stages stages. Throws ValueError for
// a split_before naming no module, splits out of order, a split count that does not match the
// stages, too few block boundaries for them, and a data input whose dim 0 the micro-batch count
// does not divide.
StageSplit split_stages(const ir::Graph& model, const sharding::PipelinePlan& plan, int ranks);

// Returns `model` with every data input's dim 0 divided by `microbatches`, every shape that a view
// or reshape gives the batch scaled to match, and every expand that broadcasts a value holding no
// batch to the batch along dim 0 (position ids expanded to [batch, seq]) expanding to the
// micro-batch instead. ValueError when a shape cannot be scaled, or when a node mixes the
// micro-batch with a value holding the whole batch (a constant folded at full batch).
ir::Graph rebatch(const ir::Graph& model, int64_t microbatches);

// One stage's work for one micro-batch.
struct StageGraph {
  ir::Graph graph;
  size_t forward_nodes = 0;   // nodes [0, forward_nodes) are the forward
  size_t backward_begin = 0;  // nodes [backward_begin, end) the backward (training only)
  std::vector<ir::Value*> inputs_from_prev;   // the values received from stage s-1, link order
  std::vector<ir::Value*> outputs_to_next;    // the values sent to stage s+1, link order
  std::vector<ir::Value*> grads_from_next;    // training: the gradients of outputs_to_next that are floating
  std::vector<ir::Value*> grads_to_prev;      // training: the gradients of the floating inputs_from_prev
  std::vector<ir::Value*> data;               // the data inputs it reads
  std::vector<ir::Value*> params;             // the trained parameters it owns
  std::vector<ir::Value*> param_grads;        // training: their gradients
  ir::Value* loss = nullptr;                  // the last stage's loss (training)
  ir::Value* seed = nullptr;                  // the last stage's input "grad_in.<loss>", bound to 1
  std::vector<ir::Value*> outputs;            // the last stage's model outputs (forward only)
  // (forward value, its gradient) as autodiff::append_gradients gives them (training).
  std::vector<std::pair<int64_t, int64_t>> gradient_pairs;
  bool recomputed = false;  // its blocks recompute their activations in the backward (file comment)
};

// The order of a stage graph's outputs: outputs_to_next, then training: grads_to_prev,
// param_grads and the loss (last stage); forward only: the model's outputs (last stage).

// Builds every stage's graph from `model` (at full batch: rebatched here). `training` appends the
// backwards; `recompute` blocks recomputes each stage's blocks in its backward (ValueError as
// autodiff::recompute_blocks gives it, for a stage without blocks).
std::vector<StageGraph> build_stages(const ir::Graph& model, const StageSplit& split, bool training,
                                     autodiff::Recompute recompute = autodiff::Recompute::none);

// By parameter name: the stages (increasing) whose `params_of(stage)` holds a value of that name,
// for stages 0..stages-1. With the trained parameters, a name held by stages on two pipeline ranks
// is a tied weight (the compile checks its placements agree; the programs sum its gradients).
std::map<std::string, std::vector<int>> stages_by_param(
    int stages, const std::function<const std::vector<ir::Value*>&(int)>& params_of);

}  // namespace dt::pipeline

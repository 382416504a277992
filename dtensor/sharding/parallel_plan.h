// Parallel plans: which module is parallelised how, on which mesh dim (docs/plans.md).
//
//   {
//     "mesh_dims": ["dp", "tp"],
//     "inputs":  {"input": {"dp": "S(0)"}},
//     "outputs": {"logits": {"dp": "S(0)"}},
//     "modules": [
//       {"pattern": "*", "style": "fsdp", "mesh_dim": "dp"},
//       {"pattern": "h.*.attn.q_proj", "style": "colwise", "mesh_dim": "tp"},
//       {"pattern": "h.*.attn.o_proj", "style": "rowwise", "mesh_dim": "tp"}
//     ]
//   }
//
// A module is a parameter name without its last component (`h.0.attn.q_proj.weight` belongs to
// `h.0.attn.q_proj`); patterns are shell globs (`*` also crosses dots). Styles, per mesh dim:
//   colwise    weight S(0) (an embedding's S(1)), bias S(0): the output is sharded on its last dim;
//              with "blocks": b, S(0,blocks=b) (a fused qkv projection: each block sharded)
//   rowwise    weight S(1) (an embedding's S(0)), bias R: the input is sharded on its last dim and
//              the output is P(sum)
//   sequence   parameters R; the nodes that use the module's parameters run with their first
//              operand sharded on `dim` (default 1, the sequence dim of [B, S, H])
//   fsdp       every parameter S(0), stored only: it is gathered before use, never propagated;
//              SS(0) (strided) when a later mesh dim also shards dim 0 (FSDP over a colwise TP)
//   replicate  every parameter R
// Later entries override earlier ones for the same parameter and mesh dim. Data inputs and outputs
// are R on every mesh dim not named. Every problem throws dt::ValueError naming the pattern.
//
// Pipeline parallelism (dtensor/pipeline/stages.h resolves it against a model):
//   "pipeline": {"split_before": ["h.2"], "microbatches": 4, "schedule": "1f1b"}
//   "pipeline": {"stages": 2, "microbatches": 4}           (splits balanced by the FLOP estimate)
// cuts the model into stages on mesh dim "pp" (or "mesh_dim"), which must be one of mesh_dims; the
// rest of the plan applies within each stage's sub-mesh.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/layout/device_mesh.h"
#include "dtensor/layout/placement.h"
#include "dtensor/ir/graph.h"

namespace dt::sharding {

enum class Style : uint8_t { colwise, rowwise, sequence, fsdp, replicate };
std::string_view style_name(Style style);

struct ModuleStyle {
  std::string pattern;
  Style style = Style::replicate;
  std::string mesh_dim;
  int64_t dim = 1;  // sequence: the sharded activation dim
  // colwise: the weight is `blocks` equal fused projections (GPT-2's c_attn: 3, q k v), each
  // sharded on its own: weight and bias S(0,blocks=b), so the split into q, k, v stays sharded.
  int64_t blocks = 1;
};

// The plan's `pipeline` section (parsed only; pipeline/stages.h checks it against the model).
struct PipelinePlan {
  std::string mesh_dim = "pp";
  std::vector<std::string> split_before;  // module names, each starting a stage after the first
  int stages = 0;                         // or a stage count (0: split_before decides)
  int microbatches = 1;
  std::string schedule = "gpipe";  // gpipe | 1f1b | interleaved-1f1b (pipeline/schedule.h)
  int virtual_stages = 1;          // model chunks per rank (interleaved-1f1b)
  bool operator==(const PipelinePlan&) const = default;
};

struct ParallelPlan {
  std::vector<std::string> mesh_dims;  // names, one per mesh dim
  std::vector<ModuleStyle> modules;
  std::optional<PipelinePlan> pipeline;
  // Data input / graph output name -> mesh dim name -> placement (absent: R).
  std::map<std::string, std::map<std::string, Placement>> inputs, outputs;
  std::string source = "<plan>";  // file name for messages

  // Parses the JSON text; throws ValueError "<source>: ..." on malformed plans.
  static ParallelPlan parse(const std::string& text, const std::string& source = "<plan>");
  static ParallelPlan load(const std::string& path);
  // Returns the plan as JSON text (parse(to_json()) gives the same plan).
  std::string to_json() const;
};

// A plan applied to one graph and mesh: the placements every input and parameter starts with.
struct ResolvedPlan {
  std::vector<std::string> mesh_dim_names;
  std::vector<Placements> value_placements;  // by Value::id, for inputs and params (others empty)
  std::vector<uint32_t> stored_only;         // by Value::id: bit m set when mesh dim m is fsdp
  // By Value::id: bit m set when a colwise/rowwise style fixes the parameter's placement on mesh
  // dim m: its readers keep that shard (PyTorch's and Megatron's styles never gather a TP weight),
  // unless no strategy can, when the node falls back to replicated operands.
  std::vector<uint32_t> pinned;
  // By node index: the sequence dim forced onto operand 0 per mesh dim (-1: none).
  std::vector<std::vector<int64_t>> forced_operand0_dim;
  std::vector<Placements> output_placements;  // per graph output
  // By Value::id: the forward value whose gradient this value is (-1 or absent: none). Propagation
  // lays such a gradient out as the backward rule of a redistribution derives from its forward
  // value's placements (redistribute/backward.h), so the backward's collectives mirror the
  // forward's. Set for training steps (sharding/train_step_placement.h).
  std::vector<int> gradient_of;
  // Whether a partial operand may stay partial past an add of a replicated one (add_rule,
  // OpShardingRule::defers_reduction). Eager DTensor ops (dtensor/eager) turn it off: their
  // results keep PyTorch's placements, where P(sum) + R is reduced first.
  bool defer_reductions = true;
};

// Resolves `plan` against `graph` on `mesh`; throws ValueError for a pattern matching no module,
// a style on a mesh dim that does not exist, a style a module's shapes cannot take, and unknown
// inputs or outputs.
ResolvedPlan resolve_plan(const ParallelPlan& plan, const ir::Graph& graph, const DeviceMesh& mesh);

// Returns the module of a parameter name ("h.0.attn.q_proj.weight" -> "h.0.attn.q_proj").
std::string module_of(const std::string& param_name);

// True when the plan's pattern (a shell glob, `*` also crossing dots) matches module `name`.
bool pattern_matches(const std::string& pattern, const std::string& name);

}  // namespace dt::sharding

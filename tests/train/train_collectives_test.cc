// Sharded training issues the collectives Megatron and FSDP issue (compile only: the per-rank
// programs of a training step are counted, nothing runs, so the realistic size is cheap).
//
// gpt hidden 512, 8 heads, vocabulary 509 (no mesh here divides it), batch 4, seq 32; one SGD
// step graph (autodiff/train_step.h) compiled with the example plans. Per transformer block (the
// difference between 2 layers and 1):
//   tp:   forward 2 all_reduce, backward 2 all_reduce (the activation gradient before each layer
//         norm's backward), nothing else;
//   fsdp: one all_gather per parameter (per bucket with the default passes) in the forward, and
//         with the default passes (reshard-after-forward) again in the backward for every
//         parameter the backward reads but the last block's, one reduce_scatter per parameter
//         gradient (per bucket) into its shard; the loss is computed on each rank's rows (no
//         logits gathered) and all-reduced;
// and on every rank no collective reads a parameter's gradient except fsdp's reduce_scatter (no
// gradient is gathered or all-reduced whole), and loss-parallel cross_entropy's backward reuses
// the forward's row statistics: no logits gathered, no collective of its own.
#include <gtest/gtest.h>

#include <algorithm>

#include "dtensor/autodiff/train_step.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/passes/rank_pipeline.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/train_step_placement.h"
#include "tests/train/fsdp_plan.h"

namespace dt::sharding {
namespace {

const std::string kExamples = DTENSOR_EXAMPLES_DIR;

ir::GptConfig config(int64_t layers) {
  return {.vocab = 509, .hidden = 512, .heads = 8, .layers = layers, .max_seq = 32, .batch = 4, .seq = 32,
          .loss = true};
}

struct Programs {
  std::vector<ir::Graph> programs;
  std::vector<int> ranks;
};

Programs compile_forward(int64_t layers, const ParallelPlan& plan, const std::string& mesh) {
  CompiledModel m = compile(ir::build_gpt(config(layers)), plan, DeviceMesh::parse(mesh));
  return {std::move(m.programs), std::move(m.ranks)};
}

Programs compile_step(int64_t layers, const ParallelPlan& plan, const std::string& mesh,
                      autodiff::Recompute recompute = autodiff::Recompute::none,
                      const autodiff::OptimizerConfig& optimizer = {}) {
  autodiff::TrainStep step = autodiff::make_train_step(ir::build_gpt(config(layers)), optimizer, false, recompute);
  CompiledModel m = compile_train_step(step, plan, DeviceMesh::parse(mesh));
  return {std::move(m.programs), std::move(m.ranks)};
}

void run_default_passes(Programs& p) {
  passes::PassManager pm;
  pm.add(passes::parse_pipeline("default"));
  passes::run_rank_pipelines(pm, p.programs, p.ranks);
}

std::map<std::string, int> counts(const Programs& p, size_t i = 0) {
  return collective_stats(p.programs[i], p.ranks[i]).count;
}

std::map<std::string, int> diff(std::map<std::string, int> b, const std::map<std::string, int>& a) {
  for (auto& [k, v] : a) b[k] -= v;
  std::erase_if(b, [](const auto& kv) { return kv.second == 0; });
  return b;
}

// The collectives of `program` whose (first) operand is a parameter's gradient, as "op(%name)".
std::vector<std::string> collectives_on_gradients(const ir::Graph& program) {
  std::vector<std::string> out;
  for (const ir::Node* n : program.nodes()) {
    if (!ir::op_def(n->op).is_collective() || n->operands.empty()) continue;
    const std::string& name = n->operands[0]->name;
    if (name.rfind("grad.", 0) == 0) out.push_back(std::string(ir::op_name(n->op)) + "(%" + name + ")");
  }
  return out;
}

int count_op(const ir::Graph& program, ir::OpKind op) {
  int k = 0;
  for (const ir::Node* n : program.nodes()) k += n->op == op;
  return k;
}

TEST(TrainCollectives, TensorParallelTwoAllReducesPerBlockForwardAndTwoBackward) {
  const ParallelPlan tp = ParallelPlan::load(kExamples + "/gpt_tp.json");
  const auto fwd = diff(counts(compile_forward(2, tp, "4")), counts(compile_forward(1, tp, "4")));
  const auto step = diff(counts(compile_step(2, tp, "4")), counts(compile_step(1, tp, "4")));
  EXPECT_EQ(fwd, (std::map<std::string, int>{{"all_reduce", 2}}));
  EXPECT_EQ(step, (std::map<std::string, int>{{"all_reduce", 4}})) << "forward 2 + backward 2 per block";
}

TEST(TrainCollectives, TensorParallelStepGathersNothingAndNeverMovesAGradient) {
  const ParallelPlan tp = ParallelPlan::load(kExamples + "/gpt_tp.json");
  for (const char* mesh : {"4", "3"}) {
    Programs step = compile_step(2, tp, mesh);
    for (size_t i = 0; i < step.programs.size(); ++i) {
      const std::string where = std::string("mesh ") + mesh + " rank " + std::to_string(i);
      // The whole step, 2 blocks: forward 2 per block + 3 of loss-parallel cross_entropy's row
      // statistics; backward one per layer norm whose output feeds colwise linears (2 per block,
      // ln_f before lm_head). No logits and no gradient gathered or reduce_scattered. (On 3 ranks
      // the 8 heads do not divide: attention's head reshapes move activations with all_to_all.)
      auto c = counts(step, i);
      EXPECT_EQ(c["all_reduce"], 2 * 2 + 3 + 2 * 2 + 1) << where;
      c.erase("all_reduce");
      if (std::string(mesh) == "3") c.erase("all_to_all_single");
      EXPECT_EQ(c, (std::map<std::string, int>{})) << where;
      EXPECT_EQ(collectives_on_gradients(step.programs[i]), std::vector<std::string>{}) << where;
      // Loss parallel: the backward is local, from the forward's row statistics.
      EXPECT_EQ(count_op(step.programs[i], ir::OpKind::cross_entropy_max), 1) << where;
      int sharded_backward = 0;
      for (const ir::Node* n : step.programs[i].nodes())
        sharded_backward += n->op == ir::OpKind::cross_entropy_backward && n->operands.size() == 5;
      EXPECT_EQ(sharded_backward, 1) << where;
    }
  }
}

// The optimizer's state is sharded like its parameter (train_step_placement.h) and its update is
// elementwise: AdamW's step issues exactly SGD's collectives, for every example plan.
TEST(TrainCollectives, AdamWIssuesTheSameCollectivesAsSgd) {
  autodiff::OptimizerConfig adamw;
  adamw.kind = "adamw";
  adamw.lr = 1e-3;
  for (const char* name : {"gpt_tp", "gpt_tp_vocab", "gpt_sp", "gpt_fsdp_tp"}) {
    const ParallelPlan plan = ParallelPlan::load(kExamples + "/" + name + ".json");
    const std::string mesh = std::string(name) == "gpt_fsdp_tp" ? "2x2" : "2";
    const Programs sgd = compile_step(2, plan, mesh), adam = compile_step(2, plan, mesh, autodiff::Recompute::none, adamw);
    for (size_t i = 0; i < sgd.programs.size(); ++i)
      EXPECT_EQ(counts(adam, i), counts(sgd, i)) << name << " rank " << i;
  }
}

// Recomputing the blocks (autodiff/recompute.h) runs the block's forward collectives that the
// backward needs again, as ordinary collectives of the step: on tp, the attention's o_proj
// all_reduce (what follows it is read by ln_2's backward); the mlp's fc_out all_reduce is not
// recomputed, since only the residual add reads it and add's backward reads no operand. After the
// default passes (whose cse must not merge the recomputed collectives with the forward's) they are
// still there, and on fsdp every rank issues the same collectives in the same order (no deadlock).
std::vector<std::string> collective_sequence(const ir::Graph& program) {
  std::vector<std::string> out;
  for (const ir::Node* n : program.nodes())
    if (ir::op_def(n->op).is_collective()) out.push_back(std::string(ir::op_name(n->op)));
  return out;
}

int all_reduces(const Programs& p, size_t i = 0) {
  auto c = counts(p, i);
  return c["all_reduce"] + c["all_reduce_"] + c["one_shot_all_reduce"] + c["all_reduce_coalesced"];
}

// Bytes the all-reduce family sends (bucketing merges all_reduces, so their count can stay).
int64_t all_reduce_bytes(const Programs& p, size_t i = 0) {
  auto b = collective_stats(p.programs[i], p.ranks[i]).bytes;
  return b["all_reduce"] + b["all_reduce_"] + b["one_shot_all_reduce"] + b["all_reduce_coalesced"];
}

TEST(TrainCollectives, RecomputeRunsTheBlocksCollectivesAgainInTheSameOrderOnEveryRank) {
  const ParallelPlan tp = ParallelPlan::load(kExamples + "/gpt_tp.json");
  const auto blocks = autodiff::Recompute::blocks;
  EXPECT_EQ(diff(counts(compile_step(2, tp, "4", blocks)), counts(compile_step(1, tp, "4", blocks))),
            (std::map<std::string, int>{{"all_reduce", 5}}))
      << "forward 2 + recomputed 1 + backward 2 per block";
  {
    Programs kept = compile_step(2, tp, "4"), rec = compile_step(2, tp, "4", blocks);
    EXPECT_EQ(all_reduces(rec), all_reduces(kept) + 2);
    run_default_passes(kept);
    run_default_passes(rec);
    EXPECT_GT(all_reduce_bytes(rec), all_reduce_bytes(kept))
        << "the default passes merged the recomputed all_reduces away";
  }
  Programs kept = compile_step(2, fsdp_plan(), "4"), rec = compile_step(2, fsdp_plan(), "4", blocks);
  run_default_passes(kept);
  run_default_passes(rec);
  for (size_t i = 0; i < rec.programs.size(); ++i) {
    EXPECT_EQ(collective_sequence(rec.programs[i]), collective_sequence(rec.programs[0])) << "rank " << i;
    EXPECT_GT(rec.programs[i].nodes().size(), kept.programs[i].nodes().size()) << "rank " << i;
  }
}

// Appends v's name and, through what the lowering adds around the collective of an uneven shard
// (the zero padding (cat) of a reduce_scatter, the flattening (reshape) and replication (cat) of a
// gather), the names of the values it was made from: one of them is the parameter or gradient.
void append_chain(const ir::Value* v, std::vector<std::string>& out) {
  for (;;) {
    out.push_back(v->name);
    if (!v->producer || (v->producer->op != ir::OpKind::cat && v->producer->op != ir::OpKind::reshape)) return;
    v = v->producer->operands[0];
  }
}

// Returns the names of the values a collective moves: the members of its bucket (the operands of
// the all_gather copy-in or chunk_cat that builds its input) or its operand itself.
std::vector<std::string> members(const ir::Node& n) {
  const ir::Value* in = n.operands[0];
  std::vector<std::string> out;
  if (in->producer && (in->producer->op == ir::OpKind::all_gather_copy_in || in->producer->op == ir::OpKind::chunk_cat))
    for (const ir::Value* v : in->producer->operands) append_chain(v, out);
  else
    append_chain(in, out);
  return out;
}

enum class Family { gather, reduce_scatter, all_reduce, other };
Family family(ir::OpKind op) {
  using K = ir::OpKind;
  if (op == K::all_gather_into_tensor || op == K::all_gather_into_tensor_ || op == K::all_to_all_single)
    return Family::gather;
  if (op == K::reduce_scatter_tensor) return Family::reduce_scatter;
  if (op == K::all_reduce || op == K::all_reduce_ || op == K::one_shot_all_reduce) return Family::all_reduce;
  return Family::other;
}

// FSDP on 4 ranks, vocabulary 512 (every parameter shards evenly) and 509 (the tables' rows do not
// divide: their gradients are reduce_scattered padded to equal chunks), without and with the
// default passes (bucketing, reshard-after-forward): without passes every parameter is gathered
// exactly once in the step, as in the forward (kept for the backward); with them every weight the
// backward reads (linear and layer-norm weights) is gathered again for the backward but lm_head's
// (the forward's last block is kept), the others (embedding tables and biases, which no backward
// reads) once. Only parameters are gathered (never logits rows nor another activation). Every
// parameter gradient but wpe's is reduce_scattered exactly once into its shard (one reduce_scatter
// per bucket: a bucket's members are moved by its one collective), and the all_reduces are the
// positional embedding's [seq, H] activation gradient (replicated in the forward, summed over the
// batch shards in the backward), from which each rank computes wpe's gradient and keeps its shard,
// and the loss (a partial sum of the ranks' row means); the default passes bucket those two into
// one. No other collective moves a gradient.
TEST(TrainCollectives, FsdpGathersPerBucketForwardAndAgainInBackwardOneReduceScatterPerBucket) {
  for (const int64_t vocab : {512, 509}) {
  ir::GptConfig cfg = config(2);
  cfg.vocab = vocab;
  std::vector<std::string> params;
  const ir::Graph model = ir::build_gpt(cfg);
  for (const ir::Value* p : model.params()) params.push_back(p->name);
  for (const bool with_passes : {false, true}) {
    CompiledModel f = compile(ir::build_gpt(cfg), fsdp_plan(), DeviceMesh::parse("4"));
    Programs fwd{std::move(f.programs), std::move(f.ranks)};
    autodiff::TrainStep ts = autodiff::make_train_step(ir::build_gpt(cfg), {});
    CompiledModel c = compile_train_step(ts, fsdp_plan(), DeviceMesh::parse("4"));
    Programs step{std::move(c.programs), std::move(c.ranks)};
    if (with_passes) {
      run_default_passes(fwd);
      run_default_passes(step);
    }
    // Counts the gathers that move parameters (and how often each is moved). In a step program
    // every gather must (the forward program gathers its logits output whole, as asked).
    auto param_gathers = [&](const ir::Graph& program, std::map<std::string, int>& times, const std::string& where,
                             bool only_params) {
      int collectives = 0;
      for (const ir::Node* n : program.nodes()) {
        if (family(n->op) != Family::gather || n->operands.empty()) continue;
        bool of_params = false;
        for (const std::string& m : members(*n))
          if (std::find(params.begin(), params.end(), m) != params.end()) {
            times[m]++;
            of_params = true;
          }
        if (only_params) {
          EXPECT_TRUE(of_params) << where << ": " << ir::op_name(n->op) << " gathers %" << n->operands[0]->name;
        }
        collectives += of_params;
      }
      return collectives;
    };
    // Gathered again for the backward (with the passes): the weights the backward reads, but the
    // last block's.
    auto regathered = [&](const std::string& p) {
      const bool weight = p.size() > 7 && p.compare(p.size() - 7, 7, ".weight") == 0;
      return with_passes && weight && p != "wte.weight" && p != "wpe.weight" && p != "lm_head.weight";
    };
    for (size_t i = 0; i < step.programs.size(); ++i) {
      const std::string where = std::string(with_passes ? "default passes" : "no passes") + ", vocab " +
                                std::to_string(vocab) + ", rank " + std::to_string(i);
      std::map<std::string, int> in_step, in_forward;
      const int step_gathers = param_gathers(step.programs[i], in_step, where, true);
      const int forward_gathers = param_gathers(fwd.programs[i], in_forward, where + " (forward)", false);
      if (with_passes) EXPECT_GT(step_gathers, forward_gathers) << where << ": the backward gathers again";
      else EXPECT_EQ(step_gathers, forward_gathers) << where;
      std::map<std::string, int> grads;
      int all_reduces = 0, reduce_scatters = 0;
      for (const ir::Node* n : step.programs[i].nodes()) {
        const Family fam = family(n->op);
        if (!ir::op_def(n->op).is_collective() || n->operands.empty()) continue;
        all_reduces += fam == Family::all_reduce;
        reduce_scatters += fam == Family::reduce_scatter;
        for (const std::string& m : members(*n)) {
          if (m.rfind("grad.", 0) != 0) continue;
          EXPECT_EQ(fam, Family::reduce_scatter) << where << ": " << ir::op_name(n->op) << " moves " << m;
          grads[m.substr(5)]++;
        }
      }
      EXPECT_EQ(all_reduces, with_passes ? 1 : 2) << where;
      for (const std::string& p : params) {
        EXPECT_EQ(in_forward[p], 1) << where << ": " << p << " gathered " << in_forward[p] << " times in the forward";
        EXPECT_EQ(in_step[p], regathered(p) ? 2 : 1) << where << ": " << p << " gathered " << in_step[p] << " times";
        EXPECT_EQ(grads[p], p == "wpe.weight" ? 0 : 1) << where << ": gradient of " << p;
      }
      if (!with_passes) {
        EXPECT_EQ(step_gathers, int(params.size())) << where;
        EXPECT_EQ(reduce_scatters, int(params.size()) - 1) << where;
      } else {
        EXPECT_LT(step_gathers, int(params.size())) << where << ": the default passes bucket the gathers";
        EXPECT_LT(reduce_scatters, int(params.size()) - 1) << where << ": and the reduce_scatters";
        if (i == 0)
          std::printf("fsdp 4, default passes: %d parameter gathers (%zu parameters), %d reduce_scatters\n",
                      step_gathers, params.size(), reduce_scatters);
      }
    }
  }
  }
}

}  // namespace
}  // namespace dt::sharding

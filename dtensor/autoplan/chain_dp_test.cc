// The chain DP (chain_dp.h) and the plan search's use of it (search.h, method chain-dp): on a
// synthetic chain it finds the brute-force optimum where the greedy path does not; on the example
// gpt (one layer, every module deciding alone) on meshes 2, 3, 4 and 2x2 its plan costs exactly
// what costing every plan finds, for each style a role can take; with the repeated blocks grouped it
// is never worse than the exact search over classes, nor on 4 layers than descent; its plans (which
// may style two layers differently) run like one device, and it is deterministic.
#include "dtensor/autoplan/chain_dp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fmt/format.h>

#include "dtensor/autoplan/search.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/job/job.h"
#include "dtensor/kernels/ops.h"
#include "tests/support/sanitizer.h"

namespace dt::autoplan {
namespace {

using sharding::Style;

// A chain whose state is the last choice: step cost = a table of (previous, choice), from a
// fixed seed. Brute force over every path against the DP.
TEST(ChainDp, FindsTheBruteForceOptimum) {
  const int steps = 6, choices = 3;
  Generator gen(11);
  const Tensor table = randn({steps, choices + 1, choices}, gen);  // [step][previous + 1][choice]
  const std::vector<double> t = table.to_doubles();
  auto cost = [&](int k, int prev, int c) { return t[size_t((k * (choices + 1) + prev + 1) * choices + c)]; };
  int64_t evals = 0;
  const ChainStepFn step = [&](const std::vector<int>& ch, const std::string& state) {
    EXPECT_EQ(state, ch.size() == 1 ? "" : std::to_string(ch[ch.size() - 2]));
    const int k = int(ch.size()) - 1;
    // Rejected: choice 2 right after choice 2 (a path constraint the DP must respect).
    if (k > 0 && ch[size_t(k)] == 2 && ch[size_t(k - 1)] == 2) return ChainStepCost{};
    return ChainStepCost{true, cost(k, k ? ch[size_t(k - 1)] : -1, ch[size_t(k)]), std::to_string(ch.back())};
  };
  const std::optional<ChainResult> r = chain_dp(std::vector<int>(steps, choices), step, 1000, &evals);
  ASSERT_TRUE(r);
  double best = 1e30;
  std::vector<int> best_path, path(steps);
  for (int code = 0; code < int(std::pow(choices, steps)); ++code) {
    int x = code;
    double sum = 0;
    bool ok = true;
    for (int k = 0; k < steps; ++k, x /= choices) path[size_t(k)] = x % choices;
    for (int k = 0; k < steps; ++k) {
      if (k > 0 && path[size_t(k)] == 2 && path[size_t(k - 1)] == 2) ok = false;
      sum += cost(k, k ? path[size_t(k - 1)] : -1, path[size_t(k)]);
    }
    if (ok && sum < best) best = sum, best_path = path;
  }
  EXPECT_NEAR(r->cost, best, 1e-9);
  EXPECT_EQ(r->choices, best_path);
  EXPECT_EQ(evals, choices + (steps - 1) * choices * choices);  // states x choices per step
  // Too small a budget: no answer rather than a partial one.
  EXPECT_FALSE(chain_dp(std::vector<int>(steps, choices), step, 10));
}

ir::Graph gpt(int64_t layers) {
  return ir::build_gpt({.vocab = 96, .hidden = 64, .heads = 4, .layers = layers, .max_seq = 16, .batch = 4, .seq = 8});
}

SearchOptions forced(const std::string& method, std::vector<Style> tp, std::vector<Style> dp, bool group) {
  SearchOptions o;
  o.method = method;
  o.tp_styles = std::move(tp);
  o.dp_styles = std::move(dp);
  o.group_blocks = group;
  return o;
}

TEST(ChainDp, EqualsTheExhaustiveSearchOverEveryModulesStyle) {
  // One layer: 12 modules deciding alone, 2 styles each per mesh dim: 4096 plans per role
  // assignment, every one costed by the exact search.
  // Sanitized (tests/support/sanitizer.h): one mesh of each kind, 3 and 2x2.
  const ir::Graph g = gpt(1);
  const std::vector<std::string> meshes = testing::kSanitized ? std::vector<std::string>{"3", "2x2"}
                                                              : std::vector<std::string>{"2", "3", "4", "2x2"};
  for (const Style other : {Style::colwise, Style::rowwise, Style::sequence, Style::fsdp})
    for (const std::string& mesh_text : meshes) {
      const std::vector<Style> tp = {Style::replicate, other};
      const std::vector<Style> dp = mesh_text == "2x2" ? std::vector<Style>{Style::replicate}
                                                      : std::vector<Style>{Style::replicate, Style::fsdp};
      SCOPED_TRACE(fmt::format("{} on mesh {}", sharding::style_name(other), mesh_text));
      const DeviceMesh mesh = DeviceMesh::parse(mesh_text);
      const SearchResult exact = search(g, mesh, forced("exact", tp, dp, false));
      const SearchResult dp_result = search(g, mesh, forced("chain-dp", tp, dp, false));
      ASSERT_EQ(exact.method, "exact");
      // The exact search took the dp role exactly too; the DP ran on every role it was given.
      for (const auto& [label, a] : dp_result.role_alternatives)
        EXPECT_NE(a.method, "descent") << label;
      EXPECT_TRUE(dp_result.exact);
      EXPECT_NEAR(dp_result.estimate.step_us, exact.estimate.step_us, 1e-9 * exact.estimate.step_us)
          << explain(dp_result) << explain(exact);
      EXPECT_LT(dp_result.evaluated, exact.evaluated);
    }
}

TEST(ChainDp, NeverWorseThanTheExactSearchOverClassesNorDescent) {
  Generator gen(5);
  // Sanitized (tests/support/sanitizer.h): 2 layers alone (4 layers repeats the same paths on a
  // longer chain).
  const std::vector<int64_t> layer_counts = testing::kSanitized ? std::vector<int64_t>{2} : std::vector<int64_t>{2, 4};
  for (const int64_t layers : layer_counts) {
    const ir::Graph g = gpt(layers);
    const Tensor input = randint({4, 8}, 0, 96, gen);
    job::TensorMap weights = ir::random_weights(g, 3);
    job::JobOptions one;
    one.mesh = DeviceMesh::parse("1");
    const Tensor want = job::Job::compile(g, one).run(job::Weights::full(weights), {{"input", input}}).outputs[0];
    for (const std::string mesh_text : {"4", "2x2"}) {
      if (layers == 4 && mesh_text == "2x2") continue;  // ~100 s: 10 choices a module on 2 mesh dims
      SCOPED_TRACE(fmt::format("{} layers on mesh {}", layers, mesh_text));
      const DeviceMesh mesh = DeviceMesh::parse(mesh_text);
      SearchOptions dp_opt = forced("chain-dp", {}, {}, true);
      dp_opt.chain_max_work = 100000000;
      const SearchResult dp_result = search(g, mesh, dp_opt);
      EXPECT_EQ(dp_result.method, "chain-dp") << explain(dp_result);
      const SearchResult descent = search(g, mesh, forced("descent", {}, {}, true));
      EXPECT_EQ(descent.method, "descent");
      EXPECT_LE(dp_result.estimate.step_us, descent.estimate.step_us + 1e-9) << explain(dp_result) << explain(descent);
      if (layers == 2) {
        // Over classes, with 2 styles a role: every layer alike, 2^12 plans costed.
        const std::vector<Style> tp = {Style::replicate, Style::colwise}, dp = {Style::replicate};
        const SearchResult classes = search(g, mesh, forced("exact", tp, dp, true));
        const SearchResult dp_same = search(g, mesh, forced("chain-dp", tp, dp, true));
        EXPECT_LE(dp_same.estimate.step_us, classes.estimate.step_us + 1e-9);
      }
      // Its plan runs like one device, and the search repeats itself byte for byte.
      job::JobOptions o;
      o.mesh = mesh;
      o.plan = dp_result.plan;
      const Tensor got = job::Job::compile(g, o).run(job::Weights::full(weights), {{"input", input}}).outputs[0];
      const std::vector<double> a = got.to_doubles(), b = want.to_doubles();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << i;
      EXPECT_EQ(to_json(search(g, mesh, dp_opt)), to_json(dp_result));
    }
  }
}

}  // namespace
}  // namespace dt::autoplan

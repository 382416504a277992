// The deadlock proof for point-to-point transfers: the order of a pair's sends and recvs on one
// group decides whether the heads pair up (threads backend semantics), mismatched pairs are
// refused, and the pass pipeline runs the proof whenever a program has a transfer. By orbit: a
// pipeline on a pp x dp mesh (stages joined by links, each backward's weight gradient all_reduced
// on dp) is proved from one program per orbit with the verdict and message of the proof over every
// rank (also with 2 model chunks per rank, interleaved-1f1b), and at 4 x 16,384 ranks the proof
// reads 8 programs.
#include "dtensor/passes/p2p_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/passes/rank_consistency.h"
#include "dtensor/passes/rank_pipeline.h"
#include "tests/support/error_text.h"
#include "tests/support/pipeline_stages.h"

namespace dt::passes {
namespace {

using Steps = std::function<void(ir::Builder&, int rank, std::vector<ir::Value*>& outs)>;

// Returns one program per rank of group pp = [0, 1], built by `steps`.
std::vector<ir::Graph> programs(const Steps& steps, int n = 2) {
  std::vector<ir::Graph> out;
  for (int r = 0; r < n; ++r) {
    out.emplace_back("rank" + std::to_string(r));
    ir::Builder b(out.back());
    std::vector<int> ranks;
    for (int k = 0; k < n; ++k) ranks.push_back(k);
    b.group("pp", ranks);
    std::vector<ir::Value*> outs;
    steps(b, r, outs);
    b.outputs(outs);
  }
  return out;
}

void check(const std::vector<ir::Graph>& gs) {
  std::vector<const ir::Graph*> view;
  std::vector<int> ranks;
  for (size_t i = 0; i < gs.size(); ++i) {
    view.push_back(&gs[i]);
    ranks.push_back(int(i));
  }
  check_p2p_order(view, ranks, "after test");
}

using test::error_text;

std::string failure(const std::vector<ir::Graph>& gs) {
  return error_text<InternalError>([&] { check(gs); });
}

// 1F1B's steady state on 2 stages: stage 0 sends activations a0, a1 and receives gradient g0;
// stage 1 receives a0, sends g0, receives a1. `recv_first` is whether stage 0 issues its recv of g0
// before its send of a1.
std::vector<ir::Graph> one_f_one_b(bool recv_first) {
  return programs([&](ir::Builder& b, int r, std::vector<ir::Value*>& outs) {
    if (r == 0) {
      ir::Value* a0 = b.input("a0", DType::f32, {4});
      ir::Value* a1 = b.input("a1", DType::f32, {4});
      ir::Value* s0 = b.send(a0, "pp", 1, /*tag=*/0);
      ir::Value* g0 = nullptr;
      if (recv_first) g0 = b.recv("pp", 1, DType::f32, {4}, /*tag=*/1);
      ir::Value* s1 = b.send(a1, "pp", 1, /*tag=*/2);
      if (!recv_first) g0 = b.recv("pp", 1, DType::f32, {4}, /*tag=*/1);
      outs.push_back(b.wait_tensor(g0));
      b.wait_tensor(s0);
      b.wait_tensor(s1);
    } else {
      ir::Value* a0 = b.wait_tensor(b.recv("pp", 0, DType::f32, {4}, /*tag=*/0));
      ir::Value* s = b.send(b.relu(a0), "pp", 0, /*tag=*/1);
      ir::Value* a1 = b.wait_tensor(b.recv("pp", 0, DType::f32, {4}, /*tag=*/2));
      b.wait_tensor(s);
      outs.push_back(a1);
    }
  });
}

TEST(P2pOrder, AcceptsHeadsThatPairUp) {
  EXPECT_EQ(failure(one_f_one_b(/*recv_first=*/true)), "no error");
}

TEST(P2pOrder, RefusesCrossedSendsAndNamesBothRanks) {
  const std::string msg = failure(one_f_one_b(/*recv_first=*/false));
  EXPECT_NE(msg.find("can deadlock after test"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 waits for"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1 waits for"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sends to rank 1 (tag 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("group pp [0, 1]"), std::string::npos) << msg;
}

TEST(P2pOrder, RefusesAWaitBeforeThePeerCanSend) {
  // Each rank waits for its recv before issuing its send: a cycle of waits.
  auto gs = programs([](ir::Builder& b, int r, std::vector<ir::Value*>& outs) {
    ir::Value* x = b.input("x", DType::f32, {3});
    ir::Value* got = b.wait_tensor(b.recv("pp", 1 - r, DType::f32, {3}));
    b.wait_tensor(b.send(x, "pp", 1 - r));
    outs.push_back(got);
  });
  EXPECT_NE(failure(gs).find("can deadlock"), std::string::npos);
}

TEST(P2pOrder, RefusesMismatchedPairs) {
  auto with = [](int64_t tag, DType dtype, int64_t count) {
    return programs([=](ir::Builder& b, int r, std::vector<ir::Value*>& outs) {
      if (r == 0) {
        b.wait_tensor(b.send(b.input("x", DType::f32, {5}), "pp", 1, /*tag=*/3));
        outs.push_back(b.input("y", DType::f32, {1}));
      } else {
        outs.push_back(b.wait_tensor(b.recv("pp", 0, dtype, {count}, tag)));
      }
    });
  };
  EXPECT_EQ(failure(with(3, DType::f32, 5)), "no error");
  EXPECT_NE(failure(with(4, DType::f32, 5)).find("rank 0 sends to rank 1 (tag 3, f32[5])"), std::string::npos);
  EXPECT_NE(failure(with(3, DType::f64, 5)).find("receives from rank 0 (tag 3, f64[5])"), std::string::npos);
  EXPECT_NE(failure(with(3, DType::f32, 6)).find("not rank-consistent"), std::string::npos);
}

TEST(P2pOrder, ASendNobodyReceivesIsPendingAtTheEnd) {
  auto gs = programs([](ir::Builder& b, int r, std::vector<ir::Value*>& outs) {
    ir::Value* x = b.input("x", DType::f32, {2});
    if (r == 0) b.send(x, "pp", 1);  // never waited, never received
    outs.push_back(x);
  });
  EXPECT_NE(failure(gs).find("rank 0 ends with"), std::string::npos);
}

TEST(P2pOrder, CollectivesAndTransfersShareTheGroupsQueue) {
  // Rank 0 issues an all_reduce on pp before its send; rank 1 receives before joining the
  // all_reduce: the heads are all_reduce vs recv, so neither moves.
  auto make = [](bool send_first) {
    return programs([=](ir::Builder& b, int r, std::vector<ir::Value*>& outs) {
      ir::Value* x = b.input("x", DType::f32, {2});
      if (r == 0) {
        ir::Value* s = send_first ? b.send(x, "pp", 1) : nullptr;
        ir::Value* ar = b.all_reduce(x, "pp");
        if (!send_first) s = b.send(x, "pp", 1);
        b.wait_tensor(s);
        outs.push_back(b.wait_tensor(ar));
      } else {
        ir::Value* got = b.wait_tensor(b.recv("pp", 0, DType::f32, {2}));
        outs.push_back(b.wait_tensor(b.all_reduce(got, "pp")));
      }
    });
  };
  EXPECT_EQ(failure(make(true)), "no error");
  EXPECT_NE(failure(make(false)).find("can deadlock"), std::string::npos);
}

TEST(P2pOrder, ThePassPipelineKeepsTransfersAndProvesThem) {
  // dce would drop a send whose wait nobody reads and cse would merge two equal recvs; neither
  // may, and the pipeline's check runs the proof.
  auto gs = programs([](ir::Builder& b, int r, std::vector<ir::Value*>& outs) {
    if (r == 0) {
      ir::Value* x = b.input("x", DType::f32, {2});
      b.wait_tensor(b.send(x, "pp", 1));
      b.wait_tensor(b.send(x, "pp", 1));
      outs.push_back(x);
    } else {
      ir::Value* a = b.wait_tensor(b.recv("pp", 0, DType::f32, {2}));
      ir::Value* c = b.wait_tensor(b.recv("pp", 0, DType::f32, {2}));
      outs.push_back(b.add(a, c));
    }
  });
  PassManager pm;
  pm.add(parse_pipeline("default"));
  run_rank_pipelines(pm, gs, std::vector<int>{0, 1});
  int sends = 0, recvs = 0;
  for (const ir::Node* n : gs[0].nodes()) sends += n->op == ir::OpKind::send;
  for (const ir::Node* n : gs[1].nodes()) recvs += n->op == ir::OpKind::recv;
  EXPECT_EQ(sends, 2);
  EXPECT_EQ(recvs, 2);

  auto crossed = one_f_one_b(/*recv_first=*/false);
  PassManager none;
  EXPECT_THROW(run_rank_pipelines(none, crossed, std::vector<int>{0, 1}), InternalError);
}

// A pipeline of `stages` ranks along pp on a stages x dp mesh: rank s * dp + d is pipeline rank s
// at dp coordinate d. With virtual_stages v (interleaved-1f1b) it holds model chunks s, s + p, ...
// and link k (chunks k and k + 1) joins pipeline ranks k mod p and (k + 1) mod p. Its orbits (dp
// coordinate 0 or not, per pipeline rank, as the partitioner's classes would give) and the
// programs of the ranks asked for.
struct PipelineMesh {
  int stages = 2, dp = 3, microbatches = 2;
  pipeline::Schedule schedule = pipeline::Schedule::one_f_one_b;
  int crossed_stage = -1;  // this stage's program swaps two link posts (a deadlock), -1: none
  int virtual_stages = 1;

  int rank(int s, int d) const { return s * dp + d; }
  std::vector<int> group(int rank, const std::string& name) const {
    const int s = rank / dp, d = rank % dp;
    if (name == "dp") {
      std::vector<int> out;
      for (int k = 0; k < dp; ++k) out.push_back(this->rank(s, k));
      return out;
    }
    const int link = std::stoi(name.substr(4));  // "link<k>"
    const int from = link % stages, to = (link + 1) % stages;
    if (s != from && s != to) return {};
    return {this->rank(from, d), this->rank(to, d)};
  }
  // The links pipeline rank s's chunks touch.
  std::vector<int> links(int s) const {
    std::vector<int> out;
    const int n = stages * virtual_stages;
    for (int c = s; c < n; c += stages)
      for (int link : {c - 1, c})
        if (link >= 0 && link < n - 1) out.push_back(link);
    return out;
  }
  ir::RankOrbits orbits() const {
    ir::RankOrbits out;
    for (int s = 0; s < stages; ++s)
      for (int rest = 0; rest < (dp > 1 ? 2 : 1); ++rest) {
        ir::RankOrbit o{.representative = rank(s, rest), .ranks = rest ? dp - 1 : 1, .same_as = -1, .peers = {}};
        std::vector<std::string> names{"dp"};
        for (int link : links(s)) names.push_back("link" + std::to_string(link));
        for (const std::string& name : names) {
          std::vector<ir::OrbitPeer> peers;
          for (int r : group(o.representative, name)) {
            const size_t orbit = size_t(orbit_of(r));
            if (std::none_of(peers.begin(), peers.end(), [&](const ir::OrbitPeer& q) { return q.orbit == orbit; }))
              peers.push_back({orbit, r});
          }
          o.peers.emplace_back(name, std::move(peers));
        }
        out.orbits.push_back(std::move(o));
      }
    out.orbit_of = [this](int r) { return orbit_of(r); };
    out.group_ranks = [this](int r, const std::string& name) { return group(r, name); };
    return out;
  }
  int orbit_of(int r) const { return (dp > 1 ? 2 : 1) * (r / dp) + (dp > 1 && r % dp != 0); }
  ir::Graph program(int r) const {
    test_support::PipelineStageOptions o{.schedule = schedule, .stages = stages, .stage = r / dp,
                                          .microbatches = microbatches, .virtual_stages = virtual_stages,
                                          .rows = 2, .width = 2,
                                          .weight_gradient = true, .link_ranks = {}, .dp_group = "dp",
                                          .dp_ranks = group(r, "dp")};
    o.link_ranks = [this, r](int link) { return group(r, "link" + std::to_string(link)); };
    ir::Graph g = test_support::pipeline_stage_graph(o);
    if (o.stage == crossed_stage) wait_first_for_the_next_stage(g, o.stage, stages * virtual_stages);
    return g;
  }
  // Makes the program start by waiting for a message from its neighbour on a link before anything
  // else: the neighbour first waits for this stage's first message on that link (a cycle). n: the
  // (virtual) stages.
  static void wait_first_for_the_next_stage(ir::Graph& g, int s, int n) {
    const int link = s < n - 1 ? s : s - 1;
    std::vector<ir::Node*> order(g.nodes().begin(), g.nodes().end());
    ir::Builder b(g);
    ir::Value* got = b.wait_tensor(b.recv("link" + std::to_string(link), link == s ? 1 : 0, DType::f32, {2, 2}, 99));
    order.insert(order.begin(), got->producer);
    order.insert(order.begin(), got->producer->operands[0]->producer);
    g.set_node_order(order);
  }
};

// Proves `mesh`'s programs over every rank and by orbit (reading one program per orbit): the same
// verdict, and on a crossed order the same failure.
void expect_the_same_verdict(const PipelineMesh& mesh) {
  const int crossed = mesh.crossed_stage;
  SCOPED_TRACE(std::string(pipeline::schedule_name(mesh.schedule)) + " p " + std::to_string(mesh.stages) + " v " +
               std::to_string(mesh.virtual_stages) + " crossed stage " + std::to_string(crossed));
  std::vector<ir::Graph> all;
  std::vector<const ir::Graph*> view;
  std::vector<int> ranks;
  for (int r = 0; r < mesh.stages * mesh.dp; ++r) all.push_back(mesh.program(r));
  for (int r = 0; r < mesh.stages * mesh.dp; ++r) {
    view.push_back(&all[size_t(r)]);
    ranks.push_back(r);
  }
  const ir::RankOrbits orbits = mesh.orbits();
  std::vector<const ir::Graph*> reps;
  for (const ir::RankOrbit& o : orbits.orbits) reps.push_back(&all[size_t(o.representative)]);
  const std::string every = error_text<InternalError>([&] { check_p2p_order(view, ranks, "after test"); });
  const std::string by_orbit = error_text<InternalError>(
      [&] { EXPECT_EQ(check_p2p_order_by_orbit(reps, orbits, "after test"), orbits.orbits.size()); });
  EXPECT_EQ(every == "no error", crossed < 0) << every;
  EXPECT_EQ(by_orbit == "no error", crossed < 0) << by_orbit;
  // The same failure (a waiting cycle, or the last stage's stray recv paired with a send of
  // another tag), and the representatives' first line as the proof over every rank gives it.
  if (crossed >= 0) {
    for (const char* kind : {"can deadlock after test", "not rank-consistent after test"})
      EXPECT_EQ(every.find(kind) == std::string::npos, by_orbit.find(kind) == std::string::npos) << kind;
    const std::string first = by_orbit.substr(0, by_orbit.find(';'));
    if (by_orbit.find("can deadlock") != std::string::npos) {
      EXPECT_NE(every.find(first.substr(first.find("rank "))), std::string::npos) << every << "\n" << by_orbit;
    }
  }
}

TEST(P2pOrderByOrbit, GivesTheVerdictOfTheProofOverEveryRank) {
  for (int crossed : {-1, 0, 1, 2})
    for (pipeline::Schedule sch : {pipeline::Schedule::gpipe, pipeline::Schedule::one_f_one_b})
      expect_the_same_verdict({.stages = 3, .dp = 3, .microbatches = 4, .schedule = sch, .crossed_stage = crossed});
}

TEST(P2pOrderByOrbit, GivesTheVerdictOfTheProofOverEveryRankWithVirtualStages) {
  // interleaved-1f1b, 2 chunks per rank: links k and k + p join the same two ranks (one channel),
  // and on p = 2 the last chunk's link wraps back to rank 0.
  for (int p : {2, 3})
    for (int crossed = -1; crossed < p; ++crossed)
      expect_the_same_verdict({.stages = p, .dp = 3, .microbatches = 4, .schedule = pipeline::Schedule::interleaved_1f1b,
                               .crossed_stage = crossed, .virtual_stages = 2});
}

TEST(P2pOrderByOrbit, ALargeMeshReadsOneProgramPerOrbit) {
  // 4 stages x 16,384 data-parallel ranks: the programs of 8 ranks, whatever the dp size.
  for (int crossed : {-1, 0}) {
    PipelineMesh mesh{.stages = 4, .dp = 16384, .microbatches = 8, .schedule = pipeline::Schedule::one_f_one_b,
                      .crossed_stage = crossed};
    const ir::RankOrbits orbits = mesh.orbits();
    EXPECT_EQ(orbits.total_ranks(), 4 * 16384);
    std::vector<ir::Graph> reps;
    for (const ir::RankOrbit& o : orbits.orbits) reps.push_back(mesh.program(o.representative));
    std::vector<const ir::Graph*> view;
    for (const ir::Graph& g : reps) view.push_back(&g);
    size_t read = 0;
    const std::string msg = error_text<InternalError>([&] { read = check_p2p_order_by_orbit(view, orbits, "after test"); });
    if (crossed < 0) {
      EXPECT_EQ(msg, "no error");
      EXPECT_EQ(read, 8u);
    } else {
      EXPECT_NE(msg.find("can deadlock"), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank 0 waits for %"), std::string::npos) << msg;  // stage 0's representatives
      EXPECT_NE(msg.find("(receives from rank 16384 (tag 99, f32[2, 2])) on group link0 [0, 16384]"),
                std::string::npos) << msg;
      EXPECT_NE(msg.find("rank 1 waits for"), std::string::npos) << msg;
    }
    // The pass pipeline proves it by orbit too, reading the programs given.
    std::vector<int> ranks;
    for (const ir::RankOrbit& o : orbits.orbits) ranks.push_back(o.representative);
    PassManager none;
    if (crossed < 0) {
      EXPECT_EQ(run_rank_pipelines(none, reps, ranks, {.orbits = &orbits}).programs_checked, 8u);
    } else {
      EXPECT_THROW(run_rank_pipelines(none, reps, ranks, {.orbits = &orbits}), InternalError);
    }
  }
}

TEST(P2pOrderByOrbit, RefusesAnOrbitHoldingSeveralRanksOfALinkAndPeersThatDiffer) {
  // Ranks 1 and 2 of one orbit both send to rank 0 of group g: each pairs in its turn, so the
  // orbit's members are not in lockstep and the proof by orbit cannot stand for them.
  auto gs = programs([](ir::Builder& b, int r, std::vector<ir::Value*>& outs) {
    ir::Value* x = b.input("x", DType::f32, {2});
    if (r == 0) {
      outs.push_back(b.wait_tensor(b.recv("pp", 1, DType::f32, {2})));
      outs.push_back(b.wait_tensor(b.recv("pp", 2, DType::f32, {2})));
    } else {
      b.wait_tensor(b.send(x, "pp", 0));
      outs.push_back(x);
    }
  }, 3);
  check(gs);  // fine rank by rank
  ir::RankOrbits orbits;
  orbits.orbits = {{.representative = 0, .ranks = 1, .same_as = -1, .peers = {{"pp", {{0, 0}, {1, 1}}}}},
                   {.representative = 1, .ranks = 2, .same_as = -1, .peers = {{"pp", {{0, 0}, {1, 1}}}}}};
  orbits.orbit_of = [](int r) { return r == 0 ? 0 : 1; };
  orbits.group_ranks = [](int, const std::string&) { return std::vector<int>{0, 1, 2}; };
  std::vector<const ir::Graph*> reps{&gs[0], &gs[1]};
  const std::string msg = error_text<InternalError>([&] { check_p2p_order_by_orbit(reps, orbits, "after test"); });
  EXPECT_NE(msg.find("cannot be proved by orbit: rank 1's orbit holds 2 ranks of group pp [0, 1, 2]"),
            std::string::npos) << msg;
  // A member whose transfer names another peer than its representative's is not in its orbit.
  auto differ = programs([](ir::Builder& b, int r, std::vector<ir::Value*>& outs) {
    ir::Value* x = b.input("x", DType::f32, {2});
    b.wait_tensor(b.send(x, "pp", r == 1 ? 0 : 1));
    outs.push_back(x);
  }, 3);
  EXPECT_NE(error_text<InternalError>([&] { check_same_orbit(differ[2], 2, differ[1], 1, "after test"); }).find("talks to peer 1"),
            std::string::npos);
}

}  // namespace
}  // namespace dt::passes

// The deadlock proof for point-to-point transfers: the order of a pair's sends and recvs on one
// group decides whether the heads pair up (threads backend semantics), mismatched pairs are
// refused, and the pass pipeline runs the proof whenever a program has a transfer.
#include "dtensor/passes/p2p_order.h"

#include <gtest/gtest.h>

#include <functional>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/passes/rank_pipeline.h"

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

std::string failure(const std::vector<ir::Graph>& gs) {
  try {
    check(gs);
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
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
  EXPECT_EQ(failure(one_f_one_b(/*recv_first=*/true)), "");
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
  EXPECT_EQ(failure(with(3, DType::f32, 5)), "");
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
  EXPECT_EQ(failure(make(true)), "");
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

}  // namespace
}  // namespace dt::passes

// Cross-mesh transfers on the threads backend: a sampled matrix of (source placements, destination
// placements, shape) between two sub-meshes of an 8-rank world gives every destination rank its
// block of the global tensor, the bytes moved equal the planned bytes, and each receiver gets
// exactly its block (nothing gathered and re-scattered).
#include "dtensor/redistribute/cross_mesh.h"

#include <gtest/gtest.h>

#include <mutex>
#include <random>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"

namespace dt {
namespace {

// Returns rank r's block of `full` under `spec`.
Tensor block_of(const Tensor& full, const DTensorSpec& spec, int r) {
  Shape offset = spec.global_offset(r), shape = spec.local_shape(r);
  Tensor v = full;
  for (size_t d = 0; d < shape.size(); ++d) v = v.narrow(int64_t(d), offset[d], shape[d]);
  return v.contiguous();
}

int64_t block_bytes(const DTensorSpec& spec, int r) { return numel(spec.local_shape(r)) * int64_t(itemsize(spec.dtype())); }

Placement random_placement(std::mt19937& rng) {
  switch (rng() % 5) {
    case 0: return Placement::replicate();
    case 1: return Placement::shard(0);
    case 2: return Placement::shard(1);
    case 3: return Placement::strided_shard(0);
    default: return Placement::strided_shard(1);
  }
}

// Returns a valid random spec on `mesh` for `shape`.
DTensorSpec random_spec(std::mt19937& rng, const DeviceMesh& mesh, const Shape& shape) {
  for (;;) {
    Placements p;
    for (int64_t m = 0; m < mesh.ndim(); ++m) p.push_back(random_placement(rng));
    try {
      return DTensorSpec(mesh, p, shape, DType::f32);
    } catch (const ValueError&) {
    }
  }
}

struct Outcome {
  std::vector<Tensor> local;
  int64_t sent = 0, received = 0;
};

Outcome run(const CrossMeshPlan& plan, const Tensor& full, int world_size) {
  Outcome out;
  out.local.resize(size_t(world_size));
  std::mutex mu;
  run_ranks(world_size, [&](ProcessGroup& world) {
    const int me = world.rank();
    Tensor mine = plan.from.mesh().contains(me) ? block_of(full, plan.from, me) : Tensor();
    CrossMeshResult r = execute_cross_mesh(plan, mine, world);
    std::lock_guard<std::mutex> lock(mu);
    out.local[size_t(me)] = r.local;
    out.sent += r.bytes_sent;
    out.received += r.bytes_received;
  });
  return out;
}

TEST(CrossMesh, SampledPlacementMatrixBetweenSubMeshes) {
  std::mt19937 rng(32);
  const std::vector<Shape> shapes = {{5, 7}, {3, 2}, {8, 6}, {1, 9}, {0, 4}};
  // Disjoint sub-meshes (pipeline stages) and overlapping ones (some pieces stay local).
  const std::vector<std::pair<DeviceMesh, DeviceMesh>> meshes = {
      {DeviceMesh({2, 2}, {0, 1, 2, 3}), DeviceMesh({4}, {4, 5, 6, 7})},
      {DeviceMesh({2, 2}, {0, 1, 2, 3}), DeviceMesh({2, 2}, {7, 5, 6, 4})},
      {DeviceMesh({4}, {4, 5, 6, 7}), DeviceMesh({2, 3}, {0, 1, 2, 3, 6, 5})},
      {DeviceMesh({2, 2}, {0, 1, 2, 3}), DeviceMesh({4}, {2, 3, 4, 5})},
  };
  int cases = 0;
  for (int i = 0; i < 48; ++i) {
    const auto& [from_mesh, to_mesh] = meshes[size_t(i) % meshes.size()];
    const Shape& shape = shapes[rng() % shapes.size()];
    DTensorSpec from = random_spec(rng, from_mesh, shape), to = random_spec(rng, to_mesh, shape);
    SCOPED_TRACE(from.str() + " -> " + to.str());
    CrossMeshPlan plan = plan_cross_mesh(from, to);
    Tensor full = Tensor::arange(0, double(numel(shape)), 1, DType::f32).reshape(shape);
    Outcome got = run(plan, full, 8);
    int64_t wanted = 0, kept = 0;
    for (int r : to_mesh.ranks()) {
      ASSERT_TRUE(got.local[size_t(r)].defined()) << "rank " << r;
      EXPECT_EQ(got.local[size_t(r)].to_doubles(), block_of(full, to, r).to_doubles()) << "rank " << r;
      wanted += block_bytes(to, r);
    }
    for (const CrossMeshPiece& p : plan.local) kept += p.numel() * 4;
    EXPECT_EQ(got.sent, plan.bytes());
    EXPECT_EQ(got.received, plan.bytes());
    // Only what each receiver needs: its block, less what it already held.
    EXPECT_EQ(plan.bytes() + kept, wanted);
    ++cases;
  }
  EXPECT_EQ(cases, 48);
}

TEST(CrossMesh, WorkedExampleAndReplicasShareTheSending) {
  DTensorSpec from(DeviceMesh({2}, {0, 1}), {Placement::shard(0)}, {10}, DType::f32);
  DTensorSpec to(DeviceMesh({3}, {2, 3, 4}), {Placement::shard(0)}, {10}, DType::f32);
  EXPECT_EQ(plan_cross_mesh(from, to).str(),
            "S(0) on 2 [10] f32 -> S(0) on 3[2,3,4] [10] f32: 4 pieces, 40 bytes (0->2 [0:4], 0->3 [4:5], 1->3 [5:8], 1->4 [8:10])");
  // A replicated source: the two replicas each send to one of the two receivers.
  DTensorSpec rep(DeviceMesh({2}, {0, 1}), {Placement::replicate()}, {10}, DType::f32);
  DTensorSpec two(DeviceMesh({2}, {2, 3}), {Placement::replicate()}, {10}, DType::f32);
  CrossMeshPlan p = plan_cross_mesh(rep, two);
  ASSERT_EQ(p.pieces.size(), 2u);
  EXPECT_NE(p.pieces[0].src, p.pieces[1].src);
}

TEST(CrossMesh, RefusesPartialBlockedAndMismatchedLayouts) {
  DeviceMesh a({2}, {0, 1}), b({2}, {2, 3});
  DTensorSpec s(a, {Placement::shard(0)}, {4, 4}, DType::f32);
  EXPECT_THROW(plan_cross_mesh(DTensorSpec(a, {Placement::partial()}, {4, 4}, DType::f32), DTensorSpec(b, {Placement::replicate()}, {4, 4}, DType::f32)), ValueError);
  EXPECT_THROW(plan_cross_mesh(s, DTensorSpec(b, {Placement::partial()}, {4, 4}, DType::f32)), ValueError);
  EXPECT_THROW(plan_cross_mesh(s, DTensorSpec(b, {Placement::blocked_shard(0, 2)}, {4, 4}, DType::f32)), ValueError);
  EXPECT_THROW(plan_cross_mesh(s, DTensorSpec(b, {Placement::shard(0)}, {4, 5}, DType::f32)), ValueError);
  EXPECT_THROW(plan_cross_mesh(s, DTensorSpec(b, {Placement::shard(0)}, {4, 4}, DType::f64)), ValueError);
  // A source block of the wrong shape is refused on the rank that holds it.
  CrossMeshPlan plan = plan_cross_mesh(s, DTensorSpec(b, {Placement::shard(1)}, {4, 4}, DType::f32));
  EXPECT_THROW(run_ranks(4, [&](ProcessGroup& world) {
                 Tensor wrong = Tensor::zeros({3, 4});
                 execute_cross_mesh(plan, wrong, world);
               }),
               ShapeError);
}

}  // namespace
}  // namespace dt

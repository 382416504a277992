// The collective matrix of the mpi backend, run under `mpirun -np N` (N = 2, 3, 4).
//
// Every rank runs the same test sequence (gtest order is deterministic), so the collectives of one
// test line up across processes. Inputs are small integers (-8..8) derived from (global rank, i):
// sums over at most 4 ranks are exact in bf16 and f32, so every reduction is compared for
// equality against a reference each rank computes locally for the whole group. Only rank 0 prints
// the gtest progress; failures print on every rank, prefixed with the rank.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "dtensor/comm/mpi/mpi_process_group.h"
#include "dtensor/comm/mpi/mpi_runtime.h"

namespace dt::mpi {
namespace {

ProcessGroupPtr g_world;

const std::vector<size_t> kCounts = {0, 1, 7, 1000, size_t(1) << 20};
const std::vector<DType> kDTypes = {DType::f32, DType::bf16, DType::i64};
const std::vector<ReduceOp> kOps = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};

// Returns the input value of element i on global rank r (an integer in -8..8).
double value(int r, size_t i) { return double(int64_t((r * 31 + i * 7) % 17) - 8); }

// A typed buffer stored as bytes, filled and read through doubles.
struct Buffer {
  DType dtype;
  std::vector<uint8_t> bytes;
  Buffer(DType t, size_t n) : dtype(t), bytes(n * itemsize(t)) {}
  size_t size() const { return bytes.size() / itemsize(dtype); }
  void* data() { return bytes.data(); }
  void set(size_t i, double v) { DT_DISPATCH(dtype, { reinterpret_cast<T*>(bytes.data())[i] = T(compute_t<T>(v)); }); }
  double get(size_t i) const {
    double v = 0;
    DT_DISPATCH(dtype, { v = double(compute_t<T>(reinterpret_cast<const T*>(bytes.data())[i])); });
    return v;
  }
};

// Returns the reference reduction of the group members' values at element i, rounded like the
// backend: exact integer sum, then avg divides in the compute type (f32 for bf16, with one
// rounding to bf16; truncating integer division for i64).
double reference(const std::vector<int>& ranks, size_t i, ReduceOp op, DType t) {
  double acc = value(ranks[0], i);
  for (size_t k = 1; k < ranks.size(); ++k) {
    double v = value(ranks[k], i);
    acc = op == ReduceOp::max ? std::max(acc, v) : op == ReduceOp::min ? std::min(acc, v) : acc + v;
  }
  if (op != ReduceOp::avg) return acc;
  int64_t n = int64_t(ranks.size());
  switch (t) {
    case DType::i64: return double(int64_t(acc) / n);
    case DType::bf16: return double(float(bf16(float(acc) / float(n))));
    default: return double(float(acc) / float(n));
  }
}

// Returns the groups this rank belongs to: the world, the world in reverse order, and the
// even / odd ranks ([0, 2] and [1, 3] on 4 processes).
std::vector<ProcessGroupPtr> test_groups() {
  int n = g_world->size(), me = g_world->rank();
  std::vector<int> reversed(n), parity;
  for (int i = 0; i < n; ++i) reversed[i] = n - 1 - i;
  for (int i = me % 2; i < n; i += 2) parity.push_back(i);
  return {g_world, g_world->new_group(reversed), g_world->new_group(parity)};
}

std::string label(const ProcessGroup& g, DType t, size_t count) {
  return fmt::format("group {} dtype {} count {}", ranks_str(g.global_ranks()), dtype_name(t), count);
}

int my_global_rank(const ProcessGroup& g) { return g.global_ranks()[g.rank()]; }

// Calls check(group, dtype, count, op) for every test group, dtype, count and reduce op, labelled.
template <typename Check>
void for_each_reduction(Check check) {
  for (const ProcessGroupPtr& g : test_groups())
    for (DType t : kDTypes)
      for (size_t count : kCounts)
        for (ReduceOp op : kOps) {
          SCOPED_TRACE(label(*g, t, count) + " op " + std::string(reduce_op_name(op)));
          check(g, t, count, op);
        }
}

TEST(MpiCollectives, AllReduceMatrix) {
  for_each_reduction([](const ProcessGroupPtr& g, DType t, size_t count, ReduceOp op) {
    Buffer buf(t, count);
    for (size_t i = 0; i < count; ++i) buf.set(i, value(my_global_rank(*g), i));
    g->all_reduce(buf.data(), count, t, op)->wait();
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i)
      if (buf.get(i) != reference(g->global_ranks(), i, op, t) && bad++ < 3)
        ADD_FAILURE() << "element " << i << ": " << buf.get(i) << " != "
                      << reference(g->global_ranks(), i, op, t);
    EXPECT_EQ(bad, 0u);
  });
}

TEST(MpiCollectives, AllReducePathFollowsTheEnvironment) {
  auto& world = dynamic_cast<MpiProcessGroup&>(*g_world);
  const char* mode = std::getenv("DTENSOR_MPI_ALL_REDUCE");
  if (mode != nullptr && std::string(mode) == "mpi") {
    EXPECT_EQ(world.all_reduce_algorithm(4000), "mpi:iallreduce");
  } else {  // every process of the test runs on this host
    EXPECT_EQ(world.all_reduce_algorithm(4000), "shm_one_shot");
    EXPECT_EQ(world.all_reduce_algorithm(size_t(64) << 20), "shm_two_shot");
  }
  EXPECT_EQ(world.all_reduce_algorithm(0), "mpi:iallreduce");
}

// Two-shot on counts below and around the group size: chunks are short or empty (torch.chunk).
TEST(MpiCollectives, TwoShotWithShortAndEmptyChunks) {
  CommOptions options;
  options.one_shot_threshold = 0;
  ProcessGroupPtr world = MpiRuntime::current()->world(options);
  for (DType t : kDTypes)
    for (size_t count : {size_t(1), size_t(2), size_t(5), size_t(7), size_t(1001)})
      for (ReduceOp op : kOps) {
        SCOPED_TRACE(label(*world, t, count) + " op " + std::string(reduce_op_name(op)));
        Buffer buf(t, count);
        for (size_t i = 0; i < count; ++i) buf.set(i, value(world->rank(), i));
        world->all_reduce(buf.data(), count, t, op)->wait();
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i) bad += buf.get(i) != reference(world->global_ranks(), i, op, t);
        EXPECT_EQ(bad, 0u);
      }
}

// all_reduce_with_algo runs the requested algorithm on the shared window (the same one-shot and
// two-shot code as the threads backend), whatever the threshold says; both give the same bits on
// rounding-sensitive f32 inputs, and a rank count-sized buffer crosses several cache-line slices.
TEST(MpiCollectives, RequestedAlgorithmsAgreeBitwise) {
  for (size_t count : {size_t(3), size_t(1000), size_t(70001)}) {
    SCOPED_TRACE(fmt::format("count {}", count));
    std::vector<float> one(count), two(count);
    for (size_t i = 0; i < count; ++i)
      one[i] = two[i] = 1.0f / float(i + 1) + float(g_world->rank()) * 1e-3f * float(i % 7);
    g_world->all_reduce_with_algo(one.data(), count, DType::f32, ReduceOp::sum, AllReduceAlgo::one_shot)->wait();
    g_world->all_reduce_with_algo(two.data(), count, DType::f32, ReduceOp::sum, AllReduceAlgo::two_shot)->wait();
    size_t differ = 0;
    for (size_t i = 0; i < count; ++i) differ += std::memcmp(&one[i], &two[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u);
  }
}

TEST(MpiCollectives, AllGatherMatrix) {
  for (const ProcessGroupPtr& g : test_groups())
    for (DType t : kDTypes)
      for (size_t count : kCounts) {
        SCOPED_TRACE(label(*g, t, count));
        Buffer in(t, count), out(t, count * g->size());
        for (size_t i = 0; i < count; ++i) in.set(i, value(my_global_rank(*g), i));
        g->all_gather(in.data(), out.data(), count, t)->wait();
        size_t bad = 0;
        for (int j = 0; j < g->size(); ++j)
          for (size_t i = 0; i < count; ++i)
            bad += out.get(j * count + i) != value(g->global_ranks()[j], i);
        EXPECT_EQ(bad, 0u);
      }
}

// A gather along a later dim: row q of rank j's block lands at out[(q*n + j)*inner + i].
TEST(MpiCollectives, AllGatherRowsInterleavesTheBlocks) {
  for (const ProcessGroupPtr& g : test_groups())
    for (DType t : kDTypes)
      for (auto [rows, inner] : {std::pair<size_t, size_t>{2, 3}, {5, 1000}}) {
        const size_t count = rows * inner, n = size_t(g->size());
        SCOPED_TRACE(label(*g, t, count) + " rows " + std::to_string(rows));
        Buffer in(t, count), out(t, count * n);
        for (size_t i = 0; i < count; ++i) in.set(i, value(my_global_rank(*g), i));
        g->all_gather_rows(in.data(), out.data(), count, rows, t)->wait();
        size_t bad = 0;
        for (size_t q = 0; q < rows; ++q)
          for (size_t j = 0; j < n; ++j)
            for (size_t i = 0; i < inner; ++i)
              bad += out.get((q * n + j) * inner + i) != value(g->global_ranks()[j], q * inner + i);
        EXPECT_EQ(bad, 0u);
      }
}

TEST(MpiCollectives, AllGatherInPlace) {
  for (const ProcessGroupPtr& g : test_groups()) {
    size_t count = 7;
    Buffer out(DType::f32, count * g->size());
    float* my_block = reinterpret_cast<float*>(out.data()) + g->rank() * count;
    for (size_t i = 0; i < count; ++i) my_block[i] = float(value(my_global_rank(*g), i));
    g->all_gather(my_block, out.data(), count, DType::f32)->wait();
    for (int j = 0; j < g->size(); ++j)
      for (size_t i = 0; i < count; ++i) EXPECT_EQ(out.get(j * count + i), value(g->global_ranks()[j], i));
  }
}

TEST(MpiCollectives, ReduceScatterMatrix) {
  for_each_reduction([](const ProcessGroupPtr& g, DType t, size_t count, ReduceOp op) {
    size_t n = size_t(g->size());
    Buffer in(t, count * n), out(t, count);
    for (size_t i = 0; i < count * n; ++i) in.set(i, value(my_global_rank(*g), i));
    g->reduce_scatter(in.data(), out.data(), count, t, op)->wait();
    // Group index, not global rank, picks the chunk.
    size_t base = size_t(g->rank()) * count, bad = 0;
    for (size_t i = 0; i < count; ++i)
      bad += out.get(i) != reference(g->global_ranks(), base + i, op, t);
    EXPECT_EQ(bad, 0u);
  });
}

// Returns the (uneven, sometimes zero) number of elements group index src sends to dst.
size_t a2a_count(size_t scale, int src, int dst) { return scale * size_t((src * 2 + dst) % 4); }

TEST(MpiCollectives, AllToAllUneven) {
  for (const ProcessGroupPtr& g : test_groups())
    for (DType t : kDTypes)
      for (size_t scale : {size_t(0), size_t(1), size_t(333)}) {
        SCOPED_TRACE(label(*g, t, scale));
        int n = g->size(), me = g->rank();
        std::vector<size_t> send_counts(n), recv_counts(n);
        for (int j = 0; j < n; ++j) {
          send_counts[j] = a2a_count(scale, me, j);
          recv_counts[j] = a2a_count(scale, j, me);
        }
        Buffer in(t, std::accumulate(send_counts.begin(), send_counts.end(), size_t(0)));
        Buffer out(t, std::accumulate(recv_counts.begin(), recv_counts.end(), size_t(0)));
        size_t k = 0;
        for (int j = 0; j < n; ++j)
          for (size_t i = 0; i < send_counts[j]; ++i) in.set(k++, value(me * 10 + j, i));
        g->all_to_all(in.data(), send_counts, out.data(), recv_counts, t)->wait();
        k = 0;
        size_t bad = 0;
        for (int j = 0; j < n; ++j)
          for (size_t i = 0; i < recv_counts[j]; ++i) bad += out.get(k++) != value(j * 10 + me, i);
        EXPECT_EQ(bad, 0u);
      }
}

TEST(MpiCollectives, BroadcastEveryRoot) {
  for (const ProcessGroupPtr& g : test_groups())
    for (size_t count : kCounts)
      for (int root = 0; root < g->size(); ++root) {
        SCOPED_TRACE(label(*g, DType::i64, count) + fmt::format(" root {}", root));
        Buffer buf(DType::i64, count);
        for (size_t i = 0; i < count; ++i) buf.set(i, g->rank() == root ? value(100 + root, i) : 99.0);
        g->broadcast(buf.data(), count, DType::i64, root)->wait();
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i) bad += buf.get(i) != value(100 + root, i);
        EXPECT_EQ(bad, 0u);
      }
}

TEST(MpiCollectives, SendRecvRing) {
  for (const ProcessGroupPtr& g : test_groups()) {
    int n = g->size(), me = g->rank();
    size_t count = 1000;
    Buffer out(DType::f32, count), in(DType::f32, count);
    for (size_t i = 0; i < count; ++i) out.set(i, value(my_global_rank(*g), i));
    WorkPtr r = g->recv(in.data(), count, DType::f32, (me + n - 1) % n);
    WorkPtr s = g->send(out.data(), count, DType::f32, (me + 1) % n);
    s->wait();
    r->wait();
    int from = g->global_ranks()[(me + n - 1) % n];
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(in.get(i), value(from, i)) << "element " << i;
  }
}

// The IR's send/recv pair the k-th send from a to b with the k-th recv on b from a: several
// messages of one pair in flight at once (uneven sizes, one empty) arrive in order, interleaved
// with the opposite direction as a pipeline's 1F1B issues them (recv the gradient before sending
// the next activation).
TEST(MpiCollectives, PairMessagesArriveInIssueOrder) {
  for (const ProcessGroupPtr& g : test_groups()) {
    const int n = g->size(), me = g->rank();
    if (n < 2) continue;
    const int peer = me ^ 1;
    if (peer >= n) continue;
    const std::vector<size_t> counts = {5, 0, 1000, 3};
    std::vector<Buffer> out, in;
    std::vector<WorkPtr> works;
    for (size_t k = 0; k < counts.size(); ++k) {
      out.emplace_back(DType::f32, counts[k]);
      in.emplace_back(DType::f32, counts[k]);
      for (size_t i = 0; i < counts[k]; ++i) out.back().set(i, value(my_global_rank(*g) + int(k), i));
    }
    for (size_t k = 0; k < counts.size(); ++k) {
      // Even ranks send message k then receive k; odd ranks receive k then send k.
      if (me % 2 == 0) {
        works.push_back(g->send(out[k].data(), counts[k], DType::f32, peer));
        works.push_back(g->recv(in[k].data(), counts[k], DType::f32, peer));
      } else {
        works.push_back(g->recv(in[k].data(), counts[k], DType::f32, peer));
        works.push_back(g->send(out[k].data(), counts[k], DType::f32, peer));
      }
    }
    for (WorkPtr& w : works) w->wait();
    const int from = g->global_ranks()[size_t(peer)];
    for (size_t k = 0; k < counts.size(); ++k)
      for (size_t i = 0; i < counts[k]; ++i) ASSERT_EQ(in[k].get(i), value(from + int(k), i)) << "message " << k;
  }
}

TEST(MpiCollectives, BoolReductions) {
  size_t count = 5;
  std::vector<uint8_t> sum(count), mn(count);
  for (size_t i = 0; i < count; ++i) sum[i] = mn[i] = (g_world->rank() + i) % 2 == 0;
  g_world->all_reduce(sum.data(), count, DType::boolean, ReduceOp::sum)->wait();
  g_world->all_reduce(mn.data(), count, DType::boolean, ReduceOp::min)->wait();
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ(sum[i], 1) << i;  // logical or: some rank holds true
    EXPECT_EQ(mn[i], g_world->size() == 1 ? uint8_t((i % 2) == 0) : 0) << i;
  }
  EXPECT_THROW(g_world->all_reduce(sum.data(), count, DType::boolean, ReduceOp::avg), DTypeError);
}

TEST(MpiCollectives, OverlappingWorksCompleteInAnyWaitOrder) {
  size_t count = 4096;
  Buffer a(DType::f32, count), b(DType::f32, count * g_world->size());
  for (size_t i = 0; i < count; ++i) a.set(i, value(g_world->rank(), i));
  WorkPtr w1 = g_world->all_reduce(a.data(), count, DType::f32, ReduceOp::max);
  Buffer in(DType::f32, count);
  for (size_t i = 0; i < count; ++i) in.set(i, 1.0);
  WorkPtr w2 = g_world->all_gather(in.data(), b.data(), count, DType::f32);
  WorkPtr w3 = g_world->barrier();
  w3->wait();
  w2->wait();
  w1->wait();
  EXPECT_TRUE(w1->is_completed());
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(a.get(i), reference(g_world->global_ranks(), i, ReduceOp::max, DType::f32));
}

TEST(MpiCollectives, CheckModeAcceptsMatchingCollectives) {
  CommOptions options;
  options.check_collectives = true;
  options.timeout = Duration(30000);
  ProcessGroupPtr world = MpiRuntime::current()->world(options);
  size_t count = 1000;
  Buffer buf(DType::bf16, count), out(DType::bf16, count / 4 + 1);
  for (size_t i = 0; i < count; ++i) buf.set(i, value(world->rank(), i));
  world->all_reduce(buf.data(), count, DType::bf16, ReduceOp::sum)->wait();
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf.get(i), reference(world->global_ranks(), i, ReduceOp::sum, DType::bf16));
  int n = world->size();
  std::vector<size_t> send(n), recv(n);
  for (int j = 0; j < n; ++j) {
    send[j] = a2a_count(1, world->rank(), j);
    recv[j] = a2a_count(1, j, world->rank());
  }
  Buffer a2a_in(DType::f32, 64), a2a_out(DType::f32, 64);
  world->all_to_all(a2a_in.data(), send, a2a_out.data(), recv, DType::f32)->wait();
  world->broadcast(buf.data(), count, DType::bf16, n - 1)->wait();
  world->barrier()->wait();
}

TEST(MpiCollectives, NewGroupRejectsBadRankLists) {
  int me = g_world->rank(), n = g_world->size();
  EXPECT_THROW(g_world->new_group({me, me}), ValueError);
  EXPECT_THROW(g_world->new_group({me, n}), ValueError);
  EXPECT_THROW(g_world->new_group({(me + 1) % n}), ValueError);  // caller not a member
  EXPECT_THROW(g_world->new_group({}), ValueError);
  EXPECT_EQ(g_world->backend_name(), "mpi");
}

TEST(MpiCollectives, GroupIndexIsPositionInTheList) {
  int n = g_world->size();
  std::vector<int> reversed(n);
  for (int i = 0; i < n; ++i) reversed[i] = n - 1 - i;
  ProcessGroupPtr g = g_world->new_group(reversed);
  EXPECT_EQ(g->rank(), n - 1 - g_world->rank());
  EXPECT_EQ(g->global_ranks(), reversed);
}

// Prints only failures on ranks other than 0, prefixed with the rank.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace dt::mpi

int main(int argc, char** argv) {
  dt::mpi::MpiRuntime runtime(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  if (runtime.world_rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new dt::mpi::FailurePrinter(runtime.world_rank()));
  }
  dt::CommOptions options;
  options.timeout = dt::Duration(60000);
  dt::mpi::g_world = runtime.world(options);
  int result = RUN_ALL_TESTS();
  dt::mpi::g_world.reset();
  return result;
}

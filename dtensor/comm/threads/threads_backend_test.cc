// The collective matrix of the threads backend: world size x element count x dtype x reduce op x
// group (contiguous, strided, permuted) x all_reduce algorithm, every result compared bitwise with
// a reference reduction computed here in rank order. Plus non-blocking, ordering, subgroup and
// point-to-point behaviour.
//
// Sampling: every combination with count in {0, 1, 7, 1000} runs (1,344 cases); of the 336
// combinations with count 2^20, a fixed-seed random sample of 12 runs (the full product takes
// minutes under ASan); plus a few hand-picked cases (permuted group, bool, several two-shot
// pipeline chunks).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fmt/format.h>
#include <random>

#include "dtensor/comm/threads/run_ranks.h"

namespace dt {
namespace {

// Returns element i of the test input of group index g: irregular values (a hash divided by 997)
// so float sums round differently in different orders, which makes the bitwise comparison check
// the reduction order. Cheap to compute: the references for 8 ranks x 2^20 elements are built here.
double input_value(DType dtype, int g, size_t i) {
  uint64_t h = (uint64_t(g) + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t(i) + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  if (dtype == DType::boolean) return double(h % 3 == 0);
  if (!is_floating(dtype)) return double(int64_t(h % 101) - 50);
  return double(int64_t(h % 2000001) - 1000000) / 997.0;
}

std::vector<std::byte> make_input(DType dtype, size_t count, int g, size_t offset = 0) {
  std::vector<std::byte> bytes(count * itemsize(dtype));
  DT_DISPATCH(dtype, {
    T* p = reinterpret_cast<T*>(bytes.data());
    for (size_t i = 0; i < count; ++i) p[i] = T(input_value(dtype, g, offset + i));
  });
  return bytes;
}

// Reference: reduces inputs[0..n) elementwise in that order (the order the backend promises).
std::vector<std::byte> reference_reduce(DType dtype, ReduceOp op, const std::vector<std::vector<std::byte>>& inputs) {
  int n = int(inputs.size());
  std::vector<std::byte> bytes(inputs[0].size());
  DT_DISPATCH(dtype, {
    using C = compute_t<T>;
    T* out = reinterpret_cast<T*>(bytes.data());
    size_t count = bytes.size() / sizeof(T);
    for (size_t i = 0; i < count; ++i) {
      C acc = C(reinterpret_cast<const T*>(inputs[0].data())[i]);
      for (int g = 1; g < n; ++g) {
        C x = C(reinterpret_cast<const T*>(inputs[size_t(g)].data())[i]);
        if constexpr (std::is_same_v<T, bool>) {
          if (op == ReduceOp::sum) acc = acc || x;
          if (op == ReduceOp::max) acc = acc || x;
          if (op == ReduceOp::min) acc = acc && x;
        } else {
          if (op == ReduceOp::sum || op == ReduceOp::avg) acc = acc + x;
          if (op == ReduceOp::max) acc = x > acc ? x : acc;
          if (op == ReduceOp::min) acc = x < acc ? x : acc;
        }
      }
      if constexpr (!std::is_same_v<T, bool>) {
        if (op == ReduceOp::avg) acc = acc / C(n);
      }
      out[i] = T(acc);
    }
  });
  return bytes;
}

// Returns bytes [begin, end) of v.
std::vector<std::byte> byte_range(const std::vector<std::byte>& v, size_t begin, size_t end) {
  return std::vector<std::byte>(v.begin() + ptrdiff_t(begin), v.begin() + ptrdiff_t(end));
}

struct MatrixCase {
  int world = 1;
  std::vector<int> group;  // empty: the world group
  size_t count = 0;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  bool two_shot = false;

  std::string name() const {
    std::string g = "all";
    if (!group.empty()) {
      g = "g";
      for (int r : group) g += std::to_string(r);
    }
    return fmt::format("w{}_{}_n{}_{}_{}_{}", world, g, count, dtype_name(dtype), reduce_op_name(op),
                       two_shot ? "twoshot" : "oneshot");
  }
};

std::vector<MatrixCase> matrix_cases() {
  std::vector<std::pair<int, std::vector<int>>> groups = {
      {1, {}}, {2, {}}, {3, {}}, {4, {}}, {4, {1, 3}}, {8, {}}, {8, {0, 2, 4, 6}}};
  std::vector<DType> dtypes = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32};
  std::vector<ReduceOp> ops = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};
  std::vector<MatrixCase> small, large;
  for (auto& [world, group] : groups)
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(1) << 20})
      for (DType dtype : dtypes)
        for (ReduceOp op : ops)
          for (bool two_shot : {false, true}) {
            MatrixCase c{world, group, count, dtype, op, two_shot};
            (count > 1000 ? large : small).push_back(c);
          }
  std::mt19937 rng(20261122);
  std::shuffle(large.begin(), large.end(), rng);
  large.resize(12);
  small.insert(small.end(), large.begin(), large.end());
  // A permuted group: group index, not global rank, decides placement; and bool (no avg).
  small.push_back({4, {2, 0, 3}, 7, DType::f32, ReduceOp::sum, false});
  small.push_back({4, {2, 0, 3}, 1000, DType::f32, ReduceOp::sum, true});
  // Two-shot over several pipeline chunks, the last one partial.
  small.push_back({3, {}, 1000003, DType::f32, ReduceOp::sum, true});
  small.push_back({3, {}, 100, DType::boolean, ReduceOp::sum, false});
  small.push_back({3, {}, 100, DType::boolean, ReduceOp::min, true});
  return small;
}

class CollectiveMatrix : public ::testing::TestWithParam<MatrixCase> {};

void expect_bytes_eq(const std::vector<std::byte>& got, const std::vector<std::byte>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (!got.empty() && std::memcmp(got.data(), want.data(), got.size()) != 0) {
    size_t first = 0;
    while (first < got.size() && got[first] == want[first]) ++first;
    FAIL() << what << ": first differing byte " << first << " of " << got.size();
  }
}

TEST_P(CollectiveMatrix, MatchesReference) {
  const MatrixCase& c = GetParam();
  CommOptions options;
  options.one_shot_threshold = c.two_shot ? 0 : SIZE_MAX;
  options.check_collectives = true;
  size_t elem = itemsize(c.dtype);
  int n = c.group.empty() ? c.world : int(c.group.size());

  // Inputs of every group index and the references, built once. reduce_scatter blocks are count
  // elements, except for the 2^20 cases (count / n, to keep memory bounded under ASan).
  size_t rs_count = c.count > 1000 ? c.count / size_t(n) : c.count;
  std::vector<std::vector<std::byte>> ar_in, rs_in, a2a_in;
  // all_to_all with uneven splits: index s sends (count + s + d) % 3 * (count % 5 + 1) elements to
  // index d, taken from its input at the prefix-sum offset.
  auto split = [&](int s, int d) { return size_t((c.count + size_t(s) + size_t(d)) % 3) * (c.count % 5 + 1); };
  for (int g = 0; g < n; ++g) {
    ar_in.push_back(make_input(c.dtype, c.count, g));
    rs_in.push_back(make_input(c.dtype, rs_count * size_t(n), g));
    size_t send_total = 0;
    for (int d = 0; d < n; ++d) send_total += split(g, d);
    a2a_in.push_back(make_input(c.dtype, send_total, g));
  }
  const std::vector<std::byte> ar_ref = reference_reduce(c.dtype, c.op, ar_in);
  const std::vector<std::byte> rs_ref = reference_reduce(c.dtype, c.op, rs_in);

  run_ranks(c.world, [&](ProcessGroup& world) {
    std::shared_ptr<ProcessGroup> sub;
    ProcessGroup* pg = &world;
    if (!c.group.empty()) {
      if (std::find(c.group.begin(), c.group.end(), world.rank()) == c.group.end()) return;
      sub = world.new_group(c.group);
      pg = sub.get();
    }
    ASSERT_EQ(pg->size(), n);
    int g = pg->rank();
    std::string where = fmt::format("{} group index {}", c.name(), g);

    // all_reduce, in place.
    std::vector<std::byte> buf = ar_in[size_t(g)];
    pg->all_reduce(buf.data(), c.count, c.dtype, c.op)->wait();
    expect_bytes_eq(buf, ar_ref, where + " all_reduce");

    // reduce_scatter: my output is block g of the reduction of the whole inputs.
    std::vector<std::byte> rs_out(rs_count * elem);
    pg->reduce_scatter(rs_in[size_t(g)].data(), rs_out.data(), rs_count, c.dtype, c.op)->wait();
    expect_bytes_eq(rs_out, byte_range(rs_ref, size_t(g) * rs_count * elem, size_t(g + 1) * rs_count * elem),
                    where + " reduce_scatter");

    if (c.op != ReduceOp::sum) return;  // the rest does not depend on the reduce op

    // all_gather: block s of the output is group index s's input.
    size_t block = c.count * elem;
    std::vector<std::byte> ag_out(block * size_t(n));
    pg->all_gather(ar_in[size_t(g)].data(), ag_out.data(), c.count, c.dtype)->wait();
    for (int s = 0; s < n; ++s)
      expect_bytes_eq(byte_range(ag_out, size_t(s) * block, size_t(s + 1) * block), ar_in[size_t(s)],
                      where + fmt::format(" all_gather block {}", s));

    std::vector<size_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n));
    size_t recv_total = 0;
    for (int d = 0; d < n; ++d) send_counts[size_t(d)] = split(g, d);
    for (int s = 0; s < n; ++s) recv_total += recv_counts[size_t(s)] = split(s, g);
    std::vector<std::byte> a2a_out(recv_total * elem);
    pg->all_to_all(a2a_in[size_t(g)].data(), send_counts, a2a_out.data(), recv_counts, c.dtype)->wait();
    size_t recv_offset = 0;
    for (int s = 0; s < n; ++s) {
      size_t send_offset = 0;
      for (int d = 0; d < g; ++d) send_offset += split(s, d);
      expect_bytes_eq(byte_range(a2a_out, recv_offset * elem, (recv_offset + split(s, g)) * elem),
                      byte_range(a2a_in[size_t(s)], send_offset * elem, (send_offset + split(s, g)) * elem),
                      where + fmt::format(" all_to_all from {}", s));
      recv_offset += split(s, g);
    }

    // broadcast from the last group index.
    int root = n - 1;
    std::vector<std::byte> bc = ar_in[size_t(g)];
    pg->broadcast(bc.data(), c.count, c.dtype, root)->wait();
    expect_bytes_eq(bc, ar_in[size_t(root)], where + " broadcast");
  }, options);
}

INSTANTIATE_TEST_SUITE_P(Threads, CollectiveMatrix, ::testing::ValuesIn(matrix_cases()),
                         [](const ::testing::TestParamInfo<MatrixCase>& info) { return info.param.name(); });

TEST(ThreadsBackend, CallReturnsBeforePeersArrive) {
  std::atomic<bool> issued{false};
  run_ranks(2, [&](ProcessGroup& pg) {
    float x = float(pg.rank() + 1);
    if (pg.rank() == 0) {
      WorkPtr w = pg.all_reduce(&x, 1, DType::f32, ReduceOp::sum);
      EXPECT_FALSE(w->is_completed());  // rank 1 has not issued yet
      issued = true;
      issued.notify_all();
      w->wait();
      EXPECT_TRUE(w->is_completed());
    } else {
      issued.wait(false);
      pg.all_reduce(&x, 1, DType::f32, ReduceOp::sum)->wait();
    }
    EXPECT_EQ(x, 3.0f);
  });
}

TEST(ThreadsBackend, BackToBackOnSameBufferRunInIssueOrder) {
  run_ranks(4, [&](ProcessGroup& pg) {
    std::vector<float> buf(100000, 1.0f);  // over the one-shot threshold: two-shot
    WorkPtr a = pg.all_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::sum);
    WorkPtr b = pg.all_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::sum);
    std::vector<float> small(7, float(pg.rank()));
    WorkPtr c = pg.all_reduce(small.data(), small.size(), DType::f32, ReduceOp::max);
    c->wait();
    b->wait();
    a->wait();
    for (float v : buf) ASSERT_EQ(v, 16.0f);
    for (float v : small) ASSERT_EQ(v, 3.0f);
  });
}

TEST(ThreadsBackend, OverlappingGroupsProgressIndependently) {
  run_ranks(4, [&](ProcessGroup& world) {
    int r = world.rank();
    auto pair = world.new_group(r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3});
    auto strided = world.new_group(r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{3, 1});
    int64_t a = r, b = r, c = r;
    // Issue on three groups, wait in a different order than issued.
    WorkPtr wa = pair->all_reduce(&a, 1, DType::i64, ReduceOp::sum);
    WorkPtr wb = strided->all_reduce(&b, 1, DType::i64, ReduceOp::max);
    WorkPtr wc = world.all_reduce(&c, 1, DType::i64, ReduceOp::sum);
    wc->wait();
    wb->wait();
    wa->wait();
    EXPECT_EQ(a, r < 2 ? 1 : 5);
    EXPECT_EQ(b, r % 2 == 0 ? 2 : 3);
    EXPECT_EQ(c, 6);
    // Group index decides placement: in group [3, 1], global rank 3 is index 0.
    EXPECT_EQ(strided->rank(), r == 3 ? 0 : r == 1 ? 1 : r / 2);
    std::vector<int64_t> gathered(2);
    int64_t mine = r;
    strided->all_gather(&mine, gathered.data(), 1, DType::i64)->wait();
    EXPECT_EQ(gathered, (r % 2 == 0 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{3, 1}));
  });
}

TEST(ThreadsBackend, SameRankListSharesSequenceNumbers) {
  run_ranks(2, [&](ProcessGroup& world) {
    auto g1 = world.new_group({0, 1});  // same list as the world group: same collectives
    int32_t x = world.rank() + 1;
    if (world.rank() == 0)
      world.all_reduce(&x, 1, DType::i32, ReduceOp::sum)->wait();
    else
      g1->all_reduce(&x, 1, DType::i32, ReduceOp::sum)->wait();
    EXPECT_EQ(x, 3);
  });
}

TEST(ThreadsBackend, SendRecvRing) {
  run_ranks(5, [&](ProcessGroup& pg) {
    int n = pg.size(), r = pg.rank();
    std::vector<double> out(33, double(r)), in(33, -1.0);
    // Even ranks send first, odd ranks receive first (rendezvous send/recv).
    for (int step = 0; step < 2; ++step) {
      bool send_now = (r % 2 == 0) == (step == 0);
      if (send_now)
        pg.send(out.data(), out.size(), DType::f64, (r + 1) % n)->wait();
      else
        pg.recv(in.data(), in.size(), DType::f64, (r + n - 1) % n)->wait();
    }
    for (double v : in) ASSERT_EQ(v, double((r + n - 1) % n));
  });
}

TEST(ThreadsBackend, BarrierAndEmptyWorld) {
  std::atomic<int> before{0};
  run_ranks(3, [&](ProcessGroup& pg) {
    ++before;
    pg.barrier()->wait();
    EXPECT_EQ(before.load(), 3);
  });
  run_ranks(1, [&](ProcessGroup& pg) {
    float x = 5;
    pg.all_reduce(&x, 1, DType::f32, ReduceOp::avg)->wait();
    EXPECT_EQ(x, 5.0f);
  });
  EXPECT_THROW(run_ranks(0, [](ProcessGroup&) {}), ValueError);
}

TEST(ThreadsBackend, NewGroupValidatesRanks) {
  run_ranks(4, [&](ProcessGroup& pg) {
    if (pg.rank() != 0) return;
    EXPECT_THROW(pg.new_group({0, 0, 1}), ValueError);
    EXPECT_THROW(pg.new_group({0, 4}), ValueError);
    EXPECT_THROW(pg.new_group({1, 2}), ValueError);
    EXPECT_THROW(pg.new_group({}), ValueError);
    try {
      pg.new_group({1, 2});
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 is not a member of group [1, 2]"), std::string::npos) << e.what();
    }
    float x = 0;
    EXPECT_THROW(pg.broadcast(&x, 1, DType::f32, 4), ValueError);
    EXPECT_THROW(pg.send(&x, 1, DType::f32, 0), ValueError);
    EXPECT_THROW(pg.all_reduce(&x, 1, DType::boolean, ReduceOp::avg), DTypeError);
  });
}

}  // namespace
}  // namespace dt

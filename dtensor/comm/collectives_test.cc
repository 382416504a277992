// Tensor-level collectives: argument checks with clear errors, and results on 2-D, 0-d and empty
// tensors through the threads backend.
#include "dtensor/comm/collectives.h"

#include <gtest/gtest.h>

#include "dtensor/comm/reduce_kernel.h"
#include "dtensor/comm/threads/run_ranks.h"
#include "tests/support/error_text.h"

namespace dt {
namespace {

using test::error_text;

// Runs fn on rank 0 of a 2-rank world only (argument checks throw before any communication).
template <typename F>
void on_rank0(F fn) {
  run_ranks(2, [&](ProcessGroup& pg) {
    if (pg.rank() == 0) fn(pg);
  });
}

// The one identity both the executor (typed fill) and the lowering (a `full` op) use: a member
// holding it changes no reduction, for every dtype.
TEST(ReduceIdentity, LeavesEveryReductionUnchanged) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    EXPECT_EQ(identity_of(ReduceOp::sum, t), 0.0);
    EXPECT_EQ(identity_of(ReduceOp::avg, t), 0.0);
  }
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    EXPECT_EQ(identity_of(ReduceOp::max, t), -inf);
    EXPECT_EQ(identity_of(ReduceOp::min, t), inf);
  }
  EXPECT_EQ(identity_of(ReduceOp::max, DType::i32), double(std::numeric_limits<int32_t>::lowest()));
  EXPECT_EQ(identity_of(ReduceOp::min, DType::i32), double(std::numeric_limits<int32_t>::max()));
  EXPECT_EQ(identity_of<int64_t>(ReduceOp::min), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(identity_of<int64_t>(ReduceOp::max), std::numeric_limits<int64_t>::lowest());
  EXPECT_EQ(identity_of(ReduceOp::max, DType::boolean), 0.0);
  EXPECT_EQ(identity_of(ReduceOp::min, DType::boolean), 1.0);
  // Reduced with a real value through the reduction kernel, the identity gives that value back.
  const int64_t x = -7, id_max = identity_of<int64_t>(ReduceOp::max), id_min = identity_of<int64_t>(ReduceOp::min);
  const void* in_max[2] = {&x, &id_max};
  const void* in_min[2] = {&id_min, &x};
  int64_t out = 0;
  reduce_buffers(in_max, 2, &out, 1, DType::i64, ReduceOp::max);
  EXPECT_EQ(out, x);
  reduce_buffers(in_min, 2, &out, 1, DType::i64, ReduceOp::min);
  EXPECT_EQ(out, x);
}

TEST(Collectives, AllGatherChecksShapesDtypesAndContiguity) {
  on_rank0([](ProcessGroup& pg) {
    Tensor in = Tensor::zeros({3, 4});
    Tensor bad = Tensor::zeros({5, 4});
    EXPECT_EQ(error_text<ShapeError>([&] { all_gather_into_tensor(pg, bad, in); }),
              "all_gather_into_tensor: output shape [5, 4] should be [6, 4] for input [3, 4] and group size 2");
    Tensor f64 = Tensor::zeros({6, 4}, DType::f64);
    EXPECT_EQ(error_text<DTypeError>([&] { all_gather_into_tensor(pg, f64, in); }),
              "all_gather_into_tensor: output dtype f64 differs from input dtype f32");
    Tensor out = Tensor::zeros({6, 4});
    Tensor strided = Tensor::zeros({4, 3}).transpose(0, 1);
    EXPECT_EQ(error_text<ValueError>([&] { all_gather_into_tensor(pg, out, strided); }),
              "all_gather_into_tensor: input must be contiguous, got shape [3, 4] with strides [1, 3]");
  });
}

TEST(Collectives, AllGatherAlongALaterDimChecksItsDim) {
  on_rank0([](ProcessGroup& pg) {
    Tensor in = Tensor::zeros({3, 4});
    Tensor out = Tensor::zeros({3, 8});
    EXPECT_EQ(error_text<ValueError>([&] { all_gather_into_tensor(pg, out, in, 2); }),
              "all_gather_into_tensor: dim 2 out of range for input [3, 4]");
    EXPECT_EQ(error_text<ShapeError>([&] { all_gather_into_tensor(pg, out, in, 0); }),
              "all_gather_into_tensor: output shape [3, 8] should be [6, 4] for input [3, 4] and group size 2");
    EXPECT_EQ(error_text<ValueError>([&] { pg.all_gather_rows(in.raw_data(), out.raw_data(), 12, 5, DType::f32); }),
              "all_gather of 12 elements per rank in 5 rows: the rows must divide the elements");
  });
}

// The gather along dim d equals the stacked gather with the members' axis moved to d, for blocks
// whose rows cross the paced copy's 1 MiB chunks (3 rows of 100,003 i32: chunk edges mid-row).
TEST(Collectives, AllGatherAlongALaterDimMatchesTheStackedOne) {
  for (auto [shape, dim] : {std::pair<Shape, int64_t>{{3, 100003}, 1}, {{2, 3, 5}, 1}, {{2, 3, 5}, 2}}) {
    run_ranks(3, [&](ProcessGroup& pg) {
      std::vector<int32_t> values(size_t(numel(shape)));
      for (size_t i = 0; i < values.size(); ++i) values[i] = int32_t(3 * i) + pg.rank();
      Tensor in = Tensor::from_vector(values, shape);
      Shape joined = shape, stacked = shape;
      joined[size_t(dim)] *= 3;
      stacked[0] *= 3;
      Tensor out = Tensor::zeros(joined, DType::i32), blocks = Tensor::zeros(stacked, DType::i32);
      all_gather_into_tensor(pg, out, in, dim)->wait();
      all_gather_into_tensor(pg, blocks, in)->wait();
      Shape members = shape;
      members.insert(members.begin(), 3);
      std::vector<int64_t> dims;
      for (int64_t k = 1; k <= dim; ++k) dims.push_back(k);
      dims.push_back(0);
      for (int64_t k = dim + 1; k < int64_t(members.size()); ++k) dims.push_back(k);
      EXPECT_EQ(out.to_doubles(), blocks.reshape(members).permute(dims).contiguous().reshape(joined).to_doubles());
    });
  }
}

// In place: each rank's block along dim already lies in its output (a producer wrote it there);
// the gather fills the other blocks exactly as the out-of-place gather does (they start at -1, so
// a block it missed shows), for the shapes above, dim 0 too, on 3 ranks.
TEST(Collectives, AllGatherInPlaceAlongADimLeavesTheOwnBlockAndGathersTheRest) {
  for (auto [shape, dim] : {std::pair<Shape, int64_t>{{3, 100003}, 1}, {{2, 3, 5}, 1}, {{2, 3, 5}, 2}, {{2, 3, 5}, 0}}) {
    run_ranks(3, [&](ProcessGroup& pg) {
      auto block_of = [&](int rank) {
        std::vector<int32_t> values(size_t(numel(shape)));
        for (size_t i = 0; i < values.size(); ++i) values[i] = int32_t(3 * i) + rank;
        return Tensor::from_vector(values, shape);
      };
      Shape joined = shape;
      joined[size_t(dim)] *= 3;
      Tensor expected = Tensor::zeros(joined, DType::i32);
      all_gather_into_tensor(pg, expected, block_of(pg.rank()), dim)->wait();
      // -1 everywhere but my block, which holds my values before the gather starts.
      Tensor out = Tensor::full(joined, -1.0, DType::i32);
      const int64_t b = shape[size_t(dim)];
      out.narrow(dim, pg.rank() * b, b).copy_(block_of(pg.rank()));
      all_gather_into_tensor_inplace(pg, out, dim)->wait();
      EXPECT_EQ(out.to_doubles(), expected.to_doubles());
    });
  }
  on_rank0([](ProcessGroup& pg) {
    Tensor odd = Tensor::zeros({3, 5});
    EXPECT_EQ(error_text<ShapeError>([&] { all_gather_into_tensor_inplace(pg, odd, 1); }),
              "all_gather_into_tensor_: dim 1 of buffer [3, 5] is not a dim divisible by group size 2");
    Tensor strided = Tensor::zeros({4, 4}).transpose(0, 1);
    EXPECT_EQ(error_text<ValueError>([&] { all_gather_into_tensor_inplace(pg, strided, 1); }),
              "all_gather_into_tensor_: buffer must be contiguous, got shape [4, 4] with strides [1, 4]");
  });
}

TEST(Collectives, ReduceScatterAndAllToAllCheckSizes) {
  on_rank0([](ProcessGroup& pg) {
    Tensor out = Tensor::zeros({2, 3});
    Tensor in = Tensor::zeros({5, 3});
    EXPECT_EQ(error_text<ShapeError>([&] { reduce_scatter_tensor(pg, out, in, ReduceOp::sum); }),
              "reduce_scatter_tensor: input shape [5, 3] should be [4, 3] for output [2, 3] and group size 2");
    Tensor a = Tensor::zeros({5, 2});
    Tensor b = Tensor::zeros({5, 2});
    EXPECT_EQ(error_text<ValueError>([&] { all_to_all_single(pg, b, a); }),
              "all_to_all_single: input dim 0 of size 5 is not divisible by group size 2 (pass split sizes)");
    EXPECT_EQ(error_text<ValueError>([&] { all_to_all_single(pg, b, a, {2, 3}, {1, 1}); }),
              "all_to_all_single: input split sizes sum to 2 but dim 0 has size 5");
    EXPECT_EQ(error_text<ValueError>([&] { all_to_all_single(pg, b, a, {2, 3}, {5}); }),
              "all_to_all_single: 1 input split sizes for group size 2");
    EXPECT_EQ(error_text<ValueError>([&] { all_to_all_single(pg, b, a, {2, 3}, {6, -1}); }),
              "all_to_all_single: negative input split size -1");
    Tensor c = Tensor::zeros({5, 3});
    EXPECT_EQ(error_text<ShapeError>([&] { all_to_all_single(pg, c, a, {2, 3}, {2, 3}); }),
              "all_to_all_single: input [5, 2] and output [5, 3] differ beyond dim 0");
    Tensor t = Tensor::zeros({2});
    EXPECT_EQ(error_text<ValueError>([&] { broadcast_(pg, t, 2); }), "broadcast root 2 out of range for group size 2");
  });
}

TEST(Collectives, ResultsOnTensors) {
  run_ranks(3, [&](ProcessGroup& pg) {
    int r = pg.rank();
    // all_reduce of a 2-D bf16 tensor.
    Tensor t = Tensor::full({2, 3}, double(r + 1), DType::bf16);
    all_reduce_(pg, t, ReduceOp::sum)->wait();
    EXPECT_EQ(t.to_doubles(), std::vector<double>(6, 6.0));

    // all_gather of 0-d tensors gives a [3] tensor in group-index order.
    Tensor scalar = Tensor::full({}, double(10 * r), DType::i64);
    Tensor gathered = Tensor::zeros({3}, DType::i64);
    all_gather_into_tensor(pg, gathered, scalar)->wait();
    EXPECT_EQ(gathered.to_doubles(), (std::vector<double>{0, 10, 20}));

    // reduce_scatter of [6, 2] rows into [2, 2]: block r of the sum over ranks.
    Tensor in = Tensor::arange(0, 12, 1, DType::f32).reshape({6, 2});
    Tensor out = Tensor::zeros({2, 2});
    reduce_scatter_tensor(pg, out, in, ReduceOp::avg)->wait();
    std::vector<double> want;
    for (int i = 0; i < 4; ++i) want.push_back(double(4 * r + i));
    EXPECT_EQ(out.to_doubles(), want);

    // all_to_all_single with uneven splits: rank s sends s+1 rows to every rank.
    int64_t rows = 3 * (r + 1);
    Tensor a_in = Tensor::full({rows, 2}, double(r), DType::i32);
    Tensor a_out = Tensor::zeros({6, 2}, DType::i32);
    all_to_all_single(pg, a_out, a_in, {1, 2, 3}, {r + 1, r + 1, r + 1})->wait();
    EXPECT_EQ(a_out.to_doubles(), (std::vector<double>{0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}));

    // Empty tensors work everywhere.
    Tensor e_in = Tensor::zeros({0, 4});
    Tensor e_out = Tensor::zeros({0, 4});
    all_gather_into_tensor(pg, e_out, e_in)->wait();
    all_reduce_(pg, e_in, ReduceOp::max)->wait();

    // broadcast from group index 1 of a strided view's contiguous copy.
    Tensor b = Tensor::full({4}, double(r), DType::f64);
    broadcast_(pg, b, 1)->wait();
    EXPECT_EQ(b.to_doubles(), std::vector<double>(4, 1.0));
  });
}

TEST(Collectives, WorkKeepsTensorsAlive) {
  run_ranks(2, [&](ProcessGroup& pg) {
    WorkPtr w;
    {
      Tensor t = Tensor::full({1000}, 1.0);
      w = all_reduce_(pg, t, ReduceOp::sum);
    }  // the caller's tensor is gone; the Work holds its storage until completion
    w->wait();
    EXPECT_TRUE(w->is_completed());
  });
}

}  // namespace
}  // namespace dt

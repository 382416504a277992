#include "dtensor/comm/collectives.h"

#include <algorithm>
#include <numeric>

namespace dt {

namespace {

// Keeps the tensors' storage alive until the collective completes, so a caller that drops its
// tensors right after issuing cannot free memory a peer is still reading.
class TensorWork : public Work {
 public:
  TensorWork(WorkPtr inner, std::vector<Tensor> keep) : inner_(std::move(inner)), keep_(std::move(keep)) {}
  void wait() override { inner_->wait(); }
  void wait(Duration timeout) override { inner_->wait(timeout); }
  bool is_completed() override { return inner_->is_completed(); }

 private:
  WorkPtr inner_;  // destroyed first (waits for completion), then the tensors
  std::vector<Tensor> keep_;
};

void check_defined_contiguous(const Tensor& t, std::string_view what, std::string_view name) {
  if (!t.defined()) DT_THROW(ValueError) << what << ": " << name << " is an undefined tensor";
  if (!t.is_contiguous())
    DT_THROW(ValueError) << what << ": " << name << " must be contiguous, got shape " << shape_str(t.shape())
                         << " with strides " << shape_str(t.strides());
}

void check_same_dtype(const Tensor& out, const Tensor& in, std::string_view what) {
  if (out.dtype() != in.dtype())
    DT_THROW(DTypeError) << what << ": output dtype " << dtype_name(out.dtype()) << " differs from input dtype "
                         << dtype_name(in.dtype());
}

// Checks out and in of an out-of-place collective `what`: defined, contiguous, one dtype.
void check_out_in(const Tensor& out, const Tensor& in, std::string_view what) {
  check_defined_contiguous(out, what, "output");
  check_defined_contiguous(in, what, "input");
  check_same_dtype(out, in, what);
}

// Returns the shape of `block` stacked `n` times along `dim` (a 0-d block gives [n]).
Shape stacked_shape(const Shape& block, int64_t n, int64_t dim) {
  if (block.empty()) return {n};
  Shape s = block;
  s[size_t(dim)] *= n;
  return s;
}

// Checks that `whole` (the collective's `whole_name`: output of a gather, input of a scatter) is
// `block` stacked once per rank of the group along `dim`.
void check_stacked(const Tensor& whole, std::string_view whole_name, const Tensor& block, std::string_view block_name,
                   int group_size, std::string_view what, int64_t dim = 0) {
  Shape expected = stacked_shape(block.shape(), group_size, dim);
  if (whole.shape() != expected)
    DT_THROW(ShapeError) << what << ": " << whole_name << " shape " << shape_str(whole.shape()) << " should be "
                         << shape_str(expected) << " for " << block_name << " " << shape_str(block.shape())
                         << " and group size " << group_size;
}

// Returns the split sizes to use along dim 0 of a tensor of `rows` rows over n ranks.
std::vector<int64_t> resolve_splits(const std::vector<int64_t>& splits, int64_t rows, int n, std::string_view name) {
  if (splits.empty()) {
    if (rows % n != 0)
      DT_THROW(ValueError) << "all_to_all_single: " << name << " dim 0 of size " << rows
                           << " is not divisible by group size " << n << " (pass split sizes)";
    return std::vector<int64_t>(size_t(n), rows / n);
  }
  if (int(splits.size()) != n)
    DT_THROW(ValueError) << "all_to_all_single: " << splits.size() << " " << name << " split sizes for group size " << n;
  int64_t total = 0;
  for (int64_t s : splits) {
    if (s < 0) DT_THROW(ValueError) << "all_to_all_single: negative " << name << " split size " << s;
    total += s;
  }
  if (total != rows)
    DT_THROW(ValueError) << "all_to_all_single: " << name << " split sizes sum to " << total << " but dim 0 has size "
                         << rows;
  return splits;
}

// The rows of a gather along `dim` of `t`: the product of the dims before it (dim 0: one row).
int64_t rows_before(const Tensor& t, int64_t dim) {
  int64_t rows = 1;
  for (int64_t d = 0; d < dim; ++d) rows *= t.size(d);
  return rows;
}

// Gathers each rank's block of `count` elements at `mine` into `out` along `dim`: one contiguous
// block per rank along dim 0, else each block is rows_before(out, dim) rows one stride of `out`
// apart (all_gather_rows). `mine` may lie inside `out` (the in-place form).
WorkPtr gather_along(ProcessGroup& pg, const void* mine, Tensor& out, size_t count, int64_t dim) {
  const int64_t rows = rows_before(out, dim);
  return rows > 1 && count > 0 ? pg.all_gather_rows(mine, out.raw_data(), count, size_t(rows), out.dtype())
                               : pg.all_gather(mine, out.raw_data(), count, out.dtype());
}

}  // namespace

WorkPtr all_reduce_(ProcessGroup& pg, Tensor& t, ReduceOp op, AllReduceAlgo algo) {
  check_defined_contiguous(t, "all_reduce", "tensor");
  return std::make_shared<TensorWork>(pg.all_reduce_with_algo(t.raw_data(), size_t(t.numel()), t.dtype(), op, algo),
                                      std::vector<Tensor>{t});
}

WorkPtr all_gather_into_tensor(ProcessGroup& pg, Tensor& out, const Tensor& in, int64_t dim) {
  check_out_in(out, in, "all_gather_into_tensor");
  if (dim < 0 || dim >= std::max<int64_t>(in.dim(), 1))
    DT_THROW(ValueError) << "all_gather_into_tensor: dim " << dim << " out of range for input "
                         << shape_str(in.shape());
  check_stacked(out, "output", in, "input", pg.size(), "all_gather_into_tensor", dim);
  WorkPtr w = gather_along(pg, in.raw_data(), out, size_t(in.numel()), dim);
  return std::make_shared<TensorWork>(std::move(w), std::vector<Tensor>{out, in});
}

WorkPtr all_gather_into_tensor_inplace(ProcessGroup& pg, Tensor& out, int64_t dim) {
  check_defined_contiguous(out, "all_gather_into_tensor_", "buffer");
  const int64_t n = pg.size();
  if (dim < 0 || dim >= out.dim() || out.size(dim) % n != 0)
    DT_THROW(ShapeError) << "all_gather_into_tensor_: dim " << dim << " of buffer " << shape_str(out.shape())
                         << " is not a dim divisible by group size " << n;
  const int64_t block = out.size(dim) / n;
  // My block: the rows before dim, each holding `block` of dim's slices of the trailing dims.
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
  const size_t count = size_t(rows_before(out, dim) * block * inner);
  const void* mine = static_cast<const std::byte*>(out.raw_data()) + size_t(pg.rank() * block * inner) * itemsize(out.dtype());
  WorkPtr w = gather_along(pg, mine, out, count, dim);
  return std::make_shared<TensorWork>(std::move(w), std::vector<Tensor>{out});
}

WorkPtr reduce_scatter_tensor(ProcessGroup& pg, Tensor& out, const Tensor& in, ReduceOp op) {
  check_out_in(out, in, "reduce_scatter_tensor");
  check_stacked(in, "input", out, "output", pg.size(), "reduce_scatter_tensor");
  return std::make_shared<TensorWork>(
      pg.reduce_scatter(in.raw_data(), out.raw_data(), size_t(out.numel()), in.dtype(), op),
      std::vector<Tensor>{out, in});
}

WorkPtr all_to_all_single(ProcessGroup& pg, Tensor& out, const Tensor& in, const std::vector<int64_t>& out_split_sizes,
                          const std::vector<int64_t>& in_split_sizes) {
  check_out_in(out, in, "all_to_all_single");
  if (in.dim() == 0 || out.dim() == 0)
    DT_THROW(ShapeError) << "all_to_all_single needs tensors of rank >= 1, got input " << shape_str(in.shape())
                         << " and output " << shape_str(out.shape());
  Shape in_row(in.shape().begin() + 1, in.shape().end());
  Shape out_row(out.shape().begin() + 1, out.shape().end());
  if (in_row != out_row)
    DT_THROW(ShapeError) << "all_to_all_single: input " << shape_str(in.shape()) << " and output "
                         << shape_str(out.shape()) << " differ beyond dim 0";
  int n = pg.size();
  std::vector<int64_t> in_splits = resolve_splits(in_split_sizes, in.size(0), n, "input");
  std::vector<int64_t> out_splits = resolve_splits(out_split_sizes, out.size(0), n, "output");
  size_t row = size_t(numel(in_row));
  std::vector<size_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    send_counts[size_t(i)] = size_t(in_splits[size_t(i)]) * row;
    recv_counts[size_t(i)] = size_t(out_splits[size_t(i)]) * row;
  }
  return std::make_shared<TensorWork>(
      pg.all_to_all(in.raw_data(), send_counts, out.raw_data(), recv_counts, in.dtype()),
      std::vector<Tensor>{out, in});
}

WorkPtr broadcast_(ProcessGroup& pg, Tensor& t, int root) {
  check_defined_contiguous(t, "broadcast", "tensor");
  if (root < 0 || root >= pg.size())
    DT_THROW(ValueError) << "broadcast root " << root << " out of range for group size " << pg.size();
  return std::make_shared<TensorWork>(pg.broadcast(t.raw_data(), size_t(t.numel()), t.dtype(), root),
                                      std::vector<Tensor>{t});
}

}  // namespace dt

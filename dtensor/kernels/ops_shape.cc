// Shape ops: cat and pad copy into a fresh tensor; split, chunk and chunk_exact return views of
// the input (as torch.split / torch.chunk do), so they cost no copy.
#include <algorithm>

#include "dtensor/kernels/ops.h"

namespace dt {

namespace {

// Returns the pieces of x along dim with the given sizes (which sum to size(dim)), as views.
std::vector<Tensor> split_views(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t offset = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(dim, offset, s));
    offset += s;
  }
  return out;
}

std::string sizes_str(const std::vector<int64_t>& v) { return shape_str(v); }

}  // namespace

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) DT_THROW(ValueError) << "cat needs at least one tensor";
  // Like torch, 1-d empty tensors of shape [0] are skipped when concatenating higher-rank tensors.
  const Tensor* ref = nullptr;
  for (const Tensor& x : xs)
    if (!(x.dim() == 1 && x.numel() == 0)) {
      ref = &x;
      break;
    }
  if (!ref) ref = &xs[0];
  const int64_t rank = ref->dim();
  if (rank == 0) DT_THROW(ShapeError) << "cat: zero-dimensional tensor cannot be concatenated";
  const int64_t d = normalize_dim(dim, rank);
  Shape out_shape = ref->shape();
  out_shape[d] = 0;
  std::vector<const Tensor*> parts;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    if (x.dtype() != ref->dtype())
      DT_THROW(DTypeError) << "cat: tensor " << i << " has dtype " << dtype_name(x.dtype()) << ", expected "
                           << dtype_name(ref->dtype()) << " (cast first)";
    if (x.dim() == 1 && x.numel() == 0 && rank != 1) continue;
    bool ok = x.dim() == rank;
    for (int64_t k = 0; ok && k < rank; ++k)
      if (k != d && x.shape()[k] != ref->shape()[k]) ok = false;
    if (!ok)
      DT_THROW(ShapeError) << "cat: tensor " << i << " has shape " << shape_str(x.shape())
                           << " which does not match " << shape_str(ref->shape()) << " except in dim " << d;
    out_shape[d] += x.shape()[d];
    parts.push_back(&x);
  }
  Tensor out = Tensor::uninitialized(out_shape, ref->dtype());
  int64_t offset = 0;
  for (const Tensor* x : parts) {
    const int64_t len = x->shape()[d];
    if (len > 0) out.narrow(d, offset, len).copy_(*x);
    offset += len;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  const int64_t d = normalize_dim(dim, x.dim());
  const int64_t L = x.shape()[d];
  if (split_size < 0 || (split_size == 0 && L != 0))
    DT_THROW(ValueError) << "split_size must be positive, got " << split_size << " for dim " << dim
                         << " of size " << L;
  // torch.split: ceil(L / split_size) pieces, at least one (L = 0 gives one empty piece).
  const int64_t pieces = split_size == 0 ? 1 : std::max<int64_t>((L + split_size - 1) / split_size, 1);
  std::vector<int64_t> sizes(size_t(pieces), split_size);
  sizes.back() = L - split_size * (pieces - 1);
  return split_views(x, sizes, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const int64_t d = normalize_dim(dim, x.dim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) DT_THROW(ValueError) << "split sizes " << sizes_str(sizes) << " contain a negative size";
    total += s;
  }
  if (total != x.shape()[d])
    DT_THROW(ValueError) << "split sizes " << sizes_str(sizes) << " sum to " << total << " but dim " << dim
                         << " has size " << x.shape()[d];
  return split_views(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  if (chunks <= 0) DT_THROW(ValueError) << "chunk expects a positive number of chunks, got " << chunks;
  const int64_t d = normalize_dim(dim, x.dim());
  const int64_t L = x.shape()[d];
  // torch.chunk: an empty dim gives `chunks` empty pieces; otherwise split by ceil(L / chunks),
  // which may give fewer pieces (L=5, chunks=4 -> 2, 2, 1).
  if (L == 0) return split_views(x, std::vector<int64_t>(size_t(chunks), 0), d);
  return split(x, chunk_size(L, chunks), d);
}

std::vector<Tensor> chunk_exact(const Tensor& x, int64_t chunks, int64_t dim) {
  if (chunks <= 0) DT_THROW(ValueError) << "chunk_exact expects a positive number of chunks, got " << chunks;
  const int64_t d = normalize_dim(dim, x.dim());
  const int64_t L = x.shape()[d];
  std::vector<int64_t> sizes(static_cast<size_t>(chunks));
  for (int64_t i = 0; i < chunks; ++i) sizes[size_t(i)] = chunk_length(L, chunks, i);
  return split_views(x, sizes, d);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  if (pads.size() % 2 != 0)
    DT_THROW(ValueError) << "pad expects an even number of pad values, got " << pads.size();
  if (int64_t(pads.size()) > 2 * x.dim())
    DT_THROW(ValueError) << "pad of " << pads.size() << " values is too long for tensor of rank " << x.dim();
  // pads = {last_lo, last_hi, prev_lo, prev_hi, ...}; negative values crop (as F.pad "constant").
  // Example: x [2, 3], pads {1, 2} -> [2, 6] with x in columns 1..3.
  Shape out_shape = x.shape();
  std::vector<int64_t> lo(size_t(x.dim()), 0), hi(size_t(x.dim()), 0);
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    const size_t d = size_t(x.dim()) - 1 - i;
    lo[d] = pads[2 * i];
    hi[d] = pads[2 * i + 1];
    out_shape[d] = x.shape()[d] + lo[d] + hi[d];
    if (out_shape[d] < 0)
      DT_THROW(ValueError) << "pad " << sizes_str(pads) << " gives negative size " << out_shape[d] << " for dim "
                           << d << " of input shape " << shape_str(x.shape());
  }
  Tensor out = Tensor::full(out_shape, value, x.dtype());
  // Copy the part of x that survives cropping into its place.
  Tensor src = x, dst = out;
  for (size_t d = 0; d < size_t(x.dim()); ++d) {
    const int64_t src_start = std::max<int64_t>(0, -lo[d]);
    const int64_t dst_start = std::max<int64_t>(0, lo[d]);
    const int64_t len = x.shape()[d] - src_start - std::max<int64_t>(0, -hi[d]);
    if (len <= 0) return out;
    src = src.narrow(int64_t(d), src_start, len);
    dst = dst.narrow(int64_t(d), dst_start, len);
  }
  dst.copy_(src);
  return out;
}

}  // namespace dt

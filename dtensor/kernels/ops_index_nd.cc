// Kernels indexed by tuples of positions over data's leading dims (ONNX ScatterND and GatherND
// with batch_dims 0): scatter_nd, gather_nd and gather_nd's gradient (ops.h). With data
// [d0, .., d(r-1)] and indices [i0, .., i(q-2), k], each index tuple names one slice
// data[t0, .., t(k-1)] of the trailing dims [dk, .., d(r-1)], contiguous in row-major data, so
// every kernel here is a loop over the tuples moving one slice each.
#include <cstring>

#include "dtensor/kernels/ops.h"

namespace dt {
namespace {

// The tuples of `indices` as offsets into data counted in slices (negative positions counted from
// the end), and the elements of one slice. Throws DTypeError on non-integer indices, ShapeError
// when indices do not fit data, ValueError on a position out of range before anything is written.
struct Tuples {
  std::vector<int64_t> offsets;
  int64_t slice = 1;
};
Tuples tuples(const char* op, const Shape& data, const Tensor& indices) {
  if (indices.dtype() != DType::i64 && indices.dtype() != DType::i32)
    DT_THROW(DTypeError) << op << ": indices must be i64 or i32, got " << dtype_name(indices.dtype());
  nd_slices_shape(op, data, indices.shape());
  const int64_t k = indices.shape().back();
  const std::vector<int64_t> idx = indices.to(DType::i64).to_vector<int64_t>();
  Tuples t;
  for (size_t d = size_t(k); d < data.size(); ++d) t.slice *= data[d];
  t.offsets.reserve(idx.size() / size_t(k));
  for (size_t m = 0; m < idx.size(); m += size_t(k)) {
    int64_t offset = 0;
    for (int64_t d = 0; d < k; ++d) {
      const int64_t len = data[size_t(d)], i = idx[m + size_t(d)];
      if (i < -len || i >= len)
        DT_THROW(ValueError) << op << ": index " << i << " is out of range for dim " << d << " of size " << len;
      offset = offset * len + (i < 0 ? i + len : i);
    }
    t.offsets.push_back(offset);
  }
  return t;
}

}  // namespace

Shape nd_slices_shape(const char* op, const Shape& data, const Shape& indices) {
  if (indices.empty() || indices.back() < 1 || indices.back() > int64_t(data.size()))
    DT_THROW(ShapeError) << op << ": indices " << shape_str(indices) << " must end in a dim of 1 to " << data.size()
                         << " (the rank of data " << shape_str(data) << ")";
  Shape u(indices.begin(), indices.end() - 1);
  u.insert(u.end(), data.begin() + indices.back(), data.end());
  return u;
}

Tensor scatter_nd(const Tensor& data, const Tensor& indices, const Tensor& updates) {
  const Shape want = nd_slices_shape("scatter_nd", data.shape(), indices.shape());
  if (updates.shape() != want)
    DT_THROW(ShapeError) << "scatter_nd: updates " << shape_str(updates.shape()) << " must be " << shape_str(want)
                         << " for data " << shape_str(data.shape()) << " and indices " << shape_str(indices.shape());
  if (updates.dtype() != data.dtype())
    DT_THROW(DTypeError) << "scatter_nd: updates " << dtype_name(updates.dtype()) << " differ from data " << dtype_name(data.dtype());
  const Tuples t = tuples("scatter_nd", data.shape(), indices);
  Tensor out = data.clone();
  const Tensor u = updates.contiguous();
  const size_t bytes = size_t(t.slice) * itemsize(data.dtype());
  char* dst = static_cast<char*>(out.raw_data());
  const char* src = static_cast<const char*>(u.raw_data());
  for (size_t m = 0; m < t.offsets.size(); ++m) std::memcpy(dst + size_t(t.offsets[m]) * bytes, src + m * bytes, bytes);
  return out;
}

Tensor gather_nd(const Tensor& data, const Tensor& indices) {
  const Tuples t = tuples("gather_nd", data.shape(), indices);
  Tensor out = Tensor::uninitialized(nd_slices_shape("gather_nd", data.shape(), indices.shape()), data.dtype());
  const Tensor d = data.contiguous();
  const size_t bytes = size_t(t.slice) * itemsize(data.dtype());
  const char* src = static_cast<const char*>(d.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (size_t m = 0; m < t.offsets.size(); ++m) std::memcpy(dst + m * bytes, src + size_t(t.offsets[m]) * bytes, bytes);
  return out;
}

Tensor gather_nd_backward(const Tensor& grad, const Tensor& indices, const Shape& shape) {
  const Tuples t = tuples("gather_nd_backward", shape, indices);
  const Shape want = nd_slices_shape("gather_nd_backward", shape, indices.shape());
  if (grad.shape() != want)
    DT_THROW(ShapeError) << "gather_nd_backward: grad " << shape_str(grad.shape()) << " is not the gather_nd "
                         << shape_str(want) << " of " << shape_str(shape) << " by indices " << shape_str(indices.shape());
  if (!is_floating(grad.dtype()))
    DT_THROW(DTypeError) << "gather_nd_backward expects a floating grad, got " << dtype_name(grad.dtype());
  const Tensor g = grad.to(DType::f64).contiguous();
  const double* gp = static_cast<const double*>(g.raw_data());
  std::vector<double> acc(size_t(numel(shape)), 0.0);
  for (size_t m = 0; m < t.offsets.size(); ++m) {
    double* o = acc.data() + t.offsets[m] * t.slice;
    const double* s = gp + int64_t(m) * t.slice;
    for (int64_t i = 0; i < t.slice; ++i) o[i] += s[i];
  }
  return Tensor::from_doubles(acc, shape, grad.dtype());
}

}  // namespace dt

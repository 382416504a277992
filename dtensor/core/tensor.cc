#include "dtensor/core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "dtensor/core/bf16_rows.h"
#include "dtensor/core/large_block_cache.h"
#include "dtensor/core/strided_loop.h"

namespace dt {

namespace {

// Resolves a single -1 in a requested view shape against numel; throws ShapeError otherwise.
Shape infer_view_shape(const Shape& requested, int64_t total) {
  Shape out = requested;
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer_at >= 0) DT_THROW(ShapeError) << "only one dim can be -1 in view shape " << shape_str(requested);
      infer_at = int(i);
    } else if (out[i] < 0) {
      DT_THROW(ShapeError) << "invalid size " << out[i] << " in view shape " << shape_str(requested);
    } else {
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0)
      DT_THROW(ShapeError) << "shape " << shape_str(requested) << " is invalid for input of size " << total;
    out[infer_at] = total / known;
  } else if (known != total) {
    DT_THROW(ShapeError) << "shape " << shape_str(requested) << " is invalid for input of size " << total;
  }
  return out;
}

// Returns strides for viewing (shape, strides) as new_shape without a copy, if possible.
// Same algorithm as PyTorch's computeStride: walk chunks of old dims that are contiguous with
// each other and map new dims onto each chunk.
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape) {
  if (shape.empty()) return Strides(new_shape.size(), 1);
  int64_t n = numel(shape);
  if (n == 0) return contiguous_strides(new_shape);
  Strides out(new_shape.size());
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = int64_t(shape.size()) - 1; td >= 0; --td) {
    tensor_numel *= shape[td];
    if (td == 0 || (shape[td - 1] != 1 && strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base_stride = strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

template <typename Dst, typename Src>
inline Dst convert(Src v) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return v;
  } else if constexpr (std::is_same_v<Dst, bool>) {
    return static_cast<compute_t<Src>>(v) != compute_t<Src>(0);
  } else if constexpr (std::is_same_v<Dst, bf16> || std::is_same_v<Dst, f16>) {
    return Dst(static_cast<float>(static_cast<compute_t<Src>>(v)));
  } else {
    return static_cast<Dst>(static_cast<compute_t<Src>>(v));
  }
}

}  // namespace

namespace {

// Sanitizer builds keep every buffer on the ordinary heap so that ASan checks them all.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kUseLargeBlockCache = false;
#else
constexpr bool kUseLargeBlockCache = true;
#endif

std::shared_ptr<Storage> allocate_storage(size_t nbytes, bool zero) {
  std::shared_ptr<void> owner;
  void* p;
  if (kUseLargeBlockCache && nbytes >= detail::LargeBlockCache::kMinBytes) {
    bool zeroed = false;
    p = detail::LargeBlockCache::instance().take(nbytes, &zeroed);
    if (zero && !zeroed) std::memset(p, 0, nbytes);
    owner = std::shared_ptr<void>(p, [nbytes](void* q) { detail::LargeBlockCache::instance().give(q, nbytes); });
  } else {
    const size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
    p = std::aligned_alloc(64, rounded);
    if (!p) DT_THROW(Error) << "out of memory allocating " << nbytes << " bytes";
    if (zero) std::memset(p, 0, rounded);
    owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  return Storage::wrap(p, nbytes, std::move(owner));
}

}  // namespace

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) { return allocate_storage(nbytes, /*zero=*/true); }

std::shared_ptr<Storage> Storage::allocate_uninitialized(size_t nbytes) {
  return allocate_storage(nbytes, /*zero=*/false);
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, std::shared_ptr<void> owner) {
  auto s = std::make_shared<Storage>();
  s->data_ = static_cast<std::byte*>(data);
  s->nbytes_ = nbytes;
  s->owner_ = std::move(owner);
  return s;
}

namespace {
Tensor new_contiguous(const Shape& shape, DType dtype, bool zero) {
  for (int64_t s : shape)
    if (s < 0) DT_THROW(ValueError) << "negative size " << s << " in shape " << shape_str(shape);
  const size_t nbytes = size_t(dt::numel(shape)) * itemsize(dtype);
  return Tensor::from_storage(zero ? Storage::allocate(nbytes) : Storage::allocate_uninitialized(nbytes), dtype,
                              shape, contiguous_strides(shape), 0);
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype) { return new_contiguous(shape, dtype, /*zero=*/true); }

Tensor Tensor::uninitialized(const Shape& shape, DType dtype) { return new_contiguous(shape, dtype, /*zero=*/false); }

Tensor Tensor::zeros(const Shape& shape, DType dtype) { return empty(shape, dtype); }
Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = uninitialized(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::arange(double start, double end, double step, DType dtype) {
  if (step == 0) DT_THROW(ValueError) << "arange step must be nonzero";
  int64_t n = std::max<int64_t>(0, int64_t(std::ceil((end - start) / step)));
  Tensor t = empty({n}, dtype);
  DT_DISPATCH(dtype, {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = convert<T>(start + double(i) * step);
  });
  return t;
}

Tensor Tensor::from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  if (int64_t(values.size()) != t.numel())
    DT_THROW(ShapeError) << values.size() << " values do not fill shape " << shape_str(shape);
  DT_DISPATCH(dtype, {
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = convert<T>(values[i]);
  });
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape,
                            const Strides& strides, int64_t offset) {
  Tensor t;
  t.storage_ = std::move(storage);
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = strides;
  t.offset_ = offset;
  return t;
}

int64_t Tensor::size(int64_t d) const { return shape_[normalize_dim(d, dim())]; }
int64_t Tensor::stride(int64_t d) const { return strides_[normalize_dim(d, dim())]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (shape_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Tensor Tensor::view(const Shape& shape) const {
  Shape s = infer_view_shape(shape, numel());
  auto st = view_strides(shape_, strides_, s);
  if (!st)
    DT_THROW(ShapeError) << "view of shape " << shape_str(s) << " is not compatible with the layout of "
                         << shape_str(shape_) << " (strides " << shape_str(strides_) << "); use reshape";
  return from_storage(storage_, dtype_, s, *st, offset_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = infer_view_shape(shape, numel());
  if (auto st = view_strides(shape_, strides_, s)) return from_storage(storage_, dtype_, s, *st, offset_);
  return contiguous().view(s);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  if (int64_t(dims.size()) != dim())
    DT_THROW(ShapeError) << "permute got " << dims.size() << " dims for tensor of rank " << dim();
  Shape s(dims.size());
  Strides st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = normalize_dim(dims[i], dim());
    if (seen[d]) DT_THROW(DimError) << "permute repeats dim " << dims[i];
    seen[d] = true;
    s[i] = shape_[d];
    st[i] = strides_[d];
  }
  return from_storage(storage_, dtype_, s, st, offset_);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> p(dim());
  for (int64_t i = 0; i < dim(); ++i) p[i] = i;
  std::swap(p[normalize_dim(d0, dim())], p[normalize_dim(d1, dim())]);
  return permute(p);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  int64_t nd = normalize_dim(d, dim());
  if (start < 0) start += shape_[nd];
  if (start < 0 || length < 0 || start + length > shape_[nd])
    DT_THROW(ValueError) << "narrow [" << start << ", " << start + length << ") out of range for dim "
                         << d << " of size " << shape_[nd];
  Shape s = shape_;
  s[nd] = length;
  return from_storage(storage_, dtype_, s, strides_, offset_ + start * strides_[nd]);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  int64_t nd = normalize_dim(d, dim());
  if (step <= 0) DT_THROW(ValueError) << "slice step must be positive, got " << step;
  int64_t L = shape_[nd];
  auto clamp = [L](int64_t v) { return std::clamp(v < 0 ? v + L : v, int64_t(0), L); };
  start = clamp(start);
  end = std::max(clamp(end), start);
  Shape s = shape_;
  Strides st = strides_;
  s[nd] = (end - start + step - 1) / step;
  st[nd] *= step;
  return from_storage(storage_, dtype_, s, st, offset_ + start * strides_[nd]);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  int64_t nd = normalize_dim(d, dim());
  int64_t L = shape_[nd];
  if (index < -L || index >= L)
    DT_THROW(ValueError) << "index " << index << " out of range for dim " << d << " of size " << L;
  if (index < 0) index += L;
  Shape s = shape_;
  Strides st = strides_;
  s.erase(s.begin() + nd);
  st.erase(st.begin() + nd);
  return from_storage(storage_, dtype_, s, st, offset_ + index * strides_[nd]);
}

Tensor Tensor::expand(const Shape& shape) const {
  if (shape.size() < shape_.size())
    DT_THROW(ShapeError) << "cannot expand " << shape_str(shape_) << " to fewer dims " << shape_str(shape);
  size_t lead = shape.size() - shape_.size();
  Shape s(shape.size());
  Strides st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      if (shape[i] < 0) DT_THROW(ShapeError) << "expand cannot use -1 for new dim " << i;
      s[i] = shape[i];
      continue;
    }
    int64_t cur = shape_[i - lead];
    int64_t want = shape[i] == -1 ? cur : shape[i];
    if (cur == want) {
      s[i] = cur;
      st[i] = strides_[i - lead];
    } else if (cur == 1) {
      s[i] = want;
    } else {
      DT_THROW(ShapeError) << "cannot expand " << shape_str(shape_) << " to " << shape_str(shape)
                           << " (dim " << i << ": " << cur << " vs " << want << ")";
    }
  }
  return from_storage(storage_, dtype_, s, st, offset_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t nd = normalize_dim(d, dim() + 1);
  Shape s = shape_;
  Strides st = strides_;
  int64_t stride = nd < dim() ? strides_[nd] * shape_[nd] : 1;
  s.insert(s.begin() + nd, 1);
  st.insert(st.begin() + nd, stride);
  return from_storage(storage_, dtype_, s, st, offset_);
}

Tensor Tensor::squeeze(int64_t d) const {
  int64_t nd = normalize_dim(d, dim());
  if (shape_[nd] != 1) return *this;
  Shape s = shape_;
  Strides st = strides_;
  s.erase(s.begin() + nd);
  st.erase(st.begin() + nd);
  return from_storage(storage_, dtype_, s, st, offset_);
}

Tensor Tensor::squeeze() const {
  Shape s;
  Strides st;
  for (size_t i = 0; i < shape_.size(); ++i)
    if (shape_[i] != 1) {
      s.push_back(shape_[i]);
      st.push_back(strides_[i]);
    }
  return from_storage(storage_, dtype_, s, st, offset_);
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = uninitialized(shape_, dtype_);
  out.copy_(*this);
  return out;
}

namespace {

// Converts a contiguous run of n values; bf16 <-> f32 takes the vectorised loops (bf16_rows.h).
template <typename S, typename D>
void convert_run(const S* src, D* dst, int64_t n) {
  if constexpr (std::is_same_v<S, bf16> && std::is_same_v<D, float>)
    widen_bf16(src, dst, n);
  else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bf16>)
    narrow_to_bf16(src, dst, n);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = convert<D>(src[i]);
}

}  // namespace

namespace {
void check_writable(const Tensor& t, const char* op) {
  if (t.storage()->read_only())
    DT_THROW(ValueError) << op << " into " << t.str()
                         << ", whose bytes are read-only (a safetensors file's, shared by every tensor loaded from it): "
                            "write into a clone()";
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  check_writable(*this, "copy_");
  Tensor s = src.expand(shape_);
  std::array<const Strides*, 2> st{&strides_, &s.strides_};
  DT_DISPATCH(dtype_, {
    using D = T;
    D* dst = static_cast<D*>(raw_data());
    DT_DISPATCH(s.dtype_, {
      const T* sp = static_cast<const T*>(s.raw_data());
      strided_loop<2>(shape_, st, [&](const std::array<int64_t, 2>& off, int64_t n,
                                      const std::array<int64_t, 2>& inner) {
        D* d = dst + off[0];
        const T* q = sp + off[1];
        if constexpr (std::is_same_v<D, T>) {
          if (inner[0] == 1 && inner[1] == 1) {
            std::memmove(static_cast<void*>(d), static_cast<const void*>(q), size_t(n) * sizeof(T));
            return;
          }
        }
        if (inner[0] == 1 && inner[1] == 1) return convert_run(q, d, n);
        for (int64_t i = 0; i < n; ++i) d[i * inner[0]] = convert<D>(q[i * inner[1]]);
      });
    });
  });
  return *this;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out = uninitialized(shape_, dtype);
  out.copy_(*this);
  return out;
}

Tensor& Tensor::fill_(double value) {
  check_writable(*this, "fill_");
  std::array<const Strides*, 1> st{&strides_};
  DT_DISPATCH(dtype_, {
    T* p = static_cast<T*>(raw_data());
    const T v = convert<T>(value);
    strided_loop<1>(shape_, st, [&](const std::array<int64_t, 1>& off, int64_t n,
                                    const std::array<int64_t, 1>& inner) {
      for (int64_t i = 0; i < n; ++i) p[off[0] + i * inner[0]] = v;
    });
  });
  return *this;
}

double Tensor::item() const {
  if (numel() != 1) DT_THROW(ValueError) << "item() needs one element, tensor has shape " << shape_str(shape_);
  return to_doubles()[0];
}

double Tensor::at(const std::vector<int64_t>& index) const {
  if (int64_t(index.size()) != dim())
    DT_THROW(ValueError) << "index of " << index.size() << " dims for tensor of rank " << dim();
  int64_t off = offset_;
  for (size_t i = 0; i < index.size(); ++i) {
    if (index[i] < 0 || index[i] >= shape_[i])
      DT_THROW(ValueError) << "index " << index[i] << " out of range for dim " << i << " of size " << shape_[i];
    off += index[i] * strides_[i];
  }
  double v = 0;
  DT_DISPATCH(dtype_, { v = convert<double>(reinterpret_cast<const T*>(storage_->data())[off]); });
  return v;
}

std::vector<double> Tensor::to_doubles() const {
  Tensor d = uninitialized(shape_, DType::f64);
  d.copy_(*this);
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

std::string Tensor::str() const {
  std::ostringstream os;
  os << "Tensor(" << dtype_name(dtype_) << ", " << shape_str(shape_) << ")";
  return os.str();
}

}  // namespace dt

// A strided CPU tensor with shared storage.
//
// Views (view/reshape, permute, transpose, narrow, slice, select, expand, unsqueeze, squeeze) share
// the storage and only change shape, strides and offset; `contiguous` and `clone` copy. Offsets and
// strides are in elements. Storage is 64-byte aligned, or wraps external memory (a memory-mapped
// safetensors file, a peer's comm buffer) kept alive by a shared handle.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"

namespace dt {

class Storage {
 public:
  // Allocates `nbytes` of 64-byte-aligned, zero-initialised memory.
  static std::shared_ptr<Storage> allocate(size_t nbytes);
  // Same, but the contents are unspecified: for outputs that are overwritten entirely.
  static std::shared_ptr<Storage> allocate_uninitialized(size_t nbytes);
  // Wraps memory owned elsewhere; `owner` keeps it alive as long as the storage lives.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, std::shared_ptr<void> owner);

  std::byte* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

  // Read-only bytes (a safetensors file's, which every tensor loaded from it shares): copy_ and
  // fill_ refuse them, the interpreter's in-place ops write a copy, and a cache may trust that
  // contents it saw once are still there while the storage lives (packed weights, which otherwise
  // hash the weight on every run).
  void set_read_only() { read_only_ = true; }
  bool read_only() const { return read_only_; }

 private:
  std::byte* data_ = nullptr;
  size_t nbytes_ = 0;
  bool read_only_ = false;
  std::shared_ptr<void> owner_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor; defined() is false

  // Creation.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);  // zero-filled
  // Like empty, but the elements are unspecified (no zero-fill pass): for kernel outputs that
  // write every element.
  static Tensor uninitialized(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  // Returns [start, start+step, ...) below `end` (1-d).
  static Tensor arange(double start, double end, double step = 1, DType dtype = DType::i64);
  static Tensor arange(int64_t end, DType dtype = DType::i64) { return arange(0, double(end), 1, dtype); }
  // Copies `values` (converted to dtype) into a new tensor of `shape`.
  static Tensor from_doubles(const std::vector<double>& values, const Shape& shape,
                             DType dtype = DType::f32);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    Tensor t = empty(shape, dtype_of<T>());
    DT_CHECK(int64_t(values.size()) == t.numel()) << values.size() << " values for shape " << shape_str(shape);
    // An empty vector's data() may be null, which memcpy must not be given even for 0 bytes.
    if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
    return t;
  }
  // Wraps existing storage with the given geometry (no copy).
  static Tensor from_storage(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape,
                             const Strides& strides, int64_t offset);

  // Metadata.
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return dt::numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * itemsize(dtype_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }

  // Pointer to element [0,...,0].
  void* raw_data() const { return storage_->data() + offset_ * int64_t(itemsize(dtype_)); }
  template <typename T>
  T* data() const {
    DT_CHECK(dtype_of<T>() == dtype_) << "data<" << dtype_name(dtype_of<T>()) << "> on "
                                      << dtype_name(dtype_);
    return static_cast<T*>(raw_data());
  }

  // Views (share storage).
  Tensor view(const Shape& shape) const;     // requires a compatible layout; -1 infers one size
  Tensor reshape(const Shape& shape) const;  // view when possible, else contiguous copy
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  Tensor slice(int64_t d, int64_t start, int64_t end, int64_t step = 1) const;  // clamps like python
  Tensor select(int64_t d, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor unsqueeze(int64_t d) const;
  Tensor squeeze(int64_t d) const;  // no-op when size(d) != 1
  Tensor squeeze() const;
  Tensor flatten() const { return reshape({numel()}); }

  // Copies.
  Tensor contiguous() const;  // returns *this when already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  // Copies src (broadcast to this shape, converted to this dtype) into this tensor's elements.
  Tensor& copy_(const Tensor& src);
  Tensor to(DType dtype) const;  // cast; returns *this when the dtype matches
  Tensor& fill_(double value);

  // Element access for tests and small host-side logic (slow path).
  double item() const;  // numel must be 1
  double at(const std::vector<int64_t>& index) const;
  std::vector<double> to_doubles() const;  // row-major
  template <typename T>
  std::vector<T> to_vector() const {
    Tensor c = contiguous();
    const T* p = c.data<T>();
    return std::vector<T>(p, p + c.numel());
  }
  std::string str() const;  // "Tensor(f32, [2, 3])"

 private:
  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::f32;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
};

}  // namespace dt

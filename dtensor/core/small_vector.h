// SmallVector<T, N>: a std::vector-like sequence that keeps up to N elements inline and only
// allocates on the heap beyond that.
//
// Why: every TensorType holds a Shape and every Node its operand and result lists; with
// std::vector each of those is one heap allocation, and parsing a large IR file was dominated by
// allocations and the page faults of fresh memory (issue 5). Real tensors have rank <= 6 and ops
// have a handful of operands, so the inline buffer covers nearly every case.
//
// Invariants:
//   - data_ points at inline_ while capacity_ == N, else at a heap block of capacity_ elements;
//   - the heap is never used for capacity <= N (shrinking back is not done: a vector that once
//     grew keeps its block until it is destroyed or moved from).
// T must be trivially copyable (int64_t, pointers): elements are moved with memcpy/memmove and
// never destroyed, which keeps the class small and its copies cheap.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace dt {

template <class T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector holds trivially copyable types only");
  static_assert(N > 0, "SmallVector needs an inline capacity");

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVector() noexcept = default;
  explicit SmallVector(size_t n) { resize(n); }
  SmallVector(size_t n, const T& value) { assign(n, value); }
  SmallVector(std::initializer_list<T> init) { assign(init.begin(), init.end()); }
  template <std::input_iterator It>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  // Implicit both ways so that code and APIs written for std::vector<T> (attributes, json,
  // kernels taking index lists) keep working at the boundary.
  SmallVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT(google-explicit-constructor)
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT

  SmallVector(const SmallVector& other) { assign(other.begin(), other.end()); }
  SmallVector(SmallVector&& other) noexcept { steal(other); }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) {
      release();
      steal(other);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> init) {
    assign(init.begin(), init.end());
    return *this;
  }
  ~SmallVector() { release(); }

  // --- size and element access ---
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_t capacity() const noexcept { return capacity_; }
  // Returns true while the elements live in the inline buffer (for tests and diagnostics).
  bool is_inline() const noexcept { return data_ == inline_; }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  T& operator[](size_t i) noexcept { return data_[i]; }
  const T& operator[](size_t i) const noexcept { return data_[i]; }
  T& at(size_t i) {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  const T& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("SmallVector::at");
    return data_[i];
  }
  T& front() noexcept { return data_[0]; }
  const T& front() const noexcept { return data_[0]; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T& back() const noexcept { return data_[size_ - 1]; }

  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  // --- modifiers ---
  void reserve(size_t n) {
    if (n > capacity_) grow_to(n);
  }
  void clear() noexcept { size_ = 0; }
  void push_back(const T& value) {
    T copy = value;  // value may alias an element that grow() moves
    if (size_ == capacity_) grow_to(next_capacity(size_ + 1));
    data_[size_++] = copy;
  }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
    return back();
  }
  void pop_back() noexcept { --size_; }
  void resize(size_t n) { resize(n, T()); }
  void resize(size_t n, const T& value) {
    if (n > capacity_) grow_to(std::max(n, next_capacity(n)));
    for (size_t i = size_; i < n; ++i) data_[i] = value;
    size_ = static_cast<uint32_t>(n);
  }
  void assign(size_t n, const T& value) {
    T copy = value;
    size_ = 0;
    resize(n, copy);
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    size_ = 0;
    if constexpr (std::forward_iterator<It>) {
      size_t n = static_cast<size_t>(std::distance(first, last));
      reserve(n);
      std::copy(first, last, data_);
      size_ = static_cast<uint32_t>(n);
    } else {
      for (; first != last; ++first) push_back(*first);
    }
  }
  void assign(std::initializer_list<T> init) { assign(init.begin(), init.end()); }

  iterator insert(const_iterator pos, const T& value) { return insert(pos, size_t{1}, value); }
  iterator insert(const_iterator pos, size_t count, const T& value) {
    T copy = value;
    size_t at = open_gap(pos, count);
    std::fill_n(data_ + at, count, copy);
    return data_ + at;
  }
  template <std::input_iterator It>
  iterator insert(const_iterator pos, It first, It last) {
    // Copy first: the range may point into this vector, which open_gap can move.
    SmallVector tmp(first, last);
    size_t at = open_gap(pos, tmp.size());
    std::copy(tmp.begin(), tmp.end(), data_ + at);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> init) {
    return insert(pos, init.begin(), init.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    size_t lo = static_cast<size_t>(first - data_);
    size_t hi = static_cast<size_t>(last - data_);
    std::memmove(data_ + lo, data_ + hi, (size_ - hi) * sizeof(T));
    size_ -= static_cast<uint32_t>(hi - lo);
    return data_ + lo;
  }
  void swap(SmallVector& other) noexcept {
    SmallVector tmp(std::move(other));
    other = std::move(*this);
    *this = std::move(tmp);
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator!=(const SmallVector& a, const SmallVector& b) { return !(a == b); }
  friend bool operator<(const SmallVector& a, const SmallVector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
  // Comparisons against std::vector<T> spelled out: the hidden friends above would also accept
  // one through the implicit conversion, but only after a copy into a SmallVector.
  friend bool operator==(const SmallVector& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const std::vector<T>& a, const SmallVector& b) { return b == a; }
  friend bool operator!=(const SmallVector& a, const std::vector<T>& b) { return !(a == b); }
  friend bool operator!=(const std::vector<T>& a, const SmallVector& b) { return !(b == a); }

 private:
  static size_t next_capacity(size_t needed) { return std::max(needed, size_t{2} * N); }

  // Moves the elements into a heap block of n >= size_ elements.
  void grow_to(size_t n) {
    n = std::max(n, size_t{2} * capacity_);
    T* block = static_cast<T*>(std::malloc(n * sizeof(T)));
    if (!block) throw std::bad_alloc();
    if (size_) std::memcpy(block, data_, size_ * sizeof(T));
    release();
    data_ = block;
    capacity_ = static_cast<uint32_t>(n);
  }
  // Makes room for `count` elements at pos; returns the index of the gap.
  size_t open_gap(const_iterator pos, size_t count) {
    size_t at = static_cast<size_t>(pos - data_);
    if (size_ + count > capacity_) grow_to(size_ + count);
    std::memmove(data_ + at + count, data_ + at, (size_ - at) * sizeof(T));
    size_ += static_cast<uint32_t>(count);
    return at;
  }
  void release() noexcept {
    if (data_ != inline_) std::free(data_);
    data_ = inline_;
    capacity_ = N;
  }
  // Takes other's elements (its heap block, or a copy of its inline ones) and leaves it empty.
  void steal(SmallVector& other) noexcept {
    if (other.data_ == other.inline_) {
      if (other.size_) std::memcpy(inline_, other.inline_, other.size_ * sizeof(T));
    } else {
      data_ = other.data_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_;
      other.capacity_ = N;
    }
    size_ = other.size_;
    other.size_ = 0;
  }

  T* data_ = inline_;
  uint32_t size_ = 0;
  uint32_t capacity_ = N;
  T inline_[N];
};

}  // namespace dt

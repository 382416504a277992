// safetensors files (https://github.com/huggingface/safetensors): read into memory once, with
// zero-copy tensors into that copy, and written atomically (dtensor/core/atomic_file.h).
//
// Layout: 8 bytes little-endian header length N, N bytes of JSON header
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data buffer; offsets are relative to the buffer start. Reading refuses (dt::IoError
// naming the file and the tensor) a truncated file, a header longer than the file or than 100 MB,
// malformed JSON, an unknown dtype, a shape whose byte size differs from its offsets, offsets out
// of range, overlapping tensors, and shapes whose strides overflow (even with 0 elements). The
// file must be a regular file (a FIFO is refused, not waited on).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dt::io {

// Name -> tensor, ordered by name (the order files are written in).
using TensorMap = std::map<std::string, Tensor>;

class SafetensorsFile {
 public:
  // Reads `path` into memory and validates its header; throws IoError. Later changes to the file
  // do not affect the returned object.
  static SafetensorsFile open(const std::string& path);
  // Validates an in-memory file image (copied); `name` is used in messages.
  static SafetensorsFile from_bytes(const std::string& bytes, const std::string& name);

  const std::string& path() const { return path_; }
  // Tensor names in file order (by offset).
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  // Returns the tensor (sharing the file's memory when aligned, else a copy); IoError when absent.
  Tensor get(const std::string& name) const;
  DType dtype(const std::string& name) const;
  const Shape& shape(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Returns every tensor.
  TensorMap all() const;

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    size_t begin;
    size_t end;
  };
  void parse_header();

  std::string path_;
  std::shared_ptr<void> bytes_owner_;  // keeps the file's bytes alive
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t buffer_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// Returns every tensor of the file at `path` (zero-copy where aligned).
TensorMap read_safetensors(const std::string& path);
// Writes tensors (made contiguous) to `path` atomically; throws IoError when it cannot be written.
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// Returns the bytes of a safetensors file holding `tensors`.
std::string safetensors_bytes(const TensorMap& tensors, const std::map<std::string, std::string>& metadata = {});

// Returns "F32", "BF16", ... for a dtype, and the dtype of such a string (IoError when unknown).
std::string safetensors_dtype_name(DType t);

}  // namespace dt::io

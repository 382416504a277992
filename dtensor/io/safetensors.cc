#include "dtensor/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/core/input_file.h"

namespace dt::io {
namespace {

// The reference implementation's limit: a header beyond this is refused before parsing.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
// Strides and byte sizes of a tensor are int64 element and byte counts: 2^62 keeps them and their
// sums far from overflow.
constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 62;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {{DType::f32, "F32"}, {DType::f64, "F64"}, {DType::f16, "F16"},
                                     {DType::bf16, "BF16"}, {DType::i64, "I64"}, {DType::i32, "I32"},
                                     {DType::boolean, "BOOL"}};

std::optional<DType> parse_safetensors_dtype(const std::string& s) {
  for (const auto& d : kDTypeNames)
    if (s == d.name) return d.dtype;
  return std::nullopt;
}

}  // namespace

std::string safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == t) return d.name;
  DT_THROW(IoError) << "dtype " << dtype_name(t) << " has no safetensors name";
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  // The file is read into private memory, not mapped: a shared mapping of a file that another
  // process truncates or rewrites in place (a writer that is not dtensor's) raises SIGBUS on the
  // next access, hours into a run. One read costs about what faulting the mapping in did.
  InputFile file(path, "safetensors file");
  SafetensorsFile f;
  f.path_ = path;
  auto storage = Storage::allocate_uninitialized(std::max<size_t>(file.size(), 1));
  file.read_exactly(storage->data(), file.size(), 0);
  f.data_ = storage->data();
  f.size_ = file.size();
  f.bytes_owner_ = storage;
  f.parse_header();
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(const std::string& bytes, const std::string& name) {
  SafetensorsFile f;
  f.path_ = name;
  // Copy into 64-byte aligned storage so tensors can alias it as they alias a file's bytes.
  auto storage = Storage::allocate(std::max<size_t>(bytes.size(), 1));
  std::memcpy(storage->data(), bytes.data(), bytes.size());
  f.data_ = storage->data();
  f.size_ = bytes.size();
  f.bytes_owner_ = storage;
  f.parse_header();
  return f;
}

void SafetensorsFile::parse_header() {
  if (size_ < 8) DT_THROW(IoError) << "safetensors file " << path_ << " is truncated: " << size_ << " bytes, need at least 8";
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint64_t(data_[i]);
  if (n > kMaxHeaderBytes)
    DT_THROW(IoError) << "safetensors file " << path_ << " declares a header of " << n << " bytes (limit " << kMaxHeaderBytes << ")";
  if (n > size_ - 8)
    DT_THROW(IoError) << "safetensors file " << path_ << " is truncated: header of " << n << " bytes but only "
                      << size_ - 8 << " follow";
  buffer_start_ = 8 + size_t(n);
  const size_t buffer_size = size_ - buffer_start_;
  const char* text = reinterpret_cast<const char*>(data_ + 8);
  nlohmann::json header = nlohmann::json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    DT_THROW(IoError) << "safetensors file " << path_ << " has a malformed JSON header";
  struct Range {
    size_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) DT_THROW(IoError) << "safetensors file " << path_ << ": __metadata__ is not an object";
      for (auto m = e.begin(); m != e.end(); ++m)
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    auto bad = [&](const char* what) {
      DT_THROW(IoError) << "safetensors file " << path_ << ": tensor " << name << " " << what;
    };
    if (!e.is_object()) bad("is not an object");
    if (!e.contains("dtype") || !e["dtype"].is_string()) bad("has no dtype");
    std::string dt = e["dtype"].get<std::string>();
    std::optional<DType> dtype = parse_safetensors_dtype(dt);
    if (!dtype) DT_THROW(IoError) << "safetensors file " << path_ << ": tensor " << name << " has unsupported dtype " << dt;
    if (!e.contains("shape") || !e["shape"].is_array()) bad("has no shape list");
    Entry entry{*dtype, {}, 0, 0};
    // Strides are products of the trailing sizes whatever the element count, so a shape such as
    // [0, 2^40, 2^40, 2^40] (0 bytes) must be refused too: bound the product of the sizes with
    // 0 counted as 1, in bytes, by kMaxTensorBytes.
    uint64_t bytes = itemsize(*dtype), stride_bytes = bytes;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) bad("has a shape entry that is not a non-negative integer");
      uint64_t v = d.get<uint64_t>();
      if (__builtin_mul_overflow(stride_bytes, std::max<uint64_t>(v, 1), &stride_bytes) ||
          stride_bytes > kMaxTensorBytes)
        bad("has a shape too large");
      bytes *= v;  // <= stride_bytes
      entry.shape.push_back(int64_t(v));
    }
    if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2 ||
        !e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned())
      bad("has no data_offsets [begin, end]");
    uint64_t begin = e["data_offsets"][0].get<uint64_t>(), end = e["data_offsets"][1].get<uint64_t>();
    if (begin > end || end > buffer_size)
      DT_THROW(IoError) << "safetensors file " << path_ << ": tensor " << name << " data_offsets [" << begin << ", "
                        << end << "] out of range for a data buffer of " << buffer_size << " bytes";
    if (end - begin != bytes)
      DT_THROW(IoError) << "safetensors file " << path_ << ": tensor " << name << " has " << end - begin
                        << " bytes but dtype " << dt << " and its shape need " << bytes;
    entry.begin = size_t(begin);
    entry.end = size_t(end);
    auto [pos, inserted] = entries_.emplace(name, std::move(entry));
    DT_CHECK(inserted) << "duplicate key from json object";
    ranges.push_back({size_t(begin), size_t(end), &pos->first});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin < ranges[i - 1].end)
      DT_THROW(IoError) << "safetensors file " << path_ << ": tensors " << *ranges[i - 1].name << " and "
                        << *ranges[i].name << " overlap";
  for (const Range& r : ranges) names_.push_back(*r.name);
}

Tensor SafetensorsFile::get(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) DT_THROW(IoError) << "safetensors file " << path_ << " has no tensor " << name;
  const Entry& e = it->second;
  const std::byte* p = data_ + buffer_start_ + e.begin;
  const size_t nbytes = e.end - e.begin;
  // A bool is one byte that must be 0 or 1: any other byte is undefined behaviour when a kernel
  // loads it as bool, so the file is refused here, where it enters.
  if (e.dtype == DType::boolean)
    for (size_t i = 0; i < nbytes; ++i)
      if (std::to_integer<unsigned>(p[i]) > 1)
        DT_THROW(IoError) << "safetensors file " << path_ << ": bool tensor " << name << " holds byte "
                          << std::to_integer<unsigned>(p[i]) << " at element " << i << " (a bool is 0 or 1)";
  if (reinterpret_cast<uintptr_t>(p) % itemsize(e.dtype) == 0 && nbytes > 0) {
    // Zero-copy: the storage aliases the file's bytes and keeps them alive. Every get() shares
    // them, so these tensors must not be written: the storage is read-only (tensor.h).
    auto storage = Storage::wrap(const_cast<std::byte*>(p), nbytes, bytes_owner_);
    storage->set_read_only();
    return Tensor::from_storage(std::move(storage), e.dtype, e.shape, contiguous_strides(e.shape), 0);
  }
  Tensor t = Tensor::empty(e.shape, e.dtype);  // unaligned data (or empty): copy
  if (nbytes) std::memcpy(t.raw_data(), p, nbytes);
  return t;
}

DType SafetensorsFile::dtype(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) DT_THROW(IoError) << "safetensors file " << path_ << " has no tensor " << name;
  return it->second.dtype;
}

const Shape& SafetensorsFile::shape(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) DT_THROW(IoError) << "safetensors file " << path_ << " has no tensor " << name;
  return it->second.shape;
}

TensorMap SafetensorsFile::all() const {
  TensorMap out;
  for (const auto& n : names_) out.emplace(n, get(n));
  return out;
}

TensorMap read_safetensors(const std::string& path) { return SafetensorsFile::open(path).all(); }

std::string safetensors_bytes(const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") DT_THROW(IoError) << "a tensor cannot be named __metadata__";
    DT_CHECK(t.defined()) << "undefined tensor " << name;
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // pad so the data buffer starts 8-byte aligned
  std::string out;
  out.reserve(8 + h.size() + offset);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out += char((n >> (8 * i)) & 0xff);
  out += h;
  for (const auto& [name, t] : tensors) {
    Tensor c = t.contiguous();
    out.append(reinterpret_cast<const char*>(c.raw_data()), c.nbytes());
  }
  return out;
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, safetensors_bytes(tensors, metadata));
}

}  // namespace dt::io

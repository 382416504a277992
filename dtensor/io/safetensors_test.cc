#include "dtensor/io/safetensors.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "dtensor/core/error.h"
#include "dtensor/core/rng.h"

namespace dt::io {
namespace {

TensorMap sample_tensors() {
  Generator gen(3);
  TensorMap m;
  m["a.weight"] = rand({3, 5}, gen);
  m["b"] = Tensor::arange(7, DType::i64);
  m["c"] = rand({2, 2}, gen, DType::f64);
  m["d"] = rand({4}, gen, DType::bf16);
  m["e"] = rand({1}, gen, DType::f16);
  m["f"] = Tensor::arange(3, DType::i32);
  m["g"] = Tensor::ones({2}, DType::boolean);
  m["empty"] = Tensor::zeros({0, 3});
  m["scalar"] = Tensor::full({}, 2.5);
  return m;
}

// Builds a file image from a raw JSON header and a data buffer.
std::string image(const std::string& header, const std::string& data) {
  std::string out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out += char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string io_error(const std::string& bytes) {
  try {
    SafetensorsFile::from_bytes(bytes, "bad.safetensors").all();
  } catch (const IoError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Safetensors, WriteReadRoundTripAllDtypes) {
  TensorMap m = sample_tensors();
  auto path = std::filesystem::temp_directory_path() / "dtensor_io_roundtrip.safetensors";
  write_safetensors(path.string(), m, {{"format", "pt"}});
  SafetensorsFile f = SafetensorsFile::open(path.string());
  EXPECT_EQ(f.names().size(), m.size());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  for (const auto& [name, t] : m) {
    SCOPED_TRACE(name);
    Tensor r = f.get(name);
    EXPECT_EQ(r.dtype(), t.dtype());
    EXPECT_EQ(r.shape(), t.shape());
    EXPECT_EQ(r.to_doubles(), t.to_doubles());
  }
  // Zero-copy: two reads of an aligned tensor alias the same mapped bytes.
  EXPECT_EQ(f.get("a.weight").raw_data(), f.get("a.weight").raw_data());
  std::filesystem::remove(path);
}

TEST(Safetensors, HeaderIsPaddedAndSortedByName) {
  std::string bytes = safetensors_bytes(sample_tensors());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ(n % 8, 0u);
  SafetensorsFile f = SafetensorsFile::from_bytes(bytes, "mem");
  EXPECT_EQ(f.names().front(), "a.weight");
}

TEST(Safetensors, ReadsTheReferenceWeights) {
  std::string path = std::string(DTENSOR_REFERENCE_DIR) + "/mlp/weights.safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << "reference folder absent: " << path;
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.names().size(), 12u);
  EXPECT_EQ(f.shape("layers.0.fc1.weight"), (Shape{256, 64}));
  EXPECT_EQ(f.dtype("layers.1.fc2.bias"), DType::f32);
}

TEST(Safetensors, RefusesTruncatedFiles) {
  EXPECT_EQ(io_error("abc"), "safetensors file bad.safetensors is truncated: 3 bytes, need at least 8");
  std::string good = safetensors_bytes(sample_tensors());
  EXPECT_NE(io_error(good.substr(0, 40)).find("is truncated: header of"), std::string::npos);
  // Cutting the data buffer puts the last tensors' offsets out of range.
  EXPECT_NE(io_error(good.substr(0, good.size() - 4)).find("out of range for a data buffer"), std::string::npos);
}

TEST(Safetensors, RefusesAHugeHeader) {
  std::string bytes(16, '\0');
  bytes[4] = 1;  // 2^32 bytes
  EXPECT_EQ(io_error(bytes), "safetensors file bad.safetensors declares a header of 4294967296 bytes (limit 104857600)");
}

TEST(Safetensors, RefusesMalformedHeaders) {
  EXPECT_EQ(io_error(image("{\"a\": ", "")), "safetensors file bad.safetensors has a malformed JSON header");
  EXPECT_EQ(io_error(image("[1, 2]", "")), "safetensors file bad.safetensors has a malformed JSON header");
  EXPECT_EQ(io_error(image(R"({"w": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]}})", "x")),
            "safetensors file bad.safetensors: tensor w has unsupported dtype I8");
  EXPECT_EQ(io_error(image(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "xxxx")),
            "safetensors file bad.safetensors: tensor w has a shape entry that is not a non-negative integer");
  EXPECT_EQ(io_error(image(R"({"w": {"dtype": "F32", "shape": [2]}})", "")),
            "safetensors file bad.safetensors: tensor w has no data_offsets [begin, end]");
}

TEST(Safetensors, RefusesABoolByteOtherThanZeroOrOne) {
  // Found by the safetensors fuzzer: loading byte 112 as a bool is undefined behaviour.
  EXPECT_EQ(io_error(image(R"({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})", std::string("\x01\x00p", 3))),
            "safetensors file bad.safetensors: bool tensor m holds byte 112 at element 2 (a bool is 0 or 1)");
  EXPECT_EQ(io_error(image(R"({"m": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}})", std::string("\x01\x00", 2))),
            "no error");
}

TEST(Safetensors, RefusesOffsetsThatDoNotFit) {
  EXPECT_EQ(io_error(image(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}})", "12345678")),
            "safetensors file bad.safetensors: tensor w data_offsets [0, 12] out of range for a data buffer of 8 bytes");
  EXPECT_EQ(io_error(image(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", "12345678")),
            "safetensors file bad.safetensors: tensor w has 8 bytes but dtype F32 and its shape need 12");
  EXPECT_EQ(io_error(image(R"({"v": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                           R"( "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                           "12345678")),
            "safetensors file bad.safetensors: tensors v and w overlap");
  EXPECT_EQ(io_error(image(R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})", "12345678")),
            "safetensors file bad.safetensors: tensor w has a shape too large");
}

// Issue 13: a zero-element shape whose strides overflow int64 was accepted (0 bytes) and
// overflowed contiguous_strides.
TEST(Safetensors, RefusesShapesWhoseStridesOverflowWhateverTheElementCount) {
  EXPECT_EQ(io_error(image(R"({"w": {"dtype": "F32", "shape": [0, 1099511627776, 1099511627776, 1099511627776],)"
                           R"( "data_offsets": [0, 0]}})", "")),
            "safetensors file bad.safetensors: tensor w has a shape too large");
  // A large zero-element shape whose strides fit is still fine.
  EXPECT_EQ(io_error(image(R"({"w": {"dtype": "F32", "shape": [0, 1099511627776], "data_offsets": [0, 0]}})", "")),
            "no error");
}

// Issue 13: `dtensor run` kept the weights mapped for the whole run, so rewriting the file in
// place (truncate, then write) killed it with SIGBUS. An opened file must not depend on the file.
TEST(Safetensors, OpenedFileSurvivesTruncationInPlace) {
  TensorMap m = sample_tensors();
  auto path = std::filesystem::temp_directory_path() / ("dtensor_io_truncate_" + std::to_string(getpid()) + ".safetensors");
  write_safetensors(path.string(), m);
  SafetensorsFile f = SafetensorsFile::open(path.string());
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  for (const auto& [name, t] : m) EXPECT_EQ(f.get(name).to_doubles(), t.to_doubles()) << name;
  std::filesystem::remove(path);
}

// Issue 13: a FIFO given as the weights hung forever in open().
TEST(Safetensors, RefusesAFifo) {
  auto path = std::filesystem::temp_directory_path() / ("dtensor_io_fifo_" + std::to_string(getpid()));
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  try {
    SafetensorsFile::open(path.string());
    ADD_FAILURE() << "a fifo was opened";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), "safetensors file " + path.string() + " is not a regular file (a fifo)");
  }
  std::filesystem::remove(path);
}

TEST(Safetensors, MissingFileAndTensor) {
  EXPECT_THROW(SafetensorsFile::open("/nonexistent/w.safetensors"), IoError);
  SafetensorsFile f = SafetensorsFile::from_bytes(safetensors_bytes(sample_tensors()), "mem");
  try {
    f.get("nope");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_STREQ(e.what(), "safetensors file mem has no tensor nope");
  }
}

// Seeded random byte mutations of a valid file: a clean IoError or a file that reads fully.
TEST(Safetensors, MutatedFilesFailCleanly) {
  const std::string good = safetensors_bytes(sample_tensors());
  Generator gen(11);
  int refused = 0;
  for (int i = 0; i < 400; ++i) {
    std::string m = good;
    const int edits = 1 + int(gen.next_u64() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = size_t(gen.next_u64() % m.size());
      // Bias edits towards the header, where the interesting failures are.
      if (gen.next_u64() % 4 != 0) at %= std::min<size_t>(m.size(), 8 + 600);
      switch (gen.next_u64() % 4) {
        case 0: m[at] = char(gen.next_u64()); break;
        case 1: m[at] = "0123456789[],:\"{} -"[gen.next_u64() % 19]; break;
        case 2: m.erase(at, 1 + gen.next_u64() % 4); break;
        case 3: m.resize(at); break;
      }
      if (m.empty()) break;
    }
    try {
      SafetensorsFile f = SafetensorsFile::from_bytes(m, "mutant");
      for (const auto& [name, t] : f.all()) (void)t.to_doubles();
    } catch (const IoError& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find("mutant"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      FAIL() << "mutant " << i << " threw a non-IoError: " << e.what();
    }
  }
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace dt::io

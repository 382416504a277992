// safetensors: a file image is refused with an IoError or reads fully; what reads must write back
// to a file that reads to the same tensors.
#include <cstddef>
#include <cstdint>
#include <string>

#include "dtensor/io/safetensors.h"
#include "fuzz/fuzz_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  dt::fuzz::expect_clean([&] {
    dt::io::SafetensorsFile f = dt::io::SafetensorsFile::from_bytes(bytes, "fuzz.safetensors");
    dt::io::TensorMap all = f.all();
    for (const auto& [name, t] : all) {
      dt::fuzz::require(t.shape() == f.shape(name), "tensor shape matches the header");
      if (t.numel() <= 4096) (void)t.to_doubles();
    }
    dt::io::SafetensorsFile again = dt::io::SafetensorsFile::from_bytes(dt::io::safetensors_bytes(all, f.metadata()), "again");
    dt::fuzz::require(again.names().size() == all.size(), "rewritten file has every tensor");
  });
  return 0;
}

// onnx: a model file is refused with a typed dt::Error or imports into a graph that verifies and
// prints to IR text dtensor's own parser reads back the same (issue 29: no hostile file crashes,
// hangs or writes a .dt the parser refuses). Dynamic dims get a small size, so that seeds with a
// dynamic batch or sequence reach their nodes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "dtensor/io/onnx_import.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "fuzz/fuzz_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  dt::fuzz::expect_clean([&] {
    dt::io::OnnxImportOptions opt;
    opt.dynamic_dim_default = 2;
    dt::io::OnnxImportResult r = dt::io::import_onnx_bytes(bytes, "fuzz.onnx", opt);
    const std::string text = dt::ir::print(r.graph);
    dt::fuzz::require(dt::ir::print(dt::ir::parse(text, "fuzz.dt")) == text, "imported graph round-trips through IR text");
    for (const dt::ir::Value* p : r.graph.params())
      dt::fuzz::require(r.weights.count(p->name) == 1, "every parameter has its weight");
  });
  return 0;
}

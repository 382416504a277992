// IR text: parse + verify, then print and parse again; the second print must equal the first
// (the text format round-trips everything it accepts).
#include <cstddef>
#include <cstdint>
#include <string>

#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "fuzz/fuzz_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  dt::fuzz::expect_clean([&] {
    dt::ir::Graph g = dt::ir::parse(text, "fuzz.dt");
    const std::string printed = dt::ir::print(g);
    dt::ir::Graph again = dt::ir::parse(printed, "printed.dt");
    dt::fuzz::require(dt::ir::print(again) == printed, "print(parse(print(g))) == print(g)");
  });
  return 0;
}

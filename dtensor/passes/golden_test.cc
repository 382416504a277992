// Golden IR tests: tests/passes/<pass>/<case>.dt is run through the single pass <pass> and the
// printed result must equal <case>.expected.dt. A first line `# options: --bucket-cap-mb 1,4
// --one-shot-threshold 0 --memory-budget 1024` sets PassOptions. Set DTENSOR_UPDATE_GOLDEN=1 to
// (re)write the expected files, then review the diff.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/ir/verifier.h"
#include "tests/support/golden_case.h"
#include "dtensor/passes/pass_manager.h"

namespace dt::passes {
namespace {

namespace fs = std::filesystem;

TEST(Golden, EveryPassHasCases) {
  for (const PassInfo& info : registered_passes()) {
    SCOPED_TRACE(std::string(info.name));
    EXPECT_GE(golden_cases(DTENSOR_PASSES_GOLDEN_DIR, info.name).size(), 1u);
  }
}

TEST(Golden, OutputsMatch) {
  const bool update = std::getenv("DTENSOR_UPDATE_GOLDEN") != nullptr;
  size_t n = 0;
  for (const PassInfo& info : registered_passes()) {
    for (const GoldenCase& c : golden_cases(DTENSOR_PASSES_GOLDEN_DIR, info.name)) {
      SCOPED_TRACE(c.input.string());
      ++n;
      ir::Graph g = ir::parse_file(c.input.string());
      PassManager pm;
      pm.add(parse_pipeline(info.name, c.options));
      pm.run(g);
      std::string got = ir::print(g);
      if (update) {
        std::ofstream(c.expected) << got;
        continue;
      }
      ASSERT_TRUE(fs::exists(c.expected)) << "missing " << c.expected;
      EXPECT_EQ(got, read_text(c.expected));
      // The expected output is itself valid IR and a fixed point of printing.
      ir::Graph back = ir::parse_file(c.expected.string());
      EXPECT_EQ(ir::print(back), got);
    }
  }
  EXPECT_GE(n, 10u);
}

}  // namespace
}  // namespace dt::passes

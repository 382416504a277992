// Test support: discovery of the golden IR cases under tests/passes/<pass>/ (shared by the golden
// and the numerics tests).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/passes/pass.h"

namespace dt::passes {

struct GoldenCase {
  std::filesystem::path input;     // <case>.dt
  std::filesystem::path expected;  // <case>.expected.dt
  PassOptions options;             // from a leading `# options: ...` line
};

// Returns the cases of one pass, sorted by file name.
std::vector<GoldenCase> golden_cases(const std::string& root, std::string_view pass);
std::string read_text(const std::filesystem::path& p);

}  // namespace dt::passes

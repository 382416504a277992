#include "tests/support/golden_case.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "dtensor/core/error.h"
#include "dtensor/passes/pass_manager.h"

namespace dt::passes {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) DT_THROW(IoError) << "cannot read " << p.string();
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

PassOptions parse_options(const std::string& text) {
  PassOptions o;
  const std::string tag = "# options:";
  if (text.rfind(tag, 0) != 0) return o;
  std::istringstream line(text.substr(tag.size(), text.find('\n') - tag.size()));
  std::string flag, value;
  while (line >> flag >> value) {
    if (flag == "--bucket-cap-mb") o.bucket_cap_mb = parse_bucket_caps(value);
    else if (flag == "--one-shot-threshold") o.one_shot_threshold_bytes = std::stoull(value);
    else if (flag == "--memory-budget") o.memory_budget_bytes = std::stoull(value);
    else if (flag == "--bucket-mixed-dtypes") o.bucket_mixed_dtypes = value == "true";
    else if (flag == "--tp-overlap")
      o.tp_overlap = value == "on" ? PassOptions::TpOverlap::on
                     : value == "off" ? PassOptions::TpOverlap::off : PassOptions::TpOverlap::automatic;
    else if (flag == "--tp-overlap-chunks") o.tp_overlap_chunks = std::stoi(value);
    else DT_THROW(ValueError) << "unknown golden option " << flag;
  }
  return o;
}

}  // namespace

std::vector<GoldenCase> golden_cases(const std::string& root, std::string_view pass) {
  std::vector<GoldenCase> out;
  std::filesystem::path dir = std::filesystem::path(root) / std::string(pass);
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".dt" || name.find(".expected.") != std::string::npos) continue;
    GoldenCase c;
    c.input = e.path();
    c.expected = dir / (e.path().stem().string() + ".expected.dt");
    c.options = parse_options(read_text(e.path()));
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const GoldenCase& a, const GoldenCase& b) { return a.input < b.input; });
  return out;
}

}  // namespace dt::passes

#include "bench/torch_reference.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "dtensor/core/error.h"

namespace dt::bench {

std::string torch_unavailable(const TorchScript& t, const char* bench) {
  if (!std::filesystem::exists(t.script))
    DT_THROW(IoError) << bench << " --vs-torch needs " << t.script
                      << " (run from the repository root or pass --torch-script)";
  if (std::system(fmt::format("{} -c 'import torch' >/dev/null 2>&1", t.python).c_str()) == 0) return "";
  return t.python + " cannot import torch: skipping the PyTorch comparison";
}

std::optional<double> torch_min_ms(const TorchScript& t, const std::string& part, const ir::GptConfig& m, int repeat,
                                   int world) {
  std::string cmd = fmt::format("{} {} {} {} {} {} {} {} {} {}", t.python, t.script, part, m.vocab, m.hidden, m.heads,
                                m.layers, m.batch, m.seq, repeat);
  if (part == "tp") cmd += fmt::format(" {}", world);
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return std::nullopt;
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  const int status = pclose(f);
  const size_t brace = out.rfind("{\"part\"");
  if (status != 0 || brace == std::string::npos) {
    std::fprintf(stderr, "bench: `%s` failed (status %d): %s\n", cmd.c_str(), status, out.c_str());
    return std::nullopt;
  }
  return nlohmann::json::parse(out.substr(brace))["min_ms"].get<double>();
}

}  // namespace dt::bench

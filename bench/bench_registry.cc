#include "bench/bench_registry.h"

namespace dt::bench {

std::vector<std::pair<std::string, BenchSetup>>& registered_benches() {
  static std::vector<std::pair<std::string, BenchSetup>> benches;
  return benches;
}

BenchRegistrar::BenchRegistrar(const std::string& name, BenchSetup setup) {
  registered_benches().emplace_back(name, std::move(setup));
}

int& bench_exit_code() {
  static int code = 0;
  return code;
}

}  // namespace dt::bench

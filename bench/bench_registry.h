// Registration of the `dtensor bench ...` benchmarks. Each bench_*.cc file registers its own with a
// static BenchRegistrar (so adding a benchmark touches only its own file and bench/CMakeLists.txt);
// the CLI adds them under its `bench` command. Benchmark code is this target's, not the CLI's: the
// CLI calls in, nothing here includes tools/.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace dt::bench {

// A setup function adds one benchmark (options and callback) to the `bench` app it receives.
using BenchSetup = std::function<void(CLI::App&)>;

struct BenchRegistrar {
  BenchRegistrar(const std::string& name, BenchSetup setup);
};

// Every registered setup, in registration order.
std::vector<std::pair<std::string, BenchSetup>>& registered_benches();

// Exit code a benchmark wants: 1 when it ran but a result it checks was wrong.
int& bench_exit_code();

}  // namespace dt::bench

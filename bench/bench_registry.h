// Registration of the `dtensor bench ...` benchmarks. Each bench_*.cc file registers its own with a
// static BenchRegistrar (core/registry.h); the CLI adds them under its `bench` command. Benchmark
// code is this target's, not the CLI's: the CLI calls in, nothing here includes tools/.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "dtensor/core/registry.h"

namespace dt::bench {

// A setup function adds one benchmark (options and callback) to the `bench` app it receives.
using BenchSetup = std::function<void(CLI::App&)>;
using Benches = Registry<struct BenchTag, BenchSetup>;
using BenchRegistrar = Benches::Registrar;

// Adds benchmark `name` under `bench` with the --json flag every benchmark has (into `json`) and
// `run` as its action; returns it for the benchmark's own options. What `run` reads must outlive
// the app (the options are a static of the setup function).
CLI::App* add_bench(CLI::App& bench, const std::string& name, const std::string& summary, bool& json,
                    std::function<void()> run);

// Exit code a benchmark wants: 1 when it ran but a result it checks was wrong.
int& bench_exit_code();

}  // namespace dt::bench

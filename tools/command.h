// Registration of `dtensor` subcommands: each cmd_*.cc file registers itself with a static
// CommandRegistrar (core/registry.h), so adding a command touches only its own file and
// tools/CMakeLists.txt.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "dtensor/core/registry.h"

namespace dt::tools {

// A setup function adds one subcommand (options and callback) to the app.
using CommandSetup = std::function<void(CLI::App&)>;

using Commands = Registry<struct CommandTag, CommandSetup>;
using CommandRegistrar = Commands::Registrar;

// Throws ValueError when `applies` is false and any of the flags `names` was given on `cmd`'s
// command line: an option that cannot apply is an error, never silently ignored. The message is
// "<flag> <why>", e.g. "--passes applies to sharded runs only: add --mesh and --plan".
void refuse_unless(const CLI::App* cmd, bool applies, const std::vector<std::string>& names, const std::string& why);

// Exit code a command callback wants (set by callbacks: 1 means "ran, but the check failed").
int& command_exit_code();

}  // namespace dt::tools

// The dtensor command-line tool: one subcommand per file (cmd_*.cc), registered at start-up.
#include <cstdio>
#include <exception>

#include "dtensor/core/error.h"
#include "tools/command.h"

namespace dt::tools {

std::vector<std::pair<std::string, CommandSetup>>& registered_commands() {
  static std::vector<std::pair<std::string, CommandSetup>> commands;
  return commands;
}

CommandRegistrar::CommandRegistrar(const std::string& name, CommandSetup setup) {
  registered_commands().emplace_back(name, std::move(setup));
}

std::vector<std::pair<std::string, CommandSetup>>& registered_benches() {
  static std::vector<std::pair<std::string, CommandSetup>> benches;
  return benches;
}

BenchRegistrar::BenchRegistrar(const std::string& name, CommandSetup setup) {
  registered_benches().emplace_back(name, std::move(setup));
}

void refuse_unless(const CLI::App* cmd, bool applies, const std::vector<std::string>& names, const std::string& why) {
  if (applies) return;
  for (const std::string& name : names)
    if (cmd->get_option(name)->count() > 0) DT_THROW(ValueError) << name << " " << why;
}

int& command_exit_code() {
  static int code = 0;
  return code;
}

}  // namespace dt::tools

int main(int argc, char** argv) {
  CLI::App app{"dtensor: turn a single-device tensor program into a distributed one and run it"};
  app.set_version_flag("--version", std::string("dtensor ") + DTENSOR_VERSION);
  app.require_subcommand(1);
  for (auto& [name, setup] : dt::tools::registered_commands()) setup(app);
  if (!dt::tools::registered_benches().empty()) {
    CLI::App* bench = app.add_subcommand("bench", "Run a benchmark and print its figures (--json for JSON)");
    bench->require_subcommand(1);
    for (auto& [name, setup] : dt::tools::registered_benches()) setup(*bench);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end parsing with exit code 0 and print what was asked; any other parse
    // error is a problem in the user's input: one line, exit code 2 (CLI11's own codes are 105+).
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "dtensor: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const dt::Error& e) {
    std::fprintf(stderr, "dtensor: error: %s\n", e.what());
    return 2;
  } catch (const dt::InternalError& e) {
    std::fprintf(stderr, "dtensor: internal error (a bug in dtensor, not in your input; please report it): %s\n",
                 e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtensor: internal error: %s\n", e.what());
    return 3;
  }
  return dt::tools::command_exit_code();
}

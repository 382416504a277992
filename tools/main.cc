// The dtensor command-line tool: one subcommand per file (cmd_*.cc), registered at start-up.
#include <cstdio>
#include <string>
#include <exception>

#include "dtensor/core/error.h"
#include "bench/bench_registry.h"
#include "tools/command.h"

namespace dt::tools {

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

namespace {

// Returns a message when argv[at] names no subcommand of `app` (CLI11 itself only says "A
// subcommand is required"), looking one level further down for commands that take a subcommand
// (bench, checkpoint); empty when the words are known or are options.
std::string unknown_command(CLI::App& app, int argc, char** argv, int at) {
  if (at >= argc || argv[at][0] == '-') return "";
  std::string names;
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == argv[at])
      return sub->get_require_subcommand_min() > 0 ? unknown_command(*sub, argc, argv, at + 1) : "";
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  const std::string where = app.get_parent() ? " " + app.get_name() : "";
  return "unknown command '" + std::string(argv[at]) + "': dtensor" + where + " has " + names;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtensor: turn a single-device tensor program into a distributed one and run it"};
  app.set_version_flag("--version", std::string("dtensor ") + DTENSOR_VERSION);
  app.require_subcommand(1);
  for (auto& [name, setup] : dt::tools::Commands::entries()) setup(app);
  if (!dt::bench::Benches::entries().empty()) {
    CLI::App* bench = app.add_subcommand("bench", "Run a benchmark and print its figures (--json for JSON)");
    bench->require_subcommand(1);
    for (auto& [name, setup] : dt::bench::Benches::entries()) setup(*bench);
  }
  if (const std::string unknown = unknown_command(app, argc, argv, 1); !unknown.empty()) {
    std::fprintf(stderr, "dtensor: error: %s (see --help)\n", unknown.c_str());
    return 2;
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
  return dt::tools::command_exit_code() != 0 ? dt::tools::command_exit_code() : dt::bench::bench_exit_code();
}

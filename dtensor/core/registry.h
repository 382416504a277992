// A list that files add themselves to at start-up: each of the CLI's commands (tools/command.h) and
// each benchmark (bench/bench_registry.h) registers with a static Registrar in its own file, so
// adding one touches only that file and its CMakeLists.txt.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dt {

// `Tag` keeps two registries of the same Entry type apart.
template <class Tag, class Entry>
struct Registry {
  // Every registered entry, in registration order. A function-local static, so registrars in
  // other files' static initialisers may run first.
  static std::vector<std::pair<std::string, Entry>>& entries() {
    static std::vector<std::pair<std::string, Entry>> all;
    return all;
  }
  struct Registrar {
    Registrar(std::string name, Entry entry) { entries().emplace_back(std::move(name), std::move(entry)); }
  };
};

}  // namespace dt

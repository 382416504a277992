// What a test's action throws, as text: the checks of user errors compare whole messages.
#pragma once

#include <string>

#include "dtensor/core/error.h"

namespace dt::test {

// Runs fn and returns what() of the E it throws (any dt::Error by default), or "no error". An
// exception of another type propagates and fails the test.
template <typename E = Error, typename F>
std::string error_text(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace dt::test

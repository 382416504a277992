// The message of the error a test provokes, for tests that compare two checks' messages.
#pragma once

#include <functional>
#include <string>

#include "dtensor/core/error.h"

namespace dt::test {

// Returns the message of the E that `body` throws, "" when it throws nothing.
template <typename E = InternalError>
std::string message_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace dt::test

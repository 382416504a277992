// What a fuzz harness accepts: input that fails with a typed dt::Error is fine (that is the
// contract for user input); an InternalError (a DT_CHECK reached from user input) or any other
// exception is a finding, turned into a crash so libFuzzer saves the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "dtensor/core/error.h"

namespace dt::fuzz {

// Runs `body`; returns normally on success or a user-facing dt::Error, aborts otherwise.
template <typename Body>
void expect_clean(Body&& body) {
  try {
    body();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "fuzz: internal error from user input: %s\n", e.what());
    std::abort();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: untyped exception from user input: %s\n", e.what());
    std::abort();
  }
}

// Aborts with `what` unless `cond` (a property the harness checks, e.g. a round trip).
inline void require(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "fuzz: property failed: %s\n", what);
    std::abort();
  }
}

}  // namespace dt::fuzz

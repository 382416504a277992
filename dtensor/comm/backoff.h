// Waiting for something that can only be polled (an MPI request, a counter in shared memory).
//
// Open MPI progresses non-blocking operations only inside MPI calls, so a waiter must keep
// polling; spinning for the whole timeout, though, burns a core per rank while a stalled peer
// holds everyone up (~90 % CPU for 60 s). Backoff spins (yielding) for the first kSpin, when the
// operation is most likely about to complete, then sleeps between polls, doubling the sleep from
// kFirstSleep up to kMaxSleep: a long wait costs a poll per millisecond at most, and an operation
// that completes late is noticed at most kMaxSleep after it did.
#pragma once

#include <chrono>
#include <thread>

namespace dt {

class Backoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::microseconds kSpin{20000};
  static constexpr std::chrono::microseconds kFirstSleep{20};
  static constexpr std::chrono::microseconds kMaxSleep{1000};

  Backoff() : start_(Clock::now()) {}

  // Pauses before the next poll: a yield while spinning, then a bounded sleep.
  void pause() {
    if (sleep_.count() == 0) {
      if (Clock::now() - start_ < kSpin) {
        std::this_thread::yield();
        return;
      }
      sleep_ = kFirstSleep;
    }
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, kMaxSleep);
  }

 private:
  Clock::time_point start_;
  std::chrono::microseconds sleep_{0};
};

}  // namespace dt

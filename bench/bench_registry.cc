#include "bench/bench_registry.h"

namespace dt::bench {

int& bench_exit_code() {
  static int code = 0;
  return code;
}

}  // namespace dt::bench

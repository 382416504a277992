// What a process spent over an interval: wall time, CPU time (every thread),
// context switches (voluntary: a thread blocked or yielded; involuntary: the scheduler took the
// core) and page faults (minor: a page mapped on first touch, zeroed by the kernel; major: read
// from disk). `dtensor profile` reports them per run, so a forward whose wall time sits above its
// CPU time per core, whose involuntary switches climb (threads oversubscribing the cores), or whose
// steady-state runs still touch fresh pages (buffers not recycled), shows.
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <chrono>

namespace dt::runtime {

struct ProcessUsage {
  double wall_s = 0, cpu_s = 0;
  long voluntary_switches = 0, involuntary_switches = 0;
  long minor_faults = 0, major_faults = 0;

  // The process's totals now: CPU time from CLOCK_PROCESS_CPUTIME_ID (every thread's scheduled
  // run time, to the nanosecond), switches and faults from getrusage(RUSAGE_SELF). getrusage's
  // user + system split is sampled at the scheduler's ticks, which over a few milliseconds under
  // load reported 3.3 cores busy for a process of two threads.
  static ProcessUsage now() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    timespec cpu{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    return {std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
            double(cpu.tv_sec) + double(cpu.tv_nsec) * 1e-9, ru.ru_nvcsw, ru.ru_nivcsw, ru.ru_minflt, ru.ru_majflt};
  }
  friend ProcessUsage operator-(const ProcessUsage& a, const ProcessUsage& b) {
    return {a.wall_s - b.wall_s, a.cpu_s - b.cpu_s, a.voluntary_switches - b.voluntary_switches,
            a.involuntary_switches - b.involuntary_switches, a.minor_faults - b.minor_faults,
            a.major_faults - b.major_faults};
  }
};

}  // namespace dt::runtime

// Whether this test binary was built with AddressSanitizer (`make asan`, or clang's). The sanitized
// run is there to catch memory and undefined-behaviour errors on every code path; it runs ~30x
// slower than the release run, which already checks each sweep in full. So a test whose cost is a
// sweep over many similar cases (meshes, limits, layer counts) keeps a fixed subset of them there,
// chosen so every code path of the sweep is still taken once.
#pragma once

namespace dt::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace dt::testing

// XXH64 (Yann Collet's xxHash, 64-bit variant, seed 0 by default): a fast non-cryptographic hash,
// used to check that each file of a sharded checkpoint is the one its manifest lists
// (io/sharded_checkpoint.h). Bit-compatible with the reference `xxh64sum`.
#pragma once

#include <cstdint>
#include <string_view>

namespace dt {

uint64_t xxhash64(std::string_view bytes, uint64_t seed = 0);

}  // namespace dt

// Direct all_gather: out[s*count .. (s+1)*count) = rank s's `in`, for every group index s; with
// desc.rows > 1, row r of rank s's `in` (count/rows elements) lands at out[(r*n + s)*count/rows ..]
// instead (a gather along a later dim, written straight into its final layout).
//
// Each rank copies every peer's `in` straight into its own `out` (one copy per byte, no staging),
// starting with its own index and walking round the group so that ranks read different peers'
// buffers at the same time instead of all reading rank 0 first.
//
//   for each chunk (kAllGatherChunkBytes of every input):
//     copy chunk of in_s into out[s*count ..] for s = me, me+1, ... (mod n);
//     barrier (all but the last chunk: pacing only);
//   barrier "read": every rank has read my `in`; after it nobody touches my buffers.
//
// Why chunks: every input is read by all n ranks. Keeping the ranks within one chunk of each
// other means the first reader pulls a chunk into the shared cache and the other n-1 read it from
// there, so each input crosses the memory bus about once instead of n times. The intermediate
// barriers are for pacing only; correctness needs just the final one.
//
// In place: when `in` is exactly my block of `out` (in == out + me*count; rows > 1: in == out +
// me*count/rows, the first row of my block, its rows n*count/rows apart as in `out`), the own copy
// is skipped; peers then read my block where it lies in my `out`, which I never write (a producer
// wrote its result there: a vocabulary-parallel lm_head's GEMM into its columns of the logits).
// Any other overlap of `in` and `out` is undefined.
#include <algorithm>
#include <cstring>
#include <vector>

#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

void all_gather(AlgorithmContext& ctx) {
  const int n = ctx.size();
  const size_t block = ctx.desc().bytes();
  if (block == 0) return;
  auto* out = static_cast<std::byte*>(ctx.mine().out);
  const size_t row = block / ctx.desc().rows;  // rows == 1: the whole block
  // Rank s's input row r starts at in_s + r * stride_s: rows of a block are `row` bytes apart, or
  // n * row when rank s's input is its block of its own output (in place).
  std::vector<size_t> stride(size_t(n), row);
  for (int s = 0; s < n; ++s)
    if (ctx.desc().rows > 1 && ctx.part(s).in == static_cast<const std::byte*>(ctx.part(s).out) + size_t(s) * row)
      stride[size_t(s)] = size_t(n) * row;
  ctx.paced_chunks(block, kAllGatherChunkBytes, [&](size_t begin, size_t len) {
    for (int k = 0; k < n; ++k) {
      int s = (ctx.me + k) % n;
      const auto* src = static_cast<const std::byte*>(ctx.part(s).in);
      // Bytes [begin, begin + len) of block s, one piece per row they cross.
      for (size_t at = begin, end = begin + len; at < end;) {
        const size_t r = at / row, col = at % row, piece = std::min(row - col, end - at);
        std::byte* dst = out + (r * size_t(n) + size_t(s)) * row + col;
        const std::byte* from = src + r * stride[size_t(s)] + col;
        if (from != dst) std::memcpy(dst, from, piece);
        at += piece;
      }
    }
  });
}

}  // namespace dt::threads

// How a tensor is laid out along one mesh dim: S(d) sharded on tensor dim d, R replicated, or
// P(op) partial (the global value is the reduction with op of the local values over that dim).
//
// SS(d), the strided shard (PyTorch's _StridedShard, FSDP over TP), is S(d) split last: when
// several mesh dims shard tensor dim d, the plain S(d) ones split it in mesh-dim order and the
// SS(d) ones then split each resulting chunk (in mesh-dim order among themselves). On a dp x tp
// mesh, SS(0),S(0) splits rows by tp first and each tp chunk by dp, so an all_gather over dp
// rebuilds exactly this rank's tp shard. Worked example, 16 rows on mesh 4x2: rank (dp i, tp j)
// holds rows [8j + 2i, 8j + 2i + 2), row offsets by global rank 0, 8, 2, 10, 4, 12, 6, 14.
// is_shard() is true for both; is_strided() tells them apart.
//
// A blocked shard S(d,blocks=b) (a fused projection's layout, PyTorch's _StridedShard with
// split_factor b) cuts tensor dim d into b equal blocks and shards each block on the mesh dim: the
// local piece is the concatenation of every block's chunk. A fused qkv weight [3H, k] as
// S(0,blocks=3) on 2 ranks: rank 0 holds rows [0, H/2) [H, 3H/2) [2H, 5H/2) (its half of q, k and
// v). The dim must divide by b and no other mesh dim may shard it; redistribution never moves a
// blocked shard (its producers and readers keep it: a fused linear and the split after it).
//
// Text form: "S(0)", "S(-1)", "S(0,blocks=3)", "SS(0)", "R", "P(sum)" (also "P" for P(sum); P(avg), P(max),
// P(min), P(prod)); a list is
// comma-separated, one placement per mesh dim: "S(0),R". A negative shard dim stays negative until
// normalised against a tensor rank (DTensorSpec does this).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/comm/reduce_op.h"

namespace dt {

class Placement {
 public:
  enum class Kind : uint8_t { replicate, shard, partial, strided_shard };

  Placement() = default;  // R
  static Placement replicate() { return Placement(Kind::replicate, 0, ReduceOp::sum); }
  static Placement shard(int64_t dim) { return Placement(Kind::shard, dim, ReduceOp::sum); }
  static Placement partial(ReduceOp op = ReduceOp::sum) { return Placement(Kind::partial, 0, op); }
  static Placement strided_shard(int64_t dim) { return Placement(Kind::strided_shard, dim, ReduceOp::sum); }
  // S(dim) in `blocks` equal blocks (blocks 1: plain S(dim)).
  static Placement blocked_shard(int64_t dim, int64_t blocks) {
    Placement p(Kind::shard, dim, ReduceOp::sum);
    p.blocks_ = int32_t(blocks < 1 ? 1 : blocks);
    return p;
  }
  // Parses one placement; throws ValueError naming the text.
  static Placement parse(std::string_view text);

  Kind kind() const { return kind_; }
  bool is_replicate() const { return kind_ == Kind::replicate; }
  bool is_shard() const { return kind_ == Kind::shard || kind_ == Kind::strided_shard; }
  bool is_shard(int64_t dim) const { return is_shard() && dim_ == dim; }
  bool is_strided() const { return kind_ == Kind::strided_shard; }
  // The number of equal blocks a blocked shard cuts its dim into (1 for every other placement).
  int64_t blocks() const { return blocks_; }
  bool is_blocked() const { return blocks_ > 1; }
  // The same placement on another dim (shards only; blocks kept).
  Placement with_dim(int64_t dim) const {
    Placement p(kind_, dim, op_);
    p.blocks_ = blocks_;
    return p;
  }
  bool is_partial() const { return kind_ == Kind::partial; }
  int64_t dim() const { return dim_; }  // the shard dim (0 for non-shards)
  ReduceOp op() const { return op_; }   // the partial op (sum for non-partials)

  // Returns S(d) with d normalised into [0, rank); throws DimError
  // "shard dim 3 out of range for tensor of rank 2".
  Placement normalized(int64_t rank) const;
  std::string str() const;

  bool operator==(const Placement& o) const {
    return kind_ == o.kind_ && dim_ == o.dim_ && op_ == o.op_ && blocks_ == o.blocks_;
  }
  bool operator!=(const Placement& o) const { return !(*this == o); }

 private:
  Placement(Kind kind, int64_t dim, ReduceOp op) : kind_(kind), op_(op), dim_(dim) {}
  Kind kind_ = Kind::replicate;
  ReduceOp op_ = ReduceOp::sum;
  int32_t blocks_ = 1;
  int64_t dim_ = 0;
};

using Placements = std::vector<Placement>;

// Parses "S(0),R,P(sum)"; throws ValueError naming the bad item.
Placements parse_placements(std::string_view text);
// Returns "S(0),R,P(sum)".
std::string placements_str(const Placements& placements);

}  // namespace dt

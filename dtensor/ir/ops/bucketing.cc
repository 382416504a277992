// Ops the collective passes (dtensor/passes) introduce: flat-buffer copy-in and split/view-out for
// bucketed collectives, and the lowered forms of collectives (in-place all_reduce_ and
// all_gather_into_tensor_ with its all_gather_copy_in, blocking one-shot).
//
// Worked example: two all_gathers on a group of n = 4, inputs a f32[2, 3] and b f32[5] merge into
//   %flat = bucket_copy_in(%a, %b) {dtype = f32}            : f32[11]    a's 6 then b's 5 elements
//   %ag   = all_gather_into_tensor(%flat) {group = g}        : f32[44]    row r = rank r's flat
//   %w    = wait_tensor(%ag)                                 : f32[44]
//   %a_g  = bucket_split_out(%w) {chunks = 4, offset = 0, shape = [8, 3]}  : f32[8, 3]
//   %b_g  = bucket_split_out(%w) {chunks = 4, offset = 6, shape = [20]}    : f32[20]
// bucket_split_out views w as [chunks, 11], takes columns [offset, offset + numel/chunks) and copies
// them out row after row: exactly all_gather_into_tensor(a) and all_gather_into_tensor(b).
//
// Gathers of different dtypes share a bucket as PyTorch's multi-dtype bucketing does: the buffer
// takes the members' smallest dtype and holds each input's bytes unconverted, `bitcast = true` on
// the copy-in, and each piece is read back at its own dtype (`view` on the split-out; offsets and
// widths count buffer elements). With n = 2, a f32[2] and b bf16[3] (bf16 is the smaller):
//   %flat = bucket_copy_in(%a, %b) {dtype = bf16, bitcast = true} : bf16[7]   a's 8 bytes, b's 6
//   %a_g  = bucket_split_out(%w) {chunks = 2, offset = 0, shape = [4], view = "f32"} : f32[4]
//   %b_g  = bucket_split_out(%w) {chunks = 2, offset = 4, shape = [6]}               : bf16[6]
// Nothing is converted, so the result is bitwise that of the separate gathers.
//
// Reduce-scatter buckets lay their inputs out chunk-major ("chunk-cat"): with n = 2, x f32[3, 2]
// and y f32[4], chunk c_x = ceil(3/2) = 2 rows (4 elements, the second chunk padded with zeros),
// c_y = 2 elements, so a row is 6 elements and
//   chunk_cat(%x, %y) {chunks = 2} : f32[12] = [x0 x1 | y0 y1 || x2 0 0 | y2 y3]
// reduce_scatter gives each rank its row of 6, and flat_view(%w) {offset = 0, shape = [2, 2]} /
// {offset = 4, shape = [2]} are views (no copies) of the pieces.
#include <cstring>

#include "dtensor/comm/collectives.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

int64_t inner_numel(const TensorType& t) {
  int64_t inner = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) inner *= t.shape[i];
  return inner;
}

void require_all_rank1(const Node& node) {
  for (size_t i = 0; i < node.operands.size(); ++i)
    if (node.operands[i]->type.rank() < 1)
      DT_THROW(ShapeError) << op_name(node.op) << " expects tensors of rank >= 1, got "
                           << type_str(node.operands[i]->type);
}

int64_t positive_attr(const Node& node, std::string_view name) {
  int64_t v = node.attr_int(name);
  if (v < 1) DT_THROW(ValueError) << op_name(node.op) << " " << name << " must be >= 1, got " << v;
  return v;
}

// Returns the elements of `dtype` the flattened operands of a copy-in fill: their numel, or with
// `bitcast` their bytes counted in dtype's elements (each a whole number of them).
int64_t flat_elements(const Node& node, DType dtype) {
  const bool bitcast = node.attr_bool("bitcast");
  int64_t total = 0;
  for (const Value* v : node.operands) {
    if (!bitcast) {
      total += v->type.numel();
      continue;
    }
    const size_t bytes = v->type.nbytes();
    if (bytes % itemsize(dtype) != 0)
      DT_THROW(ShapeError) << op_name(node.op) << " cannot hold the " << bytes << " bytes of " << type_str(v->type)
                           << " in whole " << dtype_name(dtype) << " elements";
    total += int64_t(bytes / itemsize(dtype));
  }
  return total;
}

// bucket_copy_in(x...) {dtype, bitcast}: the flattened inputs one after another, cast to dtype
// (or with bitcast, their bytes as they are).
void infer_copy_in(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::check_arena_offset(node);
  const DType dtype = node.attr_dtype("dtype");
  out.push_back({dtype, {flat_elements(node, dtype)}});
}
// Copies the flattened inputs one after another into the flat `dst`: cast to its dtype, or with
// `bitcast` byte for byte.
void copy_flat(std::span<const Tensor> inputs, Tensor dst, bool bitcast) {
  int64_t off = 0;
  if (bitcast) {
    DT_CHECK(dst.is_contiguous()) << "bucket copy-in into a strided buffer";
    auto* bytes = static_cast<std::byte*>(dst.raw_data());
    for (const Tensor& x : inputs) {
      const Tensor c = x.contiguous();
      if (c.nbytes() > 0) std::memcpy(bytes + off, c.raw_data(), c.nbytes());
      off += int64_t(c.nbytes());
    }
    return;
  }
  for (const Tensor& x : inputs) {
    if (x.numel() > 0) dst.narrow(0, off, x.numel()).view(x.shape()).copy_(x);
    off += x.numel();
  }
}
void run_copy_in(const KernelArgs& a) {
  Tensor out = output_buffer(a);
  copy_flat(a.in, out, a.node.attr_bool("bitcast"));
  a.out[0] = out;
}

// Returns the dtype a split-out piece is read as: its `view`, or the buffer's.
DType piece_dtype(const Node& node) {
  const std::string& view = node.attr_str("view");
  return view.empty() ? node.operands[0]->type.dtype : parse_dtype(view);
}

// Returns the buffer elements per chunk of an output of bucket_split_out and checks the geometry.
int64_t split_out_width(const Node& node, int64_t chunks, const Shape& shape) {
  const TensorType& w = node.operands[0]->type;
  if (w.rank() != 1) DT_THROW(ShapeError) << op_name(node.op) << " expects a flat buffer, got " << type_str(w);
  if (w.shape[0] % chunks != 0)
    DT_THROW(ShapeError) << op_name(node.op) << " buffer " << type_str(w) << " does not split into " << chunks << " chunks";
  int64_t n = numel(shape);
  if (n % chunks != 0)
    DT_THROW(ShapeError) << op_name(node.op) << " shape " << shape_str(shape) << " does not split into " << chunks
                         << " chunks";
  const size_t piece_bytes = size_t(n / chunks) * itemsize(piece_dtype(node));
  if (piece_bytes % itemsize(w.dtype) != 0)
    DT_THROW(ShapeError) << op_name(node.op) << " chunk of " << piece_bytes << " bytes is not whole "
                         << dtype_name(w.dtype) << " elements";
  int64_t width = int64_t(piece_bytes / itemsize(w.dtype)), row = w.shape[0] / chunks, offset = node.attr_int("offset");
  if (offset < 0 || offset + width > row)
    DT_THROW(ShapeError) << op_name(node.op) << " offset " << offset << " + " << width << " exceeds the chunk of "
                         << row << " elements of " << type_str(w);
  return width;
}

// bucket_split_out(w) {chunks, offset, shape, view}: columns [offset, offset + width) of w viewed
// as [chunks, -1], copied out and viewed as `shape` (of dtype `view` when set: the columns' bytes
// as they are).
void infer_split_out(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const auto& shape = node.attr_ints("shape");
  split_out_width(node, positive_attr(node, "chunks"), shape);
  out.push_back({piece_dtype(node), shape});
}
void run_split_out(const KernelArgs& a) {
  const Shape& shape = a.node.result()->type.shape;
  int64_t chunks = a.node.attr_int("chunks");
  int64_t width = numel(shape) / chunks;
  const DType dtype = a.node.result()->type.dtype;
  if (dtype != a.in[0].dtype()) {  // a piece of another dtype: copy its bytes row by row
    const Tensor w = a.in[0].contiguous();
    const size_t item = itemsize(w.dtype()), row = size_t(w.numel() / chunks) * item;
    const size_t piece = size_t(width) * itemsize(dtype), offset = size_t(a.node.attr_int("offset")) * item;
    Tensor out = Tensor::uninitialized(shape, dtype);
    const auto* src = static_cast<const std::byte*>(w.raw_data());
    auto* dst = static_cast<std::byte*>(out.raw_data());
    for (int64_t r = 0; r < chunks && piece > 0; ++r) std::memcpy(dst + size_t(r) * piece, src + size_t(r) * row + offset, piece);
    a.out[0] = out;
    return;
  }
  Tensor src = a.in[0].view({chunks, a.in[0].numel() / chunks}).narrow(1, a.node.attr_int("offset"), width);
  Tensor out = Tensor::uninitialized({chunks, width}, a.in[0].dtype());
  if (out.numel() > 0) out.copy_(src);
  a.out[0] = out.view(shape);
}

// chunk_cat(x...) {chunks}: chunk r of every input (dim 0 padded to a multiple of chunks with
// zeros) one after another, for r = 0..chunks-1.
void infer_chunk_cat(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::check_arena_offset(node);
  int64_t chunks = positive_attr(node, "chunks");
  require_all_rank1(node);
  infer_util::require_same_dtype(node);
  int64_t row = 0;
  for (const Value* v : node.operands) row += chunk_size(v->type.shape[0], chunks) * inner_numel(v->type);
  out.push_back({node.operands[0]->type.dtype, {chunks * row}});
}
void run_chunk_cat(const KernelArgs& a) {
  int64_t chunks = a.node.attr_int("chunks");
  Tensor out = output_buffer(a);
  out.fill_(0);  // zeros: the padding
  int64_t row = out.numel() / chunks, off = 0;
  Tensor rows = out.view({chunks, row});
  for (const Tensor& x : a.in) {
    int64_t d0 = x.size(0), c = chunk_size(d0, chunks), inner = d0 ? x.numel() / d0 : 0;
    Shape piece_shape = x.shape();
    for (int64_t r = 0; r < chunks; ++r) {
      int64_t len = chunk_length(d0, chunks, r);
      if (len <= 0 || inner == 0) continue;
      piece_shape[0] = len;
      rows.select(0, r).narrow(0, off, len * inner).view(piece_shape).copy_(x.narrow(0, chunk_offset(d0, chunks, r), len));
    }
    off += c * inner;
  }
  a.out[0] = out;
}

// flat_view(w) {offset, shape}: elements [offset, offset + numel(shape)) of a flat w, viewed.
void infer_flat_view(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& w = node.operands[0]->type;
  const auto& shape = node.attr_ints("shape");
  if (w.rank() != 1) DT_THROW(ShapeError) << "flat_view expects a flat buffer, got " << type_str(w);
  int64_t offset = node.attr_int("offset");
  if (offset < 0 || offset + numel(shape) > w.shape[0])
    DT_THROW(ShapeError) << "flat_view offset " << offset << " + " << numel(shape) << " elements exceeds " << type_str(w);
  out.push_back({w.dtype, shape});
}
void run_flat_view(const KernelArgs& a) {
  const Shape& shape = a.node.result()->type.shape;
  a.out[0] = a.in[0].contiguous().narrow(0, a.node.attr_int("offset"), numel(shape)).view(shape);
}

void infer_clone(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::check_arena_offset(node);
  out.push_back(node.operands[0]->type);
}
void run_clone(const KernelArgs& a) {
  Tensor out = output_buffer(a);
  out.copy_(a.in[0]);
  a.out[0] = out;
}

void check_algo(const Node& node) {
  const std::string& algo = node.attr_str("algo");
  if (algo != "auto" && algo != "one_shot" && algo != "two_shot")
    DT_THROW(ValueError) << op_name(node.op) << " algo must be auto, one_shot or two_shot, got " << algo;
}

// all_reduce_(x) {group, op, algo}: in place on x's buffer (the pass guarantees nothing reads x
// afterwards); the result is that buffer once the wait completes.
void infer_all_reduce_inplace(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  infer_util::group_size(node, graph);
  parse_reduce_op(node.attr_str("op"));
  check_algo(node);
  out.push_back(node.operands[0]->type);
}
void run_all_reduce_inplace(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor t = a.in[0].contiguous();
  WorkPtr w = dt::all_reduce_(pg, t, parse_reduce_op(a.node.attr_str("op")),
                              parse_all_reduce_algo(a.node.attr_str("algo")));
  a.comm->issue(a.node.result(), std::move(w), {t});
  a.out[0] = t;
}

// one_shot_all_reduce(x) {group, op}: blocking out-of-place all_reduce (symm_mem's one-shot):
// it returns the reduced value, so it needs no wait_tensor.
void infer_one_shot(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  infer_util::group_size(node, graph);
  parse_reduce_op(node.attr_str("op"));
  out.push_back(node.operands[0]->type);
}
void run_one_shot(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor t = a.in[0].clone();
  dt::all_reduce_(pg, t, parse_reduce_op(a.node.attr_str("op")), AllReduceAlgo::one_shot)->wait();
  a.out[0] = t;
}

// all_gather_copy_in(x...) {group, dtype}: the all_gather output buffer of a bucket, with only
// this rank's block filled: the flattened inputs, cast to dtype, at [me*total, (me+1)*total)
// (FSDP2's all_gather_copy_in). The other blocks are written by all_gather_into_tensor_.
void infer_all_gather_copy_in(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  infer_util::check_arena_offset(node);
  const int n = infer_util::group_size(node, graph);
  const DType dtype = node.attr_dtype("dtype");
  out.push_back({dtype, {flat_elements(node, dtype) * n}});
}
void run_all_gather_copy_in(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor out = output_buffer(a);
  const int64_t total = out.numel() / pg.size();
  copy_flat(a.in, out.narrow(0, pg.rank() * total, total), a.node.attr_bool("bitcast"));
  a.out[0] = out;
}

// all_gather_into_tensor_(w) {group, dim}: in-place all_gather on a buffer whose block of this
// rank along dim (group index me, blocks of w.shape[dim]/n) already holds the input: the backends
// skip the own copy (threads) or pass MPI_IN_PLACE (mpi). The result is w once the wait completes.
// dim 0 (a flat bucket of all_gather_copy_in) stacks the blocks; a later dim (a producer that wrote
// its result into its columns of the gathered value, all_gather_linear_in) interleaves them by rows.
void infer_all_gather_inplace(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  const int n = infer_util::group_size(node, graph);
  const TensorType& w = node.operands[0]->type;
  const int64_t dim = node.attr_int("dim");
  if (dim < 0 || dim >= int64_t(w.rank()) || w.shape[size_t(dim)] % n != 0)
    DT_THROW(ShapeError) << "all_gather_into_tensor_ expects a buffer whose dim " << dim
                         << " is divisible by group size " << n << ", got " << type_str(w);
  out.push_back(w);
}
void run_all_gather_inplace(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor t = a.in[0];
  WorkPtr w = dt::all_gather_into_tensor_inplace(pg, t, a.node.attr_int("dim"));
  a.comm->issue(a.node.result(), std::move(w), {t});
  a.out[0] = t;
}

// Copy-ins of a multi-dtype bucket: inputs keep their bytes (see the file comment).
AttrSpec bitcast_attr() { return {"bitcast", AttrKind::boolean, Attr(false)}; }

}  // namespace

void register_bucketing_ops(OpTable& t) {
  t.add({.kind = OpKind::bucket_copy_in, .operands = {{"x", false, true}},
         .attrs = {{"dtype", AttrKind::dtype, std::nullopt}, bitcast_attr(), arena_offset_attr()}, .infer = infer_copy_in,
         .kernel = run_copy_in, .writes_preallocated_out = true});
  t.add({.kind = OpKind::bucket_split_out, .operands = {{"w"}},
         .attrs = {{"chunks", AttrKind::i64, std::nullopt}, {"offset", AttrKind::i64, std::nullopt},
                   {"shape", AttrKind::ints, std::nullopt}, {"view", AttrKind::str, Attr(std::string())}},
         .infer = infer_split_out, .kernel = run_split_out});
  t.add({.kind = OpKind::chunk_cat, .operands = {{"x", false, true}},
         .attrs = {{"chunks", AttrKind::i64, std::nullopt}, arena_offset_attr()}, .infer = infer_chunk_cat,
         .kernel = run_chunk_cat, .writes_preallocated_out = true});
  t.add({.kind = OpKind::flat_view, .operands = {{"w"}},
         .attrs = {{"offset", AttrKind::i64, std::nullopt}, {"shape", AttrKind::ints, std::nullopt}},
         .infer = infer_flat_view, .kernel = run_flat_view, .result_aliases_operand = true});
  t.add({.kind = OpKind::clone, .operands = {{"x"}}, .attrs = {arena_offset_attr()}, .infer = infer_clone,
         .kernel = run_clone, .writes_preallocated_out = true});
  t.add({.kind = OpKind::all_reduce_, .operands = {{"x"}},
         .attrs = {group_attr(), reduce_op_attr(), {"algo", AttrKind::str, Attr(std::string("auto"))}},
         .infer = infer_all_reduce_inplace, .kernel = run_all_reduce_inplace, .needs_wait = true,
         .bytes_sent = comm_bytes::reduce,
         .result_aliases_operand = true});
  t.add({.kind = OpKind::all_gather_copy_in, .operands = {{"x", false, true}},
         .attrs = {group_attr(), {"dtype", AttrKind::dtype, std::nullopt}, bitcast_attr(), arena_offset_attr()},
         .infer = infer_all_gather_copy_in, .kernel = run_all_gather_copy_in, .writes_preallocated_out = true});
  t.add({.kind = OpKind::all_gather_into_tensor_, .operands = {{"w"}},
         .attrs = {group_attr(), {"dim", AttrKind::i64, Attr(int64_t(0))}},
         .infer = infer_all_gather_inplace, .kernel = run_all_gather_inplace, .needs_wait = true,
         .bytes_sent = comm_bytes::gather_inplace,
         .result_aliases_operand = true});
  t.add({.kind = OpKind::one_shot_all_reduce, .operands = {{"x"}}, .attrs = {group_attr(), reduce_op_attr()},
         .infer = infer_one_shot, .kernel = run_one_shot, .bytes_sent = comm_bytes::reduce});
  // Copy-ins, chunk-cats and clones exist to feed one collective, in a buffer of their own.
  for (OpKind k : {OpKind::bucket_copy_in, OpKind::chunk_cat, OpKind::clone}) {
    t.at(k).fresh_result = true;
    t.at(k).comm_prep = true;
  }
  for (OpKind k : {OpKind::all_reduce_, OpKind::all_gather_into_tensor_}) t.at(k).in_place = true;
}

}  // namespace dt::ir

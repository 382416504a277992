// CPU kernels of the tensor core: free functions on Tensor, PyTorch semantics.
//
// Elementwise ops broadcast (numpy rules) and accept any strided inputs; results are contiguous.
// bf16/f16 inputs are computed in f32 and rounded to nearest even on store. Binary ops require
// both inputs to have the same dtype (no implicit promotion; cast explicitly). Bad input throws a
// dt::Error subclass with the values in the message.
#pragma once

#include <string>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dt {

class PackedWeight;  // gemm_f32_packed.h

// ---- elementwise unary (ops_unary.cc) ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (erf, exact) or "tanh", as torch.nn.functional.gelu.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
// x < 0 ? slope·x : x (torch.nn.functional.leaky_relu, ONNX LeakyRelu with alpha = slope).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// log(1 + exp(beta·x)) / beta, x where beta·x > threshold (torch.nn.functional.softplus; ONNX
// Softplus is beta 1 with no linear region: threshold inf).
Tensor softplus(const Tensor& x, double beta = 1, double threshold = 20);
Tensor erf(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor abs(const Tensor& x);
// min(max(x, lo), hi), as torch.clamp (NaN stays NaN); either bound may be ±inf.
Tensor clamp(const Tensor& x, double lo, double hi);
Tensor cast(const Tensor& x, DType dtype);

// ---- elementwise binary with broadcasting (ops_binary.cc) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
// Comparisons return bool tensors.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// where(cond, a, b): cond is bool; all three broadcast.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Logical ops on bool tensors (broadcast), as torch.logical_and / _or / _xor restricted to bool.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);

// ---- reductions over dims (ops_reduce.cc) ----
// Empty `dims` reduces over all dims. Negative dims are normalised.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

// ---- matmul family through OpenBLAS (ops_matmul.cc) ----
Tensor mm(const Tensor& a, const Tensor& b);    // [m,k] x [k,n]
Tensor bmm(const Tensor& a, const Tensor& b);   // [b,m,k] x [b,k,n]
Tensor matmul(const Tensor& a, const Tensor& b);  // torch.matmul incl. 1-d and batch broadcast
// beta * self + alpha * (a @ b), self broadcast to [m,n].
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, double beta = 1, double alpha = 1);
// x [..., in] · weight[out, in]ᵀ + bias[out] (bias may be undefined).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// linear(x, weight, bias) written into `out` (linear's result shape, x's dtype, f32 or f64), a view
// whose rows (the last dim) are contiguous and whose leading dims fold into rows one stride apart:
// a block of columns of a wider buffer, such as one rank's columns of gathered logits. Bitwise
// linear()'s values (the same GEMM panels, only the output's row stride differs).
// With `packed` (as linear_act), an f32 product multiplies through it.
void linear_into(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                 const PackedWeight* packed = nullptr);
// c = a @ b + beta · c in place, for 2-d a [m, k] and b [k, n] (any layout) of c's dtype (f32 or
// f64) and a contiguous c [m, n]; beta 0 ignores c's contents. The GEMM behind mm, split into the
// same row panels on the rank's threads, for kernels that multiply into a slice of their own
// output (conv's im2col products, ops_conv.cc).
void gemm_into(const Tensor& a, const Tensor& b, const Tensor& c, double beta);

// ---- fused epilogues (ops_unary.cc, ops_matmul.cc) ----
// The activations a linear can apply to its output as an epilogue.
enum class Activation { none, relu, gelu, gelu_tanh, silu };
// act(linear(x, weight, bias)) as one pass over the output: each GEMM row panel is seeded with the
// bias, multiplied and activated while it is in cache, instead of three passes over a tensor
// that does not fit. f32 only (the dtype whose GEMM output is the result, so the activation sees
// the same values): bitwise equal to relu/gelu/silu of linear(). Other dtypes: DTypeError.
Tensor linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act);
// With `packed` (non-null: weight packed by PackedWeight, gemm_f32_packed.h) an f32 linear
// multiplies through gemm_f32_packed instead of sgemm; results differ from sgemm's only by the
// order of the f32 additions. Other dtypes, or an input sgemm cannot read row by row, ignore it.
// Without one, an f32 linear on the packed path (f32_packed_linears) packs its weight during the
// call (gemm_f32_packing): the bits it would have with `packed`.
Tensor linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act, const PackedWeight* packed);
// The elementwise op a linear's epilogue can apply with a second tensor of its output's shape.
enum class EpilogueOp { mul, add };
// op(linear(x, weight, bias), other) as one pass over the output: each GEMM row panel is multiplied
// by, or added to, other's rows while it is in cache. Llama's SwiGLU (silu(gate) * up, fused into
// up's panels) and the residual add after a projection (h + o_proj(a), h + down_proj(m), GPT-2's
// c_proj with its bias). f32 only; other has the linear's shape; bitwise equal to the two ops (mul
// and add are commutative: either operand order).
Tensor linear_binary(const Tensor& x, const Tensor& weight, const Tensor& bias, EpilogueOp op, const Tensor& other,
                     const PackedWeight* packed = nullptr);
// Applies act in place to n contiguous f32 values, exactly as the relu/gelu/silu ops compute them.
void apply_activation(Activation act, float* p, int64_t n);

// ---- rotary position embedding (ops_rotary.cc) ----
// x·cos + rotate_half(x)·sin with rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]) over x's last
// dim D (even), cos and sin broadcast to x's shape: Hugging Face Llama's RoPE, which its ONNX export
// spells as mul, slice, neg, cat, mul and add. One pass over x; bitwise equal to those ops. f32 only.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);

// ---- normalisation and activations over a dim (ops_nn.cc) ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// log_softmax(x, 1)[i, index[i]] for x [N, C] and integer index [N] (each in [0, C)), bitwise, without
// the [N, C] result: cross_entropy's per-row loss reads one element of each row's log_softmax.
Tensor log_softmax_at(const Tensor& x, const Tensor& index);
// The loss-parallel pieces of cross_entropy on a class shard x [N, C] (ir/ops/loss.cc), each an [N]
// row statistic in x's dtype: the row max; Σ exp(x - max) for a given [N] max (the global one: the
// exps and the double sum of log_softmax's rows); and the logit at column target - class_start
// where the row's target falls in this shard, else 0. f32, bf16 and f16 rows compute in f32, f64
// in f64.
Tensor cross_entropy_max(const Tensor& logits);
Tensor cross_entropy_sum_exp(const Tensor& logits, const Tensor& max);
Tensor cross_entropy_target_logit(const Tensor& logits, const Tensor& target, int64_t class_start = 0);
// Normalises over the trailing dims of `normalized_shape`; weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                double eps = 1e-6);
// Looks up rows of weight [V, H] for integer indices of any shape -> [..., H]; out-of-range
// indices throw ValueError naming the index.
Tensor embedding(const Tensor& indices, const Tensor& weight);
// The vocabulary-parallel lookup: weight holds rows [vocab_start, vocab_start + V) of the table;
// an index in that range reads its row, any other index gives a row of zeros (summing the results
// of every shard gives the full lookup). Indices are not range-checked against the whole table.
Tensor masked_embedding(const Tensor& indices, const Tensor& weight, int64_t vocab_start);

// ---- attention (ops_attention.cc) ----
// softmax(q·kᵀ·scale + mask)·v for q [..., Hq, S, D], k [..., Hkv, Sk, D], v [..., Hkv, Sk, Dv]
// -> [..., Hq, S, Dv], as torch.nn.functional.scaled_dot_product_attention (torch 2.x). The leading
// dims agree except heads (dim -3): Hkv divides Hq and q head h reads kv head h / (Hq / Hkv)
// (grouped-query attention, torch's repeat_interleave of k/v, without copying them). Rank-2 q, k,
// v are one head.
struct AttentionOptions {
  // torch's top-left aligned mask, query i sees keys j <= i; combined with `mask` (both apply).
  bool causal = false;
  double scale = 0;  // 0: 1/sqrt(D), torch's scale=None
  // Undefined: none. Else bool (true = keep, false = -inf) or q's dtype (added to the scaled
  // scores), broadcastable (numpy rules, no new dims for the result) to [..., Hq, S, Sk].
  Tensor mask;
};
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opts);
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false);
// Checks the shapes of an attention (mask: null for none) and returns Hq / Hkv (1 below rank 3);
// ShapeError naming `op` and what does not fit. The kernels and the IR's shape inference share it.
int64_t attention_kv_group(const char* op, const Shape& q, const Shape& k, const Shape& v, const Shape* mask);
// The shape the scores (and a mask broadcast to them) have: q's leading dims, then [S, Sk].
Shape attention_scores_shape(const Shape& q, const Shape& k);

// ---- shape ops (ops_shape.cc): cat and pad copy; split, chunk and chunk_exact return views of
// the input, as torch does (call .contiguous()/.clone() for an independent buffer) ----
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
// torch.split: pieces of `split_size` along dim, the last possibly shorter.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
// torch.chunk: ceil(L/chunks) per piece; may return fewer than `chunks` pieces (e.g. L=5, 4 ->
// sizes 2,2,1). Use chunk_exact when a fixed count with empty trailing pieces is wanted.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim);
// Always `chunks` pieces with dt::chunk_length sizes (short and empty trailing pieces): the
// sharding layout.
std::vector<Tensor> chunk_exact(const Tensor& x, int64_t chunks, int64_t dim);
// Pads dims from the last backwards: pads = {last_lo, last_hi, prev_lo, prev_hi, ...}, constant value.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0);

// ---- ops indexed by position along one dim (ops_index.cc); `dim` may be negative ----
// ONNX Gather / torch.index_select with an index tensor of any shape: the result has shape
// x.shape[:dim] + indices.shape + x.shape[dim+1:]. Indices (i64 or i32) may be negative (counted
// from the end); one out of [-size, size) throws ValueError naming it.
Tensor gather(const Tensor& x, const Tensor& indices, int64_t dim);
// gather's gradient: zeros of `shape` (x's) with grad's slices added at their indices along dim,
// in index order (repeated indices accumulate), summed in double.
Tensor gather_backward(const Tensor& grad, const Tensor& indices, int64_t dim, const Shape& shape);
// ONNX GatherElements / torch.gather: indices has x's rank and, off `dim`, sizes no larger than
// x's; out[..., i, ...] = x[..., indices[..., i, ...], ...] along dim (result: indices' shape).
// Negative indices count from the end; one out of range throws ValueError.
Tensor gather_elements(const Tensor& x, const Tensor& indices, int64_t dim);
// gather_elements' gradient: zeros of `shape` with each grad element added at its index (in
// order, repeats accumulate), summed in double.
Tensor gather_elements_backward(const Tensor& grad, const Tensor& indices, int64_t dim, const Shape& shape);
// Index (i64) of the largest / smallest element along dim; ties pick the first index, or the last
// with select_last_index (ONNX ArgMax/ArgMin); NaN counts as the extremum (torch).
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false, bool select_last_index = false);
// The k largest (or smallest) values along dim, sorted, and their i64 indices (torch.topk, ONNX
// TopK): NaN counts as the largest, equal values keep the lower index first.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false, bool select_last_index = false);
// Running sum along dim as ONNX CumSum: exclusive leaves out the element itself, reverse sums from
// the end. Floating types accumulate in double, integers wrap.
Tensor cumsum(const Tensor& x, int64_t dim, bool exclusive = false, bool reverse = false);
// torch.triu / torch.tril over the last two dims: keeps elements with j - i >= diagonal (triu) or
// j - i <= diagonal (tril), zeroes the rest. Rank >= 2.
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
// ---- ops indexed by tuples over data's leading dims (ops_index_nd.cc) ----
// data [d0, .., d(r-1)], indices [i0, .., i(q-2), k] (i64 or i32, 1 <= k <= r): each index tuple
// indices[i0, .., :] names the slice data[t0, .., t(k-1)] of shape [dk, .., d(r-1)]. Negative
// positions count from the end; one out of range throws ValueError. nd_slices_shape returns the
// shape [i0, .., i(q-2), dk, .., d(r-1)] of the slices (ShapeError naming `op` when indices do not
// fit data).
Shape nd_slices_shape(const char* op, const Shape& data, const Shape& indices);
// ONNX ScatterND with reduction none (PyTorch exports `x[idx] = v` and static-cache writes as
// it): a copy of data whose slices are replaced by updates (of the slices' shape); of repeated
// tuples the last write wins (ONNX leaves it undefined).
Tensor scatter_nd(const Tensor& data, const Tensor& indices, const Tensor& updates);
// ONNX GatherND with batch_dims 0: the slices, in the tuples' order.
Tensor gather_nd(const Tensor& data, const Tensor& indices);
// gather_nd's gradient: zeros of `shape` (data's) with each grad slice added at its tuple
// (repeated tuples accumulate), summed in double.
Tensor gather_nd_backward(const Tensor& grad, const Tensor& indices, const Shape& shape);

// ---- convolution (ops_conv.cc) ----
// Convolution over the 1 or 2 trailing dims (torch.nn.functional.conv1d / conv2d, ONNX Conv):
// x [N, C, *in], weight [O, C / groups, *kernel], bias [O] (or undefined) -> [N, O, *out] with
//   out_i = (in_i + pad_begin_i + pad_end_i - dilation_i * (kernel_i - 1) - 1) / stride_i + 1
// (floor). `padding` holds the begin pads, then the end pads (ONNX's pads), one of each per
// spatial dim; e.g. a 3x3 kernel with PyTorch's padding=1 is {1, 1, 1, 1}. Output group g reads input
// channels [g·C/groups, (g+1)·C/groups). f32 and f64 accumulate in their own type; bf16 and f16 are
// computed in f32.
struct ConvParams {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};
// The output shape, after checking the ranks, channel counts, groups and sizes (ShapeError or
// ValueError naming the values): used by the IR's shape inference too.
Shape conv_output_shape(const Shape& x, const Shape& weight, const ConvParams& p);
Tensor conv(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvParams& p);
// The gradients of conv with respect to x (of shape `input_shape`) and to the weight (of shape
// `weight_shape`) given the output's gradient; the bias's is the sum of `grad` over all dims but 1.
Tensor conv_backward_input(const Tensor& grad, const Tensor& weight, const Shape& input_shape, const ConvParams& p);
Tensor conv_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape, const ConvParams& p);

// ---- comparison of results (ops_compare.cc) ----
struct DiffReport {
  double max_abs_diff = 0;
  double max_rel_diff = 0;  // |a-b| / max(|b|, rel_floor) over elements (inf where that is 0)
  int64_t mismatches = 0;   // elements failing |a-b| <= atol + rtol*|b|
  bool shapes_match = true;
};
// NaN never matches (torch.allclose with equal_nan=False); an infinity only matches itself.
// rel_floor < 0 means the smallest positive double.
DiffReport compare(const Tensor& actual, const Tensor& expected, double rtol = 1e-5, double atol = 1e-8,
                   double rel_floor = -1);
bool allclose(const Tensor& actual, const Tensor& expected, double rtol = 1e-5, double atol = 1e-8);

}  // namespace dt

// Converters of the ONNX ops indexed by position along an axis (ir/ops/index.cc) and the logical
// ops: Gather, GatherElements, ArgMax, ArgMin, CumSum, Trilu, TopK, ScatterND, GatherND, And, Or, Xor.
#include <algorithm>

#include "dtensor/core/error.h"
#include "dtensor/io/onnx_importer.h"

namespace dt::io::onnx_internal {
namespace {

// At most this many constant indices become slices (a cat of them): a slice keeps the gathered
// value a view that sharding plans understand (RoPE halves, the last position's logits).
constexpr size_t kMaxSliceIndices = 8;

// Gather(data, indices) {axis}. A few constant indices select slices (and cat them); computed
// indices into a 2-d table on axis 0 are an embedding lookup (so vocabulary-parallel plans apply);
// every other case is the gather op, negative indices counted from the end at run time.
void conv_gather(Importer& im, const onnx::NodeProto&) {
  const ir::TensorType xt = im.type_of(0);
  if (xt.rank() == 0) DT_THROW(ShapeError) << im.where() << ": Gather needs data of rank >= 1";
  const int64_t axis = normalize_dim(im.attr_int("axis", 0), xt.rank());
  const int64_t len = xt.shape[size_t(axis)];
  if (im.is_const(1) && size_t(im.const_in(1).numel()) <= kMaxSliceIndices && im.const_in(1).numel() > 0) {
    const Shape index_shape = im.const_in(1).shape();
    std::vector<Value*> pieces;
    for (int64_t i : im.const_ints(1)) {
      const int64_t j = i < 0 ? i + len : i;
      if (j < 0 || j >= len) DT_THROW(ValueError) << im.where() << ": index " << i << " is out of range for size " << len;
      pieces.push_back(im.b().slice(im.in(0), axis, j, j + 1));
    }
    Value* g = pieces.size() == 1 ? pieces[0] : im.b().cat(pieces, axis);
    Shape out(xt.shape.begin(), xt.shape.begin() + axis);
    out.insert(out.end(), index_shape.begin(), index_shape.end());
    out.insert(out.end(), xt.shape.begin() + axis + 1, xt.shape.end());
    return im.set_out(0, im.b().reshape(g, out));
  }
  if (!im.is_const(1) && axis == 0 && xt.rank() == 2) return im.set_out(0, im.b().embedding(im.in(1), im.in(0)));
  im.set_out(0, rec(im, OpKind::gather, {im.in(0), im.in(1)}, {{"dim", axis}}));
}

// ArgMax / ArgMin {axis = 0, keepdims = 1, select_last_index = 0}.
void conv_arg(Importer& im, OpKind op) {
  im.set_out(0, rec(im, op, {im.in(0)},
                    {{"dim", im.attr_int("axis", 0)},
                     {"keepdim", im.attr_int("keepdims", 1) != 0},
                     {"select_last_index", im.attr_int("select_last_index", 0) != 0}}));
}

// CumSum(x, axis) {exclusive, reverse}: the axis must be known at import.
void conv_cumsum(Importer& im, const onnx::NodeProto&) {
  const std::vector<int64_t> axis = im.const_ints(1);
  if (axis.size() != 1) DT_THROW(ValueError) << im.where() << ": the axis must hold one value, got " << axis.size();
  im.set_out(0, rec(im, OpKind::cumsum, {im.in(0)},
                    {{"dim", axis[0]},
                     {"exclusive", im.attr_int("exclusive", 0) != 0},
                     {"reverse", im.attr_int("reverse", 0) != 0}}));
}

// Trilu(x, k?) {upper = 1}: triu or tril with diagonal k (a constant). On a constant input (the
// causal masks exporters build) the importer folds it, so attention fusion still sees the mask.
void conv_trilu(Importer& im, const onnx::NodeProto&) {
  int64_t k = 0;
  if (im.has_input(1)) {
    const std::vector<int64_t> ks = im.const_ints(1);
    if (ks.size() != 1) DT_THROW(ValueError) << im.where() << ": k must be one integer, it has " << ks.size();
    k = ks[0];
  }
  if (im.type_of(0).rank() < 2)
    DT_THROW(ShapeError) << im.where() << ": input has rank " << im.type_of(0).rank() << ", Trilu needs 2 or more";
  im.set_out(0, rec(im, im.attr_int("upper", 1) ? OpKind::triu : OpKind::tril, {im.in(0)}, {{"diagonal", k}}));
}

// TopK(X, K) {axis = -1, largest = 1, sorted = 1} -> values, indices: the IR's topk, which always
// sorts (an order ONNX allows for sorted = 0 too). K must be known at import.
void conv_topk(Importer& im, const onnx::NodeProto&) {
  const std::vector<int64_t> k = im.const_ints(1);
  if (k.size() != 1) DT_THROW(ValueError) << im.where() << ": K must hold one value, it has " << k.size();
  const std::vector<Value*> r = im.b().record(OpKind::topk, {im.in(0)},
                                              {{"k", k[0]}, {"dim", im.attr_int("axis", -1)}, {"largest", im.attr_int("largest", 1) != 0}});
  im.set_out(0, r[0]);
  im.set_out(1, r[1]);
}

// ScatterND(data, indices, updates) {reduction = "none"}: the IR's scatter_nd; the reductions
// (add, mul, max, min) are refused by name.
void conv_scatter_nd(Importer& im, const onnx::NodeProto&) {
  const std::string reduction = im.attr_str("reduction", "none");
  if (reduction != "none")
    DT_THROW(ValueError) << im.where() << ": ScatterND with reduction '" << reduction << "' is not supported (only 'none')";
  im.set_out(0, rec(im, OpKind::scatter_nd, {im.in(0), im.in(1), im.in(2)}));
}

// GatherND(data, indices) {batch_dims = 0}: the IR's gather_nd (the gradient of ScatterND's
// updates); batch_dims > 0 is refused by name.
void conv_gather_nd(Importer& im, const onnx::NodeProto&) {
  const int64_t batch_dims = im.attr_int("batch_dims", 0);
  if (batch_dims != 0)
    DT_THROW(ValueError) << im.where() << ": GatherND with batch_dims " << batch_dims << " is not supported (only 0)";
  im.set_out(0, rec(im, OpKind::gather_nd, {im.in(0), im.in(1)}));
}

}  // namespace

void add_index_converters(ConverterTable& t) {
  t["Gather"] = conv_gather;
  t["GatherElements"] = [](Importer& im, const onnx::NodeProto&) {
    im.set_out(0, rec(im, OpKind::gather_elements, {im.in(0), im.in(1)}, {{"dim", im.attr_int("axis", 0)}}));
  };
  t["ArgMax"] = [](Importer& im, const onnx::NodeProto&) { conv_arg(im, OpKind::argmax); };
  t["ArgMin"] = [](Importer& im, const onnx::NodeProto&) { conv_arg(im, OpKind::argmin); };
  t["CumSum"] = conv_cumsum;
  t["Trilu"] = conv_trilu;
  t["TopK"] = conv_topk;
  t["ScatterND"] = conv_scatter_nd;
  t["GatherND"] = conv_gather_nd;
  t["And"] = [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::logical_and); };
  t["Or"] = [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::logical_or); };
  t["Xor"] = [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::logical_xor); };
}

}  // namespace dt::io::onnx_internal

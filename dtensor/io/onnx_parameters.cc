// How the ONNX importer names and classifies initializers (onnx_importer.h): which are trainable
// parameters and which are consts, the module names of a constant-folded export's pre-transposed
// weights, pre-transposed copies of tied weights, and the warning for names it cannot recover.
#include <algorithm>
#include <cstring>
#include <set>

#include "dtensor/core/error.h"
#include "dtensor/io/onnx_importer.h"

namespace dt::io::onnx_internal {

// The module path of the current node when it is a Linear's MatMul or Gemm ("/layers.0/mlp/up_proj/
// MatMul" -> "layers.0.mlp.up_proj"), else "".
std::string Importer::linear_module() const {
  const std::string& nm = node_->name();
  const std::string& op = node_->op_type();
  if ((op != "MatMul" && op != "Gemm") || nm.size() < 2 || nm[0] != '/') return "";
  const size_t slash = nm.find_last_of('/');
  if (slash == 0 || nm.compare(slash + 1, op.size(), op) != 0) return "";
  std::string path = nm.substr(1, slash - 1);
  std::replace(path.begin(), path.end(), '/', '.');
  return path;
}

// A constant-folded export stores Transpose(W) of a weight W that is also read as it is (a tied
// lm_head reading the embedding) as an initializer of its own (`onnx::MatMul_611`): found by its
// values, it becomes Transpose(W), so the tied weight stays one parameter.
void Importer::find_folded_transposes() {
  for (const auto& t : model_.graph().initializer()) {
    Slot& s = slots_.at(t.name());
    if (t.name().rfind("onnx::", 0) != 0 || s.constant.dim() != 2 || !s.trainable || s.initializer != t.name()) continue;
    const Shape swapped{s.constant.shape()[1], s.constant.shape()[0]};
    for (const auto& w : model_.graph().initializer()) {
      const Slot& ws = slots_.at(w.name());
      if (w.name() == t.name() || w.name().rfind("onnx::", 0) == 0 || ws.constant.shape() != swapped ||
          ws.constant.dtype() != s.constant.dtype() || !ws.trainable)
        continue;
      const Tensor wt = ws.constant.transpose(0, 1).contiguous();
      const Tensor st = s.constant.contiguous();
      if (std::memcmp(wt.raw_data(), st.raw_data(), size_t(st.numel()) * itemsize(st.dtype())) != 0) continue;
      s.initializer.clear();
      s.transpose_of = w.name();
      break;
    }
  }
}

bool is_trainable_initializer(const std::string& name, DType dtype, const std::set<std::string>& frozen) {
  if (!is_floating(dtype) || frozen.count(name)) return false;
  // Buffers of PyTorch's and Hugging Face's modules (register_buffer), by their last name piece.
  static const std::set<std::string> buffers = {"inv_freq", "cos_cached", "sin_cached", "masked_bias",
                                                "position_ids", "token_type_ids", "_cos_cached", "_sin_cached"};
  const size_t dot = name.find_last_of('.');
  return !buffers.count(dot == std::string::npos ? name : name.substr(dot + 1));
}


// An export made with constant folding stores some weights under names the exporter made up
// (`onnx::MatMul_611`, the transposed weight of a Linear), which no plan pattern matches.
void Importer::warn_constant_folded_export() {
  std::vector<std::string> names;
  for (const Value* p : main_.params())
    if (!p->frozen && p->name.rfind("onnx__", 0) == 0) names.push_back(p->name);
  if (names.empty()) return;
  std::string list;
  for (size_t i = 0; i < names.size() && i < 3; ++i) list += (i ? ", " : "") + names[i];
  if (names.size() > 3) list += ", ...";
  result_.warnings.push_back(std::to_string(names.size()) + " parameters have names the exporter made up (" + list +
                             "): the model was exported with constant folding, and plans cannot name them; "
                             "export with do_constant_folding=False to keep the module names");
}

}  // namespace dt::io::onnx_internal

#include "dtensor/io/tensor_binding.h"

#include <set>

#include "dtensor/core/error.h"

namespace dt::io {

// A tensor of the wrong dtype or shape is a DTypeError / ShapeError wherever it came from (a file,
// a Python array): Python callers get a ValueError, not an OSError, for an array of the wrong shape.
void check_binding(const ir::Value& v, const Tensor& t, const std::string& what) {
  if (t.dtype() != v.type.dtype)
    DT_THROW(DTypeError) << "tensor " << v.name << " in " << what << " has dtype " << dtype_name(t.dtype())
                      << " but the graph expects " << ir::type_str(v.type);
  if (t.shape() != v.type.shape)
    DT_THROW(ShapeError) << "tensor " << v.name << " in " << what << " has shape " << shape_str(t.shape())
                      << " but the graph expects " << ir::type_str(v.type);
}

namespace {
TensorMap bind(const std::vector<ir::Value*>& values, const SafetensorsFile& file, const char* kind) {
  TensorMap out;
  for (const ir::Value* v : values) {
    if (!file.contains(v->name))
      DT_THROW(IoError) << "missing " << kind << " " << v->name << " in " << file.path();
    check_binding(*v, file.get(v->name), file.path());
    out.emplace(v->name, file.get(v->name));
  }
  return out;
}
}  // namespace

TensorMap bind_params(const ir::Graph& graph, const SafetensorsFile& weights) {
  TensorMap out = bind(graph.params(), weights, "parameter");
  for (const std::string& name : weights.names())
    if (!out.count(name))
      DT_THROW(IoError) << "unexpected tensor " << name << " in " << weights.path() << " (not a parameter of graph "
                        << graph.name() << ")";
  return out;
}

TensorMap bind_inputs(const ir::Graph& graph, const SafetensorsFile& inputs) {
  return bind(graph.inputs(), inputs, "input");
}

}  // namespace dt::io

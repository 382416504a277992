#include "tools/output_check.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/sharding/tensor_sharding.h"
#include "dtensor/ir/printer.h"

namespace dt::tools {

NonFinite find_non_finite(const Tensor& t) {
  NonFinite nf;
  if (!is_floating(t.dtype()) || t.numel() == 0) return nf;
  const Tensor f = t.to(DType::f64).contiguous();
  const double* p = f.data<double>();
  for (int64_t i = 0; i < f.numel(); ++i) {
    if (std::isfinite(p[i])) continue;
    if (nf.count++ == 0) {
      nf.first_value = p[i];
      nf.first_index.assign(size_t(t.dim()), 0);
      int64_t rest = i;
      for (int64_t d = t.dim(); d-- > 0;) {
        nf.first_index[size_t(d)] = rest % t.size(d);
        rest /= t.size(d);
      }
    }
  }
  return nf;
}

std::string non_finite_text(const NonFinite& nf) {
  return fmt::format("{} non-finite value{} (first: {} at [{}])", nf.count, nf.count == 1 ? "" : "s", nf.first_value,
                     fmt::join(nf.first_index, ", "));
}

std::vector<std::optional<Tensor>> expected_outputs(const ir::Graph& graph, const std::string& file) {
  // A directory is a `run --save-outputs DIR --sharded` output: the full tensors assembled from it.
  std::map<std::string, Tensor> e;
  if (std::filesystem::is_directory(file)) {
    e = sharding::assemble_checkpoint(io::read_sharded_checkpoint(file, "--expect"));
  } else {
    const io::SafetensorsFile f = io::SafetensorsFile::open(file);
    for (const std::string& name : f.names()) e.emplace(name, f.get(name));
  }
  std::vector<std::optional<Tensor>> ref(graph.outputs().size());
  bool any = false;
  for (size_t k = 0; k < ref.size(); ++k) {
    const std::string& name = graph.outputs()[k]->name;
    if (e.count(name)) ref[k] = e.at(name);
    else if (k == 0 && e.count("output")) ref[k] = e.at("output");
    any = any || ref[k].has_value();
  }
  if (!any) {
    std::vector<std::string> names;
    for (const auto& [name, t] : e) names.push_back(name);
    std::vector<std::string> outs;
    for (const ir::Value* v : graph.outputs()) outs.push_back(v->name);
    DT_THROW(ValueError) << "--expect " << file << " names none of the model's outputs (" << fmt::format("{}", fmt::join(outs, ", "))
                         << "); it holds: " << fmt::format("{}", fmt::join(names, ", "))
                         << " (a tensor named like an output, or `output` for output 0)";
  }
  return ref;
}

OutputDiff compare_output(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  OutputDiff r;
  if (actual.shape() == expected.shape())
    for (double v : expected.to_doubles())
      if (std::isfinite(v)) r.atol_scale = std::max(r.atol_scale, std::fabs(v));
  const double floor = atol * r.atol_scale;
  const DiffReport d = compare(actual, expected, rtol, floor, floor);
  r.shapes_match = d.shapes_match;
  r.mismatches = d.mismatches;
  r.max_abs_diff = d.max_abs_diff;
  r.max_rel_diff = d.max_rel_diff;
  return r;
}

OutputCheck check_outputs(const ir::Graph& graph, const std::vector<Tensor>& outputs,
                          const std::vector<std::optional<Tensor>>& reference, double rtol, double atol) {
  OutputCheck c;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const ir::Value* v = graph.outputs()[k];
    const Tensor& out = outputs[k];
    nlohmann::json o = {{"name", v->name}, {"type", ir::type_str(v->type)}};
    std::string line = fmt::format("output %{} : {}", v->name, ir::type_str(v->type));
    if (out.numel() == 1) {
      o["value"] = out.item();
      line += fmt::format(" = {:.9g}", out.item());
    }
    const NonFinite nf = find_non_finite(out);
    if (nf.count > 0) {
      o["non_finite"] = {{"count", nf.count}, {"first_index", nf.first_index}, {"first_value", fmt::format("{}", nf.first_value)}};
      line += ": " + non_finite_text(nf);
      c.match = false;
    }
    if (k < reference.size() && reference[k]) {
      const Tensor& want = *reference[k];
      const OutputDiff d = compare_output(out, want, rtol, atol);
      bool ok = d.shapes_match && d.mismatches == 0 && nf.count == 0;
      c.match = c.match && ok;
      o["match"] = ok;
      o["mismatches"] = d.mismatches;
      if (!d.shapes_match) {
        o["expected_shape"] = shape_str(want.shape());
        line += fmt::format("; expected shape {}: MISMATCH", shape_str(want.shape()));
      } else if (nf.count > 0) {
        line += ": MISMATCH";  // the difference would be inf or nan, which says less than the count
      } else {
        o["max_abs_diff"] = d.max_abs_diff;
        o["max_rel_diff"] = d.max_rel_diff;
        o["atol_scale"] = d.atol_scale;
        c.max_abs_diff = std::max(c.max_abs_diff, d.max_abs_diff);
        c.max_rel_diff = std::max(c.max_rel_diff, d.max_rel_diff);
        line += fmt::format("; max_abs_diff {:.3g}, max_rel_diff {:.3g}, mismatches {}: {}", d.max_abs_diff,
                            d.max_rel_diff, d.mismatches, ok ? "match" : "MISMATCH");
      }
    }
    c.outputs.push_back(o);
    c.lines.push_back(line);
  }
  return c;
}

void save_outputs(const std::string& path, const ir::Graph& graph, const std::vector<Tensor>& outputs) {
  io::TensorMap m;
  for (size_t k = 0; k < outputs.size(); ++k) m[graph.outputs()[k]->name] = outputs[k];
  io::write_safetensors(path, m);
}

}  // namespace dt::tools

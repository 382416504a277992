// Models from Python: an IR graph plus its weights, run on one device or as a job (dtensor/job) on
// a mesh, compiled, trained and saved. Every call is the library's; this file converts arguments
// and results, releases the GIL while ranks run, and checks Ctrl-C between training steps.
#include "python/model.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>

#include "dtensor/autoplan/search.h"
#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"
#include "dtensor/io/onnx_import.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/job/job.h"
#include "dtensor/job/report.h"
#include "dtensor/job/train.h"
#include "python/arrays.h"

namespace dt::python {
namespace py = pybind11;
namespace {

// Where and how a model runs: the mesh shape (empty: one device, as `dtensor run` without --mesh),
// the plan's JSON text (empty: every parameter replicated), the pass pipeline and its memory
// budget (0: the passes' default; plan="auto" under max_memory_per_rank sets the one the search
// estimated the plan's memory under, as the CLI's --plan auto does).
struct JobKey {
  std::vector<int64_t> mesh;
  std::string plan_json, plan_source, passes = "default";
  size_t memory_budget = 0;
  bool operator<(const JobKey& o) const {
    return std::tie(mesh, plan_json, plan_source, passes, memory_budget) <
           std::tie(o.mesh, o.plan_json, o.plan_source, o.passes, o.memory_budget);
  }
};

job::JobOptions job_options(const JobKey& p, const std::string& backend) {
  job::JobOptions o;
  o.mesh = DeviceMesh(p.mesh.empty() ? Shape{1} : Shape(p.mesh));
  if (!p.plan_json.empty()) o.plan = sharding::ParallelPlan::parse(p.plan_json, p.plan_source);
  o.backend = backend.empty() ? job::default_backend() : runtime::parse_backend(backend);
  o.passes.pipeline = p.passes;
  o.passes.options.memory_budget_bytes = p.memory_budget;
  return o;
}

// A model: the graph and its weights. Runs compile the job once per placement and keep it.
class Model {
 public:
  Model(ir::Graph graph, job::Weights weights) : graph_(std::move(graph)), weights_(std::move(weights)) {
    // Check the weights against the parameters now, not at the first run.
    if (weights_.is_checkpoint()) return;
    const job::TensorMap& full = weights_.full_tensors();
    for (const ir::Value* p : graph_.params()) {
      auto it = full.find(p->name);
      if (it == full.end())
        DT_THROW(IoError) << "weights: no tensor for parameter '" << p->name << "' of model " << graph_.name();
      io::check_binding(*p, it->second, "weights");
    }
  }

  const ir::Graph& graph() const { return graph_; }
  const job::Weights& weights() const { return weights_; }
  void set_weights(job::Weights w) { weights_ = std::move(w); }

  // Checks the data inputs (every graph input, each with its declared dtype and shape).
  job::TensorMap check_inputs(const job::TensorMap& inputs) const {
    for (const auto& [name, t] : inputs) {
      bool known = false;
      for (const ir::Value* v : graph_.inputs()) known |= v->name == name;
      if (!known) DT_THROW(ValueError) << "inputs: model " << graph_.name() << " has no input '" << name << "'" << input_list();
    }
    for (const ir::Value* v : graph_.inputs()) {
      auto it = inputs.find(v->name);
      if (it == inputs.end()) DT_THROW(ValueError) << "inputs: missing '" << v->name << "'" << input_list();
      io::check_binding(*v, it->second, "inputs");
    }
    return inputs;
  }

  // The compiled job for `p` (compiled on first use).
  std::shared_ptr<const job::Job> job_for(const JobKey& p, const std::string& backend) {
    std::lock_guard lock(mu_);
    auto key = std::make_pair(p, backend);
    auto it = jobs_.find(key);
    if (it != jobs_.end()) return it->second;
    auto j = std::make_shared<const job::Job>(job::Job::compile(graph_, job_options(p, backend)));
    jobs_[key] = j;
    return j;
  }

  // One device: the graph as it is on a world of one rank (what `dtensor run` does without --mesh).
  std::vector<Tensor> run_single(const job::TensorMap& inputs) const {
    runtime::Bindings bindings(inputs.begin(), inputs.end());
    for (const ir::Value* p : graph_.params()) bindings[p->name] = weights_.full_tensors().at(p->name);
    std::vector<Tensor> out;
    run_ranks(1, [&](ProcessGroup& world) { out = runtime::run_rank(graph_, bindings, world).outputs; });
    return out;
  }

  std::string input_list() const {
    std::string s = " (the model's inputs:";
    for (const ir::Value* v : graph_.inputs()) s += " " + v->name;
    return s + ")";
  }

 private:
  ir::Graph graph_;
  job::Weights weights_;
  std::mutex mu_;
  std::map<std::pair<JobKey, std::string>, std::shared_ptr<const job::Job>> jobs_;
};

py::dict outputs_dict(const ir::Graph& g, std::vector<Tensor> outs) {
  py::dict d;
  for (size_t k = 0; k < outs.size(); ++k) d[py::str(g.outputs()[k]->name)] = to_numpy(outs[k]);
  return d;
}

py::dict value_types(const std::vector<ir::Value*>& values) {
  py::dict d;
  for (const ir::Value* v : values)
    d[py::str(v->name)] = py::make_tuple(shape_tuple(v->type.shape), numpy_dtype_name(v->type.dtype));
  return d;
}

JobKey job_key(const std::optional<std::vector<int64_t>>& mesh, const std::string& plan_json,
               const std::string& plan_source, const std::string& passes, size_t memory_budget) {
  JobKey p;
  if (mesh) p.mesh = *mesh;
  p.plan_json = plan_json;
  p.plan_source = plan_source.empty() ? "<plan>" : plan_source;
  p.passes = passes;
  p.memory_budget = memory_budget;
  return p;
}

// A compiled job as Python sees it: the per-rank programs, the report, runs with the model's weights.
struct Compiled {
  std::shared_ptr<Model> model;
  std::shared_ptr<const job::Job> job;
};

// Calls Python's signal handlers (Ctrl-C raises KeyboardInterrupt there) from a rank thread or
// the training loop; throws to stop the work at this step.
void check_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

py::object train_result(const job::TrainResult& r) {
  py::dict d;
  d["losses"] = r.losses;
  d["step_ms"] = r.step_ms;
  d["peak_bytes"] = r.peak_bytes;
  d["state"] = to_numpy_dict(r.state);
  d["placements"] = r.placements;
  d["bytes_sent_per_step"] = r.bytes_sent_per_step;
  d["collectives"] = r.collectives;
  d["first_grads"] = to_numpy_dict(r.first_grads);
  return d;
}

}  // namespace

void bind_model(py::module_& m) {
  py::class_<Model, std::shared_ptr<Model>>(m, "_Model")
      .def_static(
          "load",
          [](const std::string& path, py::object weights) {
            ir::Graph g = ir::parse_file(path);
            job::Weights w;
            if (py::isinstance<py::str>(weights)) w = job::Weights::load(weights.cast<std::string>(), "weights");
            else if (py::isinstance<py::dict>(weights)) w = job::Weights::full(to_tensor_map(weights, "weights"));
            else if (!weights.is_none())
              throw py::type_error("weights: expected a path or a dict of arrays, got " +
                                   std::string(py::str(py::type::of(weights))));
            else if (!g.params().empty())
              DT_THROW(ValueError) << "model " << path << " has " << g.params().size()
                                   << " parameters: pass weights= (a .safetensors path or a dict of arrays)";
            return std::make_shared<Model>(std::move(g), std::move(w));
          },
          py::arg("path"), py::arg("weights"))
      .def_static(
          "import_onnx",
          [](const std::string& path, const std::map<std::string, std::vector<int64_t>>& input_shapes,
             const std::map<std::string, std::string>& input_dtypes, bool fuse) {
            io::OnnxImportOptions o;
            for (const auto& [name, shape] : input_shapes) o.input_shapes[name] = Shape(shape);
            for (const auto& [name, dtype] : input_dtypes) o.input_dtypes[name] = parse_dtype(dtype);
            o.fuse = fuse;
            io::OnnxImportResult r;
            {
              py::gil_scoped_release release;
              r = io::import_onnx(path, o);
            }
            return std::make_shared<Model>(std::move(r.graph), job::Weights::full(std::move(r.weights)));
          },
          py::arg("path"), py::arg("input_shapes"), py::arg("input_dtypes"), py::arg("fuse"))
      .def_property_readonly("name", [](const Model& md) { return md.graph().name(); })
      .def_property_readonly("inputs", [](const Model& md) { return value_types(md.graph().inputs()); })
      .def_property_readonly("params", [](const Model& md) { return value_types(md.graph().params()); })
      .def_property_readonly("outputs", [](const Model& md) {
        std::vector<std::string> names;
        for (const ir::Value* v : md.graph().outputs()) names.push_back(v->name);
        return names;
      })
      .def_property_readonly("num_nodes", [](const Model& md) { return md.graph().nodes().size(); })
      .def("ir", [](const Model& md) { return ir::print(md.graph()); })
      // plan="auto": the plan the search (dtensor/autoplan) finds for this mesh, as plan JSON, and
      // the passes' memory budget its memory was estimated under (0: none asked for). The search
      // runs the job's pass pipeline on each candidate, so it is given the same one.
      .def(
          "auto_plan",
          [](const Model& md, const std::vector<int64_t>& mesh, bool train, const std::string& optimizer,
             int64_t max_memory_per_rank, const std::string& passes) {
            autoplan::SearchOptions so;
            so.train = train;
            so.optimizer.kind = optimizer;
            so.max_memory_per_rank = max_memory_per_rank;
            so.pipeline = passes;
            py::gil_scoped_release release;
            const autoplan::SearchResult r = autoplan::search(md.graph(), DeviceMesh(Shape(mesh.begin(), mesh.end())), so);
            return std::make_pair(r.plan.to_json(), r.pass_options.memory_budget_bytes);
          },
          py::arg("mesh"), py::arg("train"), py::arg("optimizer"), py::arg("max_memory_per_rank"), py::arg("passes"))
      .def("weights", [](const Model& md) { return to_numpy_dict(md.weights().full_tensors()); })
      .def(
          "run",
          [](Model& md, const py::dict& inputs, std::optional<std::vector<int64_t>> mesh, const std::string& plan_json,
             const std::string& plan_source, const std::string& passes, const std::string& backend,
             size_t memory_budget) {
            job::TensorMap in = md.check_inputs(to_tensor_map(inputs, "inputs"));
            if (!mesh && plan_json.empty() && backend.empty()) {
              std::vector<Tensor> outs;
              {
                py::gil_scoped_release release;
                outs = md.run_single(in);
              }
              return outputs_dict(md.graph(), std::move(outs));
            }
            const JobKey key = job_key(mesh, plan_json, plan_source, passes, memory_budget);
            job::RunResult r;
            {
              py::gil_scoped_release release;
              r = md.job_for(key, backend)->run(md.weights(), in);  // compiled on the first call
            }
            return outputs_dict(md.graph(), std::move(r.outputs));
          },
          py::arg("inputs"), py::arg("mesh"), py::arg("plan_json"), py::arg("plan_source"), py::arg("passes"),
          py::arg("backend"), py::arg("memory_budget"))
      .def(
          "_time_library_runs",
          [](Model& md, const py::dict& inputs, int n) {
            // For bench/bench_python.py: the seconds of n single-device runs called from C++ (the
            // library call m.run makes, without the Python layer around it).
            job::TensorMap in = md.check_inputs(to_tensor_map(inputs, "inputs"));
            py::gil_scoped_release release;
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < n; ++i) md.run_single(in);
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          },
          py::arg("inputs"), py::arg("n"))
      .def(
          "compile",
          [](std::shared_ptr<Model> md, std::optional<std::vector<int64_t>> mesh, const std::string& plan_json,
             const std::string& plan_source, const std::string& passes, const std::string& backend,
             size_t memory_budget) {
            std::shared_ptr<const job::Job> job;
            {
              py::gil_scoped_release release;
              job = md->job_for(job_key(mesh, plan_json, plan_source, passes, memory_budget), backend);
            }
            return Compiled{md, job};
          },
          py::arg("mesh"), py::arg("plan_json"), py::arg("plan_source"), py::arg("passes"), py::arg("backend"),
          py::arg("memory_budget"))
      .def(
          "train",
          [](Model& md, const py::dict& data, int steps, const std::string& optimizer, std::optional<double> lr,
             double momentum, double weight_decay, std::optional<std::vector<int64_t>> mesh, const std::string& plan_json,
             const std::string& plan_source, const std::string& passes, const std::string& backend,
             size_t memory_budget, bool keep_first_grads) {
            if (steps < 1) DT_THROW(ValueError) << "steps must be at least 1, got " << steps;
            job::TrainOptions to;
            to.steps = steps;
            to.optimizer.kind = optimizer;
            to.optimizer.lr = lr ? *lr : (optimizer == "adamw" ? 1e-3 : 0.1);  // the CLI's defaults
            to.optimizer.momentum = momentum;
            to.optimizer.weight_decay = weight_decay;
            to.keep_first_grads = keep_first_grads;
            autodiff::validate(to.optimizer);
            to.on_step = [](int, double, double) { check_signals(); };
            job::TensorMap d = to_tensor_map(data, "data");
            const job::TensorMap& weights = md.weights().full_tensors();
            job::TrainResult r;
            {
              py::gil_scoped_release release;
              if (!mesh && plan_json.empty() && backend.empty()) {
                r = job::train_single_device(md.graph().clone(), weights, d, to);
              } else {
                job::ShardedTrainOptions so;
                so.job = job_options(job_key(mesh, plan_json, plan_source, passes, memory_budget), backend);
                so.gather_state = true;  // mpi: rank 0 gets the trained tensors (threads: always)
                r = job::train_sharded(md.graph().clone(), weights, d, to, so);
              }
            }
            return train_result(r);
          },
          py::arg("data"), py::arg("steps"), py::arg("optimizer"), py::arg("lr"), py::arg("momentum"),
          py::arg("weight_decay"), py::arg("mesh"), py::arg("plan_json"), py::arg("plan_source"), py::arg("passes"),
          py::arg("backend"), py::arg("memory_budget"), py::arg("keep_first_grads"))
      .def(
          "set_weights",
          [](Model& md, const py::dict& weights) { md.set_weights(job::Weights::full(to_tensor_map(weights, "weights"))); },
          py::arg("weights"))
      .def(
          "save_weights",
          [](const Model& md, const std::string& path) {
            const job::TensorMap& full = md.weights().full_tensors();
            py::gil_scoped_release release;
            io::write_safetensors(path, full);
          },
          py::arg("path"));

  m.def(
      "load_safetensors",
      [](const std::string& path) { return to_numpy_dict(io::read_safetensors(path)); }, py::arg("path"),
      "Reads a safetensors file: {name: ndarray} (bf16 as uint16 bits).");
  m.def(
      "save_safetensors",
      [](const std::string& path, const py::dict& tensors) {
        job::TensorMap t = to_tensor_map(tensors, "tensors");
        py::gil_scoped_release release;
        io::write_safetensors(path, t);
      },
      py::arg("path"), py::arg("tensors"), "Writes {name: ndarray} to a safetensors file (uint16 as bf16 bits).");

  py::class_<Compiled>(m, "_Compiled")
      .def_property_readonly("ranks", [](const Compiled& c) { return c.job->ranks(); })
      .def_property_readonly("warnings", [](const Compiled& c) { return c.job->warnings(); })
      .def("program", [](const Compiled& c, int rank) { return ir::print(c.job->program(rank)); }, py::arg("rank"))
      .def("report_json", [](const Compiled& c) { return job::report_json(*c.job).dump(); })
      .def(
          "run",
          [](const Compiled& c, const py::dict& inputs) {
            job::TensorMap in = c.model->check_inputs(to_tensor_map(inputs, "inputs"));
            job::RunResult r;
            {
              py::gil_scoped_release release;
              r = c.job->run(c.model->weights(), in);
            }
            py::dict out = outputs_dict(c.model->graph(), std::move(r.outputs));
            return out;
          },
          py::arg("inputs"));
}

}  // namespace dt::python

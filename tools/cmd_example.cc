// `dtensor example mlp|gpt`: writes an example model in the IR text format, with the architecture
// and parameter names of ../shared/reference (defaults = the reference configs).
//
//   dtensor example mlp --hidden 64 --layers 2 --batch 8 -o mlp.dt --weights mlp.safetensors
//   dtensor example gpt --vocab 512 --hidden 128 --heads 4 --layers 2 --max-seq 64 --batch 2
//     --seq 32 -o gpt.dt
//   --loss adds a `target` input and a loss output; --weights / --inputs write seeded random
//   parameters / data inputs; --seed picks them.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/core/rng.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/printer.h"
#include "tools/command.h"
#include "bench/gpt_options.h"

namespace dt::tools {
namespace {

struct ExampleOptions {
  std::string output;   // "" or "-": stdout
  std::string weights;  // "" : none
  std::string inputs;   // "" : none
  uint64_t seed = 0;
};

// Returns seeded random data inputs for `g`, by name: floating inputs normal(0, 1), integer
// inputs (token ids, targets) uniform in [0, int_high).
io::TensorMap random_inputs(const ir::Graph& g, uint64_t seed, int64_t int_high) {
  Generator gen(seed ^ 0x5eedf00dull);
  io::TensorMap out;
  for (const ir::Value* v : g.inputs()) {
    const ir::TensorType& t = v->type;
    out[v->name] = is_floating(t.dtype) ? randn(t.shape, gen, t.dtype) : randint(t.shape, 0, int_high, gen, t.dtype);
  }
  return out;
}

// Returns the bytes of the tensors of `values`, saturating at INT64_MAX.
int64_t tensor_bytes(const std::vector<ir::Value*>& values) {
  int64_t total = 0;
  for (const ir::Value* v : values) {
    int64_t bytes = 0;
    if (__builtin_mul_overflow(numel(v->type.shape), int64_t(itemsize(v->type.dtype)), &bytes) ||
        __builtin_add_overflow(total, bytes, &total))
      return INT64_MAX;
  }
  return total;
}

// Throws ValueError when the requested files cannot be generated in this machine's memory (each
// file is built in memory, tensors and file image, before anything is written).
void check_fits_in_memory(const ir::Graph& g, const ExampleOptions& opt) {
  const int64_t memory = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
  for (auto [flag, values] : {std::pair{"--weights", opt.weights.empty() ? std::vector<ir::Value*>{} : g.params()},
                              {"--inputs", opt.inputs.empty() ? std::vector<ir::Value*>{} : g.inputs()}}) {
    const int64_t bytes = tensor_bytes(values);
    if (bytes > memory / 2)
      DT_THROW(ValueError) << flag << ": the " << g.name() << " example's tensors need "
                           << (bytes == INT64_MAX ? std::string("more than 2^63 bytes") : fmt::format("{:.1f} GiB", double(bytes) / (1 << 30)))
                           << ", more than half of this machine's " << fmt::format("{:.1f}", double(memory) / (1 << 30))
                           << " GiB of memory";
  }
}

void write_example(const ir::Graph& g, const ExampleOptions& opt, int64_t int_high) {
  // Check sizes and build every file in memory first: a failure writes nothing, and the files
  // appear together (dtensor/core/atomic_file.h).
  check_fits_in_memory(g, opt);
  const std::string text = ir::print(g);
  const bool to_stdout = opt.output.empty() || opt.output == "-";
  StagedFiles files;
  if (!to_stdout) files.add(opt.output, text);
  if (!opt.weights.empty()) {
    auto w = ir::random_weights(g, opt.seed);
    files.add(opt.weights, io::safetensors_bytes(io::TensorMap(w.begin(), w.end()), {{"seed", std::to_string(opt.seed)}}));
  }
  if (!opt.inputs.empty())
    files.add(opt.inputs, io::safetensors_bytes(random_inputs(g, opt.seed, int_high), {{"seed", std::to_string(opt.seed)}}));
  files.commit();
  // Name every file written (the model goes to stdout when no -o is given).
  if (to_stdout) std::fwrite(text.data(), 1, text.size(), stdout);
  else std::fprintf(stderr, "wrote model %s (%zu nodes, %zu parameters)\n", opt.output.c_str(), g.nodes().size(), g.params().size());
  if (!opt.weights.empty()) std::fprintf(stderr, "wrote weights %s (seed %llu)\n", opt.weights.c_str(), (unsigned long long)opt.seed);
  if (!opt.inputs.empty()) std::fprintf(stderr, "wrote inputs %s (seed %llu)\n", opt.inputs.c_str(), (unsigned long long)opt.seed);
}

void add_common(CLI::App* cmd, ExampleOptions& opt) {
  cmd->add_option("-o,--output", opt.output, "IR file to write (default: stdout)");
  cmd->add_option("--weights", opt.weights, "also write seeded random weights to this safetensors file");
  cmd->add_option("--inputs", opt.inputs, "also write seeded random data inputs (`input`, `target`) to this safetensors file");
  cmd->add_option("--seed", opt.seed, "seed of the random weights")->capture_default_str();
}

void setup(CLI::App& app) {
  CLI::App* example = app.add_subcommand("example", "Write an example model (mlp | gpt) in the dtensor IR");
  example->require_subcommand(1);

  static ExampleOptions mlp_opt;
  static ir::MlpConfig mlp;
  CLI::App* m = example->add_subcommand("mlp", "x = x + fc2(relu(fc1(layer_norm(x)))) per layer");
  m->add_option("--hidden", mlp.hidden, "hidden size")->capture_default_str();
  m->add_option("--layers", mlp.layers, "number of blocks")->capture_default_str();
  m->add_option("--batch", mlp.batch, "batch size")->capture_default_str();
  m->add_flag("--loss", mlp.loss, "add input `target` and output mse_loss(output, target)");
  add_common(m, mlp_opt);
  m->callback([m] {
    refuse_unless(m, !mlp_opt.weights.empty() || !mlp_opt.inputs.empty(), {"--seed"},
                  "seeds the random weights and inputs: add --weights or --inputs");
    write_example(ir::build_mlp(mlp), mlp_opt, /*int_high=*/1);
  });

  static ExampleOptions gpt_opt;
  static ir::GptConfig gpt;
  CLI::App* g = example->add_subcommand("gpt", "decoder-only transformer (GPT-2 style, causal attention)");
  bench::add_gpt_options(g, gpt, /*with_max_seq=*/true);
  g->add_flag("--loss", gpt.loss, "add input `target` and output cross_entropy(logits, target)");
  static std::string gpt_dtype = "f32";
  g->add_option("--dtype", gpt_dtype, "parameters' and activations' dtype (bf16: stored in bf16, computed in f32)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  add_common(g, gpt_opt);
  g->callback([g] {
    refuse_unless(g, !gpt_opt.weights.empty() || !gpt_opt.inputs.empty(), {"--seed"},
                  "seeds the random weights and inputs: add --weights or --inputs");
    gpt.dtype = parse_dtype(gpt_dtype);
    write_example(ir::build_gpt(gpt), gpt_opt, /*int_high=*/gpt.vocab);
  });
}

CommandRegistrar reg("example", setup);

}  // namespace
}  // namespace dt::tools

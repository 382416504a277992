// Parse + verify, then execute on the interpreter (one rank) with every input and parameter bound
// to seeded data of its declared type: a model the verifier accepts must run or fail with a typed
// error, never crash. Models with a value of more than kMaxElements elements are skipped so that
// each execution stays fast and small (a huge allocation is not a bug).
#include <cstddef>
#include <cstdint>
#include <string>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/parser.h"
#include "dtensor/runtime/interpreter.h"
#include "fuzz/fuzz_error.h"

namespace {

constexpr int64_t kMaxElements = 1 << 16;

// Returns seeded data of `v`'s type: small integers for integer dtypes (valid indices for small
// tables), normal values otherwise.
dt::Tensor data_for(const dt::ir::Value& v, dt::Generator& gen) {
  const dt::ir::TensorType& t = v.type;
  if (dt::is_floating(t.dtype)) return dt::randn(t.shape, gen, t.dtype);
  return dt::randint(t.shape, 0, 2, gen, t.dtype);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  dt::fuzz::expect_clean([&] {
    dt::ir::Graph g = dt::ir::parse(text, "fuzz.dt");
    for (const auto* list : {&g.inputs(), &g.params()})
      for (const dt::ir::Value* v : *list)
        if (dt::numel(v->type.shape) > kMaxElements) return;
    for (const auto& n : g.nodes())
      for (const dt::ir::Value* r : n->results)
        if (dt::numel(r->type.shape) > kMaxElements) return;
    dt::Generator gen(1);
    dt::runtime::Bindings bindings;
    for (const auto* list : {&g.inputs(), &g.params()})
      for (const dt::ir::Value* v : *list) bindings[v->name] = data_for(*v, gen);
    dt::CommOptions comm;
    comm.timeout = dt::Duration(10000);
    dt::run_ranks(1, [&](dt::ProcessGroup& world) {
      dt::runtime::GroupMap groups = dt::runtime::make_groups(g, world);
      dt::runtime::Interpreter interp(g);
      (void)interp.run(bindings, groups);
    }, comm);
  });
  return 0;
}

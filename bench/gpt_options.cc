#include "bench/gpt_options.h"

namespace dt::bench {

void add_gpt_options(CLI::App* cmd, ir::GptConfig& cfg, bool with_max_seq) {
  cmd->add_option("--vocab", cfg.vocab, "vocabulary size")->capture_default_str();
  cmd->add_option("--hidden", cfg.hidden, "hidden size")->capture_default_str();
  cmd->add_option("--heads", cfg.heads, "attention heads")->capture_default_str();
  cmd->add_option("--layers", cfg.layers, "number of blocks")->capture_default_str();
  if (with_max_seq) cmd->add_option("--max-seq", cfg.max_seq, "rows of the position embedding")->capture_default_str();
  cmd->add_option("--batch", cfg.batch, "batch size")->capture_default_str();
  cmd->add_option("--seq", cfg.seq, "sequence length")->capture_default_str();
}

}  // namespace dt::bench

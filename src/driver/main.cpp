// tptrain command line: train / eval / generate / check / inspect (CLI11).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "src/driver/commands.hpp"

namespace {

void add_deck_options(CLI::App& cmd, tptrain::driver::DeckOptions& o) {
  cmd.add_option("deck", o.deck, "input deck (TOML)")->required()->check(CLI::ExistingFile);
  cmd.add_option("--set", o.overrides,
                 "override a deck key, e.g. --set parallel.tensor=2 (repeatable; validated like "
                 "the deck; paths relative to the working directory)")
      ->allow_extra_args(false);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tptrain::driver;
  CLI::App app{"tptrain: Megatron-style tensor/pipeline/data-parallel GPT training on Kokkos + MPI"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_string());

  DeckOptions deck;
  EvalOptions eval_opts;
  GenerateOptions gen_opts;

  auto* train_cmd = app.add_subcommand("train", "train the model of a deck (run under mpiexec)");
  add_deck_options(*train_cmd, deck);

  auto* eval_cmd = app.add_subcommand("eval", "mean loss of a checkpoint over evaluation windows");
  add_deck_options(*eval_cmd, deck);
  eval_cmd->add_option("--checkpoint", eval_opts.checkpoint, "checkpoint file (.h5)")
      ->required()
      ->check(CLI::ExistingFile);
  eval_cmd->add_option("--data", eval_opts.data, "token file (default: the deck's data.valid)")
      ->check(CLI::ExistingFile);
  eval_cmd->add_option("--windows", eval_opts.windows,
                       "number of windows (default: training.eval_windows)")
      ->check(CLI::PositiveNumber);

  auto* gen_cmd = app.add_subcommand("generate", "sample text from a checkpoint");
  add_deck_options(*gen_cmd, deck);
  gen_cmd->add_option("--checkpoint", gen_opts.checkpoint, "checkpoint file (.h5)")
      ->required()
      ->check(CLI::ExistingFile);
  gen_cmd->add_option("--prompt", gen_opts.prompt, "prompt text")->required();
  gen_cmd->add_option("--tokens", gen_opts.tokens, "tokens to generate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  gen_cmd->add_option("--temperature", gen_opts.temperature, "sampling temperature (0 = greedy)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  gen_cmd->add_option("--top-k", gen_opts.top_k, "sample among the k most likely tokens (0 = all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  gen_cmd->add_option("--seed", gen_opts.seed, "sampling seed")->capture_default_str();

  auto* check_cmd = app.add_subcommand("check", "validate a deck and print it resolved (no MPI)");
  add_deck_options(*check_cmd, deck);

  std::string inspect_file;
  auto* inspect_cmd = app.add_subcommand(
      "inspect",
      "describe a checkpoint: attributes, then every dataset with shape, dtype, L2 norm, min, max "
      "and whether its checksum verifies (no MPI; exit 1 if anything fails)");
  inspect_cmd->add_option("file", inspect_file, "checkpoint file (.h5)")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (*check_cmd) return check(deck);
  if (*train_cmd) return train(deck);
  if (*eval_cmd) return eval(deck, eval_opts);
  if (*gen_cmd) return generate(deck, gen_opts);
  if (*inspect_cmd) return inspect(inspect_file);
  return 2;
}

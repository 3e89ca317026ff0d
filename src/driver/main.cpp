// tptrain command line: train / bench / eval / generate / check / plan / inspect / tokenize / export /
// import (CLI11).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/test_hooks.hpp"
#include "io/data_paths.hpp"
#include "io/deck_path.hpp"
#include "io/path_text.hpp"
#include "src/driver/commands.hpp"
#include "src/driver/retired_environment.hpp"
#include "src/util/stop_signal.hpp"
#include "text/tiktoken_encoding.hpp"
#include "text/tokenizer.hpp"

namespace {

// SIGUSR1 and SIGTERM are recorded from the start: build/tptrain, the launcher, blocks them and
// execs this program (src/driver/stop_signal_launcher.c), and its .preinit_array installs the
// handlers and unblocks them before the constructor of any shared library runs. A signal from
// the first instruction on stops `train` after step 1; the other commands get it back at once,
// after the command line is read (main).
#if defined(__ELF__)
void record_stop_signals_at_start(int, char**, char**) { tptrain::util::record_stop_signals(); }
// maybe_unused: nvcc's front end (a CUDA build compiles this file) ignores gnu::used and warns
// (#177-D) that nothing references the entry; the loader does.
using PreinitEntry = void (*)(int, char**, char**);
[[maybe_unused, gnu::used, gnu::section(".preinit_array")]] PreinitEntry preinit_stop_signals =
    record_stop_signals_at_start;
#endif

// CLI11's own range validators print their bounds as doubles (a 309-digit number); these say
// what was expected in words: "--tokens: expected a positive integer, got 0".
CLI::Validator integer_at_least(int lo, int most = std::numeric_limits<int>::max()) {
  const std::string what = lo > 0 ? "a positive integer" : "a non-negative integer";
  return CLI::Validator(
      [what, lo, most](std::string& text) -> std::string {
        long long v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size() && v >= lo && v <= most) return {};
        if (ec != std::errc::invalid_argument && end == text.data() + text.size() && v >= lo)
          return fmt::format("expected {} no larger than {}, got {}", what, most, text);
        return fmt::format("expected {}, got {}", what, text);
      },
      lo > 0 ? "INT > 0" : "INT >= 0");
}

// CLI11 would wrap -1 or 2^70 into some 64-bit seed: a different sample than asked for.
CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        unsigned long long v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size()) return {};
        return fmt::format("expected an integer from 0 to {}, got {}",
                           std::numeric_limits<unsigned long long>::max(), text);
      },
      "UINT64");
}

CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) && v >= 0)
          return {};
        return fmt::format("expected a non-negative number, got {}", text);
      },
      "NUMBER >= 0");
}

// A positive number, at most `most` when given.
// A finite number >= 1 (a ratio to a balanced or ideal figure).
CLI::Validator ratio_at_least_one() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) && v >= 1) return {};
        return fmt::format("expected a number >= 1, got {}", text);
      },
      "NUMBER >= 1");
}

CLI::Validator positive_number(double most = std::numeric_limits<double>::infinity()) {
  return CLI::Validator(
      [most](std::string& text) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size() && std::isfinite(v) && v > 0 && v <= most)
          return {};
        if (std::isfinite(most)) return fmt::format("expected a number > 0 and <= {:g}, got {}", most, text);
        return fmt::format("expected a positive number, got {}", text);
      },
      std::isfinite(most) ? "NUMBER in (0, 1]" : "NUMBER > 0");
}

// A file that can be read, or why not: "permission denied", "the file name is too long"
// rather than CLI11's "does not exist" for every failure.
CLI::Validator readable_file() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        const std::string problem = tptrain::io::regular_file_problem(path);
        return problem.empty() ? std::string() : tptrain::io::display_path(path) + " " + problem;
      },
      "FILE");
}

// A token file, or a folder or glob pattern of them (io/data_paths.hpp), or why not; the
// files of a set are checked one by one when the dataset opens them.
CLI::Validator readable_data() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const tptrain::io::DataPaths paths = tptrain::io::expand_data_paths(value);
        if (!paths.problem.empty()) return tptrain::io::display_path(value) + " " + paths.problem;
        if (paths.form != tptrain::io::DataPaths::Form::file) return {};
        const std::string problem = tptrain::io::regular_file_problem(value);
        return problem.empty() ? std::string() : tptrain::io::display_path(value) + " " + problem;
      },
      "FILE|FOLDER|PATTERN");
}

// The world rank the MPI launcher gives this process, read before MPI_Init (a usage error ends
// the process before MPI starts). 0 when not launched by mpiexec/srun.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* value = std::getenv(name)) return std::atoi(value);
  return 0;
}

void add_deck_options(CLI::App& cmd, tptrain::driver::DeckOptions& o) {
  // The deck itself is checked by load_deck, which says why it cannot be read.
  cmd.add_option("deck", o.deck, "input deck (TOML)")->required();
  cmd.add_option("--set", o.overrides,
                 "override a deck key, e.g. --set parallel.tensor=2 (repeatable; validated like "
                 "the deck; paths relative to the working directory)")
      ->allow_extra_args(false);
}

// --test-hook NAME=VALUE (base/test_hooks.hpp): for the tests, hidden from --help (an empty
// group). Parsed after the command line (main): a misspelt hook is a usage error, not a test
// that silently passes. (Not a CLI11 check: CLI11 names a hidden option "" in its messages.)
void add_test_hook_option(CLI::App& cmd, std::vector<std::string>& hooks) {
  cmd.add_option("--test-hook", hooks, "a test hook NAME=VALUE (base/test_hooks.hpp; repeatable)")
      ->allow_extra_args(false)
      ->group("");
}

}  // namespace

int main(int argc, char** argv) {
  // Again (or first, without .preinit_array): in case a library's constructor replaced them.
  if (!tptrain::util::record_stop_signals()) {
    std::fprintf(stderr, "tptrain: error: cannot install the handlers of SIGUSR1 and SIGTERM\n");
    return 1;
  }
  tptrain::util::restore_output_flags_at_exit();
  // A file size limit (ulimit -f) then fails a write with EFBIG, which the checkpoint and
  // metrics writers report with the file's name, instead of ending the process with a core dump.
  std::signal(SIGXFSZ, SIG_IGN);
  using namespace tptrain::driver;
  CLI::App app{"tptrain: Megatron-style tensor/context/pipeline/data/expert-parallel GPT training on Kokkos + MPI"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_string());

  DeckOptions deck;
  std::vector<std::string> test_hooks;
  EvalOptions eval_opts;
  GenerateOptions gen_opts;

  auto* train_cmd = app.add_subcommand("train", "train the model of a deck (run under mpiexec)");
  add_deck_options(*train_cmd, deck);
  add_test_hook_option(*train_cmd, test_hooks);
  bool fresh = false;
  train_cmd->add_flag("--fresh", fresh,
                      "start a new run from step 0, deleting the checkpoints and metrics.jsonl an earlier run left in "
                      "checkpoint.dir and run.dir (--set checkpoint.resume=false --set checkpoint.overwrite=true)");

  BenchOptions bench_opts;
  auto* bench_cmd = app.add_subcommand(
      "bench",
      "time training steps of a deck on synthetic tokens (no data files, checkpoints or eval): tokens/s, "
      "model FLOP/s, the GEMM peak measured in the same run, MFU and HFU, with --phases the step time by "
      "phase (run under mpiexec like train; one JSON line at the end)");
  add_deck_options(*bench_cmd, deck);
  add_test_hook_option(*bench_cmd, test_hooks);
  bench_cmd->add_option("--steps", bench_opts.steps, fmt::format("timed steps (at most {})", BenchOptions::max_steps))
      ->check(integer_at_least(1, BenchOptions::max_steps))
      ->capture_default_str();
  bench_cmd
      ->add_option("--warmup", bench_opts.warmup,
                   fmt::format("untimed steps before them (at most {})", BenchOptions::max_warmup))
      ->check(integer_at_least(0, BenchOptions::max_warmup))
      ->capture_default_str();
  bench_cmd->add_flag("--phases", bench_opts.phases,
                      "then as many steps again timed phase by phase (a fence at every phase boundary; tokens/s "
                      "and MFU never include those fences)");
  bench_cmd
      ->add_option("--attention", bench_opts.attention,
                   "attention core (overrides training.attention): default (the deck's; batched on GPUs, flash on "
                   "CPUs), flash, batched (the GPU path, also on a CPU) or causal_tiles (the batched core in the "
                   "former CPU path's causal-tile GEMMs, a reference)")
      ->check(CLI::IsMember({"default", "flash", "batched", "causal_tiles"}))
      ->capture_default_str();
  auto* bench_trace = bench_cmd->add_option(
      "--trace", bench_opts.trace,
      "then one more step, every phase boundary fenced, written to this file as a Chrome trace (Perfetto, "
      "chrome://tracing): a process per rank, a thread per stream (docs/benchmarks.md)");
  bench_cmd
      ->add_option("--calibrate", bench_opts.calibrate,
                   "instead of timing steps, measure this machine (GEMM rates by shape, memory bandwidth, MPI latency "
                   "and bandwidth between ranks 0 and 1 of the node) and write its machine file to this path, for "
                   "plan --machine")
      ->excludes(bench_trace);

  auto* eval_cmd = app.add_subcommand("eval", "mean loss of a checkpoint over evaluation windows");
  add_deck_options(*eval_cmd, deck);
  add_test_hook_option(*eval_cmd, test_hooks);
  eval_cmd->add_option("--checkpoint", eval_opts.checkpoint, "checkpoint file (.h5)")
      ->required()
      ->check(readable_file());
  auto* eval_data = eval_cmd->add_option("--data", eval_opts.data,
                                         "token file, folder or glob pattern of shards (default: the deck's data.valid)")
                        ->check(readable_data());
  auto* eval_windows = eval_cmd->add_option("--windows", eval_opts.windows,
                                            "number of windows (default: training.eval_windows)")
                           ->check(integer_at_least(1));
  auto* eval_tasks =
      eval_cmd
          ->add_option("--tasks", eval_opts.tasks,
                       "multiple-choice task file, JSON Lines of {\"context\": ..., \"endings\": [...], \"label\": k}: "
                       "mc_accuracy and mc_accuracy_norm instead of the loss")
          ->check(readable_file())
          ->excludes(eval_data)
          ->excludes(eval_windows);
  eval_cmd->add_option("--tasks-scores", eval_opts.tasks_scores,
                       "with --tasks: write each example's log-likelihoods and scored tokens to this file (JSON Lines)")
      ->needs(eval_tasks);

  auto* gen_cmd = app.add_subcommand("generate", "sample text from a checkpoint");
  add_deck_options(*gen_cmd, deck);
  add_test_hook_option(*gen_cmd, test_hooks);
  gen_cmd->add_option("--checkpoint", gen_opts.checkpoint, "checkpoint file (.h5)")
      ->required()
      ->check(readable_file());
  gen_cmd->add_option("--prompt", gen_opts.prompt, "prompt text")->required();
  gen_cmd->add_option("--tokens", gen_opts.tokens, "tokens to generate")
      ->check(integer_at_least(1))
      ->capture_default_str();
  gen_cmd->add_option("--temperature", gen_opts.temperature, "sampling temperature (0 = greedy)")
      ->check(non_negative_number())
      ->capture_default_str();
  gen_cmd->add_option("--top-k", gen_opts.top_k, "sample among the k most likely tokens (0 = all)")
      ->check(integer_at_least(0))
      ->capture_default_str();
  gen_cmd->add_option("--seed", gen_opts.seed, "sampling seed")->check(unsigned_64())->capture_default_str();
  gen_cmd->add_flag("--no-kv-cache", gen_opts.no_kv_cache,
                    "recompute the full forward of the context window for every token instead of keeping a "
                    "key/value cache (the reference the cache is tested against; slower)");
  gen_cmd->add_flag("--ignore-eos", gen_opts.ignore_eos,
                    "keep generating after the tokenizer's <|endoftext|> (by default it ends the sample)");

  auto* check_cmd = app.add_subcommand("check", "validate a deck and print it resolved (no MPI)");
  add_deck_options(*check_cmd, deck);
  CheckOutput check_output = CheckOutput::resolved_deck;
  auto* ranks_flag = check_cmd->add_flag_callback(
      "--ranks", [&] { check_output = CheckOutput::ranks; },
      "print only the number of MPI ranks the deck needs (for scripts)");
  check_cmd
      ->add_flag_callback("--json", [&] { check_output = CheckOutput::json; },
                          "print the resolved deck as one JSON object: \"section.key\": value, "
                          "and \"ranks\"")
      ->excludes(ranks_flag);

  PlanOptions plan_opts;
  auto* plan_cmd = app.add_subcommand(
      "plan",
      "what a deck needs before it runs (no MPI, no GPU, no data files): parameters, memory of the most loaded "
      "rank by category, FLOPs, bytes per communicator, and the step simulated on a machine description: time "
      "per iteration and for the run, MFU, its breakdown (compute, exposed communication, pipeline bubble, "
      "optimizer); exit 1, with the nearest layouts that fit, when the GPU count "
      "is wrong or a rank does not fit in GPU memory (last line: one JSON object)");
  add_deck_options(*plan_cmd, deck);
  plan_cmd->add_option("--gpus", plan_opts.gpus, "GPUs of the allocation (default: tensor x context x pipeline x data)")
      ->check(integer_at_least(1));
  plan_cmd->add_option("--machine", plan_opts.machine,
                       "machine description (input/machines/*.toml, or bench --calibrate's) the step is simulated on "
                       "(default: a DGX A100 80 GB, built in: input/machines/dgx-a100-80gb.toml)")
      ->check(readable_file());
  plan_cmd->add_option("--gpus-per-node", plan_opts.gpus_per_node, "GPUs per node (default: the machine's)")
      ->check(integer_at_least(1));
  plan_cmd->add_option("--gpu-memory", plan_opts.gpu_memory_gib, "memory of one GPU in GiB (default: the machine's)")
      ->check(positive_number());
  plan_cmd->add_option("--peak-tflops", plan_opts.peak_tflops,
                       "dense peak of one GPU in TFLOP/s for the deck's precision (default: the machine's; "
                       "A100: 312 for bf16/fp16, 19.5 for fp32)")
      ->check(positive_number());
  plan_cmd->add_flag("--search", plan_opts.search,
                     "rank the layouts of the GPU count that fit by simulated step time (tensor, context, pipeline, "
                     "virtual stages, data, expert, micro-batch, sequence parallelism, recompute, rank order, and the "
                     "shard mode: ZeRO-1, 2, 3); "
                     "print the best 5 with their breakdowns, --set arguments and deck lines");
  plan_cmd->add_option("--trace", plan_opts.trace,
                       "write the simulated step (every rank, one per stage beyond 1024; every stream) as a Chrome trace (JSON) to FILE");
  plan_cmd->add_option("--expert-imbalance", plan_opts.expert_imbalance,
                       "the busiest expert-parallel rank's routed rows over the mean (what `tptrain bench` reports "
                       "as expert_imbalance; default 1: balanced): with parallel.expert > 1 the step is simulated "
                       "waiting for that rank's experts at every all-to-all")
      ->check(ratio_at_least_one());
  plan_cmd->add_option("--tokens", plan_opts.tokens,
                       "training tokens, e.g. 300e9 (default: training.steps x global_batch x seq_length)")
      ->check(positive_number());

  std::string inspect_file;
  auto* inspect_cmd = app.add_subcommand(
      "inspect",
      "describe a checkpoint: attributes, then every dataset with shape, dtype, L2 norm, min, max "
      "and whether its checksum verifies (no MPI; exit 1 if anything fails)");
  inspect_cmd->add_option("file", inspect_file, "checkpoint file (.h5)")->required();

  TokenizeOptions tokenize_opts;
  auto* tokenize_cmd = app.add_subcommand(
      "tokenize",
      "text files (one document each) or JSON Lines (.jsonl, a \"text\" per line) -> llm.c token shards "
      "train_000000.bin, ... in --out; every document preceded by <|endoftext|>; under mpiexec the ranks share the "
      "work and the shards are the same for any number of ranks");
  tokenize_cmd->add_option("inputs", tokenize_opts.inputs, "input files, in order")->required();
  tokenize_cmd->add_option("--out", tokenize_opts.out, "output folder (created; shards already there are not overwritten)")
      ->required();
  tokenize_cmd
      ->add_option("--tokenizer", tokenize_opts.tokenizer,
                   "\"gpt2\" (GPT-2 BPE), \"cl100k_base\", \"o200k_base\", \"tiktoken:PATH\" (a tiktoken rank file, "
                   "with --tokenizer-pattern) or \"bytes\"")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            for (std::string_view name : tptrain::text::tokenizer_names())
              if (v == name) return {};
            if (v.size() > tptrain::text::kTiktokenFilePrefix.size() && v.rfind(tptrain::text::kTiktokenFilePrefix, 0) == 0) return {};
            return "expected \"bytes\", \"gpt2\", \"cl100k_base\", \"o200k_base\" or \"tiktoken:PATH\", got \"" + v + "\"";
          },
          "TOKENIZER"))
      ->capture_default_str();
  tokenize_cmd->add_option("--tokenizer-pattern", tokenize_opts.tokenizer_pattern,
                           "pre-tokenization pattern of --tokenizer tiktoken:PATH: \"cl100k\", \"o200k\" or \"llama3\"")
      ->check(CLI::IsMember({"cl100k", "o200k", "llama3"}));
  tokenize_cmd->add_option("--tokenizer-dir", tokenize_opts.tokenizer_dir,
                           "folder of GPT-2's encoder.json and vocab.bpe, or of cl100k_base.tiktoken and o200k_base.tiktoken "
                           "(default: the cache folders jobs/setup-deps.sh fills)");
  tokenize_cmd->add_option("--shard-tokens", tokenize_opts.shard_tokens, "tokens per shard")
      ->check(integer_at_least(1))
      ->capture_default_str();
  tokenize_cmd->add_option("--valid-tokens", tokenize_opts.valid_tokens,
                           "the first N tokens go to valid_000000.bin, ... (0 = no validation shards)")
      ->check(unsigned_64())
      ->capture_default_str();
  tokenize_cmd->add_option("--segment-bytes", tokenize_opts.segment_bytes,
                           "input bytes per unit of work (a rank's share of one round; memory per rank)")
      ->check(integer_at_least(1, 1 << 30))
      ->capture_default_str();

  ExportOptions export_opts;
  auto* export_cmd = app.add_subcommand(
      "export",
      "a checkpoint (any layout, any precision) as a Hugging Face model folder, GPT2LMHeadModel, LlamaForCausalLM, "
      "Qwen2ForCausalLM, MixtralForCausalLM or DeepseekV3ForCausalLM by model.architecture: config.json + "
      "model.safetensors (float32)");
  export_cmd->add_option("checkpoint", export_opts.checkpoint, "checkpoint file (.h5)")->required()->check(readable_file());
  export_cmd->add_option("--format", export_opts.format, "output format")
      ->check(CLI::IsMember({"hf"}))
      ->capture_default_str();
  export_cmd->add_option("--out", export_opts.out, "output folder (created; files already there are not overwritten)")
      ->required();

  ImportOptions import_opts;
  auto* import_cmd = app.add_subcommand(
      "import",
      "a Hugging Face model folder (config.json + model.safetensors, or the shards of "
      "model.safetensors.index.json; DeepSeek-V3's fp8 weights too) of the deck's model.architecture as a step-0 "
      "checkpoint of the deck's model, to start training from (training.init_from), evaluate or generate");
  import_cmd->add_option("dir", import_opts.dir,
                         "folder of config.json and model.safetensors (or model.safetensors.index.json)")
      ->required();
  import_cmd->add_option("--deck", import_opts.deck.deck, "the deck whose model the weights are")->required();
  import_cmd->add_option("--set", import_opts.deck.overrides, "override a deck key, as for train")
      ->allow_extra_args(false);
  import_cmd->add_option("--out", import_opts.out, "checkpoint file to write (.h5; not overwritten)")->required();

  // --kokkos-* flags are Kokkos' own (Kokkos::initialize reads them), not tptrain's options.
  std::vector<std::string> kokkos_args, args;
  for (int i = argc - 1; i >= 1; --i) {  // CLI11 takes the arguments in reverse order
    const std::string a = argv[i];
    (a.rfind("--kokkos-", 0) == 0 ? kokkos_args : args).push_back(a);
  }
  std::reverse(kokkos_args.begin(), kokkos_args.end());
  set_kokkos_arguments(kokkos_args);
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    // Under mpiexec every rank parses the same arguments: one message, every rank exits.
    const int rc = launcher_rank() == 0 ? app.exit(e) : e.get_exit_code();
    return rc == 0 ? 0 : 2;
  }

  try {
    tptrain::TestHooks hooks;
    for (const std::string& h : test_hooks) tptrain::parse_test_hook(h, hooks);
    tptrain::set_test_hooks(hooks);
  } catch (const std::invalid_argument& e) {
    if (launcher_rank() == 0) std::fprintf(stderr, "%s\n", e.what());  // as CLI11 reports a bad option
    return 2;
  }
  if (launcher_rank() == 0) warn_of_retired_environment();

  // Only train has something to save on a stop signal; the others end on it as they always did.
  if (!*train_cmd)
    if (const int signal = tptrain::util::restore_stop_signals(); signal != 0) std::raise(signal);
  if (*check_cmd) return check(deck, check_output);
  if (*plan_cmd) return plan(deck, plan_opts);
  if (*train_cmd) {
    if (fresh) deck.overrides.insert(deck.overrides.end(), {"checkpoint.resume=false", "checkpoint.overwrite=true"});
    return train(deck);
  }
  if (*bench_cmd) return bench(deck, bench_opts);
  if (*eval_cmd) return eval(deck, eval_opts);
  if (*gen_cmd) return generate(deck, gen_opts);
  if (*inspect_cmd) return inspect(inspect_file);
  if (*tokenize_cmd) return tokenize(tokenize_opts);
  if (*export_cmd) return export_checkpoint(export_opts);
  if (*import_cmd) return import_checkpoint(import_opts);
  return 2;
}

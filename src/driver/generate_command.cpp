#include "src/driver/generate_command.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <type_traits>

#include "base/agreement.hpp"
#include "io/json_line.hpp"
#include "src/util/log.hpp"
#include "src/model/gpt_inference.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "src/driver/precision_dispatch.hpp"
#include "src/data/document_starts.hpp"
#include "src/train/training_run.hpp"
#include "text/text_error.hpp"
#include "text/tokenizer.hpp"
#include "text/utf8_stream.hpp"

namespace tptrain::driver {

namespace {

using parallel::on_every_rank;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The next token from the last stage's local logits `row` [V_padded/tp], the same on every rank.
template <class T>
class Sampler {
 public:
  Sampler(const model::GptModel<T>& model, const parallel::Topology& topo, const std::string& checkpoint,
          const SampleOptions& o, int sample_below)
      : model_(model), topo_(topo), checkpoint_(checkpoint), o_(o), below_(sample_below), rng_(o.seed),
        full_("generate.full", model.shape().padded_vocab()) {}

  template <class RV>
  std::int32_t next(const kx::ExecSpace& exec, const RV& row, int generated) {
    // On the last pipeline stage, which holds the logits: (logit, token) of the tokens that may
    // be drawn, and how many are NaN or +-Inf.
    std::vector<std::pair<double, int>> cand;
    int non_finite = 0, first_bad = 0;
    if (model_.is_last_stage()) {
      parallel::all_gather(model_.tp(), exec, row, full_);  // one row of logits, for sampling only
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), full_);
      for (int v = 0; v < below_; ++v) {
        cand.emplace_back(h(v), v);
        if (!std::isfinite(cand.back().first) && non_finite++ == 0) first_bad = v;
      }
    }
    // A NaN or Inf logit gives no distribution (every weight turns NaN): refused, as eval refuses
    // a non-finite loss. The verdict goes from the last stage to every rank: all stop together.
    parallel::Communicator& pp = topo_.pp();
    if (const int count = parallel::all_reduce_scalar(pp, non_finite, parallel::ReduceOp::sum); count > 0) {
      const bool mine = model_.is_last_stage();
      const int token = parallel::all_reduce_scalar(pp, mine ? first_bad : 0, parallel::ReduceOp::sum);
      const double value = parallel::all_reduce_scalar(  // x + 0 keeps NaN and Inf
          pp, mine ? cand[static_cast<std::size_t>(first_bad)].first : 0.0, parallel::ReduceOp::sum);
      log::stream("\n");
      throw parallel::AgreedError(fmt::format(
          "generate: checkpoint {}: the logits for generated token {} are not finite ({} of {}; the first, for "
          "token {}, is {}): nothing to sample from{}",
          checkpoint_, generated + 1, count, below_, token, value,
          std::is_same<T, kx::fp16>::value
              ? " (in fp16 the forward pass exceeds fp16's range, largest value 65504: try training.precision = "
                "\"bf16\")"
              : ""));
    }
    // Every stage needs the token for its next input: the last stage's choice, to all.
    const auto agreed = [&](const std::pair<double, int>& choice) {
      return parallel::all_reduce_scalar(pp, model_.is_last_stage() ? choice.second : 0, parallel::ReduceOp::sum);
    };
    if (!model_.is_last_stage()) return agreed({0.0, 0});
    const auto before = [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    if (o_.temperature <= 0)  // greedy: the first of the sorted order, without sorting V logits per token
      return agreed(*std::min_element(cand.begin(), cand.end(), before));
    std::sort(cand.begin(), cand.end(), before);
    if (o_.top_k > 0 && static_cast<std::size_t>(o_.top_k) < cand.size()) cand.resize(static_cast<std::size_t>(o_.top_k));
    std::vector<double> w;
    for (const auto& c : cand) w.push_back(std::exp((c.first - cand.front().first) / o_.temperature));
    std::discrete_distribution<int> pick(w.begin(), w.end());
    return agreed(cand[static_cast<std::size_t>(pick(rng_))]);
  }

 private:
  const model::GptModel<T>& model_;
  const parallel::Topology& topo_;
  const std::string& checkpoint_;
  const SampleOptions& o_;
  int below_;
  std::mt19937_64 rng_;  // same seed on every rank: every rank draws the same token
  kernels::Vector<T> full_;
};

}  // namespace

template <class T>
Generation generate_tokens(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                           std::vector<std::int32_t> context, const SampleOptions& o,
                           std::optional<std::int32_t> end_of_text, int sample_below,
                           const std::function<void(std::int32_t)>& on_token) {
  using Model = model::GptModel<T>;
  // Generation holds every row of its few new tokens on every tensor rank: no sequence
  // parallelism (the same sums; the cached forward needs it, the full one is as exact).
  model::GptShape shape = model::shape_of(deck);
  shape.sequence_parallel = false;
  if (context.empty()) throw std::invalid_argument("tptrain: generate_tokens: an empty context");
  for (std::int32_t t : context)  // the same context on every rank: the same verdict everywhere
    if (t < 0 || t >= shape.vocab_size)
      throw parallel::AgreedError(fmt::format("the prompt has token {} but the model's vocabulary has {} tokens (0..{})",
                                              t, shape.vocab_size, shape.vocab_size - 1));
  const kx::ExecSpace exec;
  std::unique_ptr<Model> model_ptr;
  std::unique_ptr<model::GptInference<T>> cache;
  on_every_rank(topo.world(), [&] {
    // Every rank runs the same tokens, so the experts' all-to-alls match at any parallel.expert.
    model_ptr = std::make_unique<Model>(shape, 1, topo.tp(), deck.training.seed,
                                        model::PipelineStage{topo.coords().pp, topo.layout().pipeline},
                                        model::Recompute::selective, model::OptimizerSharding{}, nullptr, &topo.ep());
  });
  Model& model = *model_ptr;
  on_every_rank(topo.world(), [&] { checkpoint::load_weights(model, topo, checkpoint); });
  if (o.kv_cache) on_every_rank(topo.world(), [&] { cache = std::make_unique<model::GptInference<T>>(model); });
  Generation g;
  if (cache) g.kv_cache_bytes = cache->cache_bytes();
  const std::int64_t S = shape.seq_length;
  parallel::Communicator& pp = topo.pp();
  const int stage = pp.rank();
  Sampler<T> sampler(model, topo, checkpoint, o, std::min(sample_below, shape.vocab_size));
  kernels::Vector<T> row("generate.row", shape.local_vocab());
  // Packed documents (data.document_mask, data.reset_positions): a document starts at each
  // <|endoftext|> of the window, prompt or generated, so a new one starts after the model emits it.
  // The full forward's batch derives them at upload; the cache's new rows take theirs from the
  // window (by absolute position), so that batch then derives none.
  const train::Documents documents = train::documents_of(deck);
  // The full forward's window, and the cache's new tokens.
  train::DeviceBatch batch(static_cast<int>(S), cache ? train::Documents{} : documents);
  if (!cache && documents.any()) model.bind_documents(batch.doc_start, batch.positions, nullptr);
  std::vector<std::int32_t> window_doc, window_position;
  kernels::Tokens step_doc, step_position;
  if (cache && documents.any()) {
    window_doc.resize(static_cast<std::size_t>(S));
    window_position.resize(static_cast<std::size_t>(S));
    step_doc = kernels::Tokens("generate.doc_start", S);
    step_position = kernels::Tokens("generate.positions", S);
  }
  std::size_t window = 0;        // the model sees context[window, end)
  std::size_t cached_from = 0;   // where the cache's window starts
  const Clock::time_point start = Clock::now();
  Clock::time_point after_first = start;
  for (int i = 0; i < o.tokens; ++i) {
    if (context.size() - window > static_cast<std::size_t>(S)) {
      window = context.size() - static_cast<std::size_t>(std::max<std::int64_t>(1, S / 2));
      ++g.refills;
    }
    const auto end = static_cast<std::ptrdiff_t>(context.size());
    if (cache) {
      if (cache->position() == 0 || cached_from != window) {
        cache->reset();
        cached_from = window;
      }
      const std::ptrdiff_t from = static_cast<std::ptrdiff_t>(window) + cache->position();
      const std::int64_t n = end - from;
      std::copy(context.begin() + from, context.end(), batch.h_inputs.begin());
      batch.upload(exec);
      if (stage > 0) parallel::recv(pp, exec, cache->stage_input(n), stage - 1, 0);
      const auto rows = std::make_pair(std::int64_t(0), n);
      if (documents.any()) {
        const std::int64_t p = cache->position(), len = end - static_cast<std::ptrdiff_t>(window);
        data::document_starts(context.data() + window, 1, len, documents.end_of_text, window_doc.data(),
                              window_position.data());
        using Host = Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
        Kokkos::deep_copy(exec, Kokkos::subview(step_doc, rows), Host(window_doc.data() + p, std::size_t(n)));
        Kokkos::deep_copy(exec, Kokkos::subview(step_position, rows), Host(window_position.data() + p, std::size_t(n)));
        cache->forward(exec, Kokkos::subview(batch.inputs, rows),
                       documents.mask ? kernels::Tokens(Kokkos::subview(step_doc, rows)) : kernels::Tokens(),
                       documents.reset_positions ? kernels::Tokens(Kokkos::subview(step_position, rows))
                                                 : kernels::Tokens());
      } else {
        cache->forward(exec, Kokkos::subview(batch.inputs, rows));
      }
      if (!model.is_last_stage()) parallel::send(pp, exec, cache->stage_output(n), stage + 1, 0);
      if (model.is_last_stage()) Kokkos::deep_copy(exec, row, cache->last_logits());
    } else {
      // The window left-aligned; causal attention makes whatever follows position `last`
      // irrelevant to its logits.
      std::fill(batch.h_inputs.begin(), batch.h_inputs.end(), 0);
      std::copy(context.begin() + static_cast<std::ptrdiff_t>(window), context.end(), batch.h_inputs.begin());
      const int last = static_cast<int>(end - static_cast<std::ptrdiff_t>(window)) - 1;
      batch.upload(exec);
      train::pipeline_forward(model, pp, exec, batch.inputs, nullptr);
      if (model.is_last_stage()) Kokkos::deep_copy(exec, row, Kokkos::subview(model.local_logits(), last, Kokkos::ALL()));
    }
    const std::int32_t next = sampler.next(exec, row, i);
    if (i == 0) after_first = Clock::now();
    if (end_of_text && next == *end_of_text && !o.ignore_eos) {
      g.stopped_at_end_of_text = true;
      break;
    }
    context.push_back(next);
    g.tokens.push_back(next);
    if (on_token) on_token(next);
  }
  g.first_token_seconds = std::chrono::duration<double>(after_first - start).count();
  g.next_tokens_seconds = seconds_since(after_first);
  return g;
}

template Generation generate_tokens<float>(const io::Deck&, const parallel::Topology&, const std::string&,
                                           std::vector<std::int32_t>, const SampleOptions&, std::optional<std::int32_t>,
                                           int, const std::function<void(std::int32_t)>&);
template Generation generate_tokens<kx::bf16>(const io::Deck&, const parallel::Topology&, const std::string&,
                                              std::vector<std::int32_t>, const SampleOptions&,
                                              std::optional<std::int32_t>, int, const std::function<void(std::int32_t)>&);
template Generation generate_tokens<kx::fp16>(const io::Deck&, const parallel::Topology&, const std::string&,
                                              std::vector<std::int32_t>, const SampleOptions&,
                                              std::optional<std::int32_t>, int, const std::function<void(std::int32_t)>&);

int run_generate(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                 const SampleOptions& o) {
  // The deck's tokenizer (its files were checked with the deck); the prompt is the same on every
  // rank, so is the verdict on it.
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::vector<std::int32_t> context;
  on_every_rank(topo.world(), [&] {
    tokenizer = text::make_tokenizer(deck.data.tokenizer, deck.data.tokenizer_dir, deck.data.tokenizer_pattern);
  });
  try {
    for (text::Token t : tokenizer->encode(o.prompt)) context.push_back(static_cast<std::int32_t>(t));
  } catch (const text::TextError& e) {
    throw parallel::AgreedError(fmt::format("generate: --prompt cannot be encoded by the {} tokenizer (data.tokenizer): {}",
                                            tokenizer->name(), e.what()));
  }
  const std::optional<text::Token> eot = tokenizer->end_of_text();
  // An empty prompt starts a document: GPT-2's <|endoftext|>, or a newline for byte tokens.
  if (context.empty()) context.push_back(static_cast<std::int32_t>(text::document_start(*tokenizer)));
  const std::size_t prompt_tokens = context.size();
  // Streamed as it comes: a long sample shows progress, and a killed run keeps what it made.
  // The prompt first, once the model is loaded (its messages come before).
  text::Utf8Stream out;
  bool prompt_shown = false;
  const auto show_prompt = [&] {
    if (!prompt_shown) log::stream(o.prompt);
    prompt_shown = true;
  };
  const auto on_token = [&](std::int32_t t) {
    show_prompt();
    // An id in a gap of the encoding (an untrained model may sample one) stands for no text.
    if (tokenizer->has_token(static_cast<text::Token>(t)))
      log::stream(out.push(tokenizer->decode({static_cast<text::Token>(t)})));
  };
  const std::optional<std::int32_t> end_of_text = eot ? std::optional<std::int32_t>(static_cast<std::int32_t>(*eot))
                                                      : std::nullopt;
  const int below = static_cast<int>(std::min<std::size_t>(tokenizer->vocab_size(), static_cast<std::size_t>(INT32_MAX)));
  if (deck.model.vocab_size > below && log::rank() <= 0)
    log::warning(fmt::format("generate: model.vocab_size = {} but the {} tokenizer (data.tokenizer) has {} tokens: only "
                             "those are sampled{}",
                             deck.model.vocab_size, tokenizer->name(), below,
                             deck.data.tokenizer == "bytes" ? " (for a GPT-2 model set data.tokenizer = \"gpt2\")" : ""));
  const Generation g = with_precision(deck.training.precision, [&](auto t) {
    return generate_tokens<decltype(t)>(deck, topo, checkpoint, context, o, end_of_text, below, on_token);
  });
  show_prompt();
  log::stream(out.finish() + "\n");
  // tokens/s of the tokens after the first (the first also runs the prompt's forward).
  const std::size_t n = g.tokens.size() + (g.stopped_at_end_of_text ? 1 : 0);
  const double rate = n > 1 && g.next_tokens_seconds > 0 ? static_cast<double>(n - 1) / g.next_tokens_seconds : 0.0;
  if (log::rank() <= 0) {
    std::fprintf(stderr,
                 "generate: %zu tokens%s (prompt %zu tokens, %s, %d context restart%s): first token %.3f s, then %.2f "
                 "tokens/s (%.4f s per token)\n",
                 g.tokens.size(), g.stopped_at_end_of_text ? ", stopped at <|endoftext|>" : "", prompt_tokens,
                 o.kv_cache ? fmt::format("KV cache of {:.2f} MiB per rank", g.kv_cache_bytes / 1048576.0).c_str()
                            : "full forward per token",
                 g.refills, g.refills == 1 ? "" : "s", g.first_token_seconds, rate, rate > 0 ? 1.0 / rate : 0.0);
    std::fprintf(stderr, "%s\n",
                 io::JsonObject()
                     .integer("generated_tokens", g.tokens.size())
                     .integer("prompt_tokens", prompt_tokens)
                     .boolean("kv_cache", o.kv_cache)
                     .integer("kv_cache_bytes_per_rank", g.kv_cache_bytes)
                     .boolean("stopped_at_end_of_text", g.stopped_at_end_of_text)
                     .integer("context_restarts", g.refills)
                     .number("first_token_seconds", g.first_token_seconds, io::digits(6))
                     .number("tokens_per_second", rate, io::digits(6))
                     .text()
                     .c_str());
    std::fflush(stderr);
  }
  return 0;
}

}  // namespace tptrain::driver

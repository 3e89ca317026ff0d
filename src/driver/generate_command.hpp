// `tptrain generate`: text sampled from a checkpoint. The prompt is encoded with the deck's
// tokenizer (data.tokenizer: "bytes" or "gpt2"), the sample decoded to UTF-8 and streamed
// (text/utf8_stream.hpp). By default every new token runs one row through the model against a
// key/value cache of the context (src/model/gpt_inference.hpp); kv_cache = false recomputes the
// full forward of the context window for every token (the reference the cache is tested against).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/deck.hpp"
#include "src/parallel/topology.hpp"

namespace tptrain::driver {

struct SampleOptions {
  std::string prompt;
  int tokens = 128;
  double temperature = 1.0;
  int top_k = 0;
  unsigned long long seed = 0;
  bool kv_cache = true;     // false: the full forward of the window for every token (--no-kv-cache)
  bool ignore_eos = false;  // true: <|endoftext|> does not end the sample (--ignore-eos)
};

// What generate_tokens made. Timings are wall-clock seconds on this rank.
struct Generation {
  std::vector<std::int32_t> tokens;  // the new tokens (without a final <|endoftext|>)
  bool stopped_at_end_of_text = false;
  int refills = 0;                   // times the context reached model.seq_length (see below)
  double first_token_seconds = 0;    // the prompt's forward and the first token
  double next_tokens_seconds = 0;    // every later token
  // This rank's key/value caches (2 × its layers × model.seq_length × kv_heads/tensor × head dim
  // × the element size; every stage holds as many layers); 0 without --kv-cache.
  std::int64_t kv_cache_bytes = 0;
};

// Continues `context` (token ids, the same on every rank, none >= model.vocab_size, at least
// one) by up to options.tokens tokens, sampled from the tokens below `sample_below` (the model's
// vocabulary, or fewer where the tokenizer has fewer tokens: an id without text is never drawn).
// Stops after `end_of_text` unless options.ignore_eos. on_token(t) runs on every rank for each
// new token. Every rank returns the same tokens.
//
// The context window: the model sees at most model.seq_length = S positions (the position
// embedding ends there). When the context would exceed S, the window restarts at the last S/2
// tokens (at least 1): the cache is refilled from them (one prefill), and the full forward sees
// the same window, so both paths give the same logits. Between restarts the window grows by
// one token per step.
template <class T>
Generation generate_tokens(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                           std::vector<std::int32_t> context, const SampleOptions& options,
                           std::optional<std::int32_t> end_of_text, int sample_below,
                           const std::function<void(std::int32_t)>& on_token = {});

// Streams the prompt and the sampled text to stdout (rank 0), with the model in the deck's
// training.precision, and a last report of tokens/s on stderr (text and one JSON line). Returns
// the process exit code (0, or 1 for bad input).
int run_generate(const io::Deck& deck, const parallel::Topology& topo, const std::string& checkpoint,
                 const SampleOptions& options);

}  // namespace tptrain::driver

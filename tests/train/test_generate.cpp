// Generation with a KV cache equals the full forward per token (src/driver/generate_command.hpp),
// for every preset of the block specification (gpt2; llama and qwen2 with rotary positions offset
// by the cache and grouped-query attention): greedy and seeded samples of a checkpoint, token for
// token, on one rank and on the layouts of the world (tensor, pipeline, data), with a context that passes model.seq_length several times (the
// window restarts at the last S/2 tokens on both paths).
#include <algorithm>
#include <set>
#include <vector>

#include "catch.hpp"
#include "src/driver/generate_command.hpp"
#include "src/checkpoint/model_checkpoint.hpp"
#include "tests/train/train_test_util.hpp"

using namespace tptrain;

namespace {

struct Layout {
  int tensor, pipeline, data;
};

// A prompt of 10 tokens and 30 new ones with seq_length 16: windows restart at context lengths
// 17, 26 and 35 (keeping 8 tokens each time).
// temperature 0: greedy (the tiny model's greedy sample repeats a token or two); 1: sampled with
// a seed, varied, the same draws on both paths as long as their logits agree.
driver::Generation greedy(const io::Deck& deck, const parallel::Topology& topo, const std::string& file, bool kv_cache,
                         std::optional<std::int32_t> end_of_text = std::nullopt, double temperature = 0) {
  driver::SampleOptions o;
  o.tokens = 30;
  o.temperature = temperature;
  o.seed = 2024;
  o.kv_cache = kv_cache;
  const std::vector<std::int32_t> prompt{'I', 't', ' ', 'i', 's', ' ', 'a', ' ', 't', 'r'};
  return driver::generate_tokens<float>(deck, topo, file, prompt, o, end_of_text, deck.model.vocab_size);
}

// The small pipeline deck with the block of `preset` (src/model/spec/block_spec.hpp); the rotary ones with
// grouped-query attention (8 query heads, 4 key/value heads: whole ones on up to 4 tensor ranks).
io::Deck preset_deck(const char* preset, int tensor, int pipeline, int data, const std::string& extra) {
  io::Deck deck = test::pipeline_deck(tensor, pipeline, data, 3, 8, extra);
  deck.model.architecture = preset;
  deck.model.take_preset_defaults();  // a deck built in code: the preset's choices, as the parser sets them
  if (deck.model.latent_attention()) {  // DeepSeek-V3: multi-head latent attention, its latent cached
    deck.model.q_lora_rank = 12;
    deck.model.kv_lora_rank = 10;
    deck.model.qk_nope_head_dim = 6;
    deck.model.qk_rope_head_dim = 4;
    deck.model.v_head_dim = 6;
  } else if (deck.model.position == "rope") {
    deck.model.heads = 8;
    deck.model.kv_heads = 4;
  }
  return deck;
}

}  // namespace

TEST_CASE("greedy generation with the KV cache equals the full forward, token for token", "[generate][mpi]") {
  std::size_t count = 0;
  const model::BlockPreset* presets = model::block_presets(count);
  for (std::size_t i = 0; i < count; ++i) {
  const char* preset = presets[i].name;
  INFO(preset);
  test::SharedTempDir dir;
  const std::string extra = "[checkpoint]\ndir = \"" + dir.path() + "\"\nkeep = 10\n";
  const io::Deck ref_deck = preset_deck(preset, 1, 1, 1, extra);
  if (test::world_rank() == 0) {  // a few steps on the test corpus: samples of a model, not of random weights
    parallel::Topology self(MPI_COMM_SELF, parallel::Layout{});
    train::TrainingRun run(ref_deck, self);
    for (int s = 0; s < 3; ++s) run.step(s);
    checkpoint::save_checkpoint(run.model(), ref_deck, self, 3, 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string file = checkpoint::checkpoint_path(dir.path(), 3);

  parallel::Topology self(MPI_COMM_SELF, parallel::Layout{});
  const driver::Generation full = greedy(ref_deck, self, file, false);
  const driver::Generation cached = greedy(ref_deck, self, file, true);
  REQUIRE(full.tokens.size() == 30);
  CHECK(full.refills == 3);
  CHECK(cached.refills == 3);
  CHECK(cached.tokens == full.tokens);
  const driver::Generation sampled = greedy(ref_deck, self, file, false, std::nullopt, 1.0);
  CHECK(std::set<std::int32_t>(sampled.tokens.begin(), sampled.tokens.end()).size() >= 8);  // could show a difference
  CHECK(greedy(ref_deck, self, file, true, std::nullopt, 1.0).tokens == sampled.tokens);

  // <|endoftext|> (here: whatever token greedy draws 4th) ends the sample before it, on both paths.
  const std::int32_t eot = full.tokens[3];
  const auto stop = std::find(full.tokens.begin(), full.tokens.end(), eot);
  const std::vector<std::int32_t> before(full.tokens.begin(), stop);
  for (bool kv : {false, true}) {
    const driver::Generation g = greedy(ref_deck, self, file, kv, eot);
    CHECK(g.stopped_at_end_of_text);
    CHECK(g.tokens == before);
  }

  std::vector<Layout> layouts;
  for (const Layout& l : std::vector<Layout>{{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 1}, {1, 4, 1}, {4, 1, 1}})
    if (l.tensor * l.pipeline * l.data == test::world_size()) layouts.push_back(l);
  for (const Layout& l : layouts) {
    INFO("tensor " << l.tensor << " x pipeline " << l.pipeline << " x data " << l.data);
    const io::Deck deck = preset_deck(preset, l.tensor, l.pipeline, l.data, extra);
    parallel::Topology topo(MPI_COMM_WORLD, test::layout_of(deck));
    for (bool kv : {false, true}) {
      INFO((kv ? "KV cache" : "full forward"));
      const driver::Generation g = greedy(deck, topo, file, kv);
      CHECK(g.tokens == full.tokens);
      CHECK(g.refills == 3);
      CHECK(greedy(deck, topo, file, kv, std::nullopt, 1.0).tokens == sampled.tokens);
    }
  }
  }
}

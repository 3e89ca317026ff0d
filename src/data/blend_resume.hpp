// A resume's data.train against the blend its checkpoint records (io/checkpoint_blend.hpp):
// what changed, entry by entry, and the sequences already drawn, carried over to the deck's
// entries, so that data_share and data_epochs go on counting what was drawn (the checkpoint's
// counts) plus what the deck's blend draws from the checkpoint's step on.
//
// Entries are matched by path, the first unmatched entry of that path; then an entry of the
// deck left without a match takes the checkpoint's unmatched entry at its own index (a moved or
// renamed file: "path a -> b"); the rest are added (deck) or removed (checkpoint). A matched
// entry is a change when its index, tokens or weight differ: each of them changes the datasets
// that the (seed, step) draws pick from the checkpoint's step on, or the offsets within one
// (src/data/batch_sampler.hpp). Weights are compared as written: 3:4 and 6:8 are a change in
// the deck, though not in the draws.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint_blend.hpp"

namespace tptrain::data {

struct BlendResume {
  // One line per change, in the deck's order, then the removed entries:
  //   data.train[1] "/d/b.txt": weight 4 -> 99
  //   data.train[0] "/d/a.txt": 4096 -> 8192 tokens
  //   data.train[1] "/d/b.txt": was data.train[0]
  //   data.train[0] "/e/a.txt": path was "/d/a.txt"
  //   data.train[2] "/d/c.txt": added (weight 1, 512 tokens)
  //   "/d/z.txt" (data.train[1] of the checkpoint, weight 2, 300 tokens): removed (18 sequences were drawn from it)
  // Empty: the same blend.
  std::vector<std::string> changes;
  // Per entry of the deck's blend: the sequences the checkpoint's steps drew from it (0 when added).
  std::vector<std::int64_t> drawn;
  // Every sequence the checkpoint's steps drew, from removed entries too.
  std::int64_t sequences = 0;
};

// `saved`: the checkpoint's record (not empty); `now`: the deck's blend (DataBlend::record()).
// `key` names the entries in the lines ("data.train").
BlendResume resume_blend(const io::BlendRecord& saved, const io::BlendRecord& now, const std::string& key);

}  // namespace tptrain::data

// The layout a deck's [parallel] section describes, rank order included: what every command and
// test that builds a Topology from a deck passes it.
#pragma once

#include "io/deck.hpp"
#include "src/parallel/topology_rank_map.hpp"

namespace tptrain::parallel {

inline Layout layout_of(const io::Deck& deck) {
  return Layout{deck.parallel.tensor, deck.parallel.pipeline, deck.parallel.data,
                rank_order_from_name(deck.parallel.order)};
}

}  // namespace tptrain::parallel

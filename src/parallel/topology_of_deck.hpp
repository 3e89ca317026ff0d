// The layout a deck's [parallel] section describes, rank order included, and its backend
// choices: what every command and test that builds a Topology from a deck passes it.
#pragma once

#include "io/deck.hpp"
#include "src/parallel/communicator.hpp"
#include "src/parallel/topology_rank_map.hpp"

namespace tptrain::parallel {

inline Layout layout_of(const io::Deck& deck) {
  return Layout{deck.parallel.tensor, deck.parallel.pipeline, deck.parallel.data,
                rank_order_from_name(deck.parallel.order), deck.parallel.context,
                deck.parallel.expert, deck.parallel.shard_group};
}

// The backend choices of a deck's [parallel] section (the deck has validated them).
inline CommunicatorOptions communicator_options_of(const io::Deck& deck) {
  CommunicatorOptions o;
  o.lanes = deck.parallel.nccl_pipeline_lanes;
  const std::string& m = deck.parallel.mpi_device_memory;
  o.mpi_device_memory = m == "on"    ? CommunicatorOptions::DeviceMemory::yes
                        : m == "off" ? CommunicatorOptions::DeviceMemory::no
                                     : CommunicatorOptions::DeviceMemory::ask;
  return o;
}

}  // namespace tptrain::parallel

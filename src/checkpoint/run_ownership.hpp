// Which run the files of run.dir and checkpoint.dir belong to (docs/design.md, "Run outputs"):
// a run never replaces or rotates away files that another run wrote.
//
// Every checkpoint carries its run's id, the int64 attribute /train/run_id: a random positive
// number drawn when a run starts from step 0, and kept by every run that resumes from one of its
// checkpoints. Checkpoints of an older tptrain have none (id 0).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/deck.hpp"

namespace tptrain::checkpoint {

inline constexpr const char* kRunIdAttribute = "run_id";

// The run a process trains: its id, and whether checkpoints without an id count as its own (it
// resumed from one: an older tptrain's run continued).
struct RunIdentity {
  std::int64_t id = 0;
  bool owns_unlabelled = false;
  bool owns(std::int64_t checkpoint_run_id) const {
    return checkpoint_run_id == id || (checkpoint_run_id == 0 && owns_unlabelled);
  }
};

// Collective over `comm`: a new run's id, drawn by rank 0 and the same on every rank.
RunIdentity new_run_identity(MPI_Comm comm);
// The run a checkpoint's /train attributes belong to; a checkpoint without an id gets a new id
// that owns the unlabelled checkpoints. Collective (the draw), the same on every rank.
RunIdentity resumed_run_identity(MPI_Comm comm, const std::map<std::string, std::int64_t>& train);

// The files an earlier run left where a new run (one that starts from step 0) writes: complete
// checkpoints of checkpoint.dir, and run.dir's metrics.jsonl when it is not empty.
struct EarlierRunFiles {
  std::vector<std::string> checkpoints;  // oldest first
  std::string metrics;                   // "" when there is none
  bool empty() const { return checkpoints.empty() && metrics.empty(); }
};
EarlierRunFiles earlier_run_files(const io::Deck& deck);

// Rank 0 of a new run, before step 1: without checkpoint.overwrite an earlier run's files are a
// refusal (std::runtime_error naming them and the ways out); with it they are deleted, and said
// so. A training.init_from among them is refused either way: deleting it would lose it, and
// keeping it would leave a stranger's newer checkpoint for a later resume to pick. With
// checkpoint.resume = true and only a metrics.jsonl (a start that died before its first
// checkpoint, requeued), that file is renamed metrics.jsonl.<UTC time> and the run goes on.
void claim_run_directories(const io::Deck& deck);

}  // namespace tptrain::checkpoint

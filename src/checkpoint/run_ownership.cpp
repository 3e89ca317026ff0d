#include "src/checkpoint/run_ownership.hpp"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <system_error>

#include "base/mpi_check.hpp"
#include "io/metrics_writer.hpp"
#include "io/path_text.hpp"
#include "src/util/log.hpp"
#include "src/checkpoint/model_checkpoint.hpp"

namespace tptrain::checkpoint {

namespace fs = std::filesystem;

namespace {

std::int64_t draw_run_id(MPI_Comm comm) {
  int rank = 0;
  TPTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::int64_t id = 0;
  if (rank == 0) {
    // random_device alone may be a fixed sequence on some platforms: the clock is mixed in.
    std::random_device device;
    std::seed_seq seed{device(), device(), static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()),
                       static_cast<unsigned>(std::chrono::system_clock::now().time_since_epoch().count())};
    std::mt19937_64 engine(seed);
    while (id <= 0) id = static_cast<std::int64_t>(engine() >> 1);  // positive: 0 means "none"
  }
  TPTRAIN_MPI_CHECK(MPI_Bcast(&id, 1, MPI_INT64_T, 0, comm));
  return id;
}

// "a, b and 3 more": the first names of a list, for a message.
std::string first_names(const std::vector<std::string>& paths) {
  std::string out;
  const std::size_t shown = std::min<std::size_t>(paths.size(), 3);
  for (std::size_t i = 0; i < shown; ++i)
    out += (i == 0 ? "" : i + 1 == shown && shown == paths.size() ? " and " : ", ") +
           io::display_path(fs::path(paths[i]).filename().string());
  if (paths.size() > shown) out += fmt::format(" and {} more", paths.size() - shown);
  return out;
}

// 20261202T133100Z: when a file was set aside, in its name.
std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &utc);
  return text;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

}  // namespace

RunIdentity new_run_identity(MPI_Comm comm) { return RunIdentity{draw_run_id(comm), false}; }

RunIdentity resumed_run_identity(MPI_Comm comm, const std::map<std::string, std::int64_t>& train) {
  const auto id = train.find(kRunIdAttribute);
  if (id != train.end() && id->second > 0) return RunIdentity{id->second, false};
  return RunIdentity{draw_run_id(comm), true};
}

EarlierRunFiles earlier_run_files(const io::Deck& deck) {
  EarlierRunFiles files;
  files.checkpoints = complete_checkpoints(deck.checkpoint.dir);
  const fs::path metrics = fs::path(deck.run.dir) / io::MetricsWriter::kFileName;
  // Records are in a regular file; anything else by that name (a FIFO, a folder) is the metrics
  // writer's refusal to make, with its own reason.
  std::error_code ec;
  if (fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0 && !ec) files.metrics = metrics.string();
  return files;
}

void claim_run_directories(const io::Deck& deck) {
  const EarlierRunFiles earlier = earlier_run_files(deck);
  if (earlier.empty()) return;
  std::vector<std::string> what;
  if (!earlier.checkpoints.empty())
    what.push_back(fmt::format("checkpoint.dir = {} holds {} checkpoint{} of an earlier run ({})",
                               io::display_path(deck.checkpoint.dir), earlier.checkpoints.size(),
                               earlier.checkpoints.size() == 1 ? "" : "s", first_names(earlier.checkpoints)));
  if (!earlier.metrics.empty())
    what.push_back(fmt::format("run.dir = {} holds the {} of an earlier run", io::display_path(deck.run.dir),
                               io::MetricsWriter::kFileName));
  const std::string found = what.size() == 1 ? what[0] : what[0] + ", and " + what[1];
  const std::string& init = deck.training.init_from;
  for (const std::string& path : earlier.checkpoints)
    if (!init.empty() && same_file(init, path))
      throw std::runtime_error(fmt::format(
          "{}; training.init_from = {} is one of them: a new run there would {}. Copy it out of checkpoint.dir "
          "and point training.init_from at the copy, or set another checkpoint.dir",
          found, io::display_path(init),
          deck.checkpoint.overwrite ? "delete it (checkpoint.overwrite = true)" : "replace it or rotate it away"));
  // checkpoint.resume = true, no checkpoint, yet a metrics.jsonl: a start of this deck that died
  // before its first checkpoint (a requeued job killed hard). Its records are set aside, not
  // replaced, so that the requeue runs and nothing is lost.
  if (deck.checkpoint.resume && earlier.checkpoints.empty() && !deck.checkpoint.overwrite) {
    const std::string kept = earlier.metrics + "." + utc_stamp();
    std::error_code ec;
    fs::rename(earlier.metrics, kept, ec);
    if (ec)
      throw std::runtime_error("cannot keep " + io::display_path(earlier.metrics) + " aside as " +
                               io::display_path(kept) + ": " + ec.message());
    log::warning(fmt::format("checkpoint.resume = true, but checkpoint.dir = {} holds no checkpoint to resume from: the "
                             "{} of that earlier start is kept as {}, and this run starts from step 0",
                             io::display_path(deck.checkpoint.dir), io::MetricsWriter::kFileName,
                             io::display_path(kept)));
    return;
  }
  if (!deck.checkpoint.overwrite)
    throw std::runtime_error(fmt::format(
        "{}; this run starts from step 0 (checkpoint.resume = false) and would replace its files or rotate them "
        "away. Continue that run with checkpoint.resume = true, give this run other folders (run.dir, "
        "checkpoint.dir), or delete them and start anew with checkpoint.overwrite = true (tptrain train --fresh)",
        found));
  std::vector<std::string> doomed = earlier.checkpoints;
  if (!earlier.metrics.empty()) doomed.push_back(earlier.metrics);
  for (const std::string& path : doomed) {
    std::error_code ec;
    fs::remove(path, ec);
    if (ec) throw std::runtime_error("checkpoint.overwrite = true: cannot delete " + io::display_path(path) + ": " + ec.message());
  }
  log::warning(fmt::format("checkpoint.overwrite = true: {}: deleted, this run starts anew", found));
}

}  // namespace tptrain::checkpoint

// `tptrain tokenize INPUT... --out DIR`: text files and JSON Lines -> llm.c token shards, split
// over the ranks of mpiexec. MPI only (no Kokkos, no device).
//
// The input stream is cut into segments of about --segment-bytes at points that change no token
// (src/data/corpus.hpp). Round r gives segment r*P + k to rank k; after each round the ranks
// learn each other's token counts, so every rank knows where its tokens start in the output
// stream and writes them there itself (src/data/shard_writer.hpp). The shards are written into
// DIR/.tokenize-partial and renamed into DIR, headers written, only when every rank succeeded:
// a failed run leaves no shard behind. Errors are agreed on after every phase (agreement.hpp),
// and in each round the lowest failing rank holds the first error of the stream, so the message
// is the same whatever the number of ranks.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <regex>
#include <sys/resource.h>

#include "io/deck_path.hpp"
#include "io/path_text.hpp"
#include "src/data/corpus.hpp"
#include "src/data/segment_tokens.hpp"
#include "src/data/shard_writer.hpp"
#include "src/data/token_dataset.hpp"
#include "src/driver/commands.hpp"
#include "src/driver/mpi_session.hpp"
#include "src/util/log.hpp"
#include "base/agreement.hpp"
#include "base/mpi_check.hpp"
#include "text/gpt2_files.hpp"
#include "text/tiktoken_encoding.hpp"
#include "text/tokenizer.hpp"

namespace tptrain::driver {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPartialDir = ".tokenize-partial";
constexpr double kProgressSeconds = 10;

// Every rank runs f; all agree; every rank throws the same AgreedError if any rank failed.
template <class F>
void phase(F&& f) {
  parallel::on_every_rank(MPI_COMM_WORLD, std::forward<F>(f));
}

std::unique_ptr<text::Tokenizer> load_tokenizer(const TokenizeOptions& o) {
  if (o.tokenizer == "gpt2") {
    const std::string dir = text::gpt2_dir_or_default(o.tokenizer_dir);
    if (dir.empty())
      throw data::DataError("no folder for GPT-2's vocabulary: neither XDG_CACHE_HOME nor HOME is set; use --tokenizer-dir");
    std::string missing;
    for (const std::string& path : text::gpt2_file_paths(dir))
      if (const std::string problem = io::regular_file_problem(path); !problem.empty())
        missing += (missing.empty() ? "" : " and ") + io::display_path(path) + " " + problem;
    if (!missing.empty())
      throw data::DataError("GPT-2's vocabulary: " + missing + "; " + text::gpt2_files_hint() +
                            (o.tokenizer_dir.empty() ? ", or name another folder with --tokenizer-dir" : ""));
  } else if (text::named_tiktoken_ranks(o.tokenizer)) {
    const std::string path = text::tiktoken_ranks_path(o.tokenizer, o.tokenizer_dir);
    if (const std::string problem = io::regular_file_problem(path); !problem.empty())
      throw data::DataError(o.tokenizer + "'s rank file " + io::display_path(path) + " " + problem + "; " +
                            text::tiktoken_files_hint() +
                            (o.tokenizer_dir.empty() ? ", or name another folder with --tokenizer-dir" : ""));
  }
  return text::make_tokenizer(o.tokenizer, o.tokenizer_dir, o.tokenizer_pattern);
}

// Rank 0: DIR exists, holds no shards (tokenize never overwrites), and has an empty partial folder.
void prepare_output(const std::string& out) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw data::DataError("--out " + io::display_path(out) + ": cannot create the folder: " + ec.message());
  if (!fs::is_directory(out)) throw data::DataError("--out " + io::display_path(out) + " is not a folder");
  static const std::regex shard(R"((train|valid)_[0-9]+\.bin)");
  std::vector<std::string> shards;
  for (const auto& entry : fs::directory_iterator(out, ec))
    if (std::regex_match(entry.path().filename().string(), shard)) shards.push_back(entry.path().filename().string());
  if (ec) throw data::DataError("--out " + io::display_path(out) + ": cannot list the folder: " + ec.message());
  if (!shards.empty()) {
    std::sort(shards.begin(), shards.end());
    throw data::DataError("--out " + io::display_path(out) + " already holds " + shards.front() +
                          (shards.size() > 1 ? fmt::format(" and {} more shard{}", shards.size() - 1, shards.size() > 2 ? "s" : "") : "") +
                          ": tokenize does not overwrite shards; remove them or choose another folder");
  }
  const fs::path partial = fs::path(out) / kPartialDir;
  fs::remove_all(partial, ec);  // what a killed run left
  if (!fs::create_directory(partial, ec) || ec)
    throw data::DataError("--out " + io::display_path(out) + ": cannot create " + kPartialDir + " in it: " +
                          (ec ? ec.message() : std::string("it exists")));
}

// Rank 0, once every token is written: headers, then each shard renamed into DIR.
void publish(const std::string& out, const data::ShardLayout& layout, std::uint64_t total) {
  const fs::path partial = fs::path(out) / kPartialDir;
  data::write_shard_headers(partial.string(), layout, total);
  for (const data::ShardFile& shard : data::shard_files(layout, total)) {
    std::error_code ec;
    fs::rename(partial / shard.name, fs::path(out) / shard.name, ec);
    if (ec) throw data::DataError("cannot move " + shard.name + " into --out " + io::display_path(out) + ": " + ec.message());
  }
  fs::remove_all(partial);
}

// User and system CPU time of this process.
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::string megabytes(std::uint64_t bytes) { return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6); }

std::string shard_summary(const std::vector<data::ShardFile>& shards, const char* kind) {
  std::uint64_t tokens = 0;
  std::vector<const data::ShardFile*> mine;
  for (const auto& s : shards)
    if (s.name.rfind(kind, 0) == 0) mine.push_back(&s), tokens += s.tokens;
  if (mine.empty()) return fmt::format("no {} shard", kind);
  return fmt::format("{} {} token{} in {}{}", tokens, kind, tokens == 1 ? "" : "s", mine.front()->name,
                     mine.size() > 1 ? " .. " + mine.back()->name : std::string());
}

// `created_partial`: whether this run made DIR/.tokenize-partial (and may remove it on failure).
int run_tokenize(const TokenizeOptions& o, const MpiSession& mpi, bool& created_partial) {
  using clock = std::chrono::steady_clock;
  std::optional<data::Corpus> corpus;
  std::unique_ptr<text::Tokenizer> tokenizer;
  data::ShardVocabulary vocabulary;  // recorded in every shard's header
  phase([&] {
    corpus.emplace(o.inputs);
    tokenizer = load_tokenizer(o);
    vocabulary = data::shard_vocabulary(tokenizer->name(), tokenizer->vocab_size());
  });
  phase([&] {
    if (mpi.rank == 0) prepare_output(o.out);
  });
  created_partial = true;
  const std::string partial = (fs::path(o.out) / kPartialDir).string();
  // Version 1 (uint16, llm.c's own) while the ids fit, version 2 (uint32) above 65536 ids.
  const data::ShardLayout layout{o.valid_tokens, o.shard_tokens, vocabulary,
                                 data::shard_version_for(tokenizer->vocab_size())};
  std::optional<data::ShardWriter> writer;
  phase([&] { writer.emplace(partial, layout); });

  // Timed from here: tokenizing and writing, not loading the vocabulary.
  const auto started = clock::now();
  const double cpu_started = cpu_seconds();
  const std::uint64_t total_bytes = corpus->total_bytes();
  const std::uint64_t segments = (total_bytes + o.segment_bytes - 1) / o.segment_bytes;
  const auto ranks = static_cast<std::uint64_t>(mpi.size);
  std::vector<std::uint64_t> documents_per_file(corpus->files().size(), 0);
  std::uint64_t written = 0, documents = 0, empty_documents = 0;
  auto last_progress = started;
  for (std::uint64_t first = 0; first < segments; first += ranks) {
    const std::uint64_t j = first + static_cast<std::uint64_t>(mpi.rank);
    data::SegmentTokens segment;
    phase([&] {
      if (j >= segments) return;
      const std::uint64_t begin = corpus->cut_at_or_after(j * o.segment_bytes);
      const std::uint64_t end = corpus->cut_at_or_after((j + 1) * o.segment_bytes);
      segment = data::tokenize_segment(*corpus, begin, end, *tokenizer, documents_per_file);
    });
    std::uint64_t mine = segment.tokens.size();
    std::vector<std::uint64_t> counts(ranks);
    TPTRAIN_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_UINT64_T, counts.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD));
    const std::uint64_t before = std::accumulate(counts.begin(), counts.begin() + mpi.rank, std::uint64_t{0});
    phase([&] { writer->write(written + before, segment.tokens.data(), segment.tokens.size()); });
    written += std::accumulate(counts.begin(), counts.end(), std::uint64_t{0});
    documents += segment.documents;
    empty_documents += segment.empty_documents;
    const auto now = clock::now();
    if (mpi.rank == 0 && std::chrono::duration<double>(now - last_progress).count() >= kProgressSeconds) {
      last_progress = now;
      const std::uint64_t done = std::min(total_bytes, (first + ranks) * o.segment_bytes);
      const double seconds = std::chrono::duration<double>(now - started).count();
      log::infof("tokenize: {:.0f}% ({} of {}), {} tokens, {:.2f} MB/s", 100.0 * done / total_bytes, megabytes(done),
                 megabytes(total_bytes), written, done / 1e6 / seconds);
    }
  }
  phase([&] { writer->close(); });

  std::vector<std::uint64_t> sums(documents_per_file.size() + 2);
  {
    std::vector<std::uint64_t> local(documents_per_file);
    local.push_back(documents);
    local.push_back(empty_documents);
    TPTRAIN_MPI_CHECK(MPI_Allreduce(local.data(), sums.data(), static_cast<int>(local.size()), MPI_UINT64_T, MPI_SUM,
                                    MPI_COMM_WORLD));
  }
  documents = sums[sums.size() - 2];
  empty_documents = sums.back();
  phase([&] {
    std::string problems;
    for (std::size_t f = 0; f < corpus->files().size(); ++f)
      if (sums[f] == 0)
        problems += (problems.empty() ? "" : "\n") + std::string("input '") + io::display_path(corpus->files()[f].path) +
                    "' holds no document: every line is blank or has an empty \"text\"";
    if (!problems.empty()) throw data::DataError(problems);
    corpus->check_unchanged();  // every rank: the files it read are the files it opened
    if (written <= o.valid_tokens)
      throw data::DataError(fmt::format("the inputs hold {} tokens, and --valid-tokens {} leaves none for training",
                                        written, o.valid_tokens));
    if (mpi.rank == 0) publish(o.out, layout, written);
  });

  const double seconds = std::chrono::duration<double>(clock::now() - started).count();
  double cpu = cpu_seconds() - cpu_started;
  TPTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &cpu, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  const auto shards = data::shard_files(layout, written);
  // Per CPU second, the rate of one core whatever else the machine runs (a shared node, more
  // ranks than cores); the wall-clock rate is what the run took.
  log::infof("tokenize: {} document{}{} from {} file{}, {} -> {} {} tokens in {:.2f} s on {} rank{}: {:.2f} MB/s, "
             "{:.2f} MB per CPU second",
             documents, documents == 1 ? "" : "s",
             empty_documents ? fmt::format(" ({} empty one{} skipped)", empty_documents, empty_documents == 1 ? "" : "s")
                             : std::string(),
             corpus->files().size(), corpus->files().size() == 1 ? "" : "s", megabytes(total_bytes), written,
             tokenizer->name(), seconds, mpi.size, mpi.size == 1 ? "" : "s", total_bytes / 1e6 / seconds,
             total_bytes / 1e6 / std::max(cpu, 1e-9));
  log::infof("tokenize: {}; {} (in {})", shard_summary(shards, "train"), shard_summary(shards, "valid"),
             io::display_path(o.out));
  return 0;
}

}  // namespace

int tokenize(const TokenizeOptions& o) {
  MpiSession mpi;
  bool created_partial = false;
  return with_agreed_failures([&] { return run_tokenize(o, mpi, created_partial); },
                              [&] {
                                std::error_code ec;  // no half-written shard survives
                                if (created_partial) fs::remove_all(fs::path(o.out) / kPartialDir, ec);
                              });
}

}  // namespace tptrain::driver

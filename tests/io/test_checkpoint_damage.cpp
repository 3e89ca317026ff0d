// Damaged checkpoints (io/checkpoint_schema.hpp, io/read_watchdog.hpp): a valid small checkpoint
// is written, then damaged on purpose (links deleted or renamed, attributes deleted or replaced,
// a corrupt global heap that makes libhdf5 loop, bytes flipped all over the metadata), and
// tptrain inspect and read_checkpoint must always end, in bounded time, with a clean error, a
// checksum error, or (a flip that changed nothing that matters) the original contents. Each case
// runs in a forked child so that a crash or a hang is caught and named instead of ending the
// suite. Also: a write that runs out of space (RLIMIT_FSIZE) or permission.
#include <hdf5.h>
#include <mpi.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cfenv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "tests/test_helpers.hpp"
#include "io/checkpoint_file.hpp"
#include "io/read_watchdog.hpp"
#include "src/driver/inspect.hpp"
#include "tests/io/checkpoint_tensors.hpp"
#include "tests/mpi_test_util.hpp"

using namespace tptrain::io;
using tptrain::driver::inspect_checkpoint;
namespace fs = std::filesystem;

namespace {

using tptrain::test::Tensor;

std::vector<Tensor> sample_tensors() {
  std::vector<Tensor> ts = {{"model/embedding/word", {16, 8}, {}},
                            {"model/layers/0/mlp/fc/weight", {8, 4}, {}},
                            {"model/ln_f/bias", {8}, {}},
                            {"optimizer/exp_avg/ln_f/bias", {8}, {}}};
  std::uint64_t k = 0;
  for (Tensor& t : ts) {
    std::uint64_t n = 1;
    for (auto d : t.shape) n *= d;
    for (std::uint64_t i = 0; i < n; ++i)
      t.values.push_back(static_cast<float>(static_cast<double>((++k * 37) % 101) / 64.0 - 0.7));
  }
  return ts;
}

CheckpointMeta sample_meta() {
  CheckpointMeta m;
  m.step = 4;
  m.tokens_seen = 256;
  m.deck = "[model]\nlayers = 1\nhidden = 8\n";
  m.tp = 1;
  m.train = {{"step", 4}, {"seed", 1234}, {"data_step", 4}};
  return m;
}

// This rank holds every tensor whole.
std::vector<TensorShard> shards(std::vector<Tensor>& ts) { return tptrain::test::row_shards(ts); }

// Written by this rank alone (MPI_COMM_SELF): the damage tests are serial.
void write_sample(const std::string& path) {
  std::vector<Tensor> ts = sample_tensors();
  write_checkpoint(MPI_COMM_SELF, path, sample_meta(), shards(ts));
}

using tptrain::test::file_bytes;
using tptrain::test::put_bytes;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// What a child reported about one damaged file.
struct Outcome {
  enum Kind { kOk, kCleanError, kChecksumError, kCrash, kHang, kUndetected } kind = kOk;
  int inspect_rc = -1;
  std::string text;  // inspect's output and read_checkpoint's message (or the signal)
};

// Runs inspect and read_checkpoint (with verification, every tensor) on `path` in a forked child
// with a metadata time limit of `watchdog_s`; the parent kills it after `limit_s`.
Outcome examine(const std::string& path, double watchdog_s, double limit_s) {
  const std::string report = path + ".report";
  const pid_t pid = ::fork();
  if (pid == 0) {
    // A flipped mantissa can make a signalling NaN; the suite traps FE_INVALID, a user does not.
    fedisableexcept(FE_ALL_EXCEPT);
    tptrain::io::ReadWatchdog::set_configured_seconds(watchdog_s);  // as the driver does from the deck
    std::ostringstream out, err;
    // What the sample's model holds (the driver derives this from the checkpoint's deck).
    const tptrain::io::ExpectedDatasets expected = [](const std::string&) {
      std::map<std::string, std::vector<std::uint64_t>> names;
      for (const Tensor& t : sample_tensors()) names[t.name] = t.shape;
      return names;
    };
    const int rc = inspect_checkpoint(path, out, err, expected);
    std::string text = out.str() + err.str() + "\n--- read_checkpoint: ";
    int read = 0;
    try {
      std::vector<Tensor> ts = sample_tensors();
      for (Tensor& t : ts) std::fill(t.values.begin(), t.values.end(), -1.0f);
      const CheckpointMeta m = read_checkpoint(MPI_COMM_SELF, path, shards(ts));
      const CheckpointMeta want = sample_meta();
      const std::vector<Tensor> orig = sample_tensors();
      bool same = m.step == want.step && m.tokens_seen == want.tokens_seen &&
                  m.deck == want.deck && m.train == want.train && m.tp == want.tp;
      for (std::size_t i = 0; i < ts.size(); ++i)
        same = same && std::memcmp(ts[i].values.data(), orig[i].values.data(),
                                   4 * orig[i].values.size()) == 0;
      text += same ? "ok, identical" : "ok, BUT DIFFERENT CONTENTS";
      read = same ? 0 : 3;
    } catch (const CheckpointError& e) {
      text += e.what();
      read = contains(e.what(), "checksum mismatch") ? 1 : 2;
    } catch (const std::exception& e) {
      text += std::string("unexpected exception: ") + e.what();
      read = 4;
    }
    put_bytes(report, text);
    ::_exit(100 + rc * 10 + read);  // 1 is the watchdog's
  }
  REQUIRE(pid > 0);
  Outcome o;
  int status = 0;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(limit_s)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      o.kind = Outcome::kHang;
      o.text = "did not end in " + std::to_string(limit_s) + " s";
      return o;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  o.text = file_bytes(report);
  fs::remove(report);
  if (WIFSIGNALED(status)) {
    o.kind = Outcome::kCrash;
    o.text = "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
             strsignal(WTERMSIG(status)) + ")\n" + o.text;
    return o;
  }
  const int code = WEXITSTATUS(status);
  if (code == 1) {  // the watchdog's exit
    o.inspect_rc = 1;
    o.kind = Outcome::kCleanError;
    return o;
  }
  if (code < 100) {
    o.kind = Outcome::kCrash;
    o.text = "unexpected exit status " + std::to_string(code) + "\n" + o.text;
    return o;
  }
  o.inspect_rc = (code - 100) / 10;
  const int read = (code - 100) % 10;
  if (o.inspect_rc == 1 && read == 0) {  // inspect stricter than a load: still an error
    o.kind = Outcome::kCleanError;
    return o;
  }
  if (read == 4 || o.inspect_rc > 1) {
    o.kind = Outcome::kCrash;
    o.text = "unexpected result (inspect " + std::to_string(o.inspect_rc) + ", read " +
             std::to_string(read) + ")\n" + o.text;
    return o;
  }
  if (read == 3 || (o.inspect_rc == 0) != (read == 0)) {
    o.kind = Outcome::kUndetected;
    o.text = "undetected damage (inspect " + std::to_string(o.inspect_rc) + ", read " +
             std::to_string(read) + ")\n" + o.text;
    return o;
  }
  o.kind = read == 0 ? Outcome::kOk : read == 1 ? Outcome::kChecksumError : Outcome::kCleanError;
  return o;
}

// Opens a copy of the sample read-write and applies `damage`.
std::string damaged_copy(const std::string& good, const std::string& name,
                         const std::function<void(hid_t)>& damage) {
  const std::string path = (fs::path(good).parent_path() / (name + ".h5")).string();
  fs::copy_file(good, path, fs::copy_options::overwrite_existing);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  damage(f);
  REQUIRE(H5Fclose(f) >= 0);
  return path;
}

void replace_with_string_attr(hid_t loc, const char* name, const char* text) {
  H5Adelete(loc, name);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, std::strlen(text) + 1);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  CHECK(H5Awrite(a, type, text) >= 0);
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(type);
}

void replace_with_int_attr(hid_t loc, const char* name, hid_t file_type, long long v) {
  H5Adelete(loc, name);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(loc, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
  CHECK(H5Awrite(a, H5T_NATIVE_LLONG, &v) >= 0);
  H5Aclose(a);
  H5Sclose(space);
}

// [offset, offset + size) of every dataset's contiguous data: the rest of the file is metadata.
std::vector<std::pair<std::uint64_t, std::uint64_t>> data_ranges(const std::string& path) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  for (const Tensor& t : sample_tensors()) {
    const hid_t d = H5Dopen2(f, t.name.c_str(), H5P_DEFAULT);
    ranges.emplace_back(H5Dget_offset(d), H5Dget_storage_size(d));
    H5Dclose(d);
  }
  H5Fclose(f);
  return ranges;
}

}  // namespace

TEST_CASE("damaged checkpoint metadata is reported, never accepted", "[io][checkpoint][damage]") {
  if (tptrain::test::world_rank() != 0) return;
  const fs::path dir = fs::temp_directory_path() /
                       ("tptrain_damage_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string good = (dir / "good.h5").string();
  write_sample(good);
  {
    const Outcome o = examine(good, 5, 30);
    INFO(o.text);
    REQUIRE(o.kind == Outcome::kOk);
  }

  struct Case {
    const char* name;
    std::function<void(hid_t)> damage;
    const char* expect;  // in inspect's output and read_checkpoint's message
  };
  const std::vector<Case> cases = {
      {"no_train", [](hid_t f) { H5Ldelete(f, "train", H5P_DEFAULT); },
       "the checkpoint has no /train group"},
      {"train_renamed",
       [](hid_t f) { H5Lmove(f, "train", f, "training", H5P_DEFAULT, H5P_DEFAULT); },
       "the checkpoint has no /train group"},
      {"no_step", [](hid_t f) { H5Adelete(f, "step"); }, "the checkpoint has no step attribute"},
      {"no_deck", [](hid_t f) { H5Adelete(f, "deck"); }, "the checkpoint has no deck attribute"},
      {"format_version_string",
       [](hid_t f) { replace_with_string_attr(f, "format_version", "1"); },
       "attribute format_version is not a single integer"},
      {"format_wrong", [](hid_t f) { replace_with_string_attr(f, "format", "other"); },
       "not a tptrain checkpoint"},
      {"tp_zero", [](hid_t f) { replace_with_int_attr(f, "tp", H5T_STD_I32LE, 0); },
       "attribute tp = 0 is out of range"},
      {"train_not_integer",
       [](hid_t f) {
         const hid_t g = H5Gopen2(f, "train", H5P_DEFAULT);
         replace_with_string_attr(g, "seed", "1234");
         H5Gclose(g);
       },
       "attribute /train/seed is not a single integer"},
      {"checksum_deleted",
       [](hid_t f) {
         const hid_t d = H5Dopen2(f, "model/ln_f/bias", H5P_DEFAULT);
         H5Adelete(d, kChecksumAttribute);
         H5Dclose(d);
       },
       "model/ln_f/bias: has no checksum_splitmix64_sum attribute"},
      {"checksum_signed",
       [](hid_t f) {
         const hid_t d = H5Dopen2(f, "model/ln_f/bias", H5P_DEFAULT);
         replace_with_int_attr(d, kChecksumAttribute, H5T_STD_I64LE, 5);
         H5Dclose(d);
       },
       "is not an unsigned integer"},
      {"dataset_int32",
       [](hid_t f) {
         H5Ldelete(f, "model/ln_f/bias", H5P_DEFAULT);
         const hsize_t n = 8;
         const hid_t space = H5Screate_simple(1, &n, nullptr);
         const hid_t d = H5Dcreate2(f, "model/ln_f/bias", H5T_STD_I32LE, space, H5P_DEFAULT,
                                    H5P_DEFAULT, H5P_DEFAULT);
         H5Dclose(d);
         H5Sclose(space);
       },
       "model/ln_f/bias: checkpoint holds integer data, expected float32"},
      {"optimizer_no_step",
       [](hid_t f) {
         const hid_t g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
         H5Adelete(g, "step");
         H5Gclose(g);
       },
       "optimizer: the group has no step attribute"},
  };
  for (const Case& c : cases) {
    const std::string path = damaged_copy(good, c.name, c.damage);
    const Outcome o = examine(path, 5, 30);
    INFO(c.name << ":\n" << o.text);
    CHECK(o.kind == Outcome::kCleanError);
    CHECK(o.inspect_rc == 1);
    CHECK(contains(o.text, c.expect));
  }
  // A group linked into itself changes nothing a load reads, but inspect must flag it, and not
  // follow the loop.
  {
    const std::string path = damaged_copy(good, "group_loop", [](hid_t f) {
      H5Lcreate_hard(f, "model", f, "model/layers/0/up", H5P_DEFAULT, H5P_DEFAULT);
    });
    std::ostringstream out, err;
    CHECK(inspect_checkpoint(path, out, err) == 1);
    INFO(out.str());
    CHECK(contains(out.str(), "model/layers/0/up: links to a group listed before"));
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Names come from the model (the driver passes the datasets the checkpoint's deck implies): a
// renamed, deleted or added dataset fails inspect as it would fail a load.
TEST_CASE("inspect reports renamed, deleted and extra datasets", "[io][checkpoint][damage]") {
  if (tptrain::test::world_rank() != 0) return;
  const fs::path dir = fs::temp_directory_path() /
                       ("tptrain_names_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string good = (dir / "good.h5").string();
  write_sample(good);
  const std::pair<const char*, std::function<void(hid_t)>> cases[] = {
      {"dataset_renamed",
       [](hid_t f) {
         H5Lmove(f, "model/ln_f/bias", f, "model/ln_f/bias2", H5P_DEFAULT, H5P_DEFAULT);
       }},
      {"group_deleted", [](hid_t f) { H5Ldelete(f, "model/layers", H5P_DEFAULT); }},
      {"extra_layer",
       [](hid_t f) {
         H5Ocopy(f, "model/layers/0", f, "model/layers/1", H5P_DEFAULT, H5P_DEFAULT);
       }},
  };
  for (const auto& [name, damage] : cases) {
    const Outcome o = examine(damaged_copy(good, name, damage), 5, 30);
    INFO(name << ":\n" << o.text);
    CHECK(o.kind == Outcome::kCleanError);
    CHECK(o.inspect_rc == 1);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("a corrupt global heap ends inspect and read in bounded time, with a message",
          "[io][checkpoint][damage]") {
  if (tptrain::test::world_rank() != 0) return;
  const fs::path dir = fs::temp_directory_path() / ("tptrain_gheap_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "gheap.h5").string();
  write_sample(path);
  // The collection holding the variable-length strings: "GCOL", version, 3 reserved bytes, its
  // size (8 bytes), then objects: index (2), references (2), reserved (4), size (8), data padded
  // to 8.
  std::string bytes = file_bytes(path);
  const std::size_t gcol = bytes.find("GCOL");
  REQUIRE(gcol != std::string::npos);
  double limit_s = 30;
  SECTION("a free-space object of size 0: libhdf5 1.10 walks the collection forever") {
    std::uint64_t size = 0;
    std::memcpy(&size, bytes.data() + gcol + 8, 8);
    std::size_t p = gcol + 16;
    bool patched = false;
    while (p + 16 <= gcol + size && p + 16 <= bytes.size()) {
      std::uint16_t idx = 0;
      std::uint64_t obj = 0;
      std::memcpy(&idx, bytes.data() + p, 2);
      std::memcpy(&obj, bytes.data() + p + 8, 8);
      if (idx == 0) {
        std::memset(&bytes[p + 8], 0, 8);
        patched = true;
        break;
      }
      p += 16 + ((obj + 7) / 8) * 8;
    }
    REQUIRE(patched);
    limit_s = 15;  // the watchdog (2 s here) must end it
  }
  SECTION("a string longer than its collection: libhdf5 1.10 memcpy's past its buffer") {
    const std::size_t object = gcol + 16;
    std::uint16_t idx = 0;
    std::memcpy(&idx, bytes.data() + object, 2);
    REQUIRE(idx != 0);
    bytes[object + 8 + 5] = static_cast<char>(bytes[object + 8 + 5] ^ 0x60);  // size += ~2^46
  }
  put_bytes(path, bytes);
  const auto start = std::chrono::steady_clock::now();
  const Outcome o = examine(path, 2, 30);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(o.text);
  CHECK(o.kind == Outcome::kCleanError);
  CHECK(took < limit_s);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE("byte flips in checkpoint metadata never crash, hang or pass unnoticed",
          "[io][checkpoint][damage]") {
  if (tptrain::test::world_rank() != 0) return;
  const fs::path dir = fs::temp_directory_path() / ("tptrain_flips_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string good = (dir / "good.h5").string();
  write_sample(good);
  const std::string bytes = file_bytes(good);
  const auto ranges = data_ranges(good);
  std::vector<std::uint64_t> metadata;
  for (std::uint64_t i = 0; i < bytes.size(); ++i) {
    bool data = false;
    for (const auto& [off, len] : ranges) data = data || (i >= off && i < off + len);
    if (!data) metadata.push_back(i);
  }
  REQUIRE(metadata.size() > 500);
  // Every 7th metadata byte (the whole header region sampled), plus random ones, each XORed
  // with a random non-zero mask; fixed seed, so a failure names a reproducible offset.
  const int cases = std::getenv("TPTRAIN_FLIP_CASES") ? std::atoi(std::getenv("TPTRAIN_FLIP_CASES"))
                                                       : 400;
  std::mt19937_64 gen(20240611);
  int counts[6] = {0, 0, 0, 0, 0, 0};
  const std::string path = (dir / "flipped.h5").string();
  for (int k = 0; k < cases; ++k) {
    const std::uint64_t at = k % 2 == 0 ? metadata[(static_cast<std::uint64_t>(k / 2) * 7) %
                                                   metadata.size()]
                                        : metadata[gen() % metadata.size()];
    const auto mask = static_cast<unsigned char>(1 + gen() % 255);
    std::string b = bytes;
    b[at] = static_cast<char>(static_cast<unsigned char>(b[at]) ^ mask);
    put_bytes(path, b);
    const Outcome o = examine(path, 3, 20);
    ++counts[o.kind];
    INFO("byte " << at << " ^= 0x" << std::hex << int(mask) << std::dec << ":\n" << o.text);
    CHECK(o.kind != Outcome::kCrash);
    CHECK(o.kind != Outcome::kHang);
    CHECK(o.kind != Outcome::kUndetected);
  }
  std::printf(
      "byte flips in metadata: %d cases: %d unchanged contents (inspect and load agree), %d clean "
      "errors, %d checksum errors, %d crashes, %d hangs, %d undetected (inspect passes a file "
      "that a load refuses or reads differently)\n",
      cases, counts[0], counts[1], counts[2], counts[3], counts[4], counts[5]);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

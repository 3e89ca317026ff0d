// tptrain inspect (src/driver/inspect.hpp) on files written by write_checkpoint: names in natural
// order, shapes, types, norms, min/max, checksum verdicts, /train, errors. Every rank writes
// (collectively); rank 0 inspects.
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "tests/mpi_test_util.hpp"
#include "io/checkpoint_file.hpp"
#include "src/driver/inspect.hpp"
#include "tests/io/checkpoint_tensors.hpp"

using namespace tptrain::io;
using tptrain::driver::inspect_checkpoint;
namespace fs = std::filesystem;

namespace {

using Dir = tptrain::test::SharedTempDir;
using tptrain::test::world_rank;
using tptrain::test::world_size;

using tptrain::test::Tensor;

float value_of(std::uint64_t id, std::uint64_t i) {
  return static_cast<float>(static_cast<double>((i * 7 + id * 13) % 23) * 0.25 - 2.5);
}

Tensor make(const std::string& name, std::vector<std::uint64_t> shape, std::uint64_t id) {
  Tensor t{name, std::move(shape), {}};
  std::uint64_t n = 1;
  for (auto d : t.shape) n *= d;
  for (std::uint64_t i = 0; i < n; ++i) t.values.push_back(value_of(id, i));
  return t;
}

// The tensors of the test: layers 2 and 10 (natural order), a tensor read in several chunks
// (2100 rows of 1024 elements), an optimizer moment, a 1-D tensor.
std::vector<Tensor> tensors() {
  return {make("model/layers/10/mlp/fc/weight", {6, 5}, 1),
          make("model/layers/2/mlp/fc/weight", {6, 5}, 2),
          make("model/embedding/word", {2100, 1024}, 3),
          make("model/ln_f/bias", {7}, 4),
          make("optimizer/exp_avg/model/ln_f/bias", {7}, 5)};
}

// Rows split over the ranks.
void write_tensors(const std::string& path, std::vector<Tensor>& ts) {
  const std::vector<TensorShard> shards = tptrain::test::row_shards(ts, world_rank(), world_size());
  CheckpointMeta meta;
  meta.step = 20;
  meta.tokens_seen = 20480;
  meta.deck = "[model]\nlayers = 2\nhidden = 32\n";
  meta.tp = 2;
  meta.dp = 1;
  meta.train = {{"step", 20}, {"seed", 1234}, {"data_step", 20}};
  write_checkpoint(MPI_COMM_WORLD, path, meta, shards);
}

std::string g6(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The output line that mentions `name` followed by a space (a table row).
std::string line_of(const std::string& out, const std::string& name) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (contains(line, "  " + name + " ")) return line;
  return {};
}

void flip_byte(const std::string& path, const std::string& dataset, std::uint64_t at) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const haddr_t offset = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  REQUIRE(offset != HADDR_UNDEF);
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(offset + at));
  char byte = 0;
  io.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x01);
  io.seekp(static_cast<std::streamoff>(offset + at));
  io.write(&byte, 1);
}

}  // namespace

TEST_CASE("inspect describes a checkpoint", "[io][checkpoint][inspect][mpi]") {
  Dir dir;
  const std::string path = dir.file("step_00000020.h5");
  std::vector<Tensor> ts = tensors();
  write_tensors(path, ts);

  if (world_rank() == 0) {
    std::ostringstream out, err;
    const int rc = inspect_checkpoint(path, out, err);
    const std::string text = out.str();
    INFO(text);
    CHECK(rc == 0);
    CHECK(err.str().empty());
    CHECK(contains(text, "checkpoint " + path));
    CHECK(contains(text, "tptrain-checkpoint, format_version 2"));
    CHECK(contains(text, "tokens_seen  20480"));
    CHECK(contains(text, "tp 2, pp 1, dp 1"));
    CHECK(contains(text, "deck         31 bytes, 3 lines:"));
    // The architecture from the deck: one without model.architecture is a tied gpt2.
    CHECK(contains(text, "model        gpt2, 2 layers, hidden 32, heads ?, kv_heads ?, ffn_hidden ?, tied embeddings"));
    CHECK(contains(text, "    | hidden = 32"));
    CHECK(contains(text, "/train\n  data_step    20\n  seed         1234\n  step         20\n"));
    CHECK(contains(text, "/optimizer\n  step         20\n"));
    CHECK(contains(text, "datasets: 5, 2,150,474 elements"));
    // Natural order: layers/2 before layers/10; groups before their neighbours' names.
    const auto p2 = text.find("model/layers/2/mlp/fc/weight");
    const auto p10 = text.find("model/layers/10/mlp/fc/weight");
    const auto pe = text.find("model/embedding/word");
    const auto po = text.find("optimizer/exp_avg/model/ln_f/bias");
    CHECK(pe < p2);
    CHECK(p2 < p10);
    CHECK(p10 < po);
    for (const Tensor& t : ts) {
      const std::string line = line_of(text, t.name);
      INFO(t.name << ": " << line);
      REQUIRE(!line.empty());
      std::string shape = "[";
      for (std::size_t d = 0; d < t.shape.size(); ++d)
        shape += (d ? ", " : "") + std::to_string(t.shape[d]);
      shape += "]";
      double sq = 0, lo = INFINITY, hi = -INFINITY;
      for (float v : t.values) {
        const double x = v;
        sq += x * x;
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
      CHECK(contains(line, " " + shape + " "));
      CHECK(contains(line, " float32 "));
      CHECK(contains(line, " " + g6(std::sqrt(sq)) + " "));
      CHECK(contains(line, " " + g6(lo) + " "));
      CHECK(contains(line, " " + g6(hi) + " "));
      CHECK(line.size() >= 3);
      CHECK(line.substr(line.size() - 3) == " ok");
    }
    CHECK(contains(text, "OK: 5 datasets, every checksum verifies"));

    // A flipped bit in the data: that dataset's checksum fails, and the verdict.
    flip_byte(path, "model/embedding/word", 4 * 1500000 + 1);
    std::ostringstream out2, err2;
    CHECK(inspect_checkpoint(path, out2, err2) == 1);
    const std::string text2 = out2.str();
    INFO(text2);
    CHECK(contains(line_of(text2, "model/embedding/word"), "MISMATCH (stored 0x"));
    CHECK(contains(line_of(text2, "model/ln_f/bias"), " ok"));
    CHECK(contains(text2, "FAILED: 1 of 5 datasets fail verification: model/embedding/word "
                          "(checksum mismatch)"));
    CHECK(contains(err2.str(), path + ": 1 of 5 datasets fail verification"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("inspect refuses what is not a checkpoint", "[io][inspect]") {
  const fs::path dir = fs::temp_directory_path() /
                       ("tptrain_inspect_errors_" + std::to_string(::getpid()) + "_" +
                        std::to_string(world_rank()));
  fs::create_directories(dir);
  std::ostringstream out, err;

  SECTION("missing file") {
    const std::string p = (dir / "nope.h5").string();
    CHECK(inspect_checkpoint(p, out, err) == 1);
    CHECK(err.str() == p + ": no such file\n");
    CHECK(out.str().empty());
  }
  SECTION("not HDF5") {
    const std::string p = (dir / "text.h5").string();
    std::ofstream(p) << "step = 20\n";
    CHECK(inspect_checkpoint(p, out, err) == 1);
    CHECK(err.str() == p + ": not an HDF5 file\n");
  }
  SECTION("a directory") {
    CHECK(inspect_checkpoint(dir.string(), out, err) == 1);
    CHECK(err.str() == dir.string() + ": not a regular file\n");
  }
  SECTION("an HDF5 file that is not a tptrain checkpoint: listed, but exit 1") {
    const std::string p = (dir / "other.h5").string();
    const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[2] = {2, 3};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t d = H5Dcreate2(f, "data/x", H5T_STD_I32LE, space, [] {
      const hid_t l = H5Pcreate(H5P_LINK_CREATE);
      H5Pset_create_intermediate_group(l, 1);
      return l;
    }(), H5P_DEFAULT, H5P_DEFAULT);
    const int v[6] = {-3, 4, 0, 0, 0, 0};
    H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(d);
    H5Sclose(space);
    H5Fclose(f);
    CHECK(inspect_checkpoint(p, out, err) == 1);
    const std::string text = out.str();
    INFO(text);
    const std::string line = line_of(text, "data/x");
    CHECK(contains(line, "[2, 3]"));
    CHECK(contains(line, "int32"));
    CHECK(contains(line, " 5 "));  // L2 norm of (-3, 4, 0, ...)
    CHECK(contains(line, " -3 "));
    CHECK(contains(line, "n/a (not floating-point)"));
    CHECK(contains(text, "FAILED: not a tptrain checkpoint: the file has no format attribute"));
    CHECK(contains(err.str(), "not a tptrain checkpoint"));
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Checkpoint files at the format level (io/checkpoint_file.hpp), on whatever number of ranks the
// suite runs with (1, 2 and 4 under ctest): tensors written under one split are read back under
// others and compared bit for bit with the logical tensor; metadata round-trips; the file appears
// under its final name only when complete; every error is thrown on every rank with one message.
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "tests/test_helpers.hpp"
#include "tests/mpi_test_util.hpp"
#include "io/checkpoint_file.hpp"

using namespace tptrain::io;
namespace fs = std::filesystem;

namespace {

struct World {
  int rank = 0;
  int size = 1;
};

World world() {
  World w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  return w;
}

void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

using TempDir = tptrain::test::SharedTempDir;

// ---- logical tensors --------------------------------------------------------------------------

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element `linear` of logical tensor `id`: a finite float with random sign, exponent and
// mantissa bits, so that any misplaced element shows up in a bitwise comparison.
float logical_value(std::uint64_t id, std::uint64_t linear) {
  const std::uint64_t h = splitmix(id * 0x100000001B3ull + linear);
  const std::uint32_t bits = (static_cast<std::uint32_t>(h >> 63) << 31) |
                             (static_cast<std::uint32_t>(100 + (h >> 40) % 50) << 23) |
                             static_cast<std::uint32_t>(h & 0x7FFFFF);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

float from_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

struct Spec {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::uint64_t id;
};

// The local buffer for `slabs` of logical tensor `spec`: slab after slab, each row-major.
std::vector<float> expected(const Spec& spec, const std::vector<Hyperslab>& slabs) {
  const std::size_t rank = spec.shape.size();
  std::vector<std::uint64_t> stride(rank, 1);
  for (std::size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * spec.shape[d];
  std::vector<float> out;
  for (const Hyperslab& s : slabs) {
    std::uint64_t n = 1;
    for (std::uint64_t c : s.count) n *= c;
    std::vector<std::uint64_t> idx(rank, 0);
    for (std::uint64_t e = 0; e < n; ++e) {
      std::uint64_t linear = 0;
      for (std::size_t d = 0; d < rank; ++d) linear += (s.start[d] + idx[d]) * stride[d];
      out.push_back(logical_value(spec.id, linear));
      for (std::size_t d = rank; d-- > 0;) {
        if (++idx[d] < s.count[d]) break;
        idx[d] = 0;
      }
    }
  }
  return out;
}

// [begin, end) of part i of n split into `parts` nearly equal blocks.
std::pair<std::uint64_t, std::uint64_t> block(std::uint64_t n, int parts, int i) {
  const std::uint64_t p = static_cast<std::uint64_t>(parts), k = static_cast<std::uint64_t>(i);
  const std::uint64_t base = n / p, extra = n % p;
  const std::uint64_t begin = k * base + std::min(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

// Slab [begin, end) along dimension `dim`, everything along the others.
Hyperslab along(const std::vector<std::uint64_t>& shape, std::size_t dim, std::uint64_t begin,
                std::uint64_t end) {
  Hyperslab s;
  s.start.assign(shape.size(), 0);
  s.count = shape;
  s.start[dim] = begin;
  s.count[dim] = end - begin;
  return s;
}

Hyperslab whole(const std::vector<std::uint64_t>& shape) { return along(shape, 0, 0, shape[0]); }

// A rank's tensors: specs, slabs and buffers, kept together.
struct Layout {
  std::vector<Spec> specs;
  std::vector<std::vector<Hyperslab>> slabs;
  std::vector<bool> write;
  std::vector<std::vector<float>> buffers;

  void add(const Spec& spec, std::vector<Hyperslab> s, bool w = true) {
    specs.push_back(spec);
    slabs.push_back(std::move(s));
    write.push_back(w);
  }
  // Buffers holding the logical values (or `garbage` everywhere for replicas not written).
  void fill_expected(bool garbage_for_replicas) {
    buffers.clear();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      buffers.push_back(expected(specs[i], slabs[i]));
      if (garbage_for_replicas && !write[i])
        for (float& x : buffers.back()) x = from_bits(0x3F800000u);  // 1.0f
    }
  }
  // Buffers of the right sizes holding a sentinel.
  void fill_sentinel() {
    buffers.clear();
    for (std::size_t i = 0; i < specs.size(); ++i)
      buffers.emplace_back(expected(specs[i], slabs[i]).size(), from_bits(0x7F7F7F7Fu));
  }
  std::vector<TensorShard> shards() {
    std::vector<TensorShard> out;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      TensorShard t;
      t.name = specs[i].name;
      t.global_shape = specs[i].shape;
      t.slabs = slabs[i];
      t.data = buffers[i].empty() ? nullptr : buffers[i].data();
      t.write = write[i];
      out.push_back(std::move(t));
    }
    return out;
  }
  // Number of elements that differ bitwise from the logical tensor.
  std::size_t mismatches() const {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const std::vector<float> want = expected(specs[i], slabs[i]);
      if (want.size() != buffers[i].size()) return bad + want.size() + buffers[i].size();
      for (std::size_t k = 0; k < want.size(); ++k)
        if (bits_of(want[k]) != bits_of(buffers[i][k])) ++bad;
    }
    return bad;
  }
};

// The logical tensors of the tests; H = 2 * ranks so that QKV splits evenly.
std::vector<Spec> specs(int n) {
  const auto u = static_cast<std::uint64_t>(n);
  const std::uint64_t H = 2 * u;
  return {
      {"model/embedding/word", {2 * u + 1, 6}, 1},
      {"model/layers/0/mlp/proj/weight", {5, 3 * u + 2}, 2},
      {"model/layers/0/attn/qkv/weight", {3 * H, 4}, 3},
      {"model/layers/0/attn/qkv/bias", {3 * H}, 4},
      {"model/ln_f/weight", {7}, 5},
      {"model/layers/0/mlp/fc/weight", {4, 4 * u}, 6},
      {"model/layers/1/odd", {3, 2, 2 * u + 1}, 7},
      {"model/empty", {0, 3}, 8},
      {"optimizer/exp_avg/model/embedding/word", {2 * u + 1, 6}, 9},
  };
}

// How the trainer would write them: rows split, columns split, QKV as three row blocks per rank,
// a replicated tensor written by rank 0 only, two interleaved column blocks given right to left,
// a rank with no slabs at all, a zero-size tensor, rows striped one per slab.
Layout write_layout(int r, int n) {
  const auto S = specs(n);
  Layout L;
  L.add(S[0], {along(S[0].shape, 0, block(S[0].shape[0], n, r).first,
                     block(S[0].shape[0], n, r).second)});
  L.add(S[1], {along(S[1].shape, 1, block(S[1].shape[1], n, r).first,
                     block(S[1].shape[1], n, r).second)});
  const std::uint64_t H = S[2].shape[0] / 3, per = H / static_cast<std::uint64_t>(n);
  const std::uint64_t q = static_cast<std::uint64_t>(r) * per;
  std::vector<Hyperslab> qkv, qkv_bias;
  for (std::uint64_t part = 0; part < 3; ++part) {
    qkv.push_back(along(S[2].shape, 0, part * H + q, part * H + q + per));
    qkv_bias.push_back(along(S[3].shape, 0, part * H + q, part * H + q + per));
  }
  L.add(S[2], qkv);
  L.add(S[3], qkv_bias);
  L.add(S[4], {whole(S[4].shape)}, r == 0);
  const std::uint64_t half = S[5].shape[1] / 2, c = 2 * static_cast<std::uint64_t>(r);
  L.add(S[5], {along(S[5].shape, 1, half + c, half + c + 2), along(S[5].shape, 1, c, c + 2)});
  if (n == 1) {
    L.add(S[6], {whole(S[6].shape)});
  } else if (r == n - 1) {
    L.add(S[6], {});
  } else {
    const auto b = block(S[6].shape[2], n - 1, r);
    L.add(S[6], {along(S[6].shape, 2, b.first, b.second)});
  }
  L.add(S[7], {});
  std::vector<Hyperslab> striped;
  for (std::uint64_t row = static_cast<std::uint64_t>(r); row < S[8].shape[0];
       row += static_cast<std::uint64_t>(n))
    striped.push_back(along(S[8].shape, 0, row, row + 1));
  L.add(S[8], striped);
  return L;
}

// Every rank reads every tensor whole.
Layout read_all_layout(int n) {
  Layout L;
  for (const Spec& s : specs(n)) L.add(s, {whole(s.shape)});
  return L;
}

// Split along the last dimension, ranks in reverse order (rows split becomes columns split).
Layout read_last_dim_layout(int r, int n) {
  Layout L;
  for (const Spec& s : specs(n)) {
    const std::size_t d = s.shape.size() - 1;
    const auto b = block(s.shape[d], n, n - 1 - r);
    L.add(s, {along(s.shape, d, b.first, b.second)});
  }
  return L;
}

// One slab per row of dimension 0, rows r, r+n, ..., listed bottom to top.
Layout read_striped_reverse_layout(int r, int n) {
  Layout L;
  for (const Spec& s : specs(n)) {
    std::vector<Hyperslab> rows;
    for (std::uint64_t row = static_cast<std::uint64_t>(r); row < s.shape[0];
         row += static_cast<std::uint64_t>(n))
      rows.insert(rows.begin(), along(s.shape, 0, row, row + 1));
    L.add(s, rows);
  }
  return L;
}

CheckpointMeta sample_meta(int r, int n) {
  CheckpointMeta m;
  m.step = 123456789012;
  m.tokens_seen = 9876543210123;
  m.deck =
      "# tiny deck \xE2\x80\x94 \xC3\xBCnic\xC3\xB6"
      "de\n[model]\nlayers = 4\nhidden = 128\n";
  m.tp = n;
  m.pp = 3;
  m.dp = 5;
  m.train = {{"step", 123456789012}, {"seed", -42}, {"data_step", 7}, {"rng offset", 1LL << 62}};
  if (r != 0) {
    m.deck = "ignored: the metadata written is rank 0's";
    m.train = {{"ignored", 1}};
  }
  return m;
}

void write_sample(const std::string& path) {
  const World w = world();
  Layout L = write_layout(w.rank, w.size);
  L.fill_expected(true);
  write_checkpoint(MPI_COMM_WORLD, path, sample_meta(w.rank, w.size), L.shards());
}

std::vector<TensorShard> read_all_shards(Layout& L) {
  L.fill_sentinel();
  return L.shards();
}

// ---- collective checks ------------------------------------------------------------------------

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return {};
}

std::uint64_t hash_of(const std::string& s) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// True on every rank when every rank threw and all messages are equal.
bool everyone_threw_the_same(const std::string& msg) {
  int threw = msg.empty() ? 0 : 1, all = 0;
  MPI_Allreduce(&threw, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  const std::uint64_t h = hash_of(msg);
  unsigned long long mine[2] = {h, ~h}, max[2] = {0, 0};
  MPI_Allreduce(mine, max, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return all == 1 && max[0] == ~max[1];
}

bool everyone(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

using tptrain::test::file_bytes;
using tptrain::test::put_bytes;

// Rank 0 rewrites a root attribute of a closed file with the serial library.
void rewrite_attribute(const std::string& path, const char* name, const std::string* text,
                       int number) {
  if (world().rank == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0);
    CHECK(H5Adelete(f, name) >= 0);
    const hid_t space = H5Screate(H5S_SCALAR);
    if (text != nullptr) {
      const hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, H5T_VARIABLE);
      H5Tset_cset(type, H5T_CSET_UTF8);
      const hid_t a = H5Acreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
      const char* p = text->c_str();
      CHECK(H5Awrite(a, type, &p) >= 0);
      H5Aclose(a);
      H5Tclose(type);
    } else {
      const hid_t a = H5Acreate2(f, name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
      CHECK(H5Awrite(a, H5T_NATIVE_INT, &number) >= 0);
      H5Aclose(a);
    }
    H5Sclose(space);
    CHECK(H5Fclose(f) >= 0);
  }
  barrier();
}

}  // namespace

TEST_CASE("checkpoint round trip under different splits", "[io][checkpoint][mpi]") {
  const World w = world();
  TempDir dir;
  const std::string path = dir.file("step_00000042.h5");
  REQUIRE(everyone(!fs::exists(path)));

  write_sample(path);
  CHECK(everyone(fs::exists(path)));
  CHECK(everyone(!fs::exists(path + ".tmp")));

  SECTION("every rank reads everything") {
    Layout L = read_all_layout(w.size);
    const CheckpointMeta meta = read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L));
    CHECK(L.mismatches() == 0);
    CHECK(meta.step == 123456789012);
  }
  SECTION("split along the last dimension, ranks reversed") {
    Layout L = read_last_dim_layout(w.rank, w.size);
    read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L));
    CHECK(L.mismatches() == 0);
  }
  SECTION("one slab per row, bottom to top") {
    Layout L = read_striped_reverse_layout(w.rank, w.size);
    read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L));
    CHECK(L.mismatches() == 0);
  }
  SECTION("the same split as written") {
    Layout L = write_layout(w.rank, w.size);
    read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L));
    CHECK(L.mismatches() == 0);  // replicas too: every rank reads its own slabs
  }
  SECTION("a subset of the tensors, in another order") {
    Layout all = read_all_layout(w.size);
    Layout L;
    L.add(all.specs[5], all.slabs[5]);
    L.add(all.specs[0], all.slabs[0]);
    read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L));
    CHECK(L.mismatches() == 0);
  }
}

TEST_CASE("checkpoint metadata round trip and file format", "[io][checkpoint][mpi]") {
  const World w = world();
  TempDir dir;
  const std::string path = dir.file("step_00000001.h5");
  write_sample(path);

  const CheckpointMeta want = sample_meta(0, w.size);
  for (const CheckpointMeta& got :
       {read_checkpoint_meta(MPI_COMM_WORLD, path), read_checkpoint(MPI_COMM_WORLD, path, {})}) {
    CHECK(got.step == want.step);
    CHECK(got.tokens_seen == want.tokens_seen);
    CHECK(got.deck == want.deck);  // rank 0's, on every rank
    CHECK(got.tp == want.tp);
    CHECK(got.pp == want.pp);
    CHECK(got.dp == want.dp);
    CHECK(got.train == want.train);  // rank 0's, on every rank
  }

  // What h5py relies on: UTF-8 variable-length strings, integer attributes, float32 data.
  if (w.rank == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0);
    for (const char* name : {"format", "deck"}) {
      const hid_t a = H5Aopen(f, name, H5P_DEFAULT);
      const hid_t t = H5Aget_type(a);
      CHECK(H5Tget_class(t) == H5T_STRING);
      CHECK(H5Tis_variable_str(t) > 0);
      CHECK(H5Tget_cset(t) == H5T_CSET_UTF8);
      H5Tclose(t);
      H5Aclose(a);
    }
    for (const char* name : {"format_version", "step", "tokens_seen", "tp", "pp", "dp"}) {
      const hid_t a = H5Aopen(f, name, H5P_DEFAULT);
      const hid_t t = H5Aget_type(a);
      CHECK(H5Tget_class(t) == H5T_INTEGER);
      H5Tclose(t);
      H5Aclose(a);
    }
    int version = 0;
    const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_INT, &version);
    H5Aclose(a);
    CHECK(version == 2);
    const hid_t d = H5Dopen2(f, "model/layers/0/attn/qkv/weight", H5P_DEFAULT);
    CHECK(d >= 0);
    const hid_t t = H5Dget_type(d);
    CHECK(H5Tequal(t, H5T_IEEE_F32LE) > 0);
    H5Tclose(t);
    // The checksum: a uint64 attribute of every dataset.
    const hid_t ca = H5Aopen(d, kChecksumAttribute, H5P_DEFAULT);
    CHECK(ca >= 0);
    const hid_t ct = H5Aget_type(ca);
    CHECK(H5Tequal(ct, H5T_STD_U64LE) > 0);
    H5Tclose(ct);
    H5Aclose(ca);
    H5Dclose(d);
    // /train: int64 attributes; /optimizer: the step.
    const hid_t g = H5Gopen2(f, "train", H5P_DEFAULT);
    CHECK(g >= 0);
    for (const auto& [name, value] : want.train) {
      const hid_t ta = H5Aopen(g, name.c_str(), H5P_DEFAULT);
      CHECK(ta >= 0);
      const hid_t tt = H5Aget_type(ta);
      CHECK(H5Tequal(tt, H5T_STD_I64LE) > 0);
      std::int64_t v = 0;
      H5Aread(ta, H5T_NATIVE_INT64, &v);
      CHECK(v == value);
      H5Tclose(tt);
      H5Aclose(ta);
    }
    H5Gclose(g);
    const hid_t o = H5Gopen2(f, "optimizer", H5P_DEFAULT);
    std::int64_t step = 0;
    const hid_t oa = H5Aopen(o, "step", H5P_DEFAULT);
    CHECK(H5Aread(oa, H5T_NATIVE_INT64, &step) >= 0);
    CHECK(step == want.step);
    H5Aclose(oa);
    H5Gclose(o);
    CHECK(H5Fclose(f) >= 0);
  }
  barrier();
}

TEST_CASE("checkpoint /train round trip", "[io][checkpoint][mpi]") {
  const World w = world();
  TempDir dir;
  const std::string path = dir.file("train.h5");
  Layout L = write_layout(w.rank, w.size);
  L.fill_expected(true);

  SECTION("empty: the group exists without attributes") {
    CheckpointMeta m = sample_meta(0, w.size);
    m.train.clear();
    write_checkpoint(MPI_COMM_WORLD, path, m, L.shards());
    CHECK(read_checkpoint_meta(MPI_COMM_WORLD, path).train.empty());
    if (w.rank == 0) {
      const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      CHECK(H5Lexists(f, "train", H5P_DEFAULT) > 0);
      H5Fclose(f);
    }
    barrier();
  }
  SECTION("extreme values, read back with the tensors") {
    CheckpointMeta m = sample_meta(0, w.size);
    m.train = {{"min", INT64_MIN}, {"max", INT64_MAX}, {"zero", 0}, {"seed", 1234},
               {"data_step", 20}, {"step", m.step}};
    write_checkpoint(MPI_COMM_WORLD, path, m, L.shards());
    Layout R = read_all_layout(w.size);
    const CheckpointMeta got = read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(R));
    CHECK(got.train == m.train);
    CHECK(R.mismatches() == 0);
  }
  SECTION("an empty name is refused on every rank") {
    CheckpointMeta m = sample_meta(0, w.size);
    m.train[""] = 1;
    const std::string msg =
        error_of([&] { write_checkpoint(MPI_COMM_WORLD, path, m, L.shards()); });
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "CheckpointMeta::train has an empty name"));
    CHECK(everyone(!fs::exists(path) && !fs::exists(path + ".tmp")));
  }
  SECTION("a non-integer attribute in /train is an error") {
    write_checkpoint(MPI_COMM_WORLD, path, sample_meta(w.rank, w.size), L.shards());
    if (w.rank == 0) {
      const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      const hid_t g = H5Gopen2(f, "train", H5P_DEFAULT);
      const hid_t space = H5Screate(H5S_SCALAR);
      const hid_t a = H5Acreate2(g, "lr", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
      const double lr = 3e-4;
      CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &lr) >= 0);
      H5Aclose(a);
      H5Sclose(space);
      H5Gclose(g);
      CHECK(H5Fclose(f) >= 0);
    }
    barrier();
    const std::string msg = error_of([&] { read_checkpoint_meta(MPI_COMM_WORLD, path); });
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "attribute /train/lr is not a single integer"));
  }
}

TEST_CASE("checkpoint file appears only when complete", "[io][checkpoint][mpi]") {
  const World w = world();
  TempDir dir;

  SECTION("a successful write leaves exactly the final file, replacing a stale .tmp") {
    const std::string path = dir.file("step_00000002.h5");
    if (w.rank == 0) put_bytes(path + ".tmp", "stale leftovers of a crashed run");
    barrier();
    write_sample(path);
    std::vector<std::string> names;
    if (w.rank == 0)
      for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().filename());
    if (w.rank == 0) CHECK(names == std::vector<std::string>{"step_00000002.h5"});
    Layout L = read_all_layout(w.size);
    read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L));
    CHECK(L.mismatches() == 0);
  }

  SECTION("a failed write leaves the previous file untouched and no .tmp") {
    const std::string path = dir.file("step_00000003.h5");
    write_sample(path);
    const std::string before = w.rank == 0 ? file_bytes(path) : std::string();

    // Fails while creating datasets, after <path>.tmp exists: model/x is a dataset, not a group.
    std::vector<float> buf(4, 1.0f);
    std::vector<TensorShard> clash(2);
    clash[0].name = "model/x";
    clash[1].name = "model/x/y";
    for (TensorShard& t : clash) {
      t.global_shape = {4};
      if (w.rank == 0) t.slabs = {Hyperslab{{0}, {4}}};
      t.data = buf.data();
    }
    const std::string msg = error_of(
        [&] { write_checkpoint(MPI_COMM_WORLD, path, sample_meta(w.rank, w.size), clash); });
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "writing checkpoint " + path));
    CHECK(contains(msg, "model/x/y"));

    // Fails in validation, on the last rank only: a slab outside the tensor.
    Layout bad = write_layout(w.rank, w.size);
    bad.fill_expected(true);
    if (w.rank == w.size - 1)
      bad.slabs[0] = {along(bad.specs[0].shape, 0, 1, bad.specs[0].shape[0] + 1)};
    const std::string msg2 = error_of(
        [&] { write_checkpoint(MPI_COMM_WORLD, path, sample_meta(w.rank, w.size), bad.shards()); });
    CHECK(everyone_threw_the_same(msg2));
    CHECK(contains(msg2, "model/embedding/word: slab 0"));
    CHECK(contains(msg2, "lies outside the global shape"));
    if (w.size > 1) CHECK(contains(msg2, "[rank " + std::to_string(w.size - 1) + "]"));

    if (w.rank == 0) {
      CHECK(file_bytes(path) == before);
      CHECK(!fs::exists(path + ".tmp"));
    }
    barrier();
  }

  SECTION("a failed write to a new name creates nothing") {
    const std::string path = dir.file("missing_dir/step_00000004.h5");
    const std::string msg = error_of([&] { write_sample(path); });
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "cannot create " + path + ".tmp: No such file or directory"));
    CHECK(everyone(!fs::exists(path) && !fs::exists(path + ".tmp")));
  }

  SECTION("ranks that disagree on the tensors") {
    const std::string path = dir.file("step_00000005.h5");
    Layout L = write_layout(w.rank, w.size);
    L.fill_expected(true);
    std::vector<TensorShard> shards = L.shards();
    if (w.rank == w.size - 1) shards.pop_back();
    const std::string msg = error_of(
        [&] { write_checkpoint(MPI_COMM_WORLD, path, sample_meta(w.rank, w.size), shards); });
    if (w.size > 1) {
      CHECK(everyone_threw_the_same(msg));
      CHECK(contains(msg, "disagree"));
      CHECK(everyone(!fs::exists(path) && !fs::exists(path + ".tmp")));
    } else {
      CHECK(msg.empty());
    }
  }
}

TEST_CASE("checkpoint read errors are thrown on every rank", "[io][checkpoint][mpi]") {
  const World w = world();
  TempDir dir;
  const std::string good = dir.file("good.h5");
  write_sample(good);
  Layout L = read_all_layout(w.size);
  std::vector<TensorShard> shards = read_all_shards(L);

  auto read_error = [&](const std::string& path) {
    return error_of([&] { read_checkpoint(MPI_COMM_WORLD, path, shards); });
  };

  SECTION("missing file") {
    const std::string path = dir.file("nope.h5");
    const std::string msg = read_error(path);
    CHECK(everyone_threw_the_same(msg));
    CHECK(msg == "reading checkpoint " + path + ": no such file");
    const std::string msg2 = error_of([&] { read_checkpoint_meta(MPI_COMM_WORLD, path); });
    CHECK(everyone_threw_the_same(msg2));
    CHECK(msg2 == msg);
  }
  SECTION("garbage file") {
    const std::string path = dir.file("garbage.h5");
    if (w.rank == 0) {
      std::mt19937 gen(42);
      std::string bytes(4096, '\0');
      for (char& ch : bytes) ch = static_cast<char>(gen() & 0xFF);
      put_bytes(path, bytes);
    }
    barrier();
    const std::string msg = read_error(path);
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "not an HDF5 file"));
    CHECK(everyone_threw_the_same(error_of([&] { read_checkpoint_meta(MPI_COMM_WORLD, path); })));
  }
  SECTION("truncated file") {
    const std::string path = dir.file("truncated.h5");
    if (w.rank == 0) {
      const std::string bytes = file_bytes(good);
      CHECK(bytes.size() > 1000);
      put_bytes(path, bytes.substr(0, bytes.size() / 2));
    }
    barrier();
    const std::string msg = read_error(path);
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "H5Fopen failed for " + path));
    CHECK(contains(msg, "truncated"));
    CHECK(everyone_threw_the_same(error_of([&] { read_checkpoint_meta(MPI_COMM_WORLD, path); })));
  }
  SECTION("wrong format attribute") {
    const std::string text = "not-a-tptrain-file";
    rewrite_attribute(good, "format", &text, 0);
    const std::string msg = read_error(good);
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "not a tptrain checkpoint"));
    CHECK(contains(msg, "\"not-a-tptrain-file\""));
    CHECK(everyone_threw_the_same(error_of([&] { read_checkpoint_meta(MPI_COMM_WORLD, good); })));
  }
  SECTION("wrong format_version") {
    rewrite_attribute(good, "format_version", nullptr, 3);
    const std::string msg = read_error(good);
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "format_version 3 is not supported"));
  }
  SECTION("a changed metadata value (format_version 2 seals the attributes)") {
    rewrite_attribute(good, "tp", nullptr, 7);  // a valid value, just not the one written
    const std::string msg = read_error(good);
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "the metadata is corrupt"));
  }
  SECTION("a format_version 1 file (no metadata checksum) still loads") {
    rewrite_attribute(good, "format_version", nullptr, 1);
    if (world().rank == 0) {
      const hid_t f = H5Fopen(good.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      CHECK(H5Adelete(f, kMetadataChecksumAttribute) >= 0);
      CHECK(H5Fclose(f) >= 0);
    }
    barrier();
    CHECK(read_error(good).empty());
  }
  SECTION("missing dataset") {
    std::vector<float> buf(16);
    TensorShard extra;
    extra.name = "model/layers/7/attn/proj/weight";
    extra.global_shape = {4, 4};
    extra.slabs = {whole(extra.global_shape)};
    extra.data = buf.data();
    shards.push_back(extra);
    extra.name = "model/ln_f/weight/not_a_group";
    shards.push_back(extra);
    const std::string msg = read_error(good);
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "2 problems"));
    CHECK(contains(msg, "model/layers/7/attn/proj/weight: no such dataset in the checkpoint"));
    CHECK(contains(msg, "model/ln_f/weight/not_a_group: no such dataset"));
  }
  SECTION("shape mismatch") {
    const auto n = static_cast<std::uint64_t>(w.size);
    std::vector<float> buf(8 * 4 * n);
    for (TensorShard& t : shards)
      if (t.name == "model/layers/0/mlp/fc/weight") {
        t.global_shape = {8, 4 * n};
        t.slabs = {whole(t.global_shape)};
        t.data = buf.data();
      }
    const std::string msg = read_error(good);
    CHECK(everyone_threw_the_same(msg));
    const std::string cols = std::to_string(4 * n);
    CHECK(contains(msg, "model/layers/0/mlp/fc/weight: checkpoint has [4, " + cols +
                            "], the deck needs [8, " + cols + "]"));
  }
  SECTION("a slab outside the tensor on one rank") {
    if (w.rank == w.size - 1) shards[1].slabs = {along(shards[1].global_shape, 1, 0, 1000)};
    const std::string msg = read_error(good);
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "model/layers/0/mlp/proj/weight: slab 0"));
  }
}

// ---- checksums --------------------------------------------------------------------------------

namespace {

// The checksum of logical tensor `spec`, computed serially from its values.
std::uint64_t logical_checksum(const Spec& spec) {
  const std::vector<float> all = expected(spec, {whole(spec.shape)});
  return checksum_run(all.data(), all.size(), 0);
}

// Rank 0 reads the checksum attribute of a dataset (0 elsewhere, or when missing).
std::uint64_t stored_checksum(const std::string& path, const std::string& name) {
  std::uint64_t v = 0;
  if (world().rank == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    const hid_t a = H5Aopen(d, kChecksumAttribute, H5P_DEFAULT);
    CHECK(H5Aread(a, H5T_NATIVE_UINT64, &v) >= 0);
    H5Aclose(a);
    H5Dclose(d);
    H5Fclose(f);
  }
  return v;
}

// Rank 0 XORs `mask` into the byte at `at` bytes into the data of dataset `name` (contiguous
// storage: the data is one block at H5Dget_offset). The file stays a valid HDF5 file.
void corrupt_dataset(const std::string& path, const std::string& name, std::uint64_t at,
                     unsigned char mask) {
  if (world().rank == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    const haddr_t offset = H5Dget_offset(d);
    const hsize_t size = H5Dget_storage_size(d);
    H5Dclose(d);
    H5Fclose(f);
    REQUIRE(offset != HADDR_UNDEF);
    REQUIRE(at < size);
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(offset + at));
    char byte = 0;
    io.read(&byte, 1);
    byte = static_cast<char>(static_cast<unsigned char>(byte) ^ mask);
    io.seekp(static_cast<std::streamoff>(offset + at));
    io.write(&byte, 1);
    io.close();
    REQUIRE(io.good());
    const hid_t again = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(again >= 0);  // still a valid HDF5 file
    H5Fclose(again);
  }
  barrier();
}

// Rows of dimension 0 split into blocks, one per rank.
Layout row_split_layout(int r, int n) {
  Layout L;
  for (const Spec& s : specs(n)) {
    const auto b = block(s.shape[0], n, r);
    L.add(s, {along(s.shape, 0, b.first, b.second)});
  }
  return L;
}

}  // namespace

TEST_CASE("checkpoint checksum function", "[io][checkpoint]") {
  // Known answers (also computed by io/checkpoint_stats.py --verify and in docs/checkpoints.md).
  CHECK(splitmix64(0) == 0xE220A8397B1DCDAFull);
  CHECK(checksum_term(0x3F800000u, 0) == 0x3D3B402DA053B727ull);
  const float v[3] = {1.0f, -2.0f, 0.0f};
  CHECK(checksum_run(v, 3, 0) == 0xC244584CE105B812ull);
  // Split anywhere, same sum; moved elements change it.
  CHECK(checksum_run(v, 1, 0) + checksum_run(v + 1, 2, 1) == checksum_run(v, 3, 0));
  const float swapped[3] = {-2.0f, 1.0f, 0.0f};
  CHECK(checksum_run(swapped, 3, 0) != checksum_run(v, 3, 0));
  const float negzero[3] = {1.0f, -2.0f, -0.0f};
  CHECK(checksum_run(negzero, 3, 0) != checksum_run(v, 3, 0));
  CHECK(checksum_run(v, 0, 5) == 0);
}

TEST_CASE("checkpoint checksums do not depend on the layout", "[io][checkpoint][mpi]") {
  const World w = world();
  TempDir dir;
  // The same logical tensors under three write layouts, plus a tensor verified in several
  // chunks (4100 rows of 1024: more than one 4 Mi-element chunk on one rank).
  const Spec big{"model/big", {4100, 1024}, 99};
  std::vector<std::string> paths;
  int k = 0;
  for (Layout L : {write_layout(w.rank, w.size), row_split_layout(w.rank, w.size),
                   read_last_dim_layout(w.rank, w.size)}) {
    const auto b = block(big.shape[0], w.size, (w.rank + k) % w.size);
    L.add(big, {along(big.shape, 0, b.first, b.second)});
    L.fill_expected(true);
    paths.push_back(dir.file("layout" + std::to_string(k++) + ".h5"));
    write_checkpoint(MPI_COMM_WORLD, paths.back(), sample_meta(w.rank, w.size), L.shards());
  }
  std::vector<Spec> all = specs(w.size);
  all.push_back(big);
  if (w.rank == 0)
    for (const Spec& s : all) {
      const std::uint64_t want = logical_checksum(s);
      for (const std::string& p : paths) {
        INFO(s.name << " in " << p);
        CHECK(stored_checksum(p, s.name) == want);
      }
    }
  barrier();

  // Each file reads and verifies under every split.
  for (const std::string& p : paths) {
    INFO(p);
    for (Layout L :
         {read_all_layout(w.size), read_last_dim_layout(w.rank, w.size),
          read_striped_reverse_layout(w.rank, w.size), row_split_layout(w.rank, w.size)}) {
      L.add(big, {along(big.shape, 1, 0, 3)});
      const std::string msg =
          error_of([&] { read_checkpoint(MPI_COMM_WORLD, p, read_all_shards(L)); });
      CHECK(msg.empty());
      CHECK(L.mismatches() == 0);
    }
  }
}

TEST_CASE("a corrupted dataset is detected by its checksum on every rank",
          "[io][checkpoint][mpi]") {
  const World w = world();
  TempDir dir;
  const std::string path = dir.file("step_00000010.h5");
  write_sample(path);
  const std::string victim = "model/layers/0/mlp/fc/weight";  // [4, 4n]
  corrupt_dataset(path, victim, 4 * 5 + 2, 0x10);               // element 5, an exponent bit

  SECTION("reading it fails everywhere, naming the dataset") {
    Layout L = read_last_dim_layout(w.rank, w.size);
    const std::string msg =
        error_of([&] { read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L)); });
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "reading checkpoint " + path + ": " + victim +
                            ": checksum mismatch: the file is corrupt (stored 0x"));
    CHECK(contains(msg, ", computed 0x"));
    CHECK(!contains(msg, "model/embedding/word"));  // only the corrupt one
    CHECK(!contains(msg, "problems"));
  }
  SECTION("even when this layout does not read the corrupt element") {
    Layout all = read_all_layout(w.size);
    Layout L;
    L.add(all.specs[5], {along(all.specs[5].shape, 0, 3, 4)});  // row 3 only; 5 is in row 0
    const std::string msg =
        error_of([&] { read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L)); });
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, victim + ": checksum mismatch"));
  }
  SECTION("the other tensors still read") {
    Layout all = read_all_layout(w.size);
    Layout L;
    L.add(all.specs[0], all.slabs[0]);
    L.add(all.specs[8], all.slabs[8]);
    CHECK(error_of([&] { read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L)); }).empty());
    CHECK(L.mismatches() == 0);
  }
  SECTION("without verification the corrupt value is read") {
    Layout L = read_all_layout(w.size);
    CHECK(error_of([&] { read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L), false); })
              .empty());
    CHECK(L.mismatches() == 1);
  }
}

TEST_CASE("a dataset without checksum is an error", "[io][checkpoint][mpi]") {
  const World w = world();
  TempDir dir;
  const std::string path = dir.file("step_00000011.h5");
  write_sample(path);
  if (w.rank == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, "model/ln_f/weight", H5P_DEFAULT);
    CHECK(H5Adelete(d, kChecksumAttribute) >= 0);
    H5Dclose(d);
    CHECK(H5Fclose(f) >= 0);
  }
  barrier();
  Layout L = read_all_layout(w.size);
  const std::string msg =
      error_of([&] { read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L)); });
  CHECK(everyone_threw_the_same(msg));
  CHECK(contains(msg, std::string("model/ln_f/weight: has no ") + kChecksumAttribute +
                          " attribute"));
  Layout R = read_all_layout(w.size);
  CHECK(error_of([&] { read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(R), false); })
            .empty());
  CHECK(R.mismatches() == 0);
}

TEST_CASE("the optimizer state must be from the checkpoint's step", "[io][checkpoint][mpi]") {
  const World w = world();
  TempDir dir;
  const std::string path = dir.file("step_00000012.h5");
  write_sample(path);
  if (w.rank == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
    const hid_t a = H5Aopen(g, "step", H5P_DEFAULT);
    const std::int64_t other = 5;
    CHECK(H5Awrite(a, H5T_NATIVE_INT64, &other) >= 0);
    H5Aclose(a);
    H5Gclose(g);
    CHECK(H5Fclose(f) >= 0);
  }
  barrier();
  Layout L = read_all_layout(w.size);
  const std::string msg =
      error_of([&] { read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(L)); });
  CHECK(everyone_threw_the_same(msg));
  CHECK(contains(msg, "optimizer: the optimizer state is from step 5, the checkpoint from step "
                      "123456789012"));
  Layout model_only;
  model_only.add(L.specs[0], L.slabs[0]);
  CHECK(error_of([&] {
          read_checkpoint(MPI_COMM_WORLD, path, read_all_shards(model_only));
        }).empty());
}

TEST_CASE("checkpoint writes refuse elements written twice or not at all",
          "[io][checkpoint][mpi]") {
  const World w = world();
  TempDir dir;
  const std::string path = dir.file("step_00000013.h5");
  Layout L = write_layout(w.rank, w.size);
  const std::uint64_t rows = L.specs[0].shape[0];

  SECTION("a row nobody writes") {
    if (w.rank == w.size - 1) {
      Hyperslab& s = L.slabs[0].front();
      s.count[0] -= 1;  // the last rank's last row
    }
    L.fill_expected(true);
    const std::string msg = error_of(
        [&] { write_checkpoint(MPI_COMM_WORLD, path, sample_meta(w.rank, w.size), L.shards()); });
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "model/embedding/word: the ranks write " + std::to_string((rows - 1) * 6) +
                            " elements of its " + std::to_string(rows * 6) + " [" +
                            std::to_string(rows) + ", 6]"));
  }
  SECTION("overlapping slabs of one rank") {
    if (w.rank == 0) L.slabs[1].push_back(L.slabs[1].front());
    L.fill_expected(true);
    const std::string msg = error_of(
        [&] { write_checkpoint(MPI_COMM_WORLD, path, sample_meta(w.rank, w.size), L.shards()); });
    CHECK(everyone_threw_the_same(msg));
    CHECK(contains(msg, "model/layers/0/mlp/proj/weight: slabs 0 and 1 overlap"));
  }
  SECTION("a replicated tensor written by every rank") {
    L.write[4] = true;
    L.fill_expected(true);
    const std::string msg = error_of(
        [&] { write_checkpoint(MPI_COMM_WORLD, path, sample_meta(w.rank, w.size), L.shards()); });
    if (w.size > 1) {
      CHECK(everyone_threw_the_same(msg));
      CHECK(contains(msg, "model/ln_f/weight: the ranks write " + std::to_string(7 * w.size) +
                              " elements of its 7"));
    } else {
      CHECK(msg.empty());
    }
  }
  CHECK(everyone(!fs::exists(path + ".tmp")));
}

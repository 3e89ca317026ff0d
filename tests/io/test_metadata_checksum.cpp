// The checkpoint metadata checksum (io/checkpoint_file.hpp, metadata_checksum): every attribute
// it seals, changed alone to another valid value, must fail a load (read_checkpoint_meta,
// read_checkpoint) and tptrain inspect with "the metadata is corrupt". The attributes changed
// are those sealed_attributes() lists, the list the hash is built from, and every root and
// /train attribute a written file holds must be on it or on a short list of unsealed ones with
// a reason: a new attribute is then either sealed, and changed here, or fails this test until
// someone says why it need not be. Serial (MPI_COMM_SELF, rank 0), like the damage tests.
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "io/checkpoint_file.hpp"
#include "io/hdf5_attributes.hpp"
#include "src/driver/inspect.hpp"
#include "tests/io/checkpoint_tensors.hpp"
#include "tests/mpi_test_util.hpp"

using namespace tptrain::io;
namespace fs = std::filesystem;

namespace {

using tptrain::test::Tensor;

// What the trainer writes: the layout, and in /train the data position, the seed and an fp16
// run's loss-scaler state (src/checkpoint/model_checkpoint.cpp, TrainingRun::train_state), and
// data.train's record in /train/blend (TrainingRun::data_record).
CheckpointMeta sample_meta() {
  CheckpointMeta m;
  m.step = 12;
  m.tokens_seen = 3072;
  m.deck = "[model]\nlayers = 2\nhidden = 64\n[training]\nprecision = \"fp16\"\n";
  m.precision = "fp16";
  m.tp = 2;
  m.pp = 1;
  m.dp = 2;
  m.train = {{"step", 12},
             {"seed", 1234},
             {"data_step", 12},
             {"loss_scale_bits", 4688247212092686336},  // 2^16 as a double's bits
             {"loss_scale_growth_tracker", 3},
             {"loss_scale_hysteresis_tracker", 1}};
  m.blend.entries = {{"/data/web/train.bin", 1000000, 3, 70}, {"/data/code/", 40000, 0.25, 26}};
  m.blend.sequences = 96;
  return m;
}

std::vector<Tensor> sample_tensors() {
  std::vector<Tensor> ts = {{"model/ln_f/weight", {8}, {}}, {"optimizer/exp_avg/model/ln_f/weight", {8}, {}}};
  for (Tensor& t : ts)
    for (int i = 0; i < 8; ++i) t.values.push_back(0.25f * static_cast<float>(i) - 1.0f);
  return ts;
}

// Root, /train and /train/blend attributes of the file, as paths ("step", "train/seed",
// "train/blend/path_0").
std::set<std::string> attributes_in(const std::string& path) {
  std::set<std::string> names;
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  h5::Status st;
  for (const std::string& n : h5::attribute_names(f, st, "")) names.insert(n);
  const hid_t g = H5Gopen2(f, "train", H5P_DEFAULT);
  REQUIRE(g >= 0);
  for (const std::string& n : h5::attribute_names(g, st, "/train/")) names.insert("train/" + n);
  H5Gclose(g);
  if (H5Lexists(f, "train/blend", H5P_DEFAULT) > 0) {
    const hid_t b = H5Gopen2(f, "train/blend", H5P_DEFAULT);
    REQUIRE(b >= 0);
    for (const std::string& n : h5::attribute_names(b, st, "/train/blend/")) names.insert("train/blend/" + n);
    H5Gclose(b);
  }
  H5Fclose(f);
  REQUIRE(st.ok());
  return names;
}

// Gives attribute `path` another valid value of the same type: an integer + 1 (a layout of 2
// stays a valid layout), a number x 2 (a blend's weight), a string with one byte changed.
void change_attribute(const std::string& file, const std::string& path) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(f >= 0);
  const auto slash = path.rfind('/');
  const std::string object = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const hid_t loc = H5Oopen(f, object.c_str(), H5P_DEFAULT);
  REQUIRE(loc >= 0);
  const hid_t a = H5Aopen(loc, name.c_str(), H5P_DEFAULT);
  REQUIRE(a >= 0);
  const hid_t type = H5Aget_type(a);
  const H5T_class_t cls = H5Tget_class(type);
  H5Tclose(type);
  h5::Status st;
  if (cls == H5T_INTEGER) {
    long long v = 0;
    REQUIRE(H5Aread(a, H5T_NATIVE_LLONG, &v) >= 0);
    ++v;
    REQUIRE(H5Awrite(a, H5T_NATIVE_LLONG, &v) >= 0);
    H5Aclose(a);
  } else if (cls == H5T_FLOAT) {
    double v = 0;
    REQUIRE(H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0);
    v *= 2;
    REQUIRE(H5Awrite(a, H5T_NATIVE_DOUBLE, &v) >= 0);
    H5Aclose(a);
  } else if (cls == H5T_STRING) {
    H5Aclose(a);
    std::string text = h5::read_string_attr(loc, name.c_str(), st).value_or("");
    REQUIRE(!text.empty());
    text[text.size() / 2] = static_cast<char>(text[text.size() / 2] ^ 0x01);
    REQUIRE(H5Adelete(loc, name.c_str()) >= 0);
    h5::write_string_attr(loc, name.c_str(), text, st);
  } else {
    H5Aclose(a);
    FAIL("attribute " << path << " is neither a number nor a string: this test cannot change it");
  }
  REQUIRE(st.ok());
  H5Oclose(loc);
  REQUIRE(H5Fclose(f) >= 0);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// inspect's verdict, and what each load threw ("" when it loaded).
struct Verdicts {
  int inspect_rc = -1;
  std::string inspect_text, meta_error, read_error;
};

Verdicts examine(const std::string& path) {
  Verdicts v;
  std::ostringstream out, err;
  v.inspect_rc = tptrain::driver::inspect_checkpoint(path, out, err);
  v.inspect_text = out.str() + err.str();
  try {
    read_checkpoint_meta(MPI_COMM_SELF, path);
  } catch (const CheckpointError& e) {
    v.meta_error = e.what();
  }
  std::vector<Tensor> ts = sample_tensors();
  try {
    read_checkpoint(MPI_COMM_SELF, path, tptrain::test::row_shards(ts));
  } catch (const CheckpointError& e) {
    v.read_error = e.what();
  }
  return v;
}

constexpr char kCorrupt[] = "the metadata is corrupt";

struct SampleFile {
  fs::path dir = fs::temp_directory_path() / ("tptrain_metadata_checksum_" + std::to_string(::getpid()));
  std::string good = (dir / "good.h5").string();
  SampleFile() {
    fs::create_directories(dir);
    std::vector<Tensor> ts = sample_tensors();
    write_checkpoint(MPI_COMM_SELF, good, sample_meta(), tptrain::test::row_shards(ts));
  }
  ~SampleFile() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string copy(const std::string& name) const {
    const std::string path = (dir / (name + ".h5")).string();
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    return path;
  }
};

std::string file_name(std::string path) {
  for (char& c : path)
    if (c == '/') c = '_';
  return path;
}

}  // namespace

TEST_CASE("every attribute the metadata checksum seals, changed alone, fails load and inspect",
          "[io][checkpoint][checksum]") {
  if (tptrain::test::world_rank() != 0) return;
  const SampleFile sample;
  const CheckpointMeta meta = sample_meta();
  {
    const Verdicts v = examine(sample.good);
    INFO(v.inspect_text << v.meta_error << v.read_error);
    REQUIRE(v.inspect_rc == 0);
    REQUIRE(v.meta_error.empty());
    REQUIRE(v.read_error.empty());
  }

  // The root attributes the checksum leaves out, and why. Anything else the writer puts on the
  // root or in /train must be sealed.
  const std::map<std::string, const char*> unsealed = {
      {"format", "checked by value: anything but tptrain-checkpoint is refused"},
      {"format_version", "selects the recipe (the hashed text starts with format_version=2)"},
      {"precision", "informational (any precision loads any checkpoint) and also in the sealed deck"},
      {kMetadataChecksumAttribute, "the seal itself"},
  };
  const std::vector<SealedAttribute> sealed = sealed_attributes(meta);
  std::set<std::string> sealed_paths;
  for (const SealedAttribute& a : sealed) sealed_paths.insert(a.path);
  const std::set<std::string> in_file = attributes_in(sample.good);
  for (const std::string& path : in_file) {
    INFO("attribute " << path << " is in the file but neither sealed nor listed as unsealed with a reason");
    CHECK((sealed_paths.count(path) == 1 || unsealed.count(path) == 1));
  }
  // The list names what the writer writes, and at least the documented attributes.
  for (const std::string& path : sealed_paths) {
    INFO("sealed attribute " << path << " is not in the file");
    CHECK(in_file.count(path) == 1);
  }
  for (const char* path : {"step", "tokens_seen", "tp", "pp", "dp", "deck"}) {
    INFO("attribute " << path << " is not sealed");
    CHECK(sealed_paths.count(path) == 1);
  }
  for (const auto& entry : meta.train) {
    INFO("/train attribute " << entry.first << " is not sealed");
    CHECK(sealed_paths.count("train/" + entry.first) == 1);
  }
  for (const char* path : {"train/blend/sequences", "train/blend/path_1", "train/blend/tokens_1",
                           "train/blend/weight_1", "train/blend/drawn_1"}) {
    INFO("/train/blend attribute " << path << " is not sealed");
    CHECK(sealed_paths.count(path) == 1);
  }

  for (const SealedAttribute& a : sealed) {
    const std::string path = sample.copy(file_name(a.path));
    change_attribute(path, a.path);
    const Verdicts v = examine(path);
    INFO("changed " << a.path << ":\n" << v.inspect_text << "\nread_checkpoint_meta: " << v.meta_error
                    << "\nread_checkpoint: " << v.read_error);
    CHECK(v.inspect_rc == 1);
    CHECK(contains(v.inspect_text, kCorrupt));
    CHECK(contains(v.meta_error, kCorrupt));
    CHECK(contains(v.read_error, kCorrupt));
  }
}

TEST_CASE("an unsealed attribute changes nothing a load reads; format_version 1 does not switch the seal off",
          "[io][checkpoint][checksum]") {
  if (tptrain::test::world_rank() != 0) return;
  const SampleFile sample;
  SECTION("precision is informational: the file loads with the values written") {
    const std::string path = sample.copy("precision");
    change_attribute(path, "precision");
    const Verdicts v = examine(path);
    INFO(v.inspect_text << v.meta_error << v.read_error);
    CHECK(v.inspect_rc == 0);
    CHECK(v.meta_error.empty());
    CHECK(v.read_error.empty());
  }
  SECTION("a file that says format_version 1 but carries the seal is still checked") {
    const std::string path = sample.copy("version_1");
    {
      const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      REQUIRE(f >= 0);
      const hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
      const int one = 1;
      REQUIRE(H5Awrite(a, H5T_NATIVE_INT, &one) >= 0);
      H5Aclose(a);
      REQUIRE(H5Fclose(f) >= 0);
    }
    {
      const Verdicts v = examine(path);  // the seal still verifies: nothing it covers changed
      INFO(v.inspect_text << v.meta_error << v.read_error);
      CHECK(v.meta_error.empty());
      CHECK(v.read_error.empty());
    }
    change_attribute(path, "step");
    const Verdicts v = examine(path);
    INFO(v.inspect_text << "\n" << v.meta_error << "\n" << v.read_error);
    CHECK(v.inspect_rc == 1);
    CHECK(contains(v.inspect_text, kCorrupt));
    CHECK(contains(v.meta_error, kCorrupt));
    CHECK(contains(v.read_error, kCorrupt));
  }
}

// Files written by earlier builds must keep loading: the hash is the documented recipe
// (io/checkpoint_file.hpp), computed here independently of metadata_checksum.
TEST_CASE("the metadata checksum is the documented recipe", "[io][checkpoint][checksum]") {
  auto splitmix = [](std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  auto recipe = [&](const CheckpointMeta& m) {
    std::ostringstream text;
    text << "format_version=2\nstep=" << m.step << "\ntokens_seen=" << m.tokens_seen << "\ntp=" << m.tp
         << "\npp=" << m.pp << "\ndp=" << m.dp << "\n";
    for (const auto& [name, value] : m.train) text << "train." << name << "=" << value << "\n";
    if (!m.blend.empty()) text << "train.blend.sequences=" << m.blend.sequences << "\n";
    for (std::size_t i = 0; i < m.blend.entries.size(); ++i) {
      const BlendEntryRecord& e = m.blend.entries[i];
      std::uint64_t bits = 0;
      std::memcpy(&bits, &e.weight, sizeof bits);
      text << "train.blend.path_" << i << "=" << e.path << "\ntrain.blend.tokens_" << i << "=" << e.tokens
           << "\ntrain.blend.weight_" << i << "=" << std::hex << std::setw(16) << std::setfill('0') << bits
           << std::dec << "\ntrain.blend.drawn_" << i << "=" << e.drawn << "\n";
    }
    text << "deck=" << m.deck;
    const std::string s = text.str();
    std::uint64_t h = 0;
    for (std::size_t i = 0; i < s.size(); i += 8) {
      std::uint64_t w = 0;
      for (std::size_t b = 0; b < 8 && i + b < s.size(); ++b)
        w |= std::uint64_t(static_cast<unsigned char>(s[i + b])) << (8 * b);
      h = splitmix(h ^ w);
    }
    return splitmix(h ^ s.size());
  };
  CheckpointMeta m = sample_meta();
  CHECK(metadata_checksum(m) == recipe(m));
  m.blend = {};  // a file without /train/blend (every file from before it) hashes as it did
  CHECK(metadata_checksum(m) == recipe(m));
  m.train.clear();
  m.deck = "é";  // two bytes: one zero-padded word
  m.step = -1;
  CHECK(metadata_checksum(m) == recipe(m));
}

// A Hugging Face folder's weights (io/safetensors_folder.hpp): one model.safetensors, or the shards
// of model.safetensors.index.json read as one set of tensors, DeepSeek's F8_E4M3 weights with their
// scales beside them; an index that disagrees with its shards, names a path or a missing shard, a
// folder with both forms or neither, and scales in another shard than their weight are refused by
// name.
#include "catch.hpp"

#include <fstream>

#include "data/scratch_dir.hpp"
#include "io/safetensors_folder.hpp"

using namespace tptrain::io;
using Catch::Matchers::Contains;

namespace {

SafetensorsTensor f32(const std::string& name, std::vector<float> values) {
  const std::uint64_t n = values.size();
  return {name, SafetensorsDtype::F32, {n}, safetensors_encode(values.data(), n, SafetensorsDtype::F32)};
}
// A 2 x 2 F8_E4M3 weight of 1, 2, 0.5, -1 and its one block scale.
std::vector<SafetensorsTensor> fp8(const std::string& name, float scale) {
  const std::vector<float> w{1.0f, 2.0f, 0.5f, -1.0f};
  return {{name, SafetensorsDtype::F8_E4M3, {2, 2}, safetensors_encode(w.data(), 4, SafetensorsDtype::F8_E4M3)},
          {name + "_scale_inv", SafetensorsDtype::F32, {1, 1}, safetensors_encode(&scale, 1, SafetensorsDtype::F32)}};
}
void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("safetensors folder: the shards of an index read as one model, fp8 scales beside their weights",
          "[io][safetensors][hf]") {
  tptrain::test::ScratchDir dir("safetensors_folder");
  std::vector<SafetensorsTensor> first = fp8("a.weight", 0.25f);
  first.push_back(f32("b", {3.0f}));
  write_safetensors(dir.file("model-00001-of-00002.safetensors"), first);
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), {f32("c", {4.0f, 5.0f})});
  write_text(dir.file("model.safetensors.index.json"),
             R"({"metadata": {"total_size": 20}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                 "a.weight_scale_inv": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                 "c": "model-00002-of-00002.safetensors"}})");
  const SafetensorsFolder folder(dir.path());
  CHECK_THAT(folder.source(), Contains("model.safetensors.index.json"));
  std::vector<std::string> names;
  for (const SafetensorsTensorInfo* t : folder.tensors()) names.push_back(t->name);
  CHECK(names == std::vector<std::string>{"a.weight", "a.weight_scale_inv", "b", "c"});
  CHECK(folder.is_block_scales("a.weight_scale_inv"));
  CHECK_FALSE(folder.is_block_scales("a.weight"));
  CHECK_FALSE(folder.is_block_scales("b"));
  CHECK(folder.read_float32("a.weight") == std::vector<float>{0.25f, 0.5f, 0.125f, -0.25f});
  CHECK(folder.read_float32("c") == std::vector<float>{4.0f, 5.0f});
  CHECK_THAT(folder.path_of("c"), Contains("model-00002-of-00002.safetensors"));
  CHECK(folder.find("d") == nullptr);
  CHECK_THROWS_WITH(folder.read_float32("d"), Contains("no tensor 'd'"));

  // One model.safetensors: the same reader.
  tptrain::test::ScratchDir single("safetensors_folder");
  write_safetensors(single.file("model.safetensors"), {f32("x", {1.0f}), f32("x_scale_inv", {2.0f})});
  const SafetensorsFolder one(single.path());
  CHECK_THAT(one.source(), Contains("model.safetensors"));
  CHECK(one.tensors().size() == 2);
  CHECK_FALSE(one.is_block_scales("x_scale_inv"));  // x is not F8_E4M3: a tensor of its own
}

TEST_CASE("safetensors folder: indexes that disagree with their shards are refused by name", "[io][safetensors][hf]") {
  const std::string a = "model-00001-of-00002.safetensors", b = "model-00002-of-00002.safetensors";
  struct Case {
    const char* what;
    std::string index;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases{
      {"not JSON", "{\"weight_map\": ", {"model.safetensors.index.json", "not valid JSON"}},
      {"no weight_map", R"({"metadata": {}})", {"expected a JSON object with a \"weight_map\" object"}},
      {"empty", R"({"weight_map": {}})", {"the weight_map names no tensor"}},
      {"a path", R"({"weight_map": {"x": "../model-00001-of-00002.safetensors"}})",
       {"weight_map 'x' names \"../model-00001-of-00002.safetensors\"", "a file name of the index's folder"}},
      {"not a string", R"({"weight_map": {"x": 3}})", {"weight_map 'x' is 3"}},
      {"a missing shard", R"({"weight_map": {"x": "model-00009-of-00009.safetensors"}})",
       {"model-00009-of-00009.safetensors", "no such file"}},
      {"a name the shard lacks", R"({"weight_map": {"x": ")" + a + R"(", "y": ")" + a + R"(", "q": ")" + b + R"("}})",
       {"weight_map puts 'q' in " + b + ", which has no such tensor"}},
      {"a tensor mapped elsewhere", R"({"weight_map": {"x": ")" + a + R"(", "y": ")" + b + R"(", "z": ")" + b + R"("}})",
       {"weight_map puts 'y' in " + b}},
      {"a tensor left out", R"({"weight_map": {"x": ")" + a + R"(", "z": ")" + b + R"("}})",
       {"tensor 'y' of " + a + " is not in the weight_map"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    tptrain::test::ScratchDir dir("safetensors_folder");
    write_safetensors(dir.file(a), {f32("x", {1.0f}), f32("y", {2.0f})});
    write_safetensors(dir.file(b), {f32("z", {3.0f})});
    write_text(dir.file("model.safetensors.index.json"), c.index);
    try {
      SafetensorsFolder folder(dir.path());
      FAIL("accepted");
    } catch (const SafetensorsError& e) {
      for (const std::string& words : c.expected) CHECK_THAT(e.what(), Contains(words));
    }
  }
}

TEST_CASE("safetensors folder: both forms, neither, a tensor in two shards, scales apart from their weight",
          "[io][safetensors][hf]") {
  tptrain::test::ScratchDir dir("safetensors_folder");
  CHECK_THROWS_WITH(SafetensorsFolder(dir.path()),
                    Contains("no model.safetensors or model.safetensors.index.json"));
  write_safetensors(dir.file("model.safetensors"), {f32("x", {1.0f})});
  write_text(dir.file("model.safetensors.index.json"), R"({"weight_map": {"x": "model.safetensors"}})");
  CHECK_THROWS_WITH(SafetensorsFolder(dir.path()), Contains("holds both model.safetensors and "
                                                                     "model.safetensors.index.json"));

  // The index cannot name one tensor twice, but two of its shards can hold it: refused, naming both.
  tptrain::test::ScratchDir twice("safetensors_folder");
  write_safetensors(twice.file("s1.safetensors"), {f32("x", {1.0f})});
  write_safetensors(twice.file("s2.safetensors"), {f32("x", {2.0f}), f32("y", {3.0f})});
  write_text(twice.file("model.safetensors.index.json"),
             R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})");
  CHECK_THROWS_WITH(SafetensorsFolder(twice.path()),
                    Contains("tensor 'x' of s2.safetensors is mapped to s1.safetensors"));

  // DeepSeek keeps a weight's scales in its shard; elsewhere they are refused, naming both files.
  tptrain::test::ScratchDir apart("safetensors_folder");
  const std::vector<SafetensorsTensor> w = fp8("w", 2.0f);
  write_safetensors(apart.file("s1.safetensors"), {w[0]});
  write_safetensors(apart.file("s2.safetensors"), {w[1]});
  write_text(apart.file("model.safetensors.index.json"),
             R"({"weight_map": {"w": "s1.safetensors", "w_scale_inv": "s2.safetensors"}})");
  const SafetensorsFolder folder(apart.path());
  CHECK(folder.is_block_scales("w_scale_inv"));
  CHECK_THROWS_WITH(folder.read_float32("w"), Contains("tensor 'w' of") && Contains("s1.safetensors") &&
                                                  Contains("its block scales 'w_scale_inv' are in") &&
                                                  Contains("s2.safetensors"));
  // Without them anywhere: the reader's own refusal, naming the tensor.
  tptrain::test::ScratchDir missing("safetensors_folder");
  write_safetensors(missing.file("model.safetensors"), {w[0]});
  CHECK_THROWS_WITH(SafetensorsFolder(missing.path()).read_float32("w"),
                    Contains("tensor 'w' is F8_E4M3 without its block scales 'w_scale_inv'"));
}

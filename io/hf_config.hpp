// config.json of a Hugging Face model as a file, whatever the architecture: a JSON object whose
// fields are read by type, each failure naming the file and the field, and written as
// save_pretrained writes it (pretty-printed, fields in the order given). Which fields a config
// class has, and their defaults, is the architecture's file format (io/hf_gpt2_config.hpp,
// io/hf_llama_config.hpp); whether a config describes a model tptrain computes is the caller's
// (src/checkpoint/hf_*.hpp). JSON is parsed here, in host-only io/ (nlohmann-json), never in a header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tptrain::io {

// The fields of one config.json. Every read leaves its output alone when the field is absent
// (the caller's default), and throws std::runtime_error "Hugging Face config <path>: <what>" when
// it has another type.
class HfConfigFields {
 public:
  // Reads and parses `path`: it must be one JSON object.
  explicit HfConfigFields(const std::string& path);
  ~HfConfigFields();

  bool has(const char* key) const;  // present, null included
  bool is_null(const char* key) const;
  bool is_number(const char* key) const;
  // A positive integer that fits in an int; nullopt when absent or null.
  std::optional<int> positive(const char* key) const;
  // The same with 0 allowed (a count of optional parts: DeepSeek's shared experts, dense layers).
  std::optional<int> non_negative(const char* key) const;
  void text(const char* key, std::string* out) const;
  void flag(const char* key, bool* out) const;
  void number(const char* key, double* out) const;
  // Any integer; nullopt when absent or not an integer (token ids, which some configs give as lists).
  std::optional<int> integer(const char* key) const;
  // A list of positive integers (quantization_config.weight_block_size); nullopt when absent or null.
  std::optional<std::vector<int>> positive_list(const char* key) const;

  // The object at `key` (rope_scaling), read as this file's fields: its failures name the key
  // ("rope_scaling.factor = ..."). nullopt when absent or null; not an object: throws.
  std::optional<HfConfigFields> object(const char* key) const;
  std::vector<std::string> keys() const;  // the fields present, in the file's order

  [[noreturn]] void fail(const std::string& what) const;

  HfConfigFields(HfConfigFields&&) noexcept;

 private:
  struct Json;
  HfConfigFields(std::string path, std::string prefix, std::unique_ptr<Json> json);
  std::string name(const char* key) const { return prefix_ + key; }
  std::optional<int> at_least(const char* key, int least, const char* what) const;
  std::string path_;
  std::string prefix_;  // "rope_scaling." for an object's fields; "" for the file's
  std::unique_ptr<Json> json_;
};

// A config.json to write, field by field in order.
class HfConfigWriter {
 public:
  HfConfigWriter();
  HfConfigWriter(HfConfigWriter&&) noexcept;
  ~HfConfigWriter();
  HfConfigWriter& set(const char* key, int value);
  HfConfigWriter& set(const char* key, double value);
  HfConfigWriter& set(const char* key, bool value);
  HfConfigWriter& set(const char* key, const char* value);
  HfConfigWriter& set(const char* key, const std::string& value);
  HfConfigWriter& set(const char* key, const std::vector<std::string>& values);
  HfConfigWriter& set(const char* key, std::optional<int> value);  // null when empty
  HfConfigWriter& set(const char* key, const HfConfigWriter& object);  // a nested object (rope_scaling)
  // Pretty-printed with an indent of 2, as save_pretrained writes it, ending in a newline.
  std::string text() const;
  // The same with every object's keys sorted, as save_pretrained sorts them (json.dumps with
  // sort_keys): the field order of set() does not matter.
  std::string sorted_text() const;

 private:
  struct Json;
  std::unique_ptr<Json> json_;
};

}  // namespace tptrain::io

#include "io/checkpoint_blend.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "io/hdf5_attributes.hpp"

namespace tptrain::io::detail {
namespace {

constexpr char kWhere[] = "/train/blend/";

std::string indexed(const char* name, std::size_t i) { return fmt::format("{}_{}", name, i); }

}  // namespace

void write_blend(hid_t train, const BlendRecord& blend, h5::Status& st) {
  if (blend.empty() || !st.ok()) return;
  h5::Handle group(TPTRAIN_H5(st, H5Gcreate2(train, "blend", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                              "group /train/blend"),
                   H5Gclose);
  if (!st.ok()) return;
  const auto write_int = [&](const std::string& name, std::int64_t v) {
    h5::write_attr(group.get(), name.c_str(), H5T_STD_I64LE, H5T_NATIVE_INT64, &v, st, kWhere);
  };
  write_int("sequences", blend.sequences);
  for (std::size_t i = 0; i < blend.entries.size(); ++i) {
    const BlendEntryRecord& e = blend.entries[i];
    h5::write_string_attr(group.get(), indexed("path", i).c_str(), e.path, st);
    write_int(indexed("tokens", i), e.tokens);
    h5::write_attr(group.get(), indexed("weight", i).c_str(), H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &e.weight, st,
                   kWhere);
    write_int(indexed("drawn", i), e.drawn);
  }
  if (st.ok()) TPTRAIN_H5(st, H5Gclose(group.release()), "group /train/blend");
}

BlendRecord read_blend(hid_t train, std::vector<std::string>& problems) {
  BlendRecord blend;
  h5::Status st;
  const htri_t exists = TPTRAIN_H5(st, H5Lexists(train, "blend", H5P_DEFAULT), "/train/blend");
  if (!st.ok()) {
    problems.push_back(st.error);
    return blend;
  }
  if (exists == 0) return blend;  // a checkpoint from before the record
  h5::Handle group(TPTRAIN_H5(st, H5Gopen2(train, "blend", H5P_DEFAULT), "group /train/blend"), H5Gclose);
  const auto bad = [&](const std::string& name, const std::string& value, const char* expected) {
    problems.push_back(fmt::format("attribute {}{} = {}: expected {}", kWhere, name, value, expected));
  };
  // A required attribute; a problem (and nullopt) when it is missing or of another type.
  const auto required = [&](const std::string& name, auto read) -> decltype(read(name)) {
    if (!st.ok()) return std::nullopt;
    if (!h5::attr_exists(group.get(), name.c_str(), st, kWhere)) {
      if (st.ok()) problems.push_back(fmt::format("the group /train/blend has no {} attribute", name));
      return std::nullopt;
    }
    return read(name);
  };
  const auto read_int = [&](const std::string& name) {
    return h5::read_int_attr(group.get(), name.c_str(), st, kWhere);
  };
  const auto count = [&](const std::string& name) -> std::optional<std::int64_t> {
    const auto v = required(name, read_int);
    if (v && *v < 0) bad(name, std::to_string(*v), "a count >= 0");
    return v && *v >= 0 ? v : std::nullopt;
  };
  const auto sequences = count("sequences");
  BlendRecord out;
  std::size_t entries = 0;  // the path_<i> there are
  while (st.ok() && entries < static_cast<std::size_t>(kMaxBlendEntries) &&
         h5::attr_exists(group.get(), indexed("path", entries).c_str(), st, kWhere))
    ++entries;
  if (st.ok() && entries == 0) problems.push_back("the group /train/blend has no entry (no path_0 attribute)");
  bool complete = true;
  for (std::size_t u = 0; u < entries && st.ok(); ++u) {
    const auto path = required(indexed("path", u), [&](const std::string& name) {
      return h5::read_string_attr(group.get(), name.c_str(), st, kWhere);
    });
    const auto tokens = count(indexed("tokens", u));
    const auto weight = required(indexed("weight", u), [&](const std::string& name) {
      return h5::read_float_attr(group.get(), name.c_str(), st, kWhere);
    });
    if (weight && !(std::isfinite(*weight) && *weight > 0))
      bad(indexed("weight", u), fmt::format("{}", *weight), "a finite weight > 0");
    const auto drawn = count(indexed("drawn", u));
    if (path && tokens && weight && drawn && std::isfinite(*weight) && *weight > 0)
      out.entries.push_back({*path, *tokens, *weight, *drawn});
    else
      complete = false;
  }
  if (!st.ok()) problems.push_back(st.error);
  // A record with any problem is no record: the load fails on the problems anyway.
  if (st.ok() && sequences && complete && entries > 0) {
    blend = std::move(out);
    blend.sequences = *sequences;
  }
  return blend;
}

std::vector<std::pair<std::string, std::string>> blend_attribute_texts(const BlendRecord& blend) {
  std::vector<std::pair<std::string, std::string>> out;
  if (blend.empty()) return out;
  out.emplace_back("sequences", std::to_string(blend.sequences));
  for (std::size_t i = 0; i < blend.entries.size(); ++i) {
    const BlendEntryRecord& e = blend.entries[i];
    out.emplace_back(indexed("path", i), e.path);
    out.emplace_back(indexed("tokens", i), std::to_string(e.tokens));
    std::uint64_t bits = 0;  // exact, and the same text in any language
    static_assert(sizeof bits == sizeof e.weight, "a weight is an IEEE double");
    std::memcpy(&bits, &e.weight, sizeof bits);
    out.emplace_back(indexed("weight", i), fmt::format("{:016x}", bits));
    out.emplace_back(indexed("drawn", i), std::to_string(e.drawn));
  }
  return out;
}

}  // namespace tptrain::io::detail

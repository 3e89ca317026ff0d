#include "io/checkpoint_checksum.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "io/checkpoint_slabs.hpp"

namespace tptrain::io {

std::uint64_t checksum_term(std::uint32_t bits, std::uint64_t index) noexcept {
  return splitmix64(bits ^ splitmix64(index));
}

std::vector<SealedAttribute> sealed_attributes(const CheckpointMeta& meta) {
  std::vector<SealedAttribute> sealed = {
      {"step", "step=" + std::to_string(meta.step) + "\n"},
      {"tokens_seen", "tokens_seen=" + std::to_string(meta.tokens_seen) + "\n"},
      {"tp", "tp=" + std::to_string(meta.tp) + "\n"},
      {"pp", "pp=" + std::to_string(meta.pp) + "\n"},
      {"dp", "dp=" + std::to_string(meta.dp) + "\n"}};
  for (const auto& [name, value] : meta.train)
    sealed.push_back({"train/" + name, "train." + name + "=" + std::to_string(value) + "\n"});
  for (const auto& [name, value] : detail::blend_attribute_texts(meta.blend))
    sealed.push_back({"train/blend/" + name, "train.blend." + name + "=" + value + "\n"});
  sealed.push_back({"deck", "deck=" + meta.deck});
  return sealed;
}

std::uint64_t metadata_checksum(const CheckpointMeta& meta) noexcept {
  std::string text = "format_version=2\n";
  for (const SealedAttribute& a : sealed_attributes(meta)) text += a.line;
  std::uint64_t h = 0;
  for (std::size_t i = 0; i < text.size(); i += 8) {
    unsigned char word[8] = {};
    std::memcpy(word, text.data() + i, std::min<std::size_t>(8, text.size() - i));
    std::uint64_t w = 0;
    for (int b = 7; b >= 0; --b) w = (w << 8) | word[b];  // little-endian, whatever the host
    h = splitmix64(h ^ w);
  }
  return splitmix64(h ^ static_cast<std::uint64_t>(text.size()));
}

std::uint64_t checksum_run(const float* data, std::uint64_t n, std::uint64_t first) noexcept {
  static_assert(sizeof(float) == sizeof(std::uint32_t), "float32 checksums need a 32-bit float");
  std::uint64_t sum = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    std::uint32_t bits;
    std::memcpy(&bits, data + k, sizeof bits);
    sum += checksum_term(bits, first + k);
  }
  return sum;
}

namespace detail {

std::uint64_t shard_checksum(const TensorShard& t) {
  std::uint64_t sum = 0;
  const float* p = t.data;
  for (const Hyperslab& s : t.slabs)
    for_each_run(t.global_shape, s, [&](std::uint64_t first, std::uint64_t n) {
      sum += checksum_run(p, n, first);
      p += n;
    });
  return sum;
}

std::string hex64(std::uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(v));
  return text;
}

RowBlocks row_blocks(const std::vector<std::uint64_t>& shape, std::uint64_t part,
                     std::uint64_t parts, std::uint64_t max_chunk_elements) {
  RowBlocks b;
  b.shape = shape;
  const std::uint64_t rows = shape.empty() ? 1 : shape[0];
  for (std::size_t d = 1; d < shape.size(); ++d) b.row_elements *= shape[d];
  if (rows == 0 || b.row_elements == 0 || parts == 0) return b;
  const std::uint64_t base = rows / parts, extra = rows % parts;
  b.begin = part * base + std::min(part, extra);
  b.end = b.begin + base + (part < extra ? 1 : 0);
  b.chunk_rows = std::max<std::uint64_t>(1, max_chunk_elements / b.row_elements);
  const std::uint64_t most = base + (extra > 0 ? 1 : 0);  // rows of the largest block
  b.rounds = (most + b.chunk_rows - 1) / b.chunk_rows;
  return b;
}

template <class T>
std::uint64_t read_row_block(hid_t dset, const RowBlocks& b, std::uint64_t round, hid_t mem_type,
                             hid_t dxpl, const std::string& name, std::vector<T>& buf,
                             std::uint64_t& first, h5::Status& st) {
  using h5::Handle;
  const std::uint64_t lo = std::min(b.end, b.begin + round * b.chunk_rows);
  const std::uint64_t hi = std::min(b.end, lo + b.chunk_rows);
  first = lo * b.row_elements;
  const bool some = st.ok() && hi > lo;
  hsize_t n = some ? static_cast<hsize_t>((hi - lo) * b.row_elements) : 0;
  T dummy{};
  if (b.shape.empty()) {  // scalar: all or nothing (never collective: inspect only)
    if (!some) return 0;
    buf.resize(1);
    TPTRAIN_H5(st, H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, dxpl, buf.data()), name);
    return st.ok() ? 1 : 0;
  }
  Handle fspace(TPTRAIN_H5(st, H5Dget_space(dset), name), H5Sclose);
  if (!fspace.valid()) return 0;
  if (some) {
    std::vector<hsize_t> start(b.shape.size(), 0), count = to_hsize(b.shape);
    start[0] = lo;
    count[0] = hi - lo;
    TPTRAIN_H5(st,
               H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr,
                                   count.data(), nullptr),
               name);
    buf.resize(static_cast<std::size_t>(n));
  }
  const bool reading = some && st.ok();
  if (!reading) {
    n = 0;
    TPTRAIN_H5(st, H5Sselect_none(fspace.get()), name);
  }
  const hsize_t mdim = reading ? n : 1;
  Handle mspace(TPTRAIN_H5(st, H5Screate_simple(1, &mdim, nullptr), name), H5Sclose);
  if (!reading && mspace.valid()) TPTRAIN_H5(st, H5Sselect_none(mspace.get()), name);
  TPTRAIN_H5(st,
             H5Dread(dset, mem_type, mspace.get(), fspace.get(), dxpl,
                     reading ? buf.data() : &dummy),
             name);
  return reading && st.ok() ? static_cast<std::uint64_t>(n) : 0;
}

template std::uint64_t read_row_block<float>(hid_t, const RowBlocks&, std::uint64_t, hid_t, hid_t,
                                             const std::string&, std::vector<float>&,
                                             std::uint64_t&, h5::Status&);
template std::uint64_t read_row_block<double>(hid_t, const RowBlocks&, std::uint64_t, hid_t, hid_t,
                                              const std::string&, std::vector<double>&,
                                              std::uint64_t&, h5::Status&);

}  // namespace detail
}  // namespace tptrain::io

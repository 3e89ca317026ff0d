// A batch of token ids on the host and its device copy, for the forward-only passes (evaluation,
// generation). Training uploads its micro-batches through train::MicroBatchQueue (pinned,
// asynchronous, each kept until its backward).
#pragma once

#include <cstdint>
#include <vector>

#include "kokkos_kernels/views.hpp"
#include "src/train/documents.hpp"

namespace tptrain::train {

struct DeviceBatch {
  kernels::Tokens inputs, targets;                 // [n] on the device: the rank's rows (B*S, or B*2c under context parallelism)
  std::vector<std::int32_t> h_inputs, h_targets;   // [B*S] on the host: whole sequences
  // Packed documents (documents.hpp; empty unless asked for): each token's document start and
  // position in its document, derived from the inputs at upload.
  Documents documents;
  kernels::Tokens doc_start, positions;
  std::vector<std::int32_t> h_doc_start, h_positions;  // [n]
  std::vector<std::int32_t> local_inputs, local_targets, work;  // context parallelism: the rank's rows

  // n: the rank's rows (GptModel::tokens()).
  explicit DeviceBatch(std::int64_t n, const Documents& d = {})
      : inputs("batch.inputs", n), targets("batch.targets", n),
        h_inputs(static_cast<std::size_t>(whole(n, d))), h_targets(static_cast<std::size_t>(whole(n, d))), documents(d) {
    if (documents.doc_starts()) {
      doc_start = kernels::Tokens("batch.doc_start", n);
      h_doc_start.resize(static_cast<std::size_t>(n));
    }
    if (documents.positions()) {
      positions = kernels::Tokens("batch.positions", n);
      h_positions.resize(static_cast<std::size_t>(n));
    }
  }

  // Stream-ordered on exec: the kernels of the previous batch that still read the device ids run
  // first; no fence. The host vectors are pageable memory, which the copy has consumed when it
  // returns (CUDA may synchronise with the stream to stage it).
  void upload(const kx::ExecSpace& exec) {
    using Host = Kokkos::View<const int*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    if (documents.context.split()) {
      local_inputs.resize(inputs.size());
      local_targets.resize(targets.size());
      documents.take_rows(static_cast<std::int64_t>(h_inputs.size()) / documents.seq_length, h_inputs.data(),
                          h_targets.data(), local_inputs.data(), local_targets.data(),
                          h_doc_start.empty() ? nullptr : h_doc_start.data(),
                          h_positions.empty() ? nullptr : h_positions.data(), work);
      Kokkos::deep_copy(exec, inputs, Host(local_inputs.data(), local_inputs.size()));
      Kokkos::deep_copy(exec, targets, Host(local_targets.data(), local_targets.size()));
    } else {
      Kokkos::deep_copy(exec, inputs, Host(h_inputs.data(), h_inputs.size()));
      Kokkos::deep_copy(exec, targets, Host(h_targets.data(), h_targets.size()));
      if (documents.any())
        documents.derive(h_inputs.data(), static_cast<std::int64_t>(h_inputs.size()),
                         h_doc_start.empty() ? nullptr : h_doc_start.data(),
                         h_positions.empty() ? nullptr : h_positions.data());
    }
    if (!documents.any()) return;
    if (!h_doc_start.empty()) Kokkos::deep_copy(exec, doc_start, Host(h_doc_start.data(), h_doc_start.size()));
    if (!h_positions.empty()) Kokkos::deep_copy(exec, positions, Host(h_positions.data(), h_positions.size()));
  }

 private:
  static std::int64_t whole(std::int64_t n, const Documents& d) {
    return d.context.split() ? n / d.local_length() * d.seq_length : n;
  }
};

}  // namespace tptrain::train

// View aliases shared by the kernels and their callers.
// Activations are [tokens, features] row-major (token t = b*S + s); Linear weights [out, in].
#pragma once

#include "kokkos_kernels/compat.hpp"

namespace tptrain::kernels {

template <class T>
using Matrix = Kokkos::View<T**, Kokkos::LayoutRight, kx::MemSpace>;  // [rows, cols]
template <class T>
using Vector = Kokkos::View<T*, kx::MemSpace>;    // [n]
using Tokens = Kokkos::View<int*, kx::MemSpace>;  // [tokens]
// Attention scores / probabilities of the local heads (one buffer per stage, shared by its layers).
template <class T>
using Tensor4 = Kokkos::View<T****, Kokkos::LayoutRight, kx::MemSpace>;  // [B, nh_local, S, S]

// Unmanaged variants, for views over memory owned elsewhere (e.g. one flat parameter buffer).
template <class T>
using MatrixUnmanaged =
    Kokkos::View<T**, Kokkos::LayoutRight, kx::MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T>
using VectorUnmanaged = Kokkos::View<T*, kx::MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

}  // namespace tptrain::kernels

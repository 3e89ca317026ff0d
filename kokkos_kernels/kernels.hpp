// Convenience header: every tptrain kernel (namespace tptrain::kernels).
#pragma once

#include "kokkos_kernels/adamw.hpp"
#include "kokkos_kernels/attention.hpp"
#include "kokkos_kernels/batched_gemm.hpp"
#include "kokkos_kernels/bias.hpp"
#include "kokkos_kernels/column_sums.hpp"
#include "kokkos_kernels/cross_entropy.hpp"
#include "kokkos_kernels/elementwise.hpp"
#include "kokkos_kernels/embedding.hpp"
#include "kokkos_kernels/flat_segments.hpp"
#include "kokkos_kernels/gelu.hpp"
#include "kokkos_kernels/gemm.hpp"
#include "kokkos_kernels/layernorm.hpp"
#include "kokkos_kernels/loss_sum.hpp"
#include "kokkos_kernels/reductions.hpp"
#include "kokkos_kernels/views.hpp"

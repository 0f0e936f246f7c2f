#pragma once
// Internal to kernels/: the oneDNN CPU engine, per-thread streams and the cache of matmul
// primitives shared by the f32 and int8 GEMMs.
#include <array>
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>

namespace pgq::kernels::detail {

// The process-wide CPU engine.
dnnl::engine& cpuEngine();

// One stream per calling thread, so concurrent callers never share a stream object.
dnnl::stream& cpuStream();

// A matmul as oneDNN sees it, strides included: a [batch, m, k], b [batch, k, n],
// c [batch, m, n] contiguous. Strides are (batch, row, column) in elements.
struct MatmulKey {
  dnnl::memory::data_type a_type;
  dnnl::memory::data_type b_type;
  dnnl::memory::data_type c_type;
  int64_t batch, m, n, k;
  std::array<int64_t, 3> a_strides;
  std::array<int64_t, 3> b_strides;
  // A runtime common source zero point (int8 only).
  bool src_zero_point;
  // The OpenMP thread count the primitive was made for: oneDNN fixes a primitive's
  // parallel split when it creates it, so one made for 1 thread runs on 1 thread even
  // after omp_set_num_threads(2). Filled in by cachedMatmul; callers leave it 0.
  int threads = 0;
  bool operator==(const MatmulKey&) const = default;
};

struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a;
  dnnl::memory::desc b;
  dnnl::memory::desc c;
};

// The primitive for a key, created on first use (thread-safe).
const CachedMatmul& cachedMatmul(const MatmulKey& key);

// Runs a cached matmul on user buffers; src_zero_point is used only if the key has one.
void runMatmul(const MatmulKey& key, const void* a, const void* b, void* c,
               int32_t src_zero_point = 0);

}  // namespace pgq::kernels::detail

#include "kernels/gemm.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kernels/dnnl_context.h"
#include "kernels/kernel_error.h"

namespace pgq::kernels {
namespace detail {
namespace {

struct MatmulKeyHash {
  size_t operator()(const MatmulKey& key) const {
    size_t h = size_t(key.a_type) * 31 + size_t(key.b_type) * 17 + size_t(key.c_type);
    auto mix = [&h](int64_t v) { h = h * 1000003u ^ std::hash<int64_t>()(v); };
    for (int64_t v : {key.batch, key.m, key.n, key.k}) mix(v);
    for (int64_t v : key.a_strides) mix(v);
    for (int64_t v : key.b_strides) mix(v);
    mix(key.src_zero_point);
    mix(key.threads);
    return h;
  }
};

dnnl::memory::desc matrixDesc(int64_t batch, int64_t rows, int64_t cols,
                              const std::array<int64_t, 3>& strides, dnnl::memory::data_type type) {
  if (batch == 1) return dnnl::memory::desc({rows, cols}, type, {strides[1], strides[2]});
  return dnnl::memory::desc({batch, rows, cols}, type, {strides[0], strides[1], strides[2]});
}

CachedMatmul makeMatmul(const MatmulKey& key) {
  CachedMatmul made;
  made.a = matrixDesc(key.batch, key.m, key.k, key.a_strides, key.a_type);
  made.b = matrixDesc(key.batch, key.k, key.n, key.b_strides, key.b_type);
  made.c = matrixDesc(key.batch, key.m, key.n, {key.m * key.n, key.n, 1}, key.c_type);
  dnnl::primitive_attr attr;
  if (key.src_zero_point) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::matmul::desc desc(made.a, made.b, made.c);
  made.primitive = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, cpuEngine()));
  return made;
}

}  // namespace

dnnl::engine& cpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpuStream() {
  thread_local dnnl::stream stream(cpuEngine());
  return stream;
}

const CachedMatmul& cachedMatmul(const MatmulKey& user_key) {
  // Entries are never erased and unordered_map nodes are stable, so a reference stays
  // valid after the lock is released. A primitive is created outside the lock (it can
  // take milliseconds); two threads racing on a new key both create one and the first
  // insert wins.
  MatmulKey key = user_key;
  key.threads = omp_get_max_threads();
  static std::mutex mutex;
  static std::unordered_map<MatmulKey, std::unique_ptr<CachedMatmul>, MatmulKeyHash> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return *it->second;
  }
  auto made = std::make_unique<CachedMatmul>(makeMatmul(key));
  std::lock_guard<std::mutex> lock(mutex);
  return *cache.try_emplace(key, std::move(made)).first->second;
}

void runMatmul(const MatmulKey& key, const void* a, const void* b, void* c,
               int32_t src_zero_point) {
  const CachedMatmul& mm = cachedMatmul(key);
  dnnl::engine& engine = cpuEngine();
  dnnl::stream& stream = cpuStream();
  // oneDNN takes non-const handles but never writes its inputs.
  dnnl::memory a_mem(mm.a, engine, const_cast<void*>(a));
  dnnl::memory b_mem(mm.b, engine, const_cast<void*>(b));
  dnnl::memory c_mem(mm.c, engine, c);
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
  if (key.src_zero_point) {
    dnnl::memory zp_mem({{1}, dnnl::memory::data_type::s32, {1}}, engine, &src_zero_point);
    args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zp_mem);
  }
  mm.primitive.execute(stream, args);
  stream.wait();
}

}  // namespace detail

namespace {

void checkSize(const char* what, const char* name, size_t actual, int64_t expected,
               const GemmShape& shape) {
  if (int64_t(actual) != expected) {
    throw KernelError::format("{}: {} has {} elements, shape batch={} m={} n={} k={} needs {}",
                              what, name, actual, shape.batch, shape.m, shape.n, shape.k, expected);
  }
}

}  // namespace

namespace {

// A dense GEMM of `shape` with operands of `operand_type` and an f32 result, its
// transposed operands described by strides, after the size checks of `what`.
template <typename T>
void denseGemm(const char* what, dnnl::memory::data_type operand_type, const GemmShape& shape, std::span<const T> a,
               std::span<const T> b, std::span<float> c) {
  checkSize(what, "A", a.size(), shape.sizeA(), shape);
  checkSize(what, "B", b.size(), shape.sizeB(), shape);
  checkSize(what, "C", c.size(), shape.sizeC(), shape);
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  detail::MatmulKey key{operand_type,
                        operand_type,
                        dnnl::memory::data_type::f32,
                        shape.batch,
                        m,
                        n,
                        k,
                        // A [M,K] has strides (K,1); stored [K,M] it is (1,M).
                        {m * k, shape.trans_a ? 1 : k, shape.trans_a ? m : 1},
                        // B [K,N] has strides (N,1); stored [N,K] it is (1,K).
                        {k * n, shape.trans_b ? 1 : n, shape.trans_b ? k : 1},
                        false};
  detail::runMatmul(key, a.data(), b.data(), c.data());
}

}  // namespace

void gemmF32(const GemmShape& shape, std::span<const float> a, std::span<const float> b,
             std::span<float> c) {
  shape.validate();
  denseGemm("gemmF32", dnnl::memory::data_type::f32, shape, a, b, c);
}

void gemmBf16(const GemmShape& shape, std::span<const uint16_t> a, std::span<const uint16_t> b,
              std::span<float> c) {
  shape.validate();
  if (!hasBf16Gemm())
    throw KernelError::format("gemmBf16: this CPU ({}) has no bf16 dot products; widen to f32 and use gemmF32",
                              int8Caps().isa_name);
  denseGemm("gemmBf16", dnnl::memory::data_type::bf16, shape, a, b, c);
}

void checkExactInt8Gemm(const QuantFormat& fa, const QuantFormat& fb, const Int8Caps& caps) {
  if (!caps.exact(fa.bits, fb.bits)) {
    throw KernelError::format(
        "int8 GEMM {} x {}: a {}-bit lhs times a {}-bit rhs can saturate silently on this "
        "CPU ({}): without VNNI, vpmaddubsw sums u8 x s8 pairs in 16 bits, so one operand "
        "must have at most {} bits (use exactGemmFormats, e.g. int{}:... on one side)",
        fa.toString(), fb.toString(), fa.bits, fb.bits, caps.describe(), caps.max_bits_both,
        caps.max_bits_both);
  }
}

GemmFormats exactGemmFormats(QuantFormat lhs, QuantFormat rhs, GemmSide narrow,
                             const Int8Caps& caps) {
  lhs.bits = std::min(lhs.bits, caps.max_bits_one);
  rhs.bits = std::min(rhs.bits, caps.max_bits_one);
  if (!caps.exact(lhs.bits, rhs.bits)) {
    QuantFormat& narrowed = narrow == GemmSide::kLhs ? lhs : rhs;
    narrowed.bits = std::min(narrowed.bits, caps.max_bits_both);
  }
  return {lhs, rhs};
}

GemmFormats defaultGemmFormats(int bits, Rounding lhs_rounding, Rounding rhs_rounding,
                               GemmSide narrow, const Int8Caps& caps) {
  return exactGemmFormats(perChannelFormat(bits, lhs_rounding),
                          perChannelFormat(bits, rhs_rounding), narrow, caps);
}

}  // namespace pgq::kernels

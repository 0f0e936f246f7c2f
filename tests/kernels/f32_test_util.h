#pragma once
// Helpers shared by the f32 kernel tests: seeded random data, a thread-count guard,
// guarded output buffers that catch writes past the end (even without ASan), and
// error measures against f64 references.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace pgq::kernels::testing {

// Sizes around the vector width and the parallel threshold (16K elements).
inline const std::vector<int64_t> kAwkwardSizes = {0, 1, 3, 7, 8, 9, 15, 16, 17, 100, 1023, 16385, 20011};
inline const std::vector<int> kThreadCounts = {1, 2};

inline std::vector<float> randomVector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// Sets the OpenMP thread count for a scope.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

// An output buffer with guard values after the last element: a kernel that writes
// past n in a vector tail changes a guard.
class Guarded {
 public:
  static constexpr int64_t kGuard = 24;
  static constexpr float kGuardValue = -12345.5f;
  explicit Guarded(int64_t n, float init = 0.0f) : n_(n), data_(static_cast<size_t>(n + kGuard), kGuardValue) {
    std::fill(data_.begin(), data_.begin() + n, init);
  }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  float operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  std::vector<float> values() const { return {data_.begin(), data_.begin() + n_}; }
  bool guardsIntact() const {
    for (int64_t i = n_; i < n_ + kGuard; ++i)
      if (std::memcmp(&data_[static_cast<size_t>(i)], &kGuardValue, sizeof(float)) != 0) return false;
    return true;
  }

 private:
  int64_t n_;
  std::vector<float> data_;
};

// Largest |got - ref| / (|ref| + floor): a relative error that tolerates absolute
// error `floor` near zero.
inline double maxRelError(const float* got, const std::vector<double>& ref, double floor) {
  double worst = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]) / (std::abs(ref[i]) + floor);
    if (!(err <= worst)) worst = err;  // a NaN error becomes the worst
  }
  return worst;
}

// ||got - ref||_2 / ||ref||_2, the measure used for whole vectors (e.g. gradients).
inline double relL2Error(const std::vector<double>& got, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

inline bool bitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Bit for bit, except that any NaN equals any NaN: where both operands of a product are
// NaN, x86 returns the first one's, and the compiler may order a commutative product's
// operands either way, so a NaN's sign and payload are not part of a kernel's contract.
inline bool equalUpToNanBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return false;
    } else if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace pgq::kernels::testing

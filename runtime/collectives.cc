#include "runtime/collectives.h"

#include <algorithm>
#include <chrono>

namespace pgq {
namespace {

// Counts one collective in `stats` and the time until the end of the scope, so the
// local runs of --profile-ops show the same rows as an MPI job.
class StatsScope {
 public:
  StatsScope(CollectiveStats& stats, double bytes) : stats_(stats), start_(std::chrono::steady_clock::now()) {
    ++stats_.calls;
    stats_.bytes += bytes;
  }
  ~StatsScope() {
    stats_.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  CollectiveStats& stats_;
  std::chrono::steady_clock::time_point start_;
};

// One process: every group is this process alone, so a sum is the process's own data
// and a gather or a scatter is a copy.
class LocalCollectives final : public Collectives {
 public:
  int worldRank() const override { return 0; }
  int worldSize() const override { return 1; }
  int rank(DeviceGroup) const override { return 0; }
  int size(DeviceGroup) const override { return 1; }
  int localSize() const override { return 1; }

  void allReduceSum(float* data, int64_t count, DeviceGroup) override {
    StatsScope scope(stats_, static_cast<double>(count) * sizeof(float));
  }
  void allReduceSum(double* data, int64_t count, DeviceGroup) override {
    StatsScope scope(stats_, static_cast<double>(count) * sizeof(double));
  }
  void allReduceMax(double* data, int64_t count, DeviceGroup) override {
    StatsScope scope(stats_, static_cast<double>(count) * sizeof(double));
  }
  void allGather(const float* in, float* out, int64_t count, DeviceGroup) override {
    StatsScope scope(stats_, static_cast<double>(count) * sizeof(float));
    if (in != out) std::copy_n(in, count, out);
  }
  void reduceScatterSum(const float* in, float* out, int64_t count, DeviceGroup) override {
    StatsScope scope(stats_, static_cast<double>(count) * sizeof(float));
    if (in != out) std::copy_n(in, count, out);
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    StatsScope scope(stats_, static_cast<double>(bytes));
  }
  std::vector<std::string> allGatherStrings(const std::string& text) override {
    StatsScope scope(stats_, static_cast<double>(text.size()));
    return {text};
  }
  void barrier() override { StatsScope scope(stats_, 0); }
};

}  // namespace

std::unique_ptr<Collectives> makeLocalCollectives() { return std::make_unique<LocalCollectives>(); }

}  // namespace pgq

#include "runtime/collectives.h"

#include <algorithm>

namespace pgq {
namespace {


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
    CountedCall counted(stats_, static_cast<double>(count) * sizeof(float));
  }
  void allReduceSum(double* data, int64_t count, DeviceGroup) override {
    CountedCall counted(stats_, static_cast<double>(count) * sizeof(double));
  }
  void allReduceMax(double* data, int64_t count, DeviceGroup) override {
    CountedCall counted(stats_, static_cast<double>(count) * sizeof(double));
  }
  void allGather(const float* in, float* out, int64_t count, DeviceGroup) override {
    CountedCall counted(stats_, static_cast<double>(count) * sizeof(float));
    if (in != out) std::copy_n(in, count, out);
  }
  void reduceScatterSum(const float* in, float* out, int64_t count, DeviceGroup) override {
    CountedCall counted(stats_, static_cast<double>(count) * sizeof(float));
    if (in != out) std::copy_n(in, count, out);
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    CountedCall counted(stats_, static_cast<double>(bytes));
  }
  void broadcast(void* data, int64_t bytes, DeviceGroup) override {
    CountedCall counted(stats_, static_cast<double>(bytes));
  }
  std::vector<std::string> allGatherStrings(const std::string& text) override {
    CountedCall counted(stats_, static_cast<double>(text.size()));
    return {text};
  }
  void barrier() override { CountedCall counted(stats_, 0); }
};

}  // namespace

std::unique_ptr<Collectives> makeLocalCollectives() { return std::make_unique<LocalCollectives>(); }

}  // namespace pgq

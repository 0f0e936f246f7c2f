#pragma once
// Collective communication between the processes of one training job. The IR names
// device groups (DeviceGroup: tp, dp; ir/gemm_meta.def) and never includes MPI; the
// runtime executes collective ops through this interface:
//   - one process (no mpirun): every group has one member and every collective is a
//     copy (makeLocalCollectives);
//   - under mpirun: Open MPI communicators (runtime/mpi.h). World rank r is tensor-
//     parallel index r % T in data-parallel replica r / T: the T ranks of a tensor-
//     parallel group are consecutive, so they share a node when ranks fill nodes in
//     order (mpirun's default), as Megatron places them.
// Every member of a group must call the same collectives in the same order.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/gemm_meta.h"

namespace pgq {

// Bytes moved and time spent in collectives since the last reset (--profile-ops).
struct CollectiveStats {
  int64_t calls = 0;
  double bytes = 0;  // payload bytes each process contributed
  double ms = 0;
};

class Collectives {
 public:
  virtual ~Collectives() = default;

  virtual int worldRank() const = 0;
  virtual int worldSize() const = 0;
  // This process's index in `group`, and the group's size.
  virtual int rank(DeviceGroup group) const = 0;
  virtual int size(DeviceGroup group) const = 0;
  // Processes of the job on this node (threads per process default to the node's
  // processors divided by this).
  virtual int localSize() const = 0;

  // In place: every member gets the elementwise sum over the group.
  virtual void allReduceSum(float* data, int64_t count, DeviceGroup group) = 0;
  virtual void allReduceSum(double* data, int64_t count, DeviceGroup group) = 0;
  // In place: the elementwise maximum over the group.
  virtual void allReduceMax(double* data, int64_t count, DeviceGroup group) = 0;
  // `in` holds `count` floats of this member; `out` gets size(group) * count floats,
  // member i's at [i * count, (i + 1) * count).
  virtual void allGather(const float* in, float* out, int64_t count, DeviceGroup group) = 0;
  // `in` holds size(group) * count floats; `out` gets `count` floats: the sum over the
  // group of block rank(group) of each member's `in`.
  virtual void reduceScatterSum(const float* in, float* out, int64_t count, DeviceGroup group) = 0;
  // Over the whole job: `bytes` bytes at `data` of world rank `root` to every process.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // In `group`: `bytes` bytes at `data` of the group's member 0 to every member.
  virtual void broadcast(void* data, int64_t bytes, DeviceGroup group) = 0;
  // Over the whole job: every process's string, in world-rank order.
  virtual std::vector<std::string> allGatherStrings(const std::string& text) = 0;
  virtual void barrier() = 0;

  const CollectiveStats& stats() const { return stats_; }
  void resetStats() { stats_ = {}; }

 protected:
  // Each implementation opens one in every collective: it counts the call and its bytes,
  // and the time until the end of the scope (--profile-ops).
  class CountedCall {
   public:
    CountedCall(CollectiveStats& stats, double bytes)
        : stats_(stats), start_(std::chrono::steady_clock::now()) {
      ++stats_.calls;
      stats_.bytes += bytes;
    }
    ~CountedCall() {
      stats_.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    }
    CountedCall(const CountedCall&) = delete;
    CountedCall& operator=(const CountedCall&) = delete;

   private:
    CollectiveStats& stats_;
    std::chrono::steady_clock::time_point start_;
  };

  CollectiveStats stats_;
};

// One process: groups of one.
std::unique_ptr<Collectives> makeLocalCollectives();

}  // namespace pgq

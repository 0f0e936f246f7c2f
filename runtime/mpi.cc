#include "runtime/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/errors.h"

// MPI calls are not checked one by one: every communicator here inherits
// MPI_ERRORS_ARE_FATAL from MPI_COMM_WORLD, so a failed call ends the job with
// Open MPI's own message before it returns.

namespace pgq {
namespace {

bool envSet(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}


// Calls f(offset, n) for consecutive pieces of at most `max_count` of `count` elements:
// MPI counts are ints, and a count cast down would silently move less.
template <typename F>
void inPieces(int64_t count, int64_t max_count, F&& f) {
  for (int64_t done = 0; done < count; done += max_count) f(done, static_cast<int>(std::min(max_count, count - done)));
}

class MpiCollectives final : public Collectives {
 public:
  MpiCollectives(int tensor_parallel, int64_t max_count) : max_count_(max_count) {
    PGQ_ASSERT(mpiActive(), "MPI collectives without MPI (not launched by mpirun)");
    PGQ_ASSERT(max_count >= 1 && max_count <= INT_MAX, "max_count {}", max_count);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    if (tensor_parallel < 1)
      throw Error(fmt::format("--tensor-parallel {}: expected at least 1", tensor_parallel));
    if (world_size_ % tensor_parallel != 0)
      throw Error(fmt::format("--tensor-parallel {} does not divide the {} ranks of this job (mpirun -np {})",
                              tensor_parallel, world_size_, world_size_));
    // A private copy of the world, so pgq's messages never match another library's.
    MPI_Comm_dup(MPI_COMM_WORLD, &world_);
    // Rank r is tensor-parallel index r % T of replica r / T (runtime/collectives.h);
    // the key r keeps that order inside each group.
    MPI_Comm_split(world_, world_rank_ / tensor_parallel, world_rank_, &tp_);
    MPI_Comm_split(world_, world_rank_ % tensor_parallel, world_rank_, &dp_);
    MPI_Comm node;
    MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
  }

  ~MpiCollectives() override {
    // After MPI_Finalize (a Collectives outliving main's MpiSession) MPI calls are illegal;
    // finalizing has released the communicators anyway.
    if (!mpiActive()) return;
    MPI_Comm_free(&dp_);
    MPI_Comm_free(&tp_);
    MPI_Comm_free(&world_);
  }

  int worldRank() const override { return world_rank_; }
  int worldSize() const override { return world_size_; }
  int rank(DeviceGroup group) const override {
    int r = 0;
    MPI_Comm_rank(comm(group), &r);
    return r;
  }
  int size(DeviceGroup group) const override {
    int n = 0;
    MPI_Comm_size(comm(group), &n);
    return n;
  }
  int localSize() const override { return local_size_; }

  void allReduceSum(float* data, int64_t count, DeviceGroup group) override {
    allReduce(data, count, MPI_FLOAT, group);
  }
  void allReduceSum(double* data, int64_t count, DeviceGroup group) override {
    allReduce(data, count, MPI_DOUBLE, group);
  }
  void allReduceMax(double* data, int64_t count, DeviceGroup group) override {
    allReduce(data, count, MPI_DOUBLE, group, MPI_MAX);
  }

  void allGather(const float* in, float* out, int64_t count, DeviceGroup group) override {
    CountedCall counted(stats_, static_cast<double>(count) * sizeof(float));
    inPieces(count, max_count_, [&](int64_t offset, int n) {
      if (n == count) {
        MPI_Allgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, comm(group));
        return;
      }
      // Member i's piece goes to out[i * count + offset]: a type of n floats whose extent
      // is count floats places each member's piece in its own block.
      MPI_Datatype piece, spaced;
      MPI_Type_contiguous(n, MPI_FLOAT, &piece);
      MPI_Type_create_resized(piece, 0, static_cast<MPI_Aint>(count) * sizeof(float), &spaced);
      MPI_Type_commit(&spaced);
      MPI_Allgather(in + offset, n, MPI_FLOAT, out + offset, 1, spaced, comm(group));
      MPI_Type_free(&spaced);
      MPI_Type_free(&piece);
    });
  }

  void reduceScatterSum(const float* in, float* out, int64_t count, DeviceGroup group) override {
    const int members = size(group);
    CountedCall counted(stats_, static_cast<double>(count) * members * sizeof(float));
    std::vector<float> packed;
    inPieces(count, max_count_, [&](int64_t offset, int n) {
      if (n == count) {
        MPI_Reduce_scatter_block(in, out, n, MPI_FLOAT, MPI_SUM, comm(group));
        return;
      }
      // Piece `offset` of every member's block, side by side, as one smaller reduce-scatter.
      packed.resize(static_cast<size_t>(members) * n);
      for (int i = 0; i < members; ++i)
        std::copy_n(in + static_cast<int64_t>(i) * count + offset, n, packed.data() + static_cast<int64_t>(i) * n);
      MPI_Reduce_scatter_block(packed.data(), out + offset, n, MPI_FLOAT, MPI_SUM, comm(group));
    });
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    PGQ_ASSERT(root >= 0 && root < world_size_, "broadcast root {} of {} ranks", root, world_size_);
    CountedCall counted(stats_, static_cast<double>(bytes));
    inPieces(bytes, max_count_, [&](int64_t offset, int n) {
      MPI_Bcast(static_cast<char*>(data) + offset, n, MPI_BYTE, root, world_);
    });
  }

  std::vector<std::string> allGatherStrings(const std::string& text) override {
    CountedCall counted(stats_, static_cast<double>(text.size()));
    int64_t length = static_cast<int64_t>(text.size());
    std::vector<int64_t> lengths(static_cast<size_t>(world_size_));
    MPI_Allgather(&length, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, world_);
    // Every rank sees the same lengths, so every rank refuses together.
    int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
    PGQ_ASSERT(total <= max_count_, "allGatherStrings: {} bytes in all, above {} for one MPI call", total,
               max_count_);
    std::vector<int> counts(lengths.begin(), lengths.end());
    std::vector<int> displacements(counts.size(), 0);
    std::partial_sum(counts.begin(), counts.end() - 1, displacements.begin() + 1);
    std::string all(static_cast<size_t>(total), '\0');
    MPI_Allgatherv(text.data(), static_cast<int>(length), MPI_CHAR, all.data(), counts.data(),
                   displacements.data(), MPI_CHAR, world_);
    std::vector<std::string> result;
    for (size_t i = 0; i < counts.size(); ++i) result.push_back(all.substr(displacements[i], counts[i]));
    return result;
  }

  void barrier() override {
    CountedCall counted(stats_, 0);
    MPI_Barrier(world_);
  }

 private:
  MPI_Comm comm(DeviceGroup group) const {
    switch (group) {
      case DeviceGroup::kTensor: return tp_;
      case DeviceGroup::kData: return dp_;
    }
    throw InternalError(fmt::format("device group {}", static_cast<int>(group)));
  }

  template <typename T>
  void allReduce(T* data, int64_t count, MPI_Datatype type, DeviceGroup group, MPI_Op op = MPI_SUM) {
    CountedCall counted(stats_, static_cast<double>(count) * sizeof(T));
    inPieces(count, max_count_, [&](int64_t offset, int n) {
      MPI_Allreduce(MPI_IN_PLACE, data + offset, n, type, op, comm(group));
    });
  }

  int64_t max_count_;
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_size_ = 1;
  MPI_Comm world_ = MPI_COMM_NULL;
  MPI_Comm tp_ = MPI_COMM_NULL;
  MPI_Comm dp_ = MPI_COMM_NULL;
};

}  // namespace

bool launchedByMpirun() { return envSet("OMPI_COMM_WORLD_SIZE") || envSet("PMIX_RANK"); }

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (active_ && !finalized) MPI_Finalize();
}

MpiSession initMpiIfLaunched(int* argc, char*** argv) {
  MpiSession session;
  if (!launchedByMpirun()) return session;
  int initialized = 0;
  MPI_Initialized(&initialized);
  PGQ_ASSERT(!initialized, "MPI initialized twice");
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  session.active_ = true;
  if (provided < MPI_THREAD_FUNNELED)
    throw Error(fmt::format("this MPI library gives thread level {}, pgq needs MPI_THREAD_FUNNELED ({}): "
                            "its OpenMP threads run beside MPI",
                            provided, MPI_THREAD_FUNNELED));
  return session;
}

bool mpiActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int worldRankOrZero() {
  if (mpiActive()) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
  }
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK"})
    if (envSet(name)) return std::atoi(std::getenv(name));
  return 0;
}

std::unique_ptr<Collectives> makeMpiCollectives(int tensor_parallel, int64_t max_count) {
  return std::make_unique<MpiCollectives>(tensor_parallel, max_count);
}

void abortJob(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpiActive()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);  // MPI_Abort does not return; without MPI this is the end
}

}  // namespace pgq

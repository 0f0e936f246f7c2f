#include "runtime/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// Tags of the liveness check after a collective timed out (on pgq's private copy of the
// world, so no other message matches them).
constexpr int kPingTag = 7101;
constexpr int kPongTag = 7102;

class MpiCollectives final : public Collectives {
 public:
  MpiCollectives(int tensor_parallel, int64_t max_count, double timeout_s)
      : max_count_(max_count), timeout_s_(timeout_s) {
    PGQ_ASSERT(mpiActive(), "MPI collectives without MPI (not launched by mpirun)");
    PGQ_ASSERT(max_count >= 1 && max_count <= INT_MAX, "max_count {}", max_count);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    if (tensor_parallel < 1)
      throw Error(fmt::format("--tensor-parallel {}: expected at least 1", tensor_parallel));
    if (world_size_ % tensor_parallel != 0)
      throw Error(fmt::format("--tensor-parallel {} does not divide the {} ranks of this job (mpirun -np {})",
                              tensor_parallel, world_size_, world_size_));
    if (!sameCommandOnEveryRank(true))
      throw Error("a rank of this job printed --help or --version instead of training; start every rank with the "
                  "same pgq train command");
    // A private copy of the world, so pgq's messages never match another library's.
    MPI_Comm_dup(MPI_COMM_WORLD, &world_);
    // A rank with a timeout calls an arrival barrier before each collective and one
    // without does not: ranks started with different --collective-timeout would call
    // different collectives and hang. Agreed here with a plain collective, before any
    // timed one; every rank sees the same range and refuses together.
    double range[2] = {timeout_s_, -timeout_s_};
    MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_DOUBLE, MPI_MIN, world_);
    if (range[0] != -range[1])
      throw Error(fmt::format("--collective-timeout differs between the ranks of this job (from {} s to {} s): give "
                              "every rank the same",
                              range[0], -range[1]));
    // Rank r is tensor-parallel index r % T of replica r / T (runtime/collectives.h);
    // the key r keeps that order inside each group.
    MPI_Comm_split(world_, world_rank_ / tensor_parallel, world_rank_, &tp_);
    MPI_Comm_split(world_, world_rank_ % tensor_parallel, world_rank_, &dp_);
    MPI_Comm node;
    MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &local_size_);
    MPI_Comm_free(&node);
    members_ = {otherMembers(tp_), otherMembers(dp_), otherMembers(world_)};
    if (timeout_s_ > 0) watchdog_ = std::thread([this] { watch(); });
  }

  ~MpiCollectives() override {
    if (watchdog_.joinable()) {
      {
        std::lock_guard lock(watch_mutex_);
        stop_watch_ = true;
      }
      watch_cv_.notify_all();
      watchdog_.join();
    }
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
    const Inside inside = arrive(comm(group), "all-gather", count * static_cast<int64_t>(sizeof(float)), group);
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
    const Inside inside =
        arrive(comm(group), "reduce-scatter", count * members * static_cast<int64_t>(sizeof(float)), group);
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
    const Inside inside = arrive(world_, "broadcast", bytes, std::nullopt);
    inPieces(bytes, max_count_, [&](int64_t offset, int n) {
      MPI_Bcast(static_cast<char*>(data) + offset, n, MPI_BYTE, root, world_);
    });
  }

  void broadcast(void* data, int64_t bytes, DeviceGroup group) override {
    CountedCall counted(stats_, static_cast<double>(bytes));
    const Inside inside = arrive(comm(group), "broadcast", bytes, group);
    inPieces(bytes, max_count_, [&](int64_t offset, int n) {
      MPI_Bcast(static_cast<char*>(data) + offset, n, MPI_BYTE, 0, comm(group));
    });
  }

  std::vector<std::string> allGatherStrings(const std::string& text) override {
    CountedCall counted(stats_, static_cast<double>(text.size()));
    const Inside inside =
        arrive(world_, "all-gather of the ranks' texts", static_cast<int64_t>(text.size()), std::nullopt);
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
    if (timeout_s_ > 0) static_cast<void>(arrive(world_, "barrier", 0, std::nullopt));  // the barrier itself
    else MPI_Barrier(world_);
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
    const Inside inside = arrive(comm(group), "all-reduce", count * static_cast<int64_t>(sizeof(T)), group);
    inPieces(count, max_count_, [&](int64_t offset, int n) {
      MPI_Allreduce(MPI_IN_PLACE, data + offset, n, type, op, comm(group));
    });
  }

  // While a blocking collective runs: when it began (steady clock, ns; 0 outside one)
  // and what it is, for the watchdog.
  struct Current {
    std::atomic<int64_t> since_ns{0};
    std::atomic<const char*> what{""};
    std::atomic<int64_t> bytes{0};
    std::atomic<int> members{2};  // the index into members_ of the collective's group
  };
  class Inside {
   public:
    explicit Inside(Current* current) : current_(current) {}
    Inside(const Inside&) = delete;
    Inside& operator=(const Inside&) = delete;
    ~Inside() {
      if (current_) current_->since_ns.store(0, std::memory_order_release);
    }

   private:
    Current* current_;
  };

  static int64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // Waits, with the timeout, until every member of `comm` has reached this collective (a
  // non-blocking barrier, polled: a rank stopped or hung before it is named by timedOut),
  // then the collective runs as a blocking call, Open MPI's fast kind (its non-blocking
  // collectives, polled, made a tensor-parallel step 1.16x slower). A rank stopped
  // inside the blocking call is caught by the watchdog thread. The barrier costs
  // microseconds among ranks that are all there.
  [[nodiscard]] Inside arrive(MPI_Comm comm, const char* what, int64_t bytes, std::optional<DeviceGroup> group) {
    if (timeout_s_ <= 0) return Inside(nullptr);
    MPI_Request request;
    MPI_Ibarrier(comm, &request);
    wait(request, what, bytes, group);
    current_.what.store(what, std::memory_order_relaxed);
    current_.bytes.store(bytes, std::memory_order_relaxed);
    current_.members.store(groupIndex(group), std::memory_order_relaxed);
    current_.since_ns.store(nowNs(), std::memory_order_release);
    return Inside(&current_);
  }

  // The watchdog: every 100 ms, whether the main thread has been inside one blocking
  // collective for longer than the timeout. MPI is the main thread's alone
  // (MPI_THREAD_FUNNELED), so it names the ranks it cannot tell apart (the collective's
  // other members, one of which stopped inside it) and ends this process; mpirun then
  // ends the job.
  void watch() {
    std::unique_lock lock(watch_mutex_);
    while (!watch_cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_watch_; })) {
      const int64_t since = current_.since_ns.load(std::memory_order_acquire);
      if (since == 0) continue;
      const double waited = static_cast<double>(nowNs() - since) / 1e9;
      if (waited <= timeout_s_) continue;
      const int which = current_.members.load(std::memory_order_relaxed);
      const std::vector<int>& others = members_[static_cast<size_t>(which)];
      fmt::print(stderr,
                 "pgq: error: rank {}: a collective ({} of {} bytes{}) that every rank had entered did not complete "
                 "in {:.0f} s; rank{} {} stopped or hang{} inside it: ending the job (--collective-timeout sets the "
                 "wait, 0 waits forever)\n",
                 world_rank_, current_.what.load(), current_.bytes.load(), kGroupText[which], waited,
                 others.size() > 1 ? "s" : "", fmt::join(others, " or "), others.size() > 1 ? "" : "s");
      std::fflush(stderr);
      std::_Exit(1);
    }
  }

  // Collectives of the tensor group (0), the data group (1) and the world (2): the index
  // of members_ and of kGroupText.
  static int groupIndex(std::optional<DeviceGroup> group) {
    return !group ? 2 : *group == DeviceGroup::kTensor ? 0 : 1;
  }
  static constexpr const char* kGroupText[] = {" in the tensor-parallel group", " in the data-parallel group", ""};

  // The world ranks of the other members of the tensor (0) and data (1) groups and of
  // the world (2).
  std::vector<int> otherMembers(MPI_Comm comm) const {
    MPI_Group world_group, group;
    MPI_Comm_group(world_, &world_group);
    MPI_Comm_group(comm, &group);
    int n = 0;
    MPI_Group_size(group, &n);
    std::vector<int> local(static_cast<size_t>(n)), global(static_cast<size_t>(n));
    std::iota(local.begin(), local.end(), 0);
    MPI_Group_translate_ranks(group, n, local.data(), world_group, global.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    std::erase(global, world_rank_);
    return global;
  }

  // Waits for `request`, polling (MPI progresses it in MPI_Test) as a blocking call
  // would: spinning for the first 10 ms, as a collective whose ranks are all there
  // completes within that, then sleeping 50 us between tests while the other ranks are
  // still computing. Every 256 tests it answers liveness checks and looks at the clock;
  // past the timeout it ends the job (timedOut).
  void wait(MPI_Request& request, const char* what, int64_t bytes, std::optional<DeviceGroup> group) {
    int done = 0;
    const auto start = std::chrono::steady_clock::now();
    bool spinning = true;
    for (uint64_t polls = 1;; ++polls) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (!spinning) std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (polls % 256 != 0) continue;
      answerPings();
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      spinning = waited < 0.01;
      if (timeout_s_ > 0 && waited > timeout_s_) timedOut(what, bytes, group, waited);
    }
  }

  // Answers the liveness check of a rank whose collective timed out.
  void answerPings() {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, world_, &pending, &status);
    if (!pending) return;
    int token = 0;
    MPI_Recv(&token, 1, MPI_INT, status.MPI_SOURCE, kPingTag, world_, MPI_STATUS_IGNORE);
    MPI_Request reply;
    MPI_Isend(&world_rank_, 1, MPI_INT, status.MPI_SOURCE, kPongTag, world_, &reply);
    MPI_Request_free(&reply);
  }

  // Asks every other rank whether it is alive (a rank waiting in any collective answers
  // within a few milliseconds; one that is stopped or hung does not), for up to 10 s,
  // names those that did not answer and ends the job.
  [[noreturn]] void timedOut(const char* what, int64_t bytes, std::optional<DeviceGroup> group, double waited) {
    std::vector<int> answer(static_cast<size_t>(world_size_), -1);
    std::vector<MPI_Request> pongs(static_cast<size_t>(world_size_), MPI_REQUEST_NULL);
    for (int r = 0; r < world_size_; ++r) {
      if (r == world_rank_) continue;
      MPI_Request ping;
      MPI_Isend(&world_rank_, 1, MPI_INT, r, kPingTag, world_, &ping);
      MPI_Request_free(&ping);
      MPI_Irecv(&answer[static_cast<size_t>(r)], 1, MPI_INT, r, kPongTag, world_, &pongs[static_cast<size_t>(r)]);
    }
    const auto start = std::chrono::steady_clock::now();
    const double grace = std::min(10.0, std::max(1.0, timeout_s_));
    int all = 0;
    while (!all && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < grace) {
      MPI_Testall(world_size_, pongs.data(), &all, MPI_STATUSES_IGNORE);
      answerPings();  // another waiting rank may be asking too
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<int> silent;
    for (int r = 0; r < world_size_; ++r)
      if (r != world_rank_ && answer[static_cast<size_t>(r)] != r) silent.push_back(r);
    const char* in = kGroupText[groupIndex(group)];
    const std::string who =
        silent.empty() ? "every rank answers, so the ranks wait in different collectives (please report)"
                       : fmt::format("rank{} {} do{} not answer (stopped or hung)", silent.size() > 1 ? "s" : "",
                                     fmt::join(silent, ", "), silent.size() > 1 ? "" : "es");
    fmt::print(stderr,
               "pgq: error: rank {}: a collective ({} of {} bytes{}) did not complete in {:.0f} s; {}: ending the "
               "job (--collective-timeout sets the wait, 0 waits forever)\n",
               world_rank_, what, bytes, in, waited, who);
    abortJob(1);
  }

  int64_t max_count_;
  double timeout_s_;
  Current current_;
  std::vector<std::vector<int>> members_;  // otherMembers of the tensor, data and world groups
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool stop_watch_ = false;
  std::thread watchdog_;
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

bool sameCommandOnEveryRank(bool training) {
  int said[2] = {training ? 1 : 0, training ? -1 : 0};
  MPI_Allreduce(MPI_IN_PLACE, said, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return said[0] == -said[1];
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

std::unique_ptr<Collectives> makeMpiCollectives(int tensor_parallel, int64_t max_count, double timeout_s) {
  return std::make_unique<MpiCollectives>(tensor_parallel, max_count, timeout_s);
}

void abortJob(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpiActive()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);  // MPI_Abort does not return; without MPI this is the end
}

}  // namespace pgq

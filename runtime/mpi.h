#pragma once
// Open MPI under pgq: starting and ending MPI in a process that mpirun launched, the
// Collectives of an MPI job, and ending a whole job on an error. Only runtime/mpi.cc
// includes <mpi.h>; without mpirun pgq never initializes MPI and behaves as a single
// process (makeLocalCollectives).
#include <climits>
#include <cstdint>
#include <memory>
#include <utility>

#include "runtime/collectives.h"

namespace pgq {

// True when Open MPI's launcher (mpirun, or a PMIx launcher) started this process.
bool launchedByMpirun();

// Keeps MPI initialized while it lives and finalizes it when destroyed (normal exit).
class MpiSession {
 public:
  MpiSession() = default;  // MPI not started: nothing to finalize
  MpiSession(MpiSession&& other) noexcept : active_(other.active_) { other.active_ = false; }
  // Takes over `other`'s session; the one this held passes to `other`.
  MpiSession& operator=(MpiSession&& other) noexcept {
    std::swap(active_, other.active_);
    return *this;
  }
  ~MpiSession();

  bool active() const { return active_; }

 private:
  friend MpiSession initMpiIfLaunched(int* argc, char*** argv);
  bool active_ = false;
};

// Under mpirun, calls MPI_Init_thread(MPI_THREAD_FUNNELED) (OpenMP threads compute,
// only the main thread communicates); otherwise does nothing. Call once, at the start
// of main, and keep the session until main returns. Throws pgq::Error when the MPI
// library cannot give funneled threads.
[[nodiscard]] MpiSession initMpiIfLaunched(int* argc, char*** argv);

// MPI initialized and not yet finalized.
bool mpiActive();

// Under mpirun, every rank calls this once, before any other collective: from pgq train's
// collectives (`training` true) or from a rank that printed --help or --version and ends
// (false). True when every rank of the job said the same. A rank given --version while the
// others trained ended at once and left them waiting in their first collective forever.
bool sameCommandOnEveryRank(bool training);

// This process's rank in the job: from MPI when it runs, else from mpirun's
// environment (before MPI_Init), else 0. For logs and messages.
int worldRankOrZero();

// The Collectives of this MPI job (MPI must be active) with tensor-parallel groups of
// `tensor_parallel` consecutive ranks (runtime/collectives.h). Throws pgq::Error when
// tensor_parallel is below 1 or does not divide the job's ranks. A call moves at most
// `max_count` elements (bytes for broadcast): longer buffers go in several calls, as
// MPI counts are ints; tests pass a small limit to exercise that.
// A collective that has not completed after `timeout_s` seconds (0: no limit) means a
// rank stopped (SIGSTOP, a debugger) or hangs, and ends the job (exit 1) with a message
// naming it, instead of waiting forever as a blocking MPI call would: each collective
// first waits for every member in a non-blocking barrier polled against the clock (past
// the timeout the waiting rank asks every rank whether it is alive and names those that
// do not answer), then runs as a blocking call watched by a thread (past the timeout it
// names the collective's other members, one of which stopped inside it).
inline constexpr double kDefaultCollectiveTimeoutS = 300;
std::unique_ptr<Collectives> makeMpiCollectives(int tensor_parallel, int64_t max_count = INT_MAX,
                                                double timeout_s = kDefaultCollectiveTimeoutS);

// Ends the process with `exit_code`; under MPI ends every process of the job
// (MPI_Abort), since the others may wait in a collective for this one.
[[noreturn]] void abortJob(int exit_code);

}  // namespace pgq

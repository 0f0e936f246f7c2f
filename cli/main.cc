// pgq: profile-guided quantization of transformer training.
#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <cstdio>
#include <new>
#include <system_error>
#include <cstring>
#include <exception>
#include <iostream>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "kernels/cpu_isa.h"
#include "kernels/threads.h"
#include "runtime/mpi.h"
#include "support/errors.h"
#include "pgq_version.h"

namespace {

constexpr int kExitUsage = 2;     // bad input: files, flags, configs
constexpr int kExitInternal = 3;  // a bug in pgq

std::string versionText() {
  return fmt::format("pgq {} (oneDNN {}, CPU {})", PGQ_VERSION_STRING, pgq::kernels::onednnVersion(),
                     pgq::kernels::int8Caps().describe());
}

// OMP_NUM_THREADS is a number a user gives, like --threads, and gets the same range:
// libgomp aborts when it cannot create the threads asked for (100000), and more threads
// than processors only slow OpenMP down here. Returns an error message, or "".
std::string checkOmpNumThreads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env == nullptr || *env == '\0') return "";
  // libgomp reads a list ("4,2": nested levels); the first entry is what pgq's parallel
  // regions get.
  std::string_view text(env);
  std::string_view first = text.substr(0, text.find(','));
  int64_t threads = 0;
  auto [end, ec] = std::from_chars(first.data(), first.data() + first.size(), threads);
  const int procs = omp_get_num_procs();
  if (ec != std::errc() || end != first.data() + first.size() || threads < 1 || threads > procs)
    return fmt::format("OMP_NUM_THREADS={}: expected an integer in [1, {}] (this machine's processors; more "
                       "threads than processors only slow OpenMP down)",
                       env, procs);
  return "";
}

// OpenMP's own default is one thread per processor of the affinity mask; pgq also heeds
// a cgroup CPU quota (a container given 1.5 CPUs of 8), and under mpirun each rank gets
// its share of the node, or N ranks would run N times too many threads. OMP_NUM_THREADS
// wins over this, and --threads, parsed later, over both. Call before any parallel region.
void setDefaultThreadCount() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env != nullptr && *env != '\0') return;
  const char* local = pgq::mpiActive() ? std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE") : nullptr;
  omp_set_num_threads(pgq::kernels::defaultThreadCount(local != nullptr ? std::atoi(local) : 1));
}

// Prints `message` (a full line without its newline; the middle of a very long one left
// out) and returns `code`. Under mpirun a
// failing rank ends the whole job, as the others may wait for it in a collective. When
// every rank fails alike, one message is enough: rank 0 prints and aborts at once, and
// the others, whom that abort usually kills within 2 s, print only if still alive, with
// their rank.
int fail(int code, std::string message) {
  // An error that echoes a huge value (a 100 KB --passes) keeps its start, which names
  // the flag or file, and its end, which says what was expected.
  constexpr size_t kHead = 2048, kTail = 1024;
  if (message.size() > kHead + kTail + 64)
    message = fmt::format("{} [... {} characters left out ...] {}", message.substr(0, kHead),
                          message.size() - kHead - kTail, message.substr(message.size() - kTail));
  if (!pgq::mpiActive()) {
    fmt::print(stderr, "{}\n", message);
    return code;
  }
  const int rank = pgq::worldRankOrZero();
  if (rank == 0) {
    fmt::print(stderr, "{}\n", message);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    fmt::print(stderr, "rank {}: {}\n", rank, message);
  }
  pgq::abortJob(code);
}

// Output that never reached standard output (`pgq sqnr-table p.yaml > /dev/full`) is
// an error, not success. Most output is still buffered here; flushing it is what fails,
// and errno says why (a failed flush keeps the data, so a failure earlier in the run
// fails again here). std::cout writes through stdout (sync_with_stdio). Returns the
// exit code.
// The errno of a print that failed during the command (run() records it).
int stdout_errno = 0;

int closeStandardOutput(int code) {
  int err = 0;
  if (std::fflush(stdout) != 0) err = errno;
  if (err == 0) err = stdout_errno;
  bool failed = std::ferror(stdout) != 0 || !std::cout.flush();
  if (std::fclose(stdout) != 0 && err == 0) err = errno;
  // EBADF with nothing written: standard output was closed (`pgq ... >&-`) and unused.
  if (!failed && (err == 0 || err == EBADF)) return code;
  fmt::print(stderr, "pgq: error: cannot write standard output: {}\n",
             err != 0 ? std::strerror(err) : "a write failed");
  return code == 0 ? kExitUsage : code;
}

int run(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    // --help and --version: once per job, from rank 0. Ranks that train instead learn so
    // from their first collective and end the job (they waited there forever).
    if (pgq::mpiActive()) pgq::sameCommandOnEveryRank(false);
    if (pgq::worldRankOrZero() == 0) return app.exit(e);
    std::ostringstream discarded;
    return app.exit(e, discarded, discarded);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    app.exit(e, out, err);
    std::string message = out.str() + err.str();
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return fail(kExitUsage, message);
  } catch (const pgq::Error& e) {
    return fail(kExitUsage, fmt::format("pgq: error: {}", e.what()));
  } catch (const pgq::InternalError& e) {
    return fail(kExitInternal, fmt::format("pgq: internal error (please report): {}", e.what()));
  } catch (const std::bad_alloc&) {
    // Not pgq's bug: the machine's (or ulimit's) memory ends before the input's checks do.
    return fail(kExitUsage, "pgq: error: out of memory: the input needs more memory than this process may use");
  } catch (const std::exception& e) {
    // A print to a full or broken standard output (output past stdio's buffer, fmt's
    // system_error): closeStandardOutput says so once, with the errno, as for short output.
    if (std::ferror(stdout)) {
      if (const auto* system = dynamic_cast<const std::system_error*>(&e)) stdout_errno = system->code().value();
      return kExitUsage;
    }
    return fail(kExitInternal, fmt::format("pgq: error: {}", e.what()));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Idle OpenMP threads spin briefly, then sleep (kernels/threads.h): may run pgq again.
  pgq::kernels::useSpinWaitPolicy(argv);
  // The kernels are compiled for AVX2+FMA (x86-64-v3); say so instead of dying with
  // SIGILL on an older CPU.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fputs("pgq: error: this CPU lacks AVX2/FMA, which this build of pgq requires\n", stderr);
    return kExitUsage;
  }

  // Under mpirun MPI runs from here until `mpi` is destroyed, after the command.
  pgq::MpiSession mpi;
  try {
    mpi = pgq::initMpiIfLaunched(&argc, &argv);
  } catch (const pgq::Error& e) {
    fmt::print(stderr, "pgq: error: {}\n", e.what());
    return kExitUsage;
  }

  if (std::string error = checkOmpNumThreads(); !error.empty())
    return fail(kExitUsage, fmt::format("pgq: error: {}", error));
  setDefaultThreadCount();

  CLI::App app{"pgq: profile-guided quantization of transformer training.\n"
               "Profiles GEMM operand statistics, picks which GEMMs run in int8, rewrites the\n"
               "training graph and trains it.",
               "pgq"};
  app.set_version_flag("--version", versionText());
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  // Under mpirun rank 0 logs as a single process does; the other ranks repeat the same
  // story, so they show only warnings and errors, and say whose they are.
  const int rank = pgq::worldRankOrZero();
  const spdlog::level::level_enum floor = rank == 0 ? spdlog::level::trace : spdlog::level::warn;
  app.parse_complete_callback([&] {
    spdlog::set_level(std::max(floor, spdlog::level::from_str(log_level)));
    // Only training is distributed; any other command in N ranks would do the same work
    // N times and race on the files it writes.
    const char* ranks = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (pgq::launchedByMpirun() && ranks && std::string_view(ranks) != "1")
      for (const CLI::App* sub : app.get_subcommands())
        if (sub->get_name() != "train")
          throw pgq::Error(fmt::format("pgq {} runs in one process; only pgq train runs under mpirun ({} ranks here)",
                                       sub->get_name(), ranks));
  });
  spdlog::set_level(std::max(floor, spdlog::level::info));
  spdlog::set_pattern(rank == 0 ? std::string("[%l] %v") : fmt::format("[rank {}] [%l] %v", rank));

  pgq::cli::addExperimentCommand(app);
  pgq::cli::addTrainCommand(app);
  pgq::cli::addSqnrTableCommand(app);
  pgq::cli::addRecipeCommand(app);
  pgq::cli::addHwprobeCommand(app);
  pgq::cli::addGpuprobeCommand(app);
  pgq::cli::addImportCommand(app);
  pgq::cli::addRooflineCommand(app);
  pgq::cli::addIrCommands(app);

  return closeStandardOutput(run(app, argc, argv));
}

// pgq: profile-guided quantization of transformer training.
#include <omp.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <spdlog/spdlog.h>
#include <yaml-cpp/exceptions.h>

#include "cli/commands.h"
#include "kernels/cpu_isa.h"
#include "support/errors.h"
#include "pgq_version.h"

namespace {

constexpr int kExitUsage = 2;     // bad input: files, flags, configs
constexpr int kExitInternal = 3;  // a bug in pgq

std::string versionText() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("pgq {} (oneDNN {}.{}.{}, CPU {})", PGQ_VERSION_STRING, v->major, v->minor, v->patch,
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

// Output that never reached standard output (`pgq sqnr-table p.yaml > /dev/full`) is
// an error, not success. Most output is still buffered here; flushing it is what fails,
// and errno says why (a failed flush keeps the data, so a failure earlier in the run
// fails again here). std::cout writes through stdout (sync_with_stdio). Returns the
// exit code.
int closeStandardOutput(int code) {
  int err = 0;
  if (std::fflush(stdout) != 0) err = errno;
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
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  } catch (const pgq::Error& e) {
    fmt::print(stderr, "pgq: error: {}\n", e.what());
    return kExitUsage;
  } catch (const YAML::Exception& e) {
    fmt::print(stderr, "pgq: error: {}\n", e.what());
    return kExitUsage;
  } catch (const pgq::InternalError& e) {
    fmt::print(stderr, "pgq: internal error (please report): {}\n", e.what());
    return kExitInternal;
  } catch (const std::exception& e) {
    fmt::print(stderr, "pgq: error: {}\n", e.what());
    return kExitInternal;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The kernels are compiled for AVX2+FMA (x86-64-v3); say so instead of dying with
  // SIGILL on an older CPU.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fputs("pgq: error: this CPU lacks AVX2/FMA, which this build of pgq requires\n", stderr);
    return kExitUsage;
  }

  if (std::string error = checkOmpNumThreads(); !error.empty()) {
    fmt::print(stderr, "pgq: error: {}\n", error);
    return kExitUsage;
  }

  CLI::App app{"pgq: profile-guided quantization of transformer training.\n"
               "Profiles GEMM operand statistics, picks which GEMMs run in int8, rewrites the\n"
               "training graph and trains it.",
               "pgq"};
  app.set_version_flag("--version", versionText());
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.parse_complete_callback([&] { spdlog::set_level(spdlog::level::from_str(log_level)); });
  spdlog::set_pattern("[%l] %v");

  pgq::cli::addExperimentCommand(app);
  pgq::cli::addTrainCommand(app);
  pgq::cli::addSqnrTableCommand(app);
  pgq::cli::addRecipeCommand(app);
  pgq::cli::addHwprobeCommand(app);
  pgq::cli::addImportCommand(app);
  pgq::cli::addIrCommands(app);

  return closeStandardOutput(run(app, argc, argv));
}

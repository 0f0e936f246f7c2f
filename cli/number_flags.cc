#include "cli/number_flags.h"

#include <omp.h>

#include <charconv>

#include "support/errors.h"

namespace pgq::cli {

template <typename T>
T parseNumber(const OptionRange<T>& range, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  // from_chars reads decimal only (CLI11 would read 010 as octal 8) and reports a
  // number too large for T instead of saturating.
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end)
    throw Error(fmt::format("{}, got '{}'", range.expectation(), text));
  range.check(value);
  return value;
}

template int64_t parseNumber(const OptionRange<int64_t>&, const std::string&);
template double parseNumber(const OptionRange<double>&, const std::string&);

void addThreadsFlag(CLI::App* cmd) {
  OptionRange<int64_t> range = ranges::threadsRange();
  cmd->add_option_function<std::string>(
         std::string(range.name),
         [range](const std::string& text) {
           int64_t threads = parseNumber(range, text);
           if (threads > 0) omp_set_num_threads(static_cast<int>(threads));
         },
         fmt::format("OpenMP threads; in {} (this machine's processors), default 0: OpenMP's default "
                     "(OMP_NUM_THREADS, else one per processor this process may use: its affinity mask, "
                     "capped by a cgroup CPU quota; under mpirun, divided by the job's ranks on the "
                     "node). More threads than processors only slow OpenMP down",
                     range.text()))
      ->type_name("INT");
}

}  // namespace pgq::cli

#include "kernels/threads.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace pgq::kernels {
namespace {

std::string readSmallFile(const char* path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<long long> parseInteger(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<int> quotaOf(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return static_cast<int>(std::max<long long>(1, (quota + period - 1) / period));
}

}  // namespace

std::optional<int> cpuQuotaFromCpuMax(std::string_view text) {
  const size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::optional<long long> quota = parseInteger(text.substr(0, space));  // "max" -> nullopt
  std::optional<long long> period = parseInteger(text.substr(space + 1));
  if (!quota || !period) return std::nullopt;
  return quotaOf(*quota, *period);
}

int availableProcessors() {
  int procs = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) procs = CPU_COUNT(&set);
  if (procs <= 0) procs = omp_get_num_procs();
  std::optional<int> quota = cpuQuotaFromCpuMax(readSmallFile("/sys/fs/cgroup/cpu.max"));
  if (!quota) {
    std::optional<long long> q = parseInteger(readSmallFile("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"));
    std::optional<long long> p = parseInteger(readSmallFile("/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
    if (q && p) quota = quotaOf(*q, *p);
  }
  if (quota) procs = std::min(procs, *quota);
  return std::max(1, procs);
}

int defaultThreadCount(int local_ranks) { return std::max(1, availableProcessors() / std::max(1, local_ranks)); }

// A re-exec and not something cheaper: a setenv() from the executable's .preinit_array
// runs before libgomp's initializer but is undone by the C library's own initializer
// (which sets environ back to the process's initial array); a constructor in a shared
// library would depend on the loader's initialization order.
void useSpinWaitPolicy(char** argv) {
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if ((wait != nullptr && *wait != '\0') || (spin != nullptr && *spin != '\0')) return;
  if (setenv("GOMP_SPINCOUNT", "1000", 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("GOMP_SPINCOUNT");  // the exec failed: say nothing that libgomp did not read
}

}  // namespace pgq::kernels


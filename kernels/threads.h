#pragma once
// How many threads pgq's OpenMP regions (and oneDNN's, which share libgomp's pool) use,
// and how idle threads wait.
//
// Wait policy. libgomp's default lets an idle thread spin 300000 iterations (a few ms)
// before it sleeps. On a shared machine that is ruinous: while one of pgq's threads is
// descheduled the other spins on its core instead of yielding it. Sleeping at once
// (OMP_WAIT_POLICY=passive) is as bad the other way on a quiet virtual machine: each of
// a step's ~330 parallel regions then waits for a sleeping vCPU to wake, and `small`'s
// F+B step took 1.2x its time. pgq spins 1000 iterations (a few microseconds, libgomp's
// own figure for oversubscribed threads), which keeps the quiet speed and nearly all of
// passive's gain on a shared machine (docs/PERFORMANCE.md, "Threads on a shared
// machine"). A program that links pgq calls useSpinWaitPolicy(argv) first thing in main().
#include <optional>
#include <string_view>

namespace pgq::kernels {

// The processors this process may use: the CPUs of its affinity mask, capped by a
// cgroup CPU quota (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us),
// rounded up. At least 1.
int availableProcessors();

// The quota of a cgroup v2 `cpu.max` text ("150000 100000" -> 2; "max 100000" -> none),
// rounded up to whole processors. nullopt when unlimited or unreadable.
std::optional<int> cpuQuotaFromCpuMax(std::string_view text);

// The default thread count of a process that shares its node with `local_ranks` pgq
// ranks (1 outside MPI): availableProcessors() / local_ranks, at least 1.
int defaultThreadCount(int local_ranks);

// Unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT: sets GOMP_SPINCOUNT=1000 and
// runs this program again (execv of /proc/self/exe, same pid, same arguments), since
// libgomp reads its environment once, in its own initializer, before main(). Call it
// first in main(), before MPI starts. Returns when there was nothing to do, or when the
// exec failed (then libgomp's default policy stays; nothing else changes).
void useSpinWaitPolicy(char** argv);

}  // namespace pgq::kernels

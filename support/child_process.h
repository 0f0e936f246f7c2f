#pragma once
// Running a helper program (gnuplot for plots, Python for the GPU probe) as a child of
// pgq, without a shell between them: a SIGINT, SIGTERM or SIGHUP sent to pgq while the
// child runs (Ctrl-C reaches both; a `kill` or a job scheduler's, pgq alone) is passed on
// to the child, which is waited for, and reported, so that the caller removes its scratch
// files and ends by the same signal (endBySignal). std::system and popen left the child
// running and the scratch folder behind.
#include <string>
#include <vector>

namespace pgq {

struct ChildRun {
  std::vector<std::string> args;  // args[0] is looked up in PATH
  std::string cwd;                // "": pgq's
  // Where the child's stderr goes: a file (its stdout stays pgq's), or "": both its stdout
  // and stderr come back in ChildEnd::output, of which the last kOutputTail bytes are kept
  // (a child that writes without end cannot grow pgq's memory).
  std::string stderr_file;
  double timeout_s = 0;  // > 0: the child is killed (SIGKILL) after this many seconds
};

struct ChildEnd {
  int spawn_error = 0;  // errno of a child that could not start (ENOENT: no such program)
  int status = 0;       // waitpid's status
  int signal = 0;       // the signal that reached pgq while the child ran, 0 if none
  bool timed_out = false;
  std::string output;   // stderr_file "": the end of what the child wrote
};

inline constexpr size_t kOutputTail = 64 * 1024;

// The path of the executable file `name` in PATH (as posix_spawnp would find it), or ""
// when there is none. Lets a command refuse before its work when a helper it needs at the
// end is missing.
std::string findProgram(const std::string& name);

// Starts `run` and waits for it, passing the stop signals on (above). Does not throw for
// what the child does; throws pgq::Error only if waiting itself fails.
ChildEnd runChild(const ChildRun& run);

// Ends pgq by `signal` (after the caller removed its scratch files): default action,
// unblocked, raised.
[[noreturn]] void endBySignal(int signal);

}  // namespace pgq

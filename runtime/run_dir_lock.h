#pragma once
// An exclusive lock on a run directory (`pgq train --out`, `pgq experiment --out`), so
// that two processes never write the same checkpoint, metrics and results: the second
// one stops at once and names the first.
//
// The lock is flock(LOCK_EX | LOCK_NB) on DIR/.pgq-lock, which records the owner's pid,
// host and start time for that message. The kernel releases it when the owner exits or
// is killed, so a crashed run never leaves a stale lock behind; the file itself stays
// (removing it would let a third process lock a new file while a second still holds
// the old one). Each directory has its own lock file: an experiment holds its --out and
// each of its training runs holds its own subdirectory, so they never wait on each
// other. Two locks on the same directory conflict even within one process.
#include <string>

namespace pgq {

inline constexpr const char* kRunDirLockFile = ".pgq-lock";

class RunDirLock {
 public:
  // Locks `dir`, which must exist. Throws pgq::Error when another process (or another
  // lock of this one) holds it: "DIR is in use by pgq pid P on host H (started T); wait
  // for it or choose another --out", or when the lock file cannot be created.
  explicit RunDirLock(const std::string& dir);
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

 private:
  int fd_ = -1;
};

}  // namespace pgq

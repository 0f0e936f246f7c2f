#pragma once
// The files of a run folder (`pgq train --out DIR`), named in one place: what train()
// writes there and what pgq experiment, its report and the CLI read back.
//
//   DIR/checkpoint.pgqckpt   the run's last checkpoint (runtime/checkpoint.h)
//   DIR/metrics.csv          one row per step (runtime/metrics.h)
//   DIR/.pgq-lock            held while a process trains in DIR (runtime/run_dir_lock.h)
#include <filesystem>
#include <string>

#include "runtime/run_dir_lock.h"

namespace pgq {

struct RunLayout {
  std::filesystem::path dir;

  std::string checkpoint() const { return (dir / "checkpoint.pgqckpt").string(); }
  std::string metrics() const { return (dir / "metrics.csv").string(); }
  std::string lock() const { return (dir / kRunDirLockFile).string(); }
};

}  // namespace pgq

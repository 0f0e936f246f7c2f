#pragma once
// A private folder under /tmp for the files a helper program reads and writes (gnuplot's
// data, the GPU probe's scripts), removed with everything in it when the object goes.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "support/errors.h"

namespace pgq {

class ScratchDir {
 public:
  // `prefix` names the folder (/tmp/<prefix>-XXXXXX); `what` starts the error message.
  ScratchDir(const std::string& prefix, const std::string& what) {
    std::string pattern = "/tmp/" + prefix + "-XXXXXX";
    if (!::mkdtemp(pattern.data()))
      throw Error(fmt::format("{}: cannot create a scratch directory in /tmp: {}", what, std::strerror(errno)));
    path_ = pattern;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() { remove(); }
  // Removes the folder now (before a process ends by a signal, which runs no destructor).
  void remove() const {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace pgq

#pragma once
// The one exception the kernels throw. A caller can pass a bad shape, an
// out-of-range index or an unsupported format; that is a caller error, so it derives
// from std::invalid_argument and its message says what was expected. Kernels never
// invoke undefined behaviour on bad input: they check first and throw this.
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace pgq::kernels {

class KernelError : public std::invalid_argument {
 public:
  explicit KernelError(const std::string& message) : std::invalid_argument(message) {}

  // KernelError::format("gather: index {} out of range [0, {})", i, rows)
  template <typename... Args>
  static KernelError format(fmt::format_string<Args...> fmt_str, Args&&... args) {
    return KernelError(fmt::format(fmt_str, std::forward<Args>(args)...));
  }
};

}  // namespace pgq::kernels

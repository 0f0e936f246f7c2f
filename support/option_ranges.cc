#include "support/option_ranges.h"

#include <omp.h>

#include <cmath>
#include <type_traits>

#include <fmt/format.h>

#include "support/errors.h"

namespace pgq {
template <typename T>
std::string OptionRange<T>::text() const {
  return fmt::format("{}{}, {}{}", min_open ? '(' : '[', min,
                     max_name.empty() ? fmt::format("{}", max) : std::string(max_name), max_open ? ')' : ']');
}

template <typename T>
std::string OptionRange<T>::expectation() const {
  return fmt::format("{}: expected {} in {}", name, std::is_floating_point_v<T> ? "a finite number" : "an integer",
                     text());
}

template <typename T>
bool OptionRange<T>::contains(T value) const {
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(value)) return false;
  return (min_open ? value > min : value >= min) && (max_open ? value < max : value <= max);
}

template <typename T>
void OptionRange<T>::check(T value) const {
  if (!contains(value)) throw Error(fmt::format("{}, got {}", expectation(), value));
}

template <typename T>
void OptionRange<T>::check(T value, T bound) const {
  check(value);
  if (value > bound)
    throw Error(fmt::format("{} ({} is {}), got {}", expectation(), max_name, bound, value));
}

template struct OptionRange<int64_t>;
template struct OptionRange<double>;

namespace ranges {

OptionRange<int64_t> threadsRange() { return {.name = "--threads", .min = 0, .max = omp_get_num_procs()}; }

}  // namespace ranges
}  // namespace pgq

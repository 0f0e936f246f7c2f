#include "runtime/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace pgq {
namespace {

constexpr int64_t kBarWidth = 10;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);

std::string formatRate(double per_s) {
  if (per_s >= 1e6) return fmt::format("{:.2f}M", per_s / 1e6);
  if (per_s >= 1e3) return fmt::format("{:.1f}k", per_s / 1e3);
  return fmt::format("{:.0f}", per_s);
}

std::string formatDuration(double seconds) {
  int64_t s = std::llround(std::max(seconds, 0.0));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
}

}  // namespace

ProgressBar::ProgressBar(int64_t total_steps, int64_t start_step, int64_t plain_every,
                         std::FILE* out)
    : total_steps_(std::max<int64_t>(total_steps, 1)),
      start_step_(start_step),
      plain_every_(std::max<int64_t>(plain_every, 1)),
      out_(out),
      tty_(::isatty(::fileno(out)) == 1),
      start_time_(Clock::now()) {}

ProgressBar::~ProgressBar() { finish(); }

std::string ProgressBar::formatLine(int64_t total_steps, const ProgressStats& stats,
                                    std::optional<double> val_loss, std::optional<double> val_bpb,
                                    double eta_seconds) {
  total_steps = std::max<int64_t>(total_steps, 1);
  int64_t done = std::clamp<int64_t>(stats.step, 0, total_steps);
  int64_t filled = done * kBarWidth / total_steps;
  std::string line = fmt::format("step {}/{} [{}{}] {}% loss {:.3f}", stats.step, total_steps,
                                 std::string(static_cast<size_t>(filled), '#'),
                                 std::string(static_cast<size_t>(kBarWidth - filled), '.'),
                                 done * 100 / total_steps, stats.loss);
  if (val_loss) line += fmt::format(" val {:.3f}", *val_loss);
  if (val_bpb) line += fmt::format(" ({:.3f} bpb)", *val_bpb);
  line += fmt::format(" | {} tok/s | {:.0f} ms/step", formatRate(stats.tokens_per_s),
                      stats.ms_per_step);
  if (eta_seconds >= 0) line += fmt::format(" | ETA {}", formatDuration(eta_seconds));
  return line;
}

void ProgressBar::update(const ProgressStats& stats) {
  if (stats.val_loss) val_loss_ = stats.val_loss;
  if (stats.val_bpb) val_bpb_ = stats.val_bpb;
  bool last = stats.step >= total_steps_;
  Clock::time_point now = Clock::now();
  if (tty_) {
    if (!last && line_open_ && now - last_draw_ < kRedrawInterval) return;
  } else if (!last && stats.step != start_step_ + 1 && stats.step % plain_every_ != 0) {
    return;
  }
  last_draw_ = now;

  // The mean wall time per step so far covers evaluation and checkpoints too.
  int64_t done = stats.step - start_step_;
  double elapsed = std::chrono::duration<double>(now - start_time_).count();
  double eta = done > 0 ? elapsed / static_cast<double>(done) *
                              static_cast<double>(std::max<int64_t>(total_steps_ - stats.step, 0))
                        : -1.0;
  std::string line = formatLine(total_steps_, stats, val_loss_, val_bpb_, eta);
  if (tty_) {
    // Pad with spaces to wipe the tail of a longer previous line.
    size_t width = line.size();
    line.resize(std::max(width, last_width_), ' ');
    last_width_ = width;
    std::fprintf(out_, "\r%s", line.c_str());
    line_open_ = true;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressBar::finish() {
  if (!line_open_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  line_open_ = false;
}

}  // namespace pgq

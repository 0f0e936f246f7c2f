#pragma once
// A training progress line on stderr:
//   step 120/1000 [##........] 12% loss 2.314 val 2.401 (3.464 bpb) | 41.2k tok/s | 231 ms/step | ETA 3m22s
// On a terminal it is redrawn in place with '\r' (at most ten times a second, and
// always for the last step); otherwise (CI logs, files) it is printed as plain lines
// every `plain_every` steps, plus the first and the last step.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace pgq {

struct ProgressStats {
  int64_t step = 0;                 // steps completed so far, in [1, total]
  double loss = 0.0;                // training loss of this step
  std::optional<double> val_loss;   // set on steps that measured it; the last is kept
  std::optional<double> val_bpb;    // bits per byte, with val_loss
  double tokens_per_s = 0.0;
  double ms_per_step = 0.0;
};

class ProgressBar {
 public:
  // `start_step` is the step a resumed run starts from; the ETA uses the wall time per
  // step measured since construction.
  ProgressBar(int64_t total_steps, int64_t start_step = 0, int64_t plain_every = 50,
              std::FILE* out = stderr);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(const ProgressStats& stats);
  // Ends the in-place line on a terminal so that later output starts on its own line.
  void finish();

  // The text of one progress line; eta_seconds < 0 leaves the ETA out.
  static std::string formatLine(int64_t total_steps, const ProgressStats& stats,
                                std::optional<double> val_loss, std::optional<double> val_bpb,
                                double eta_seconds);

 private:
  using Clock = std::chrono::steady_clock;

  int64_t total_steps_;
  int64_t start_step_;
  int64_t plain_every_;
  std::FILE* out_;
  bool tty_;
  bool line_open_ = false;
  size_t last_width_ = 0;
  std::optional<double> val_loss_;
  std::optional<double> val_bpb_;
  Clock::time_point start_time_;
  Clock::time_point last_draw_;
};

}  // namespace pgq

#pragma once
// Per-step training metrics as CSV, one row per logged step, for plots and for
// comparing recipes. Each row reaches the file as one write(2) when it is logged, so
// an interrupted run keeps every row it logged. A resumed run keeps the rows up to the
// step it resumes from and drops the later ones, which the resumed run writes again.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace pgq {

// The fields of one CSV line as MetricsWriter writes it: RFC 4180 quoting, no line
// breaks inside fields. For readers of metrics files.
std::vector<std::string> splitCsv(std::string_view line);

class MetricsWriter {
 public:
  // An empty cell (a value not measured at this step, such as val_loss), an integer, a
  // number (written in the shortest form that reads back exactly; "nan"/"inf" as is)
  // or text (quoted when it holds a comma or a quote; line breaks become spaces).
  using Cell = std::variant<std::monostate, int64_t, double, std::string>;

  // Without resume_step: starts `path` afresh with a header row of `columns`, replacing
  // any previous file. With resume_step: keeps an existing file's rows whose `step`
  // column is <= resume_step and drops the others (the file is rewritten atomically),
  // then appends; a missing or empty file is started afresh. Resuming needs a column
  // named "step" and an existing header equal to `columns`; a mismatch, a step that is
  // not an integer, or an I/O failure throws pgq::Error naming the file.
  MetricsWriter(std::string path, std::vector<std::string> columns,
                std::optional<int64_t> resume_step = std::nullopt);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends one row. Columns not named in `cells` stay empty; naming a column that
  // does not exist is a programmer error.
  void write(const std::vector<std::pair<std::string, Cell>>& cells);

  const std::vector<std::string>& columns() const { return columns_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> columns_;
  int fd_ = -1;
};

}  // namespace pgq

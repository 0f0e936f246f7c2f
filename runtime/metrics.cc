#include "runtime/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "support/errors.h"
#include "support/file_io.h"

namespace pgq {
namespace {

[[noreturn]] void ioError(const std::string& path, std::string_view what, int err) {
  throw Error(fmt::format("metrics {}: {}: {}", path, what, std::strerror(err)));
}

void writeAll(int fd, std::string_view text, const std::string& path, std::string_view file) {
  while (!text.empty()) {
    ssize_t written = ::write(fd, text.data(), text.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) ioError(path, fmt::format("cannot write {}", file), errno);
    text.remove_prefix(static_cast<size_t>(written));
  }
}

std::string formatCell(const MetricsWriter::Cell& cell) {
  if (const int64_t* i = std::get_if<int64_t>(&cell)) return fmt::format("{}", *i);
  if (const double* d = std::get_if<double>(&cell)) return fmt::format("{}", *d);
  if (const std::string* text = std::get_if<std::string>(&cell)) {
    std::string flat = *text;
    std::replace(flat.begin(), flat.end(), '\n', ' ');
    std::replace(flat.begin(), flat.end(), '\r', ' ');
    if (flat.find_first_of(",\"") == std::string::npos) return flat;
    std::string quoted = "\"";
    for (char c : flat) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + '"';
  }
  return "";
}

// The existing file's header and the rows whose step is <= resume_step; the header and
// nothing else when the file is missing or empty.
std::string keptRows(const std::string& path, const std::vector<std::string>& columns,
                     const std::string& header, int64_t resume_step) {
  auto step_column = std::find(columns.begin(), columns.end(), "step");
  PGQ_ASSERT(step_column != columns.end(), "resuming metrics needs a 'step' column");
  size_t step_index = static_cast<size_t>(step_column - columns.begin());

  struct stat st;
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) {
    if (resume_step > 0)
      spdlog::warn("metrics {}: missing; the run resumes at step {} and its file starts there (the rows of the "
                   "steps before are lost)",
                   path, resume_step);
    return header;
  }
  std::string content;
  try {
    content = readTextFile(path, InputKind::kMetrics);
  } catch (const Error& e) {
    throw Error(fmt::format("metrics {}; cannot resume it", e.what()));
  }
  if (content.empty()) return header;

  size_t header_end = content.find('\n');
  std::string_view existing = std::string_view(content).substr(0, header_end);
  std::string_view expected = std::string_view(header).substr(0, header.size() - 1);
  if (existing != expected)
    throw Error(fmt::format(
        "metrics {}: the header is '{}', expected '{}' (the columns of this run); move the old "
        "file away or start a fresh run",
        path, existing, expected));

  std::string kept = header;
  int64_t last = 0;  // the last step kept
  if (header_end == std::string::npos) return kept;
  size_t line_number = 1;
  for (size_t begin = header_end + 1;;) {
    size_t end = content.find('\n', begin);
    // A last line without '\n' was cut by an interrupted write and is dropped.
    if (end == std::string::npos) break;
    ++line_number;
    std::string_view line = std::string_view(content).substr(begin, end - begin);
    begin = end + 1;
    if (line.empty()) continue;
    std::vector<std::string> fields = splitCsv(line);
    std::string_view cell =
        step_index < fields.size() ? std::string_view(fields[step_index]) : std::string_view();
    int64_t step = 0;
    auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), step);
    if (ec != std::errc() || ptr != cell.data() + cell.size())
      throw Error(fmt::format("metrics {}: line {}: step '{}' is not an integer", path,
                              line_number, cell));
    if (step <= resume_step) {
      kept.append(line).append("\n");
      last = std::max(last, step);
    }
  }
  // Rows are written every step (docs/TRAINING.md): fewer means the file was cut or
  // replaced, and the loss curves would have a gap there.
  if (last < resume_step)
    spdlog::warn("metrics {}: its rows end at step {}, but the run resumes at step {}: the rows in between are "
                 "missing (the file was cut or replaced)",
                 path, last, resume_step);
  return kept;
}

}  // namespace

std::vector<std::string> splitCsv(std::string_view line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      fields.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

MetricsWriter::MetricsWriter(std::string path, std::vector<std::string> columns,
                             std::optional<int64_t> resume_step)
    : path_(std::move(path)), columns_(std::move(columns)) {
  PGQ_ASSERT(!columns_.empty(), "metrics need at least one column");
  for (const std::string& column : columns_)
    PGQ_ASSERT(!column.empty() && column.find_first_of(",\"\r\n") == std::string::npos,
               "metrics column name '{}' must be plain text", column);
  std::string header = fmt::format("{}\n", fmt::join(columns_, ","));
  // The header (and kept rows) replace the file atomically, so a crash leaves either
  // the old rows or the new ones; rows are then appended to whatever file that left at
  // the path (its symlink's target, or a FIFO written in place).
  std::string start = resume_step ? keptRows(path_, columns_, header, *resume_step) : header;
  try {
    writeFileAtomically(path_, start);
  } catch (const Error& e) {
    throw Error(fmt::format("metrics {}", e.what()));
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) ioError(path_, "cannot open the file to append rows", errno);
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const std::vector<std::pair<std::string, Cell>>& cells) {
  std::vector<std::string> row(columns_.size());
  std::vector<bool> given(columns_.size(), false);
  for (const auto& [name, cell] : cells) {
    auto it = std::find(columns_.begin(), columns_.end(), name);
    PGQ_ASSERT(it != columns_.end(), "metrics have no column '{}'", name);
    size_t index = static_cast<size_t>(it - columns_.begin());
    PGQ_ASSERT(!given[index], "metrics column '{}' given twice in one row", name);
    given[index] = true;
    row[index] = formatCell(cell);
  }
  writeAll(fd_, fmt::format("{}\n", fmt::join(row, ",")), path_, path_);
}

}  // namespace pgq

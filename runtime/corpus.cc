#include "runtime/corpus.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "support/errors.h"
#include "support/file_io.h"
#include "support/hash.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

// Appends the content of the regular file `file` to `text`, which, with what it already
// holds, must stay within the corpus limit (support/file_io.h). `what` names the corpus in
// messages when the file is one of a directory's.
void appendFile(const std::string& file, const std::string& what, std::vector<uint8_t>& text) {
  try {
    InputFile in = openInputFile(file, InputKind::kCorpus);
    if (in.size > in.limit - std::min<uint64_t>(text.size(), in.limit))
      throw Error(fmt::format("{}: its text files add up to more than {}", what, in.limit_text));
    readRest(in, text);
  } catch (const Error& e) {
    throw Error(fmt::format("corpus {}", e.what()));
  }
}

std::optional<size_t> firstNul(const uint8_t* bytes, size_t size) {
  if (size == 0) return std::nullopt;
  const void* nul = std::memchr(bytes, 0, size);
  if (!nul) return std::nullopt;
  return static_cast<size_t>(static_cast<const uint8_t*>(nul) - bytes);
}

// The text files of a directory, concatenated in sorted name order (see corpus.h).
std::vector<uint8_t> readDirectory(const std::string& dir, int64_t& files) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code status_ec;
    if (it->symlink_status(status_ec).type() == fs::file_type::regular && !status_ec)
      names.push_back(it->path().filename().string());
  }
  if (ec)
    throw Error(fmt::format("corpus {}: cannot list the directory: {}", dir, ec.message()));
  std::sort(names.begin(), names.end());

  std::vector<uint8_t> text;
  for (const std::string& name : names) {
    size_t start = text.size();
    appendFile((fs::path(dir) / name).string(), dir, text);
    if (firstNul(text.data() + start, text.size() - start)) {
      text.resize(start);  // A binary file such as fortune's *.dat index.
      continue;
    }
    ++files;
  }
  if (files == 0)
    throw Error(fmt::format(
        "corpus {}: the directory has no text file (expected regular files without NUL "
        "bytes; symlinks and subdirectories are skipped)",
        dir));
  return text;
}

// True when `dir` is a pre-split corpus (see corpus.h); throws when it has only one of
// the two files.
bool isPreSplit(const std::string& dir) {
  std::error_code ec;
  bool train = fs::exists(fs::path(dir) / "train.txt", ec);
  bool val = fs::exists(fs::path(dir) / "val.txt", ec);
  if (train != val)
    throw Error(fmt::format("corpus {}: a pre-split corpus needs both train.txt and val.txt; {} is missing", dir,
                            train ? "val.txt" : "train.txt"));
  return train;
}

// train.txt then val.txt of a pre-split directory; `train_bytes` is where val.txt starts.
std::vector<uint8_t> readPreSplit(const std::string& dir, size_t& train_bytes) {
  std::vector<uint8_t> text;
  for (const char* name : {"train.txt", "val.txt"}) {
    std::string file = (fs::path(dir) / name).string();
    size_t start = text.size();
    appendFile(file, dir, text);
    if (text.size() == start)
      throw Error(fmt::format("corpus {}: {} is empty; a pre-split corpus needs text in both splits", dir, name));
    if (std::optional<size_t> nul = firstNul(text.data() + start, text.size() - start))
      throw Error(fmt::format("corpus {}: byte offset {} is a NUL byte; expected a text file", file, *nul));
    if (start == 0) train_bytes = text.size();
  }
  return text;
}

}  // namespace

std::string resolveCorpusPath(const std::string& path) {
  if (path != kEnglishCorpus) return path;
  const char* data_dir = std::getenv("PGQ_DATA_DIR");
  bool from_env = data_dir && *data_dir;
  fs::path dir = fs::path(from_env ? data_dir : PGQ_DEFAULT_DATA_DIR) / kEnglishCorpus;
  std::error_code ec;
  if (!fs::is_regular_file(dir / "train.txt", ec) || !fs::is_regular_file(dir / "val.txt", ec))
    throw Error(fmt::format("corpus {}: {} has no train.txt and val.txt{}; run scripts/setup.sh to assemble it (or "
                            "scripts/make_english_corpus.py {})",
                            path, dir.string(), from_env ? " (from PGQ_DATA_DIR)" : "", dir.string()));
  return dir.string();
}

Corpus loadCorpus(const std::string& given, double val_fraction) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw Error(fmt::format("corpus {}: validation fraction {} must be in (0, 1)", given,
                            val_fraction));
  const std::string path = resolveCorpusPath(given);
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    throw Error(fmt::format("corpus {}: no such file or directory", path));

  Corpus corpus;
  corpus.source = path;
  std::vector<uint8_t> text;
  std::optional<size_t> split_at;  // where a pre-split corpus's val.txt starts
  if (fs::is_directory(status) && isPreSplit(path)) {
    text = readPreSplit(path, split_at.emplace());
    corpus.files = 2;
  } else if (fs::is_directory(status)) {
    text = readDirectory(path, corpus.files);
  } else {
    appendFile(path, path, text);  // refuses anything but a regular file
    if (std::optional<size_t> nul = firstNul(text.data(), text.size()))
      throw Error(fmt::format(
          "corpus {}: byte offset {} is a NUL byte; expected a text file (is this a binary "
          "file?)",
          path, *nul));
    corpus.files = 1;
  }
  if (text.empty()) throw Error(fmt::format("corpus {}: the corpus is empty", path));

  corpus.fingerprint = fnv1a64(text.data(), text.size());
  size_t train_bytes =
      split_at ? *split_at : text.size() - static_cast<size_t>(static_cast<double>(text.size()) * val_fraction);
  corpus.val.assign(text.begin() + static_cast<std::ptrdiff_t>(train_bytes), text.end());
  text.resize(train_bytes);
  corpus.train = std::move(text);
  return corpus;
}

void checkCorpusFits(const Corpus& corpus, int64_t seq_len) {
  if (seq_len < 1) throw Error(fmt::format("seq_len {} must be at least 1", seq_len));
  uint64_t needed = static_cast<uint64_t>(seq_len) + 1;
  auto check = [&](const std::vector<uint8_t>& part, const char* name) {
    if (part.size() < needed)
      throw Error(fmt::format(
          "corpus {}: {} split has {} bytes, needs at least seq_len+1 = {}; use a longer "
          "text or a smaller seq_len",
          corpus.source, name, part.size(), needed));
  };
  check(corpus.train, "training");
  check(corpus.val, "validation");
}

}  // namespace pgq

#pragma once
// The training text of a model: one file, or every text file of a directory, split into a
// training part and a held-out validation part; or a directory that is split already.
// (runtime/corpus_tokens.h turns the text into the model's tokens.)
//
// Pre-split directory: one that holds a `train.txt` or a `val.txt` must hold both, and
// they are the two parts as they are (val_fraction does not apply; other files there,
// such as SOURCES.txt, are not read). scripts/make_english_corpus.py writes one, split
// by document.
//
// Named corpus: `english` (kEnglishCorpus) is the pre-split corpus that
// scripts/make_english_corpus.py assembles and scripts/setup.sh places in
// <source dir>/data/english; $PGQ_DATA_DIR/english instead when PGQ_DATA_DIR is set. A
// directory of that name elsewhere is given as a path (./english).
//
// Directory rule (every other directory): the regular files directly inside the directory (no recursion, and
// symbolic links are skipped so that a file linked under two names is read once) whose
// content is text, meaning it contains no NUL byte, concatenated byte for byte in
// sorted name order. This is how Debian's `fortunes` package is used: its directory
// holds the text files plus binary `*.dat` indexes (which contain NUL bytes) and
// `*.u8` symlinks, and only the text files are read. A file given directly must be
// text too: a NUL byte there means the wrong file was given.
#include <cstdint>
#include <string>
#include <vector>

namespace pgq {

inline constexpr const char* kEnglishCorpus = "english";

struct Corpus {
  // The first (1 - val_fraction) of the bytes, then the last val_fraction: contiguous,
  // so no validation window overlaps a training window. Or a pre-split directory's
  // train.txt and val.txt.
  std::vector<uint8_t> train;
  std::vector<uint8_t> val;
  std::string source;        // the path as given; a named corpus's directory
  int64_t files = 0;         // how many files were read
  uint64_t fingerprint = 0;  // FNV-1a 64 of all bytes (train then val)
};

// Reads `path` (a text file or a directory, see above) through pgq's one file reader
// (support/file_io.h). Throws pgq::Error naming the path for a missing or unreadable path, a
// path that is neither a regular file nor a directory (a FIFO, /dev/zero), more text
// than a corpus may have (4 GiB, and no more than the memory available), a file with a
// NUL byte, a directory with no text file, an empty corpus, val_fraction outside (0, 1),
// a pre-split directory without train.txt or val.txt or with an empty one, and a named
// corpus that has not been assembled (the message says to run scripts/setup.sh).
Corpus loadCorpus(const std::string& path, double val_fraction = 0.1);

// The directory a corpus name stands for (see above), or `path` itself when it is not a
// name.
std::string resolveCorpusPath(const std::string& path);

// Throws pgq::Error when the training or the validation part cannot hold one window of
// seq_len + 1 bytes (a sequence and its shifted targets).
void checkCorpusFits(const Corpus& corpus, int64_t seq_len);

}  // namespace pgq

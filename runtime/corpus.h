#pragma once
// The training text of a byte-level model (vocab 256): one file, or every text file of
// a directory, split into a training part and a held-out validation part.
//
// Directory rule: the regular files directly inside the directory (no recursion, and
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

struct Corpus {
  // The first (1 - val_fraction) of the bytes, then the last val_fraction: contiguous,
  // so no validation window overlaps a training window.
  std::vector<uint8_t> train;
  std::vector<uint8_t> val;
  std::string source;        // the path as given
  int64_t files = 0;         // how many files were concatenated
  uint64_t fingerprint = 0;  // FNV-1a 64 of all bytes (train then val)
};

// Reads `path` (a text file or a directory, see above) through pgq's one file reader
// (support/file_io.h). Throws pgq::Error naming the path for a missing or unreadable path, a
// path that is neither a regular file nor a directory (a FIFO, /dev/zero), more text
// than a corpus may have (4 GiB, and no more than the memory available), a file with a
// NUL byte, a directory with no text file, an empty corpus, or val_fraction outside
// (0, 1).
Corpus loadCorpus(const std::string& path, double val_fraction = 0.1);

// Throws pgq::Error when the training or the validation part cannot hold one window of
// seq_len + 1 bytes (a sequence and its shifted targets).
void checkCorpusFits(const Corpus& corpus, int64_t seq_len);

}  // namespace pgq

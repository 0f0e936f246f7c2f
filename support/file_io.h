#pragma once
// Reading and writing files, with errors that name the path. Every file pgq reads goes
// through openInputFile (usually by way of readTextFile) and every file it writes goes
// through OutputFile (usually by way of writeFileAtomically), so that what a user can
// put at a path (a FIFO, a device, /dev/zero, a huge or growing file, a symlink, a full
// disk) is handled once, here. Knows nothing of the IR or oneDNN: it is support code.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <memory>
#include <utility>
#include <vector>

namespace pgq {

// What a file pgq reads is. It names the file in messages and sets how large it may be:
// 64 MiB for the configs, IR text and a plot image, 1 GiB for a metrics CSV, 2 GiB for
// an ONNX model (protobuf's own limit), 4 GiB and at most the memory available now
// (MemAvailable in /proc/meminfo) for a corpus or a NumPy array, and no limit for a
// checkpoint, an ONNX external data file or a tokenizer cache file, whose readers check
// every size they read against the file's real size instead.
enum class InputKind {
  kModelConfig,
  kRecipe,
  kPolicy,
  kProfile,
  kHardwareModel,
  kIrText,
  kRunSummary,
  kExperimentOptions,
  kMetrics,
  kPlotImage,
  kCorpus,
  kNpyArray,
  kCheckpoint,
  kOnnxModel,
  kOnnxExternalData,
  kTokenCache,
  kShardingRules,
  kGemmShapes,
};

// An open file descriptor, closed when destroyed.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  int get() const { return fd_; }
  // Closes now; returns close(2)'s result (errno set on failure).
  int close();

 private:
  int fd_ = -1;
};

// A file open for reading that is a regular file no larger than its kind allows (or
// standard input, which is read with the same bound).
struct InputFile {
  std::string path;        // as given; "standard input" for "-"
  FileDescriptor fd;
  uint64_t size = 0;       // when it was opened (0 for a pipe)
  uint64_t limit = 0;      // the most bytes it may have
  std::string limit_text;  // "the 64 MiB a recipe may have", for messages
};

// Opens `path` for reading with O_NONBLOCK, so that a FIFO cannot block the open, and
// refuses anything but a regular file ("PATH: is a FIFO, expected a regular file") or
// a file larger than its kind allows ("r.yaml: 3.1 GiB is more than the 64 MiB a recipe
// may have"); then clears O_NONBLOCK. "-" is standard input, which only IR text may be
// read from (`pgq ir print -`). Throws pgq::Error naming the path.
InputFile openInputFile(const std::string& path, InputKind kind);

// Appends what is left of `file` to `out`, reading until end of file but never letting
// `out` grow past file.limit bytes: a file that grows while it is read (or a pipe that
// never ends) is cut off with a pgq::Error rather than read forever.
void readRest(InputFile& file, std::string& out);
void readRest(InputFile& file, std::vector<uint8_t>& out);

// Reads up to `size` bytes of `file` into `dst` (a chunk of a file read piece by piece,
// already_read bytes so far) and returns how many: 0 at the end of the file. Throws
// pgq::Error naming the file when reading fails or the file grows past file.limit.
size_t readChunk(InputFile& file, char* dst, size_t size, uint64_t already_read);

// The whole content of a file of `kind` (see openInputFile and readRest).
std::string readTextFile(const std::string& path, InputKind kind);

// MemAvailable of /proc/meminfo in bytes; nullopt where it cannot be read.
std::optional<uint64_t> memAvailable();

// "64 MiB", "3.1 GiB", "512 bytes": a size for messages, to one decimal.
std::string byteSizeText(uint64_t bytes);

// A file being written. Every writer in pgq follows one rule for what a path means:
//   - a regular file or nothing: written to a temporary file in the same directory
//     (".NAME.tmp-PID"), fsynced and renamed over it by commit(), so a reader sees the
//     old content or the new, never a mix; a replaced file keeps its permissions.
//   - a symlink: resolved, and the rule applies to the file it leads to, so the link
//     stays a link and its target is replaced.
//   - anything else (a character or block device such as /dev/full, a FIFO, a
//     socket) and anything reached through /proc/ or /sys/ (/dev/stdout and /dev/fd/N
//     lead to /proc/self/fd/N): opened and written in place, as a shell's `>` would;
//     one of our own descriptors (/dev/stdout) is written through directly, at its
//     current offset. A FIFO that no process reads is an error after 10 s, not a
//     hang.
//   - a directory: refused.
// Every failure throws pgq::Error naming the path and errno's text (ENOSPC on
// /dev/full is an error). Destroying an uncommitted OutputFile removes its temporary
// file, and so does a SIGINT, SIGTERM or SIGHUP that kills the process while it exists
// (where that signal's action was the default: pgq installs a handler that removes the
// temporaries and dies by the signal). Before creating one, the constructor removes the temporary files of the same
// target that a killed write left behind: those whose PID is no longer alive or is our
// own (so two OutputFiles of one process must not write the same target at once).
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t size);
  // Atomic: fsync and close the temporary file; the target is not touched yet. In place:
  // close. commit() flushes first when this has not been called.
  void flush();
  // Atomic: fsync, rename over the target, fsync the directory. In place: close.
  void commit();

  bool atomic() const { return !tmp_.empty(); }
  // True once the new content has replaced the old (after the rename).
  bool committed() const { return committed_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err) const;

  std::string path_;    // as given, for messages
  std::string target_;  // the file that ends up with the content
  std::string tmp_;     // empty when written in place
  FileDescriptor fd_;
  bool committed_ = false;
  int temp_slot_ = -1;  // where a SIGINT, SIGTERM or SIGHUP finds tmp_ to remove it
};

// Checks, before anything is written, that a file `path` and its `sidecar` (a second
// file written beside it: X.csv beside X.yaml) can both be written: each is a regular
// file (or a link to one) or not there yet, never a folder, device or FIFO (a sidecar
// beside /dev/null would be /dev/null.csv), and their folder exists and is writable.
// Throws pgq::Error starting with `flag` and the path.
void checkFileWithSidecar(const std::string& flag, const std::string& path, const std::string& sidecar);

// The files one command reads and writes, all decided before any is written. check()
// refuses, naming the flags and paths:
//   - an output OutputFile could not write: a folder, a missing or unwritable folder;
//   - a file with a sidecar (X.py beside X.json) where the file is written in place (a
//     device, a FIFO, /dev/stdout): the sidecar would land beside it, in /dev;
//   - two outputs that end in one file (through symlinks, hard links, or a sidecar's
//     name), or an output that is a file the command reads (`-o` naming the model).
// Outputs written in place (a device, a FIFO, /dev/stdout) may repeat: nothing is
// replaced there.
class OutputPlan {
 public:
  // A file the command reads: no output may end in it. A path that is not there is
  // left to the reader's own error.
  void reads(const std::string& path);
  // A file the command writes, named in messages by `flag` ("-o", "--export-torch").
  void writes(const std::string& flag, const std::string& path);
  // `path` and `sidecar`, written together (checkFileWithSidecar's rule).
  void writesWithSidecar(const std::string& flag, const std::string& path, const std::string& sidecar);
  void check() const;

 private:
  struct Output {
    std::string flag, path;
    std::string beside;  // for a sidecar: the file it goes with
  };
  std::vector<std::string> inputs_;
  std::vector<Output> outputs_;
};

// Writes `text` to `path` by OutputFile's rule: atomically for a regular file (on
// failure `path` is left as it was, with no temporary file behind), in place for a
// device or FIFO.
void writeFileAtomically(const std::string& path, const std::string& text);

// Writes (path, text) pairs that belong together (a profile and its CSV, a recipe and its
// exports): every temporary file is written and synced before the first rename, so a
// failure while writing (a full disk) leaves every target as it was. Only a failed
// rename, after all the data is on disk, can leave some replaced.
void writeFilesTogether(const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace pgq

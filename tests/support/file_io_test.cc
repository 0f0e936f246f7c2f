// The one reader and the one writer of files (support/file_io.h), against the paths a user
// can give: FIFOs, devices, directories, huge sparse files, symlinks, a full device.
#include "support/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "support/errors.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

using test::errorOf;

namespace fs = std::filesystem;

class FileIoTest : public test::TempDirTest {
 protected:
  // A file of `size` bytes that takes no disk space.
  std::string sparse(const std::string& name, uint64_t size) const {
    std::string file = path(name);
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0) << std::strerror(errno);
    ::close(fd);
    return file;
  }
};

TEST_F(FileIoTest, ReadsARegularFile) {
  std::string file = write("r.yaml", "gemms: []\n");
  EXPECT_EQ(readTextFile(file, InputKind::kRecipe), "gemms: []\n");
  EXPECT_EQ(readTextFile(write("empty.yaml", ""), InputKind::kRecipe), "");
}

TEST_F(FileIoTest, RefusesAFifoWithoutBlocking) {
  std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // No writer ever opens the FIFO: a blocking open would hang here.
  EXPECT_EQ(errorOf([&] { readTextFile(fifo, InputKind::kRecipe); }), fifo + ": is a FIFO, expected a regular file");
  EXPECT_EQ(errorOf([&] { openInputFile(fifo, InputKind::kCorpus); }), fifo + ": is a FIFO, expected a regular file");
}

TEST_F(FileIoTest, RefusesDevicesAndDirectories) {
  EXPECT_EQ(errorOf([&] { readTextFile("/dev/zero", InputKind::kModelConfig); }),
            "/dev/zero: is a character device, expected a regular file");
  EXPECT_EQ(errorOf([&] { readTextFile(dir_.string(), InputKind::kIrText); }),
            dir_.string() + ": is a directory, expected a regular file");
  EXPECT_EQ(errorOf([&] { openInputFile("/dev/null", InputKind::kCheckpoint); }),
            "/dev/null: is a character device, expected a regular file");
  std::string missing = path("missing.yaml");
  EXPECT_EQ(errorOf([&] { readTextFile(missing, InputKind::kPolicy); }),
            missing + ": cannot open: No such file or directory");
}

TEST_F(FileIoTest, RefusesAFileLargerThanItsKindAllows) {
  std::string huge = sparse("huge.yaml", uint64_t{3328599654});  // 3.1 GiB
  EXPECT_EQ(errorOf([&] { readTextFile(huge, InputKind::kRecipe); }),
            huge + ": 3.1 GiB is more than the 64 MiB a recipe may have");
  // Just past the limit: the size is given in bytes, where "64.0 MiB" would read as equal.
  std::string over = sparse("over.pgq", (uint64_t{64} << 20) + 1);
  EXPECT_EQ(errorOf([&] { readTextFile(over, InputKind::kIrText); }),
            over + ": 67108865 bytes is more than the 64 MiB an IR text file may have");
  // A corpus may be larger, but not past 4 GiB nor past the memory available.
  std::string corpus = sparse("corpus.txt", uint64_t{5} << 30);
  std::string error = errorOf([&] { openInputFile(corpus, InputKind::kCorpus); });
  EXPECT_TRUE(error.starts_with(corpus + ": 5 GiB is more than the ")) << error;
  EXPECT_TRUE(error.ends_with("a corpus may have") || error.ends_with("(MemAvailable in /proc/meminfo)")) << error;
  // A checkpoint has no size limit of its own: its reader checks its header's sizes.
  EXPECT_EQ(openInputFile(huge, InputKind::kCheckpoint).size, uint64_t{3328599654});
}

TEST_F(FileIoTest, ReadingStopsAtTheLimit) {
  // A file that grew after it was opened (or a pipe that never ends) is cut off.
  std::string file = write("grows.txt", std::string(100, 'x'));
  InputFile in = openInputFile(file, InputKind::kRecipe);
  in.size = 10;
  in.limit = 40;
  in.limit_text = "the 40 bytes of this test";
  std::string text;
  EXPECT_EQ(errorOf([&] { readRest(in, text); }), file + ": grew past the 40 bytes of this test while it was read");
  EXPECT_LE(text.size(), 40u);
}

TEST_F(FileIoTest, StandardInputIsForIrTextOnly) {
  EXPECT_EQ(errorOf([&] { readTextFile("-", InputKind::kRecipe); }),
            "-: a recipe is read from a file, not from standard input");
}

TEST(ByteSizeText, RoundsToOneDecimal) {
  EXPECT_EQ(byteSizeText(512), "512 bytes");
  EXPECT_EQ(byteSizeText(uint64_t{64} << 20), "64 MiB");
  EXPECT_EQ(byteSizeText(1536), "1.5 KiB");
  EXPECT_EQ(byteSizeText(uint64_t{4} << 30), "4 GiB");
}

TEST_F(FileIoTest, ReplacesARegularFileAtomicallyKeepingItsMode) {
  std::string file = write("out.yaml", "old\n");
  ASSERT_EQ(::chmod(file.c_str(), 0600), 0);
  writeFileAtomically(file, "new\n");
  EXPECT_EQ(content(file), "new\n");
  EXPECT_EQ(fs::status(file).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(FileIoTest, WritesASymlinksTargetAndKeepsTheLink) {
  fs::create_directory(dir_ / "real");
  std::string target = write("real/r.yaml", "old\n");
  fs::create_symlink("real/r.yaml", dir_ / "link.yaml");
  writeFileAtomically(path("link.yaml"), "new\n");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.yaml"));
  EXPECT_EQ(content(target), "new\n");
  // The temporary file went beside the target, and is gone.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "real"), fs::directory_iterator()), 1);
  // A chain of links, and a dangling one (its target is created).
  fs::create_symlink("link.yaml", dir_ / "link2.yaml");
  writeFileAtomically(path("link2.yaml"), "newer\n");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link2.yaml"));
  EXPECT_EQ(content(target), "newer\n");
  fs::create_symlink("real/created.yaml", dir_ / "dangling.yaml");
  writeFileAtomically(path("dangling.yaml"), "made\n");
  EXPECT_TRUE(fs::is_symlink(dir_ / "dangling.yaml"));
  EXPECT_EQ(content(path("real/created.yaml")), "made\n");
}

TEST_F(FileIoTest, WritesThroughAFifoWithAReader) {
  std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::string received;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);
    received.assign(std::istreambuf_iterator<char>(in), {});
  });
  writeFileAtomically(fifo, "through the pipe\n");
  reader.join();
  EXPECT_EQ(received, "through the pipe\n");
  struct stat st;
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));  // still a FIFO, not a file renamed over it
}

// A FIFO whose reader starts late gets the output; one that never gets a reader is an
// error after the wait (10 s) instead of a hang.
TEST_F(FileIoTest, AFifoWaitsForItsReaderThenGivesUp) {
  std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::string received;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::ifstream in(fifo, std::ios::binary);
    received.assign(std::istreambuf_iterator<char>(in), {});
  });
  writeFileAtomically(fifo, "late reader\n");
  late.join();
  EXPECT_EQ(received, "late reader\n");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(errorOf([&] { writeFileAtomically(fifo, "nobody\n"); }),
            fifo + ": is a FIFO that no process reads (waited 10 s); start its reader first");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 10.0);
  EXPECT_LT(waited, 60.0);
}

TEST_F(FileIoTest, AFullDeviceIsAnError) {
  EXPECT_EQ(errorOf([&] { writeFileAtomically("/dev/full", "lost\n"); }),
            std::string("/dev/full: cannot write: ") + std::strerror(ENOSPC));
  writeFileAtomically("/dev/null", "discarded\n");
}

// Files that belong together (a profile and its CSV) are replaced together or not at all:
// the profile was replaced and then its CSV failed on a full disk, leaving a new profile
// beside the old CSV (session 17's hunt). Here the second file is /dev/full.
TEST_F(FileIoTest, FilesWrittenTogetherAreAllKeptWhenOneFails) {
  const std::string yaml = path("p.yaml"), csv = path("p.csv");
  writeFileAtomically(yaml, "old profile\n");
  EXPECT_EQ(errorOf([&] { writeFilesTogether({{yaml, "new profile\n"}, {"/dev/full", "lost\n"}}); }),
            std::string("/dev/full: cannot write: ") + std::strerror(ENOSPC));
  EXPECT_EQ(readTextFile(yaml, InputKind::kProfile), "old profile\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);  // no temporary file left
  writeFilesTogether({{yaml, "new profile\n"}, {csv, "new csv\n"}});
  EXPECT_EQ(readTextFile(yaml, InputKind::kProfile), "new profile\n");
  EXPECT_EQ(readTextFile(csv, InputKind::kProfile), "new csv\n");
}

TEST_F(FileIoTest, RefusesADirectoryAndNamesAMissingOne) {
  EXPECT_EQ(errorOf([&] { writeFileAtomically(dir_.string(), "x"); }),
            dir_.string() + ": is a directory, expected a file");
  std::string nowhere = path("no/such/dir/out.yaml");
  EXPECT_TRUE(errorOf([&] { writeFileAtomically(nowhere, "x"); }).starts_with(nowhere + ": cannot create a temporary file"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);
}

TEST_F(FileIoTest, RemovesStaleTemporaryFilesOfDeadWriters) {
  // A PID that is certainly dead: a child that has exited and been reaped.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  std::string dead = std::to_string(child), own = std::to_string(::getpid());
  write(".out.yaml.tmp-" + dead, "killed writeFileAtomically");
  write("out.yaml.tmp-" + dead, "killed checkpoint writer");
  write(".out.yaml.tmp-" + own, "our own, from an earlier failure");
  write(".out.yaml.tmp-1", "a live process's write in progress");
  write(".other.yaml.tmp-" + dead, "another target's");
  writeFileAtomically(path("out.yaml"), "fresh\n");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".other.yaml.tmp-" + dead, ".out.yaml.tmp-1", "out.yaml"}));
}

// Ctrl-C (or a SIGTERM) during a write: the process still dies by the signal, and its
// temporary files go with it instead of waiting in the run folder for the next write of
// the same target (a checkpoint's is as large as the checkpoint). Two writes open at once;
// a third, committed before, and its target stay.
TEST_F(FileIoTest, ASignalThatKillsAWriterRemovesItsTemporaryFiles) {
  for (int sig : {SIGINT, SIGTERM}) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      writeFileAtomically(path("done.txt"), "kept\n");
      OutputFile a(path("checkpoint.pgqckpt")), b(path("metrics.csv"));
      a.write("partial", 7);
      b.write("partial", 7);
      ::raise(sig);
      ::_exit(3);  // not reached
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
    EXPECT_EQ(WTERMSIG(status), sig);
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    EXPECT_EQ(names, std::vector<std::string>{"done.txt"}) << "signal " << sig;
  }
}

TEST_F(FileIoTest, AnOutputPlanRefusesAnOutputThatIsAnInputOrAnotherOutput) {
  std::string model = write("m.onnx", "model\n");
  fs::create_symlink("m.onnx", dir_ / "link.onnx");
  fs::create_hard_link(model, dir_ / "hard.onnx");
  auto refusal = [&](const std::function<void(OutputPlan&)>& add) {
    OutputPlan plan;
    plan.reads(model);
    plan.reads(path("not-there.yaml"));  // left to its reader
    add(plan);
    return errorOf([&] { plan.check(); });
  };
  EXPECT_EQ(refusal([&](OutputPlan& p) { p.writes("-o", model); }),
            "-o " + model + " is " + model + ", which this command reads: writing it would destroy it; give another path");
  // Through a symlink and a hard link; relative paths and '..' resolve alike.
  EXPECT_NE(refusal([&](OutputPlan& p) { p.writes("-o", path("link.onnx")); }).find("which this command reads"),
            std::string::npos);
  EXPECT_NE(refusal([&](OutputPlan& p) { p.writes("-o", path("hard.onnx")); }).find("which this command reads"),
            std::string::npos);
  // Two outputs on one path not yet taken, and a sidecar that is another output.
  EXPECT_EQ(refusal([&](OutputPlan& p) {
              p.writes("-o", path("r.yaml"));
              p.writes("--export-megatron", path("sub/../r.yaml"));
            }),
            "-o " + path("r.yaml") + " and --export-megatron " + path("sub/../r.yaml") +
                " are one file: each output needs its own path");
  EXPECT_EQ(refusal([&](OutputPlan& p) {
              p.writes("-o", path("x.py"));
              p.writesWithSidecar("--export-torch", path("x.json"), path("x.py"));
            }),
            "-o " + path("x.py") + " and --export-torch " + path("x.py") + " (written beside " + path("x.json") +
                ") are one file: each output needs its own path");
  // A file with a sidecar cannot be written in place: /dev/stdout.py would land in /dev.
  EXPECT_NE(refusal([&](OutputPlan& p) { p.writesWithSidecar("--export-torch", "/dev/stdout", "/dev/stdout.py"); })
                .find("--export-torch /dev/stdout: is written in place"),
            std::string::npos);
  EXPECT_NE(refusal([&](OutputPlan& p) { p.writes("--plot", path("nowhere/p.svg")); }).find("does not exist"),
            std::string::npos);
  // Distinct outputs, and outputs written in place more than once, pass.
  EXPECT_EQ(refusal([&](OutputPlan& p) {
              p.writes("-o", path("r.yaml"));
              p.writesWithSidecar("--export-torch", path("t.json"), path("t.py"));
              p.writes("--a", "/dev/null");
              p.writes("--b", "/dev/null");
            }),
            "no error");
  EXPECT_EQ(content(model), "model\n");
}

}  // namespace
}  // namespace pgq

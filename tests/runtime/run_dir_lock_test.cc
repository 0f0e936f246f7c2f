#include "runtime/run_dir_lock.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <optional>

#include <gtest/gtest.h>

#include "app/experiment.h"
#include "runtime/trainer.h"
#include "support/errors.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

using test::errorOf;

namespace fs = std::filesystem;

class RunDirLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("pgq_lock_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "run");
    run_ = (dir_ / "run").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::string run_;
};

std::string hostName() {
  std::array<char, 256> name{};
  ::gethostname(name.data(), name.size() - 1);
  return name.data();
}

TEST_F(RunDirLockTest, ASecondLockNamesTheHolderUntilItIsReleased) {
  std::optional<RunDirLock> held;
  held.emplace(run_);
  std::string error = errorOf([&] { RunDirLock again(run_); });
  EXPECT_EQ(error.find(run_ + " is in use by pgq pid " + std::to_string(::getpid()) + " on host " + hostName() +
                       " (started "),
            0u)
      << error;
  EXPECT_NE(error.find(" UTC); wait for it or choose another --out"), std::string::npos) << error;
  // A nested directory has its own lock.
  fs::create_directories(fs::path(run_) / "inner");
  EXPECT_EQ(errorOf([&] { RunDirLock inner(run_ + "/inner"); }), "no error");
  held.reset();
  EXPECT_EQ(errorOf([&] { RunDirLock again(run_); }), "no error");
}

// The lock's record truncates the file: a symlink there would lose its target's content,
// a FIFO would block the open, and a hard link shares another file's content. All are
// refused.
TEST_F(RunDirLockTest, ALockFileThatIsASymlinkAFifoOrAHardLinkIsRefused) {
  const fs::path target = dir_ / "precious.txt";
  { std::ofstream(target) << "precious\n"; }
  fs::create_symlink(target, fs::path(run_) / ".pgq-lock");
  EXPECT_EQ(errorOf([&] { RunDirLock lock(run_); }),
            run_ + ": the lock file " + run_ + "/.pgq-lock is a symlink; pgq writes its own lock file there: remove the "
                   "link");
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious\n");
  fs::remove(fs::path(run_) / ".pgq-lock");
  ASSERT_EQ(::mkfifo((fs::path(run_) / ".pgq-lock").c_str(), 0644), 0);
  EXPECT_EQ(errorOf([&] { RunDirLock lock(run_); }),
            run_ + ": the lock file " + run_ + "/.pgq-lock is not a regular file; pgq writes its own lock file there: "
                   "remove it");
  // A hard link to another file: the record replaced that file's content (session 17).
  fs::remove(fs::path(run_) / ".pgq-lock");
  fs::create_hard_link(target, fs::path(run_) / ".pgq-lock");
  EXPECT_EQ(errorOf([&] { RunDirLock lock(run_); }),
            run_ + ": the lock file " + run_ + "/.pgq-lock is a hard link to another file (2 names); pgq writes its "
                   "own lock file there: remove it");
  std::ifstream again(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(again), {}), "precious\n");
}

// The kernel drops a flock with its holder: a run killed with SIGKILL (no destructor,
// no cleanup) must not leave the directory locked.
TEST_F(RunDirLockTest, AKilledHolderLeavesNoStaleLock) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    try {
      RunDirLock lock(run_);
      char byte = 1;
      if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(1);  // the parent then reads nothing and fails
    }
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  std::string error = errorOf([&] { RunDirLock lock(run_); });
  EXPECT_NE(error.find("in use by pgq pid " + std::to_string(child) + " on host"), std::string::npos) << error;
  ::kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(errorOf([&] { RunDirLock lock(run_); }), "no error");
  EXPECT_TRUE(fs::exists(fs::path(run_) / kRunDirLockFile));
}

TEST_F(RunDirLockTest, TrainingAndExperimentsRefuseALockedDirectory) {
  RunDirLock held(run_);
  std::string holder = "is in use by pgq pid " + std::to_string(::getpid());
  TrainOptions o;
  o.model = loadModelConfig("tiny");
  o.steps = 2;
  o.optimizer.warmup = 1;
  o.eval_batches = 1;
  o.out_dir = run_;
  o.progress = false;
  std::string error = errorOf([&] { train(o); });
  EXPECT_NE(error.find(holder), std::string::npos) << error;
  o.resume = true;
  error = errorOf([&] { train(o); });
  EXPECT_NE(error.find(holder), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(fs::path(run_) / "checkpoint.pgqckpt"));
  EXPECT_FALSE(fs::exists(fs::path(run_) / "metrics.csv"));

  ExperimentOptions e;
  e.model = o.model;
  e.out_dir = run_;
  e.progress = false;
  error = errorOf([&] { runExperiment(e); });
  EXPECT_NE(error.find(holder), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(fs::path(run_) / "experiment.yaml"));
}

}  // namespace
}  // namespace pgq

#include "runtime/metrics.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "runtime/progress.h"
#include "support/errors.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

using test::errorOf;

namespace fs = std::filesystem;

const std::vector<std::string> kColumns = {"step", "loss", "val_loss", "lr", "recipe"};

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "pgq_metrics_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = (dir_ / "metrics.csv").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string content() const {
    std::ifstream in(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  size_t filesInDir() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {}));
  }

  fs::path dir_;
  std::string path_;
};

void writeSteps(MetricsWriter& w, int64_t from, int64_t to) {
  for (int64_t step = from; step <= to; ++step)
    w.write({{"step", step}, {"loss", 4.0 - 0.25 * static_cast<double>(step)}});
}

TEST_F(MetricsTest, RowsHaveEmptyCellsAndReachTheFileAtOnce) {
  MetricsWriter w(path_, kColumns);
  EXPECT_EQ(content(), "step,loss,val_loss,lr,recipe\n");
  w.write({{"step", 1}, {"loss", 2.5}, {"lr", 0.001}, {"recipe", "baseline"}});
  // Read while the writer is still open: the row was written, not buffered.
  EXPECT_EQ(content(), "step,loss,val_loss,lr,recipe\n1,2.5,,0.001,baseline\n");
  w.write({{"recipe", "a,b \"q\"\nnext"}, {"val_loss", 1.0 / 3.0}, {"step", int64_t{2}}});
  EXPECT_EQ(content(),
            "step,loss,val_loss,lr,recipe\n1,2.5,,0.001,baseline\n"
            "2,,0.3333333333333333,,\"a,b \"\"q\"\" next\"\n");
  EXPECT_THROW(w.write({{"no_such_column", 1}}), InternalError);
  EXPECT_EQ(filesInDir(), 1u);
}

TEST_F(MetricsTest, ResumeKeepsRowsUpToTheStepAndDropsLaterOnes) {
  {
    MetricsWriter w(path_, {"step", "loss"});
    writeSteps(w, 1, 10);
  }
  // An interrupted write leaves a partial last line; resuming drops it.
  std::ofstream(path_, std::ios::app) << "11,1.2";
  {
    MetricsWriter w(path_, {"step", "loss"}, 6);
    EXPECT_EQ(content(), "step,loss\n1,3.75\n2,3.5\n3,3.25\n4,3\n5,2.75\n6,2.5\n");
    writeSteps(w, 7, 8);
  }
  EXPECT_EQ(content(), "step,loss\n1,3.75\n2,3.5\n3,3.25\n4,3\n5,2.75\n6,2.5\n7,2.25\n8,2\n");
  EXPECT_EQ(filesInDir(), 1u);
  // Starting afresh replaces the file.
  MetricsWriter fresh(path_, {"step", "loss"});
  EXPECT_EQ(content(), "step,loss\n");
}

TEST_F(MetricsTest, ResumeOfAMissingFileStartsAfresh) {
  MetricsWriter w(path_, {"step", "loss"}, 100);
  writeSteps(w, 101, 101);
  EXPECT_EQ(content(), "step,loss\n101,-21.25\n");
}

TEST_F(MetricsTest, ResumeRejectsAnotherHeaderOrABadStep) {
  std::ofstream(path_) << "step,loss,extra\n1,2,3\n";
  EXPECT_EQ(errorOf([&] { MetricsWriter(path_, {"step", "loss"}, 5); }),
            "metrics " + path_ +
                ": the header is 'step,loss,extra', expected 'step,loss' (the columns of this "
                "run); move the old file away or start a fresh run");
  std::ofstream(path_, std::ios::trunc) << "step,loss\n1,2\nten,3\n";
  EXPECT_EQ(errorOf([&] { MetricsWriter(path_, {"step", "loss"}, 5); }),
            "metrics " + path_ + ": line 3: step 'ten' is not an integer");
  // The failed resume left the file as it was.
  EXPECT_EQ(content(), "step,loss\n1,2\nten,3\n");
  EXPECT_TRUE(errorOf([&] { MetricsWriter((dir_ / "no/dir.csv").string(), {"step"}); })
                  .find("no/dir.csv") != std::string::npos);
}

TEST(ProgressBar, FormatsOneLine) {
  ProgressStats stats{120, 2.3141, std::nullopt, std::nullopt, 41234.0, 231.4};
  EXPECT_EQ(ProgressBar::formatLine(1000, stats, 2.401, 3.4639, 202.0),
            "step 120/1000 [#.........] 12% loss 2.314 val 2.401 (3.464 bpb) | 41.2k tok/s | 231 "
            "ms/step | ETA 3m22s");
  stats.step = 1000;
  stats.tokens_per_s = 950;
  EXPECT_EQ(ProgressBar::formatLine(1000, stats, std::nullopt, std::nullopt, 3725.0),
            "step 1000/1000 [##########] 100% loss 2.314 | 950 tok/s | 231 ms/step | ETA 1h02m");
}

TEST(ProgressBar, PrintsPlainLinesEveryNStepsWhenNotATerminal) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    ProgressBar bar(10, 0, 4, out);
    for (int64_t step = 1; step <= 10; ++step) {
      ProgressStats stats{step, 3.0, std::nullopt, std::nullopt, 1e6, 10.0};
      if (step == 3) stats.val_loss = 2.5;
      bar.update(stats);
    }
  }
  std::rewind(out);
  std::vector<std::string> lines;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, out)) lines.emplace_back(buffer);
  std::fclose(out);
  ASSERT_EQ(lines.size(), 4u);  // steps 1, 4, 8 and the last
  EXPECT_EQ(lines[0].rfind("step 1/10 [#.........] 10% loss 3.000 | 1.00M tok/s | 10 ms/step", 0),
            0u)
      << lines[0];
  // The validation loss measured at step 3 stays on later lines.
  EXPECT_EQ(lines[1].rfind("step 4/10 [####......] 40% loss 3.000 val 2.500 |", 0), 0u)
      << lines[1];
  EXPECT_EQ(lines[3].rfind("step 10/10 [##########] 100%", 0), 0u) << lines[3];
  EXPECT_NE(lines[3].find("ETA 0s\n"), std::string::npos) << lines[3];
}

}  // namespace
}  // namespace pgq

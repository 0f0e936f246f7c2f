#include <csignal>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <functional>
#include <limits>
#include <iterator>
#include <sstream>

#include <gtest/gtest.h>

#include "app/experiment.h"
#include "app/experiment_report.h"
#include "support/errors.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

// A machine on which even the tiny model's GEMMs are worth quantizing, so every
// recipe of the protocol has something to choose.
const char* kFastInt8 = R"(name: fast-int8
threads: 2
peak_gflops: {f32: 100, bf16: 100, int8: 10000}
gemm_gflops: {f32: 100, bf16: 100, int8: 10000}
memory_bandwidth_gbs: 10000
quantize_gbs: {rtn: 100000, sr: 100000}
call_overhead_us: 0
int8: {vnni: false, max_bits_one: 8, max_bits_both: 7}
)";

// The same with FP8 at the int8 rate (a GPU's formats, the tiny model's sizes).
const char* kFastFp8 = R"(name: fast-fp8
threads: 2
formats: [int8, fp8]
peak_gflops: {f32: 100, bf16: 100, int8: 10000, fp8: 10000}
gemm_gflops: {f32: 100, bf16: 100, int8: 10000, fp8: 10000}
memory_bandwidth_gbs: 10000
quantize_gbs: {rtn: 100000, sr: 100000}
call_overhead_us: 0
int8: {vnni: false, max_bits_one: 8, max_bits_both: 7}
)";

class ExperimentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("pgq_experiment_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "hw.yaml") << kFastInt8;
  }
  void TearDown() override { fs::remove_all(dir_); }

  ExperimentOptions options() const {
    ExperimentOptions o;
    o.model = loadModelConfig("tiny");
    o.out_dir = (dir_ / "exp").string();
    o.hardware = (dir_ / "hw.yaml").string();
    o.baseline_steps = 40;
    o.profile_steps = 3;
    o.finetune_steps = 12;
    o.fractions = {0.5};
    o.optimizer.warmup = 5;
    o.eval_batches = 1;
    o.progress = false;
    return o;
  }
  // Orderings cut at half the candidates, with the metrics' statistics.
  ExperimentOptions orderingOptions(int64_t random_orderings, int64_t finetune_steps) const {
    ExperimentOptions o = options();
    o.protocol = ExperimentProtocol::kOrderings;
    o.profile_metrics = true;
    o.ordering_points = {0.5};
    o.random_orderings = random_orderings;
    o.finetune_steps = finetune_steps;
    return o;
  }
  std::string read(const fs::path& p) const {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // The modification time of every file under `dir`: a run redone rewrites its files.
  static std::map<std::string, fs::file_time_type> stamps(const fs::path& dir) {
    std::map<std::string, fs::file_time_type> result;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file()) result[fs::relative(e.path(), dir).string()] = e.last_write_time();
    return result;
  }

  fs::path dir_;
};

TEST_F(ExperimentTest, WritesEveryResultAndResumesWithoutRedoingWork) {
  ExperimentOptions o = options();
  ExperimentResult r = runExperiment(o);
  fs::path out(o.out_dir);
  for (const char* f : {"REPORT.md", "table.md", "table.csv", "loss_curves.png", "speedup_vs_loss.png", "sqnr.md",
                        "sqnr.png", "profile.yaml", "experiment.yaml"})
    EXPECT_TRUE(fs::exists(out / f)) << f;
  // f32, F, F+B, F+B_SR and one SQNR-ordered / adversarial pair.
  std::vector<std::string> runs;
  for (const auto& e : fs::directory_iterator(out / "runs")) runs.push_back(e.path().filename().string());
  EXPECT_EQ(runs.size(), 6u);
  std::string table = read(out / "table.md");
  EXPECT_NE(table.find("| f32 |"), std::string::npos) << table;
  EXPECT_NE(table.find("| F+B_SR>"), std::string::npos) << table;
  bool higher = false, lower = false;
  for (const std::string& run : runs) {
    higher |= run.starts_with("F+B_SR_gt_");
    lower |= run.starts_with("F+B_SR_lt_");
    RunSummary s = loadRunSummary((out / "runs" / run / "result.yaml").string());
    EXPECT_EQ(s.first_step, 41) << run;  // every run continues the baseline
    EXPECT_EQ(s.last_step, 52) << run;
    EXPECT_GT(s.step_ms, 0) << run;
  }
  EXPECT_TRUE(higher && lower);
  // The SQNR-ordered and adversarial twins quantize the same number of backward GEMMs.
  std::string report = read(out / "REPORT.md");
  EXPECT_NE(report.find("### Is the SQNR ordering informative?"), std::string::npos);
  EXPECT_NE(report.find("get_logits:dgrad"), std::string::npos);
  // The f32 step timed again at the end, beside the runs, and what it says in the report.
  EXPECT_TRUE(fs::exists(out / "timing" / "f32" / "result.yaml"));
  EXPECT_NE(report.find("Timing"), std::string::npos) << report;

  // Running again redoes nothing and reproduces the same tables.
  auto stamp = fs::last_write_time(out / "runs" / "F+B" / "metrics.csv");
  runExperiment(o);
  EXPECT_EQ(fs::last_write_time(out / "runs" / "F+B" / "metrics.csv"), stamp);
  EXPECT_EQ(read(out / "table.md"), table);
  // A run whose result is missing (interrupted) is redone, from its checkpoint.
  fs::remove(out / "runs" / "F+B" / "result.yaml");
  runExperiment(o);
  EXPECT_TRUE(fs::exists(out / "runs" / "F+B" / "result.yaml"));
  EXPECT_EQ(read(out / "table.md"), table);
}

TEST_F(ExperimentTest, ShowsTheSqnrOfTheFormatItQuantizesTo) {
  ExperimentOptions o = options();
  o.bits = 4;
  o.granularity = ScaleLayout::parse("tensor");
  o.fractions = {};
  runExperiment(o);
  fs::path out(o.out_dir);
  std::string sqnr = read(out / "sqnr.md"), report = read(out / "REPORT.md");
  EXPECT_NE(sqnr.find("int4:tensor:rtn"), std::string::npos) << sqnr;
  EXPECT_EQ(sqnr.find("int8:channel"), std::string::npos) << sqnr;
  EXPECT_NE(report.find("Median SQNR in int4:tensor:rtn"), std::string::npos) << report;
  // The recipes quantize to the same format.
  std::string recipe = read(out / "recipes" / "F+B.yaml");
  EXPECT_NE(recipe.find("int4:tensor"), std::string::npos);
  // Table I counts the GEMMs in that format (session 15: its heading said int8).
  const std::string table = read(out / "table.md");
  EXPECT_EQ(table.find("| recipe | fwd GEMMs int4 | bwd GEMMs int4 |"), 0u) << table;
  EXPECT_EQ(read(out / "table.csv").find("recipe,fwd_quantized,fwd_total,bwd_quantized,bwd_total,"), 0u);
}

// Run summaries written before the counts were renamed (fwd_int8) still load.
TEST(ExperimentFiles, ARunSummaryWithTheOldCountNamesLoads) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("pgq_summary_{}", ::getpid());
  fs::create_directories(dir);
  const std::string path = (dir / "result.yaml").string();
  {
    std::ofstream f(path);
    f << "name: \"F\"\npolicy: \"F\"\nrecipe: \"r.yaml\"\nfirst_step: 1\nlast_step: 9\nstep_ms: 10\nmean_loss: 2.5\n"
         "final_val_loss: 2.6\nfwd_int8: 5\nfwd_total: 7\nbwd_int8: 3\nbwd_total: 14\n";
  }
  const RunSummary s = loadRunSummary(path);
  EXPECT_EQ(s.fwd_quantized, 5);
  EXPECT_EQ(s.bwd_quantized, 3);
  writeRunSummary(path, s);
  const RunSummary again = loadRunSummary(path);
  EXPECT_EQ(again.fwd_quantized, 5);
  EXPECT_EQ(again.bwd_total, 14);
  fs::remove_all(dir);
}

TEST_F(ExperimentTest, RefusesOtherOptionsInTheSameFolderAndBadValues) {
  ExperimentOptions o = options();
  runExperiment(o);
  ExperimentOptions other = o;
  other.finetune_steps = 20;
  EXPECT_THROW(runExperiment(other), Error);
  ExperimentOptions bad = options();
  bad.out_dir = (dir_ / "bad").string();
  bad.fractions = {1.5};
  EXPECT_THROW(runExperiment(bad), Error);
  bad = options();
  bad.out_dir = (dir_ / "bad").string();
  bad.extra_policies = {"F+Z"};
  EXPECT_THROW(runExperiment(bad), Error);
  // Policies whose runs would share a folder (session 16: the second reused the first's
  // run), and names that would put a run outside runs/.
  for (const std::string& name : {std::string("F"), std::string("a b"), std::string("..")}) {
    SCOPED_TRACE(name);
    bad = options();
    bad.out_dir = (dir_ / "bad").string();
    std::ofstream(dir_ / "p1.yaml") << "name: \"a:b\"\nforward: {quantize: true}\nbackward: {quantize: false}\n";
    std::ofstream(dir_ / "p2.yaml") << "name: \"" << name << "\"\nforward: {quantize: false}\nbackward: {quantize: false}\n";
    bad.extra_policies = {(dir_ / "p1.yaml").string(), (dir_ / "p2.yaml").string()};
    if (name == "..") {
      EXPECT_EQ(runSlug(name), "_..");
      continue;
    }
    try {
      runExperiment(bad);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("would share the run folder runs/"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(bad.out_dir));
  }
  bad = options();
  bad.out_dir = (dir_ / "bad").string();
  bad.protocol = ExperimentProtocol::kSearch;
  bad.loss_budget = 0;
  EXPECT_THROW(runExperiment(bad), Error);
  bad = options();
  bad.out_dir = (dir_ / "bad").string();
  bad.profile_steps = 100;  // more than the baseline
  EXPECT_THROW(runExperiment(bad), Error);
}

TEST_F(ExperimentTest, OptionsOutOfRangeFailBeforeWritingAnything) {
  const double nan = std::nan("");
  struct Case {
    std::string name;  // the message starts with it
    std::function<void(ExperimentOptions&)> set;
  };
  std::vector<Case> cases = {
      {"--baseline-steps", [](ExperimentOptions& o) { o.baseline_steps = 0; }},
      {"--profile-steps", [](ExperimentOptions& o) { o.profile_steps = 0; }},
      {"--profile-steps", [](ExperimentOptions& o) { o.profile_steps = 41; }},  // past the 40 baseline steps
      {"--finetune-steps", [](ExperimentOptions& o) { o.finetune_steps = 1; }},
      {"--trial-steps", [](ExperimentOptions& o) { o.trial_steps = std::numeric_limits<int64_t>::max(); }},
      {"eval_batches", [](ExperimentOptions& o) { o.eval_batches = 0; }},
      {"--bits", [](ExperimentOptions& o) { o.bits = 9; }},
      {"--fractions", [&](ExperimentOptions& o) { o.fractions = {0.5, nan}; }},
      {"--fractions", [](ExperimentOptions& o) { o.fractions.assign(101, 0.5); }},
      {"--loss-budget", [&](ExperimentOptions& o) {
         o.protocol = ExperimentProtocol::kSearch;
         o.loss_budget = nan;
       }},
      {"--lr", [&](ExperimentOptions& o) { o.optimizer.lr = nan; }},
      {"--warmup", [](ExperimentOptions& o) { o.optimizer.warmup = -1; }},
      {"model huge.yaml: training needs about", [](ExperimentOptions& o) {
         o.model = parseModelConfig(
             "d_model: 65536\nn_layers: 48\nn_heads: 16\nd_ff: 262144\nseq_len: 4096\nbatch: 64\n", "huge.yaml");
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExperimentOptions o = options();
    c.set(o);
    try {
      runExperiment(o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_TRUE(std::string(e.what()).starts_with(c.name)) << e.what();
    }
    EXPECT_FALSE(fs::exists(o.out_dir));
  }
}

TEST_F(ExperimentTest, AFullDiskStopsWithAnErrorAndKeepsEarlierResults) {
  ExperimentOptions o = options();
  runExperiment(o);
  std::string table = read(fs::path(o.out_dir) / "table.md");
  fs::remove(fs::path(o.out_dir) / "runs" / "F" / "result.yaml");
  // A file size limit makes writes fail part-way, like a full disk.
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  EXPECT_THROW(runExperiment(o), Error);
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, handler);
  EXPECT_EQ(read(fs::path(o.out_dir) / "table.md"), table);
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "runs" / "F+B" / "result.yaml"));
  runExperiment(o);  // and it finishes once there is room
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "runs" / "F" / "result.yaml"));
}

TEST_F(ExperimentTest, NeverRecommendsAnAdversarialRecipe) {
  ExperimentOptions o = options();
  runExperiment(o);
  fs::path runs = fs::path(o.out_dir) / "runs";
  RunSummary base = loadRunSummary((runs / "f32" / "result.yaml").string());
  // The adversarial recipe becomes the fastest run, with the f32 loss; of the real
  // recipes only F stays within 1% of it.
  std::string adversarial;
  for (const auto& e : fs::directory_iterator(runs)) {
    std::string slug = e.path().filename().string(), path = (e.path() / "result.yaml").string();
    if (slug == "f32") continue;
    RunSummary s = loadRunSummary(path);
    bool check = slug.starts_with("F+B_SR_lt_");
    if (check) adversarial = s.name;
    s.step_ms = base.step_ms / (check ? 10 : slug == "F" ? 2 : 3);
    s.mean_loss = check || slug == "F" ? base.mean_loss : base.mean_loss * 1.5;
    writeRunSummary(path, s);
  }
  ASSERT_FALSE(adversarial.empty());
  runExperiment(o);  // every run is done: only the report is written again
  std::string report = read(fs::path(o.out_dir) / "REPORT.md");
  EXPECT_NE(report.find("The fastest recipe within 1% of the f32 loss is `F`: 2.00x faster per step"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("The adversarial recipes `" + adversarial +
                        "` (10.00x, loss +0.00%) quantize the lowest-SQNR GEMMs on purpose: they are checks of the "
                        "metric, not candidates."),
            std::string::npos)
      << report;
  EXPECT_NE(read(fs::path(o.out_dir) / "table.md").find("| " + adversarial + " (adversarial) |"), std::string::npos);
  // Recipes that quantize nothing are the f32 step again: one that times faster is not
  // recommended (session 16: "F: 1.12x faster" with 0 GEMMs in int8, on timing noise).
  for (const auto& e : fs::directory_iterator(runs)) {
    const std::string path = (e.path() / "result.yaml").string();
    RunSummary s = loadRunSummary(path);
    s.fwd_quantized = s.bwd_quantized = 0;
    writeRunSummary(path, s);
  }
  runExperiment(o);
  report = read(fs::path(o.out_dir) / "REPORT.md");
  EXPECT_EQ(report.find("The fastest recipe"), std::string::npos) << report;
  EXPECT_NE(report.find("No recipe quantizes any GEMM here"), std::string::npos) << report;
}

// A finished run is reused only for the same run (session 16: an edited --policy file,
// another --trial-steps and a replaced --from-checkpoint each reused the old results under
// the same name, and a report mixed them).
TEST_F(ExperimentTest, AFinishedRunOfAnotherRecipeIsNotReused) {
  ExperimentOptions o = options();
  const fs::path policy = dir_ / "mine.yaml";
  std::ofstream(policy) << "name: mine\nforward: {quantize: false}\nbackward: {quantize: false}\n";
  o.extra_policies = {policy.string()};
  runExperiment(o);
  const std::map<std::string, fs::file_time_type> before = stamps(o.out_dir);
  runExperiment(o);  // the same options: every run reused
  std::map<std::string, fs::file_time_type> after = stamps(o.out_dir);
  for (const auto& [file, time] : before)
    if (file.starts_with("runs/")) {
      EXPECT_EQ(after.at(file), time) << file;
    }
  std::ofstream(policy) << "name: mine\nforward: {quantize: true}\nbackward: {quantize: true}\n";
  try {
    runExperiment(o);
    ADD_FAILURE() << "a run of the old policy was reused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs/mine/result.yaml: a finished run of another experiment: its recipe "
                                         "differed from"),
              std::string::npos)
        << e.what();
  }
}

// A search trial resumed from its checkpoint stops at the trial's step (it counted
// --trial-steps again from the resumed step), and trials of another --trial-steps are
// not reused.
TEST_F(ExperimentTest, SearchTrialsStopAtTheirStepWhenResumedOrLengthened) {
  ExperimentOptions o = options();
  o.protocol = ExperimentProtocol::kSearch;
  o.loss_budget = 0.5;
  o.trial_steps = 3;
  runExperiment(o);
  const fs::path f32 = fs::path(o.out_dir) / "runs" / "trial_f32";
  EXPECT_EQ(loadRunSummary((f32 / "result.yaml").string()).last_step, 43);
  // As if killed after the checkpoint at step 43 of a 6-step trial.
  fs::remove(f32 / "result.yaml");
  o.trial_steps = 6;
  try {
    runExperiment(o);
    ADD_FAILURE() << "trials of 3 steps were reused as trials of 6";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("it trained to step 43, this experiment asks for step 46"),
              std::string::npos)
        << e.what();
  }
  const RunSummary resumed = loadRunSummary((f32 / "result.yaml").string());
  EXPECT_EQ(resumed.first_step, 41);
  EXPECT_EQ(resumed.last_step, 46);
  o.trial_steps = 13;  // more than --finetune-steps: refused before any work
  EXPECT_THROW(runExperiment(o), Error);
}

// A checkpoint replaced at the --from-checkpoint path is another baseline.
TEST_F(ExperimentTest, AReplacedStartingCheckpointIsAnotherExperiment) {
  ExperimentOptions first = options();
  first.finetune_steps = 4;
  first.fractions = {};
  runExperiment(first);
  const fs::path checkpoint = dir_ / "start.pgqckpt";
  fs::copy_file(fs::path(first.out_dir) / "baseline" / "checkpoint.pgqckpt", checkpoint);
  ExperimentOptions o = first;
  o.out_dir = (dir_ / "from").string();
  o.from_checkpoint = checkpoint.string();
  runExperiment(o);
  runExperiment(o);  // the same file: reused
  // Another checkpoint of the same model at the same path.
  fs::copy_file(fs::path(first.out_dir) / "runs" / "f32" / "checkpoint.pgqckpt", checkpoint,
                fs::copy_options::overwrite_existing);
  try {
    runExperiment(o);
    ADD_FAILURE() << "results from the replaced checkpoint were reused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experiment.yaml"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("baseline_checkpoint"), std::string::npos) << e.what();
  }
}

// A run's name is a user's text (a policy's `name:`): in the plots' gnuplot script it was
// a double-quoted string, where `x" . system("touch F") . "z` ran the command (session 16).
TEST_F(ExperimentTest, PolicyNamesDoNotRunInThePlotScripts) {
  ExperimentOptions o = options();
  o.finetune_steps = 4;
  o.fractions = {};
  const fs::path touched = dir_ / "PWNED";
  std::ofstream(dir_ / "evil.yaml") << "name: 'x\" . system(\"touch " << touched.string()
                                    << "\") . \"z'\nforward: {quantize: true}\nbackward: {quantize: false}\n";
  o.extra_policies = {(dir_ / "evil.yaml").string()};
  runExperiment(o);
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "loss_curves.png"));
  EXPECT_FALSE(fs::exists(touched));
}

// A corpus edited after the runs were made is another experiment (its numbers were
// reported again as the new corpus's); a folder from before the fingerprint was recorded
// still resumes.
TEST_F(ExperimentTest, AnEditedCorpusIsAnotherExperiment) {
  ExperimentOptions o = options();
  o.finetune_steps = 4;
  o.fractions = {};
  o.corpus = (dir_ / "corpus.txt").string();
  fs::copy_file("/usr/share/games/fortunes/fortunes", o.corpus);
  runExperiment(o);
  const fs::path recorded = fs::path(o.out_dir) / "experiment.yaml";
  std::string text = read(recorded);
  const size_t line = text.find("corpus_fingerprint: ");
  ASSERT_NE(line, std::string::npos) << text;
  std::ofstream(o.corpus, std::ios::app) << "One more fortune, added after the experiment.\n";
  try {
    runExperiment(o);
    ADD_FAILURE() << "the old corpus's runs were reused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'corpus_fingerprint: "), std::string::npos) << e.what();
  }
  std::ofstream(recorded, std::ios::trunc) << text.erase(line, text.find('\n', line) + 1 - line);
  runExperiment(o);  // no fingerprint recorded: resumes as before
}

// A first attempt refused before any work leaves a folder the corrected options may use.
TEST_F(ExperimentTest, AFolderWhereNothingWasDoneTakesNewOptions) {
  ExperimentOptions o = options();
  o.finetune_steps = 4;
  o.fractions = {};
  std::error_code ec;
  fs::create_directories(o.out_dir);
  std::ofstream(fs::path(o.out_dir) / "experiment.yaml") << "# pgq experiment: the options its results depend on\n"
                                                             "model: |\n  name: other\n";
  runExperiment(o);
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "REPORT.md"));
}

TEST_F(ExperimentTest, SearchReportsEveryTrial) {
  ExperimentOptions o = options();
  o.protocol = ExperimentProtocol::kSearch;
  o.loss_budget = 0.5;  // generous: the search must then end up quantizing a lot
  o.trial_steps = 6;
  ExperimentResult r = runExperiment(o);
  std::string search = read(r.report_path);
  EXPECT_NE(search.find("# pgq threshold search"), std::string::npos);
  EXPECT_NE(search.find("Result: `F>"), std::string::npos) << search;
  std::string trials = read(fs::path(o.out_dir) / "trials.csv");
  EXPECT_GE(std::count(trials.begin(), trials.end(), '\n'), 3);
}

// When no trial that quantizes a GEMM stays within the budget, the search's last trial
// quantizes nothing: it was the "result", "0.98x faster" on timing noise (session 17's
// hunt). A slower recipe is not called faster either.
TEST_F(ExperimentTest, SearchReportRecommendsOnlyARecipeThatQuantizes) {
  RunSummary base, none, slow;
  base.name = base.policy = "f32";
  base.step_ms = 100;
  base.mean_loss = 2.0;
  none.name = none.policy = "F>1e9+B_SR>1e9";
  none.step_ms = 102;
  none.mean_loss = 2.0;
  none.fwd_total = none.bwd_total = 10;
  none.within_budget = true;
  fs::create_directories(dir_ / "s");
  writeSearchReport((dir_ / "s").string(), {base, none}, none, 0.01);
  std::string md = read(dir_ / "s" / "SEARCH.md");
  EXPECT_NE(md.find("Result: no recipe that quantizes a GEMM kept the loss within the budget"), std::string::npos) << md;
  EXPECT_EQ(md.find("faster than f32"), std::string::npos) << md;
  slow = none;
  slow.name = slow.policy = "F>0+B_SR>0";
  slow.fwd_quantized = slow.bwd_quantized = 10;
  slow.step_ms = 250;
  writeSearchReport((dir_ / "s").string(), {base, slow}, slow, 0.01);
  md = read(dir_ / "s" / "SEARCH.md");
  EXPECT_NE(md.find("Result: `F>0+B_SR>0` (within the budget), 2.50x slower than f32"), std::string::npos) << md;
}

// Fig. 2 (app/orderings.h): every metric, the adversarial, random and Pareto orderings,
// each cut at the same count; a curve per ordering with its area; identical cuts share
// one run.
TEST_F(ExperimentTest, OrderingsWriteFig2WithAnAreaPerOrdering) {
  ExperimentOptions o = orderingOptions(2, 6);
  o.pareto_steps = 2;
  ExperimentResult r = runExperiment(o);
  fs::path out(o.out_dir);
  EXPECT_EQ(r.report_path, (out / "orderings.md").string());
  for (const char* f : {"orderings.md", "orderings.csv", "ranks.csv", "fig2.png"}) EXPECT_TRUE(fs::exists(out / f)) << f;
  std::string md = read(out / "orderings.md");
  for (const char* row : {"| sqnr | metric |", "| bias | metric |", "| output | metric |", "| reach | metric |",
                          "| effect | metric |", "| adversarial | adversarial |", "| pareto | pareto |",
                          "| random (mean of 2) | random |", "## The Pareto estimate",
                          "## Agreement with the Pareto estimate"})
    EXPECT_NE(md.find(row), std::string::npos) << row << "\n" << md;
  // Each curve: f32 (0 GEMMs), the cut, all candidates; its area on every row.
  std::string csv = read(out / "orderings.csv");
  std::map<std::string, int> points;
  std::stringstream in(csv);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) points[line.substr(0, line.find(','))] += 1;
  EXPECT_EQ(points.size(), 9u) << csv;  // 5 metrics, adversarial, 2 random, pareto
  for (const auto& [name, n] : points) EXPECT_EQ(n, 3) << name;
  // Runs: f32, all, the solo runs, and at most one per ordering's cut (shared when equal).
  size_t runs = 0, solo = 0;
  for (const auto& e : fs::directory_iterator(out / "runs")) {
    ++runs;
    solo += e.path().filename().string().starts_with("solo");
  }
  EXPECT_GT(solo, 2u);
  EXPECT_LE(runs, 2 + solo + 9);
  // Resuming redoes nothing: the baseline, its profile and every run keep the files
  // they wrote (none is rewritten, none added), and the curves come out the same.
  const auto runs_before = stamps(out / "runs"), baseline_before = stamps(out / "baseline");
  const auto profile_before = fs::last_write_time(out / "profile.yaml");
  runExperiment(o);
  EXPECT_EQ(stamps(out / "runs"), runs_before);
  EXPECT_EQ(stamps(out / "baseline"), baseline_before);
  EXPECT_EQ(fs::last_write_time(out / "profile.yaml"), profile_before);
  EXPECT_EQ(read(out / "orderings.csv"), csv);
}

// --scheme fp8: the profile measures the FP8 formats, every recipe quantizes to them,
// and the report names the scheme; a hardware without FP8 is refused before any work.
TEST_F(ExperimentTest, OrderingsInAnFp8Scheme) {
  std::ofstream(dir_ / "fp8.yaml") << kFastFp8;
  ExperimentOptions o = orderingOptions(1, 4);
  o.scheme = Scheme::kFp8;
  o.backward_rounding = "rtn";
  o.token_scale = 2;
  EXPECT_THROW(runExperiment(o), Error);  // fast-int8 has no FP8
  EXPECT_FALSE(fs::exists(o.out_dir));
  o.hardware = (dir_ / "fp8.yaml").string();
  runExperiment(o);
  fs::path out(o.out_dir);
  std::string md = read(out / "orderings.md");
  EXPECT_NE(md.find("fp8, rtn gradients, on fast-fp8 at 2x the profiled tokens"), std::string::npos) << md;
  std::string profile = read(out / "profile.yaml");
  EXPECT_NE(profile.find("e4m3"), std::string::npos);
  EXPECT_NE(profile.find("e5m2"), std::string::npos);
  // Every cut's recipe quantizes its GEMMs to FP8, none to int8.
  int fp8 = 0;
  for (const auto& e : fs::directory_iterator(out / "recipes")) {
    std::string recipe = read(e.path());
    EXPECT_EQ(recipe.find("decision: int8"), std::string::npos) << e.path();
    fp8 += recipe.find("decision: fp8") != std::string::npos;
  }
  EXPECT_GT(fp8, 2);
  std::string options = read(out / "experiment.yaml");
  for (const char* line : {"scheme: fp8", "token_scale: 2", "hardware: "})
    EXPECT_NE(options.find(line), std::string::npos) << options;
}

TEST_F(ExperimentTest, SearchWorksWithAnyMetric) {
  ExperimentOptions o = options();
  o.protocol = ExperimentProtocol::kSearch;
  o.metric = Metric::kBias;
  o.profile_metrics = true;
  o.loss_budget = 0.5;
  o.trial_steps = 6;
  ExperimentResult r = runExperiment(o);
  std::string search = read(r.report_path);
  EXPECT_NE(search.find("Result: `F>"), std::string::npos) << search;
  // The trials' recipes compared the bias-aware SQNR.
  bool bias = false;
  for (const auto& e : fs::directory_iterator(fs::path(o.out_dir) / "recipes"))
    bias |= read(e.path()).find("bias ") != std::string::npos;
  EXPECT_TRUE(bias);
  EXPECT_NE(read(fs::path(o.out_dir) / "experiment.yaml").find("metric: bias"), std::string::npos);
}

// An experiment flags its own timings when the machine's load changed: the f32 step timed
// again at the end, or a run's step times that spread widely.
TEST(ExperimentTiming, FlagsABusyMachine) {
  std::vector<RunStep> steps;
  for (int i = 0; i < 11; ++i) steps.push_back({i, 1.0, i == 0 ? 500.0 : 100.0 + i, std::nullopt});
  RunSummary f32 = summarizeRun("f32", "f32", "", steps);
  EXPECT_DOUBLE_EQ(f32.step_ms, 105.5);  // the first step is excluded
  EXPECT_NEAR(f32.step_spread, (109.0 - 102.0) / 105.5, 1e-12);  // nearest ranks of 101..110
  RunSummary again = f32;
  again.step_ms = 120;  // +14%: within 20%
  EXPECT_EQ(timingCheck({f32}, again), "");
  again.step_ms = 130;  // +23%
  const std::string busy = timingCheck({f32}, again);
  EXPECT_NE(busy.find("the f32 step took 105.5 ms at the start and 130.0 ms when timed again at the end (+23%)"),
            std::string::npos)
      << busy;
  again.step_ms = 105.5;
  for (int i = 1; i < 11; i += 2) steps[static_cast<size_t>(i)].step_ms = 200;  // half the steps twice as long
  const RunSummary noisy = summarizeRun("F", "F", "r.yaml", steps);
  EXPECT_NE(timingCheck({f32, noisy}, again).find("the step times of `F` ("), std::string::npos)
      << timingCheck({f32, noisy}, again);
  // Steps of a few milliseconds spread with the scheduler's jitter: not flagged.
  RunSummary fast = noisy;
  fast.step_ms = 5;
  fast.step_spread = 3;
  EXPECT_EQ(timingCheck({f32, fast}, again), "");
  // The spread is kept in the run's summary.
  const fs::path dir = fs::path(::testing::TempDir()) / "timing_summary";
  fs::create_directories(dir);
  writeRunSummary((dir / "result.yaml").string(), noisy);
  EXPECT_NEAR(loadRunSummary((dir / "result.yaml").string()).step_spread, noisy.step_spread, 1e-3);
}

}  // namespace
}  // namespace pgq

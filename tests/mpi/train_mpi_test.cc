// Distributed training equals training in one process. Every rank runs the job's
// session (data parallel over N / T replicas, tensor parallel over T devices, through
// the Open MPI collectives) and, on its own, a one-process session of the same model
// and global batch: losses and the whole parameters (gathered from the devices) agree
// within 1e-5 relative for data parallelism and 1e-4 with tensor parallelism, where
// the GEMMs contract over other splits. Every check is an EXPECT (never ASSERT), so a
// failing rank still calls every collective the others wait in.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "frontend/model_config.h"
#include "runtime/mpi.h"
#include "runtime/trainer.h"

namespace pgq {

extern int g_tensor_parallel;

namespace {

// The GPT-2 layout (tied embeddings, learned positions, gelu) and the LLaMA one (rope,
// grouped-query attention, SwiGLU, untied head), both with a batch of 4.
const std::string kLlama = std::string(PGQ_SOURCE_DIR) + "/tests/parity/tiny_llama.yaml";

TrainOptions tinyOptions(int64_t tensor_parallel, Collectives* job, const std::string& model = "tiny") {
  TrainOptions o;
  o.model = loadModelConfig(model);
  o.model.batch = 4;
  o.model.tensor_parallel = tensor_parallel;
  o.steps = 10;
  o.optimizer.warmup = 2;
  o.progress = false;
  o.collectives = job;
  return o;
}

// Largest |a - b| relative to the largest |b| of the tensor.
double relativeError(const Tensor& a, const Tensor& b) {
  double err = 0, scale = 0;
  for (int64_t i = 0; i < b.numElements(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b.data<float>()[i])));
  }
  return scale > 0 ? err / scale : err;
}

class MpiTrainingModels : public ::testing::TestWithParam<std::string> {};

TEST_P(MpiTrainingModels, MatchesOneProcess) {
  std::unique_ptr<Collectives> job = makeMpiCollectives(g_tensor_parallel);
  const double tolerance = g_tensor_parallel == 1 ? 1e-5 : 1e-4;
  TrainOptions distributed = tinyOptions(g_tensor_parallel, job.get(), GetParam());
  TrainOptions alone = tinyOptions(1, nullptr, GetParam());
  TrainingSession a(distributed), b(alone);
  for (int64_t step = 0; step < distributed.steps; ++step) {
    const int64_t calls = job->stats().calls;
    StepRecord ra = a.step(step), rb = b.step(step);
    // Data parallel only: the loss and every gradient are averaged in one bucket (the
    // default bucket size).
    if (g_tensor_parallel == 1 && std::getenv("PGQ_DP_BUCKET_MB") == nullptr) {
      EXPECT_EQ(job->stats().calls - calls, 1) << "step " << step + 1;
    }
    EXPECT_NEAR(ra.loss, rb.loss, tolerance * std::abs(rb.loss)) << "step " << step + 1;
    EXPECT_NEAR(ra.grad_norm, rb.grad_norm, tolerance * rb.grad_norm) << "step " << step + 1;
  }
  Evaluation ea = a.evaluate(), eb = b.evaluate();
  EXPECT_NEAR(ea.loss, eb.loss, tolerance * eb.loss);
  EXPECT_NEAR(ea.bits_per_byte, eb.bits_per_byte, tolerance * eb.bits_per_byte);
  auto sa = a.state(), sb = b.state();  // whole tensors: a's are gathered from its devices
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    ASSERT_EQ(sa[i].second.type(), sb[i].second.type()) << sa[i].first;
    EXPECT_LE(relativeError(sa[i].second, sb[i].second), tolerance) << sa[i].first;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MpiTrainingModels, ::testing::Values("tiny", kLlama),
                         [](const auto& info) { return info.index == 0 ? "gpt2" : "llama"; });

// A checkpoint's whole tensors go back into any layout: loading b's state into the
// distributed session and stepping on gives what b gives.
TEST(MpiTraining, StateMovesBetweenLayouts) {
  std::unique_ptr<Collectives> job = makeMpiCollectives(g_tensor_parallel);
  TrainOptions alone = tinyOptions(1, nullptr);
  TrainingSession b(alone);
  for (int64_t step = 0; step < 3; ++step) b.step(step);
  TrainOptions distributed = tinyOptions(g_tensor_parallel, job.get());
  TrainingSession a(distributed);
  a.loadState(b.state(), "one-process state");
  auto sa = a.state(), sb = b.state();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(relativeError(sa[i].second, sb[i].second), 0.0) << sa[i].first;
  StepRecord ra = a.step(3), rb = b.step(3);
  EXPECT_NEAR(ra.loss, rb.loss, 1e-4 * rb.loss);
}

// The profile every rank gets holds every rank's statistics: per operand, the mean
// SQNR is the mean of the ranks' own means and the largest absolute value the largest
// any rank saw.
TEST(MpiTraining, ProfileHasEveryRanksStatistics) {
  std::unique_ptr<Collectives> job = makeMpiCollectives(g_tensor_parallel);
  TrainOptions o = tinyOptions(g_tensor_parallel, job.get());
  o.profile_steps = 2;
  TrainingSession s(o);
  for (int64_t step = 0; step < 2; ++step) s.step(step, true);
  Profile all = s.profile();
  Profile mine = s.profile(0, /*this_process_only=*/true);
  EXPECT_EQ(all.run.processes, job->worldSize());
  EXPECT_EQ(mine.run.processes, 1);
  ASSERT_EQ(all.gemms.size(), mine.gemms.size());
  std::vector<double> sqnr, absmax;
  for (const GemmProfile& g : mine.gemms)
    for (const OperandProfile& op : g.operands) {
      sqnr.push_back(op.formats[0].sqnr_mean);
      absmax.push_back(op.absmax);
    }
  std::vector<double> mean_of_means = sqnr, largest = absmax;
  job->allReduceSum(mean_of_means.data(), static_cast<int64_t>(sqnr.size()), DeviceGroup::kData);
  job->allReduceSum(mean_of_means.data(), static_cast<int64_t>(sqnr.size()), DeviceGroup::kTensor);
  job->allReduceMax(largest.data(), static_cast<int64_t>(absmax.size()), DeviceGroup::kData);
  job->allReduceMax(largest.data(), static_cast<int64_t>(absmax.size()), DeviceGroup::kTensor);
  size_t i = 0, differing = 0;
  for (const GemmProfile& g : all.gemms)
    for (const OperandProfile& op : g.operands) {
      EXPECT_NEAR(op.formats[0].sqnr_mean, mean_of_means[i] / job->worldSize(), 1e-9 * op.formats[0].sqnr_mean)
          << g.label << ":" << op.sideName();
      EXPECT_EQ(op.absmax, largest[i]) << g.label << ":" << op.sideName();
      if (op.formats[0].sqnr_mean != sqnr[i]) ++differing;
      ++i;
    }
  // The ranks saw different rows: the combined profile is not any one rank's.
  if (job->size(DeviceGroup::kData) > 1) {
    EXPECT_GT(differing, 0u);
  }
}

// The metrics' statistics of a job. A GEMM's output error at a step is that of the
// tensor-parallel devices' parts together (their mean squares and mses summed): a
// ratio of sums, between the devices' own SQNRs; the replicas' steps count separately.
// The bias-aware SQNR combines like the SQNR; reach comes from the graph's dataflow
// and equals one process's.
TEST(MpiTraining, ProfileMetricsCombineTheDevicesParts) {
  std::unique_ptr<Collectives> job = makeMpiCollectives(g_tensor_parallel);
  TrainOptions o = tinyOptions(g_tensor_parallel, job.get());
  o.profile_steps = 1;
  o.profile.metrics = true;
  TrainingSession s(o);
  s.step(0, true);
  const Profile all = s.profile();
  const Profile mine = s.profile(0, /*this_process_only=*/true);
  std::vector<double> low, high, bias;
  for (const GemmProfile& g : mine.gemms) {
    for (const OutputErrorStats& e : g.output_errors) low.push_back(-e.sqnr_mean), high.push_back(e.sqnr_mean);
    for (const OperandProfile& op : g.operands) bias.push_back(op.formats[0].bias_sqnr_mean);
  }
  job->allReduceMax(low.data(), static_cast<int64_t>(low.size()), DeviceGroup::kTensor);
  job->allReduceMax(high.data(), static_cast<int64_t>(high.size()), DeviceGroup::kTensor);
  job->allReduceSum(low.data(), static_cast<int64_t>(low.size()), DeviceGroup::kData);
  job->allReduceSum(high.data(), static_cast<int64_t>(high.size()), DeviceGroup::kData);
  job->allReduceSum(bias.data(), static_cast<int64_t>(bias.size()), DeviceGroup::kData);
  job->allReduceSum(bias.data(), static_cast<int64_t>(bias.size()), DeviceGroup::kTensor);
  const double replicas = job->size(DeviceGroup::kData);
  TrainOptions alone = tinyOptions(1, nullptr);
  alone.profile_steps = 1;
  alone.profile.metrics = true;
  TrainingSession b(alone);
  b.step(0, true);
  const Profile one = b.profile();
  EXPECT_EQ(all.gemms.size(), one.gemms.size());
  size_t e = 0, k = 0;
  for (size_t i = 0; i < all.gemms.size() && i < one.gemms.size(); ++i) {
    const GemmProfile& g = all.gemms[i];
    EXPECT_NEAR(g.reach, one.gemms[i].reach, 1e-12) << g.label;
    EXPECT_EQ(g.output_errors.size(), mine.gemms[i].output_errors.size()) << g.label;
    for (const OutputErrorStats& error : g.output_errors) {
      const double lo = -low[e] / replicas, hi = high[e] / replicas;
      EXPECT_GE(error.sqnr_mean, lo * (1 - 1e-6)) << g.label;
      EXPECT_LE(error.sqnr_mean, hi * (1 + 1e-6)) << g.label;
      if (job->size(DeviceGroup::kTensor) == 1) {
        EXPECT_NEAR(error.sqnr_mean, hi, 1e-9 * hi) << g.label;
      }
      ++e;
    }
    for (const OperandProfile& op : g.operands) {
      EXPECT_NEAR(op.formats[0].bias_sqnr_mean, bias[k] / job->worldSize(), 1e-9 * bias[k]) << g.label;
      ++k;
    }
  }
}

// The scaling strategies of a job: the replicas scale an operand together, so delayed
// scaling clips at step 1 when the largest absmax any replica saw exceeds the largest
// of step 0, and a tensor-parallel device scales its own part (the profile averages the
// devices' clip fractions and keeps their worst ratio). Each rank's absmax at steps 0
// and 1 comes from its own profile after each step (the mean of two values and one of
// them give the other exactly).
TEST(MpiTraining, DelayedScalingTakesTheReplicasMaxPerStep) {
  std::unique_ptr<Collectives> job = makeMpiCollectives(g_tensor_parallel);
  TrainOptions o = tinyOptions(g_tensor_parallel, job.get());
  o.profile_steps = 2;
  TrainingSession s(o);
  s.step(0, true);
  const Profile first = s.profile(0, /*this_process_only=*/true);
  s.step(1, true);
  const Profile mine = s.profile(0, /*this_process_only=*/true);
  const Profile all = s.profile();
  std::vector<double> step0, step1;
  for (size_t g = 0; g < mine.gemms.size(); ++g)
    for (size_t i = 0; i < mine.gemms[g].operands.size(); ++i) {
      step0.push_back(first.gemms[g].operands[i].absmax);
      step1.push_back(2 * mine.gemms[g].operands[i].absmax_mean - step0.back());
    }
  const auto n = static_cast<int64_t>(step0.size());
  job->allReduceMax(step0.data(), n, DeviceGroup::kData);
  job->allReduceMax(step1.data(), n, DeviceGroup::kData);
  std::vector<double> clips(step0.size()), ratios(step0.size(), 1.0);
  for (size_t k = 0; k < step0.size(); ++k)
    if (step1[k] > step0[k]) clips[k] = 1, ratios[k] = step1[k] / step0[k];
  job->allReduceSum(clips.data(), n, DeviceGroup::kTensor);
  job->allReduceMax(ratios.data(), n, DeviceGroup::kTensor);
  const double devices = job->size(DeviceGroup::kTensor);
  size_t k = 0, clipped = 0;
  for (size_t g = 0; g < all.gemms.size(); ++g)
    for (size_t i = 0; i < all.gemms[g].operands.size(); ++i, ++k) {
      const OperandProfile& op = all.gemms[g].operands[i];
      const std::string where = all.gemms[g].label + ":" + std::string(op.sideName());
      EXPECT_TRUE(op.scaling.has_value()) << where;
      if (!op.scaling) continue;
      EXPECT_EQ(op.scaling->steps, 2) << where;
      EXPECT_EQ(op.scaling->delayed_clip_fraction, clips[k] / devices) << where;
      EXPECT_NEAR(op.scaling->delayed_worst_ratio, ratios[k], 1e-12 * ratios[k]) << where;
      EXPECT_EQ(op.scaling->predicted.has_value(), op.role == OperandRole::kWeight) << where;
      // Replicas hold the same weights: without tensor parallelism the job's predicted
      // scales are each process's own.
      const OperandProfile& own = mine.gemms[g].operands[i];
      if (devices == 1 && op.scaling->predicted && own.scaling && own.scaling->predicted) {
        EXPECT_EQ(op.scaling->predicted->clip_fraction, own.scaling->predicted->clip_fraction) << where;
        EXPECT_EQ(op.scaling->predicted->overestimate, own.scaling->predicted->overestimate) << where;
      }
      if (clips[k] > 0) ++clipped;
    }
  // Activations and gradients change between steps: some grow.
  EXPECT_GT(clipped, 0u);
}

// A checkpoint keeps every rank's amax histories (each replica scales its own
// activations and gradients) and predicted weight scales: a job stopped and resumed ends
// with the uninterrupted job's checkpoint, byte for byte.
TEST(MpiTraining, ResumeKeepsEveryRanksScalingState) {
  std::unique_ptr<Collectives> job = makeMpiCollectives(g_tensor_parallel);
  int64_t id = job->worldRank() == 0 ? static_cast<int64_t>(::getpid()) : 0;
  job->broadcast(&id, sizeof id, 0);
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / fmt::format("pgq_mpi_resume_{}", id);
  const std::string recipe = (dir / "fp8.yaml").string();
  if (job->worldRank() == 0) {
    std::filesystem::create_directories(dir);
    std::ofstream(recipe) << "gemms:\n"
                             "  - {match: \"layer./mlp/(up|down)\", decision: fp8, lhs_format: \"e4m3:tensor:rtn\", "
                             "rhs_format: \"e4m3:tensor:rtn\", predict_weight_scale: true}\n"
                             "  - {match: \".*\", decision: fp8, lhs_format: \"e4m3:tensor:rtn\", "
                             "rhs_format: \"e4m3:tensor:rtn\", amax_history: 3}\n";
  }
  job->barrier();
  TrainOptions whole = tinyOptions(g_tensor_parallel, job.get());
  whole.steps = 8;
  whole.recipe_path = recipe;
  whole.out_dir = (dir / "whole").string();
  train(whole);
  TrainOptions part = whole;
  part.out_dir = (dir / "part").string();
  part.stop_after = 4;
  train(part);
  part.stop_after = 0;
  part.resume = true;
  EXPECT_EQ(train(part).history.front().step, 5);
  if (job->worldRank() == 0) {
    auto bytes = [](const std::filesystem::path& path) {
      std::ifstream in(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string a = bytes(dir / "whole/checkpoint.pgqckpt"), b = bytes(dir / "part/checkpoint.pgqckpt");
    EXPECT_GT(a.size(), 0u);
    EXPECT_TRUE(a == b) << "the resumed job's checkpoint differs from the uninterrupted one's";
    EXPECT_NE(a.find(fmt::format("kernel_state/train/layer0/attn/q.lhs_scales")), std::string::npos);
  }
  job->barrier();
  if (job->worldRank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pgq

#include "runtime/profile_collector.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "ir/quant.h"
#include "support/errors.h"

namespace pgq {

ProfileCollector::ProfileCollector(const Graph& graph) : graph_(graph) {
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const Node* node = graph.outputs()[i];
    if (node->op() != Op::kQuantStats) continue;
    outputs_.push_back({i, node, std::vector<Accumulator>(node->attrs().getFormats(AttrKey::kFormats).size())});
  }
  PGQ_ASSERT(!outputs_.empty(), "graph @{} has no statistics outputs (run instrument_stats)", graph.name());
}

void ProfileCollector::add(const Executor& executor) {
  auto field = [](const float* row, StatField f) { return static_cast<double>(row[static_cast<int>(f)]); };
  for (StatsOutput& out : outputs_) {
    std::span<const float> rows = executor.output<float>(out.output_index);
    for (size_t f = 0; f < out.per_format.size(); ++f) {
      const float* row = rows.data() + f * kStatFields;
      Accumulator& a = out.per_format[f];
      double sqnr = field(row, StatField::kSqnr);
      a.sqnr_min = steps_ == 0 ? sqnr : std::min(a.sqnr_min, sqnr);
      a.sqnr_max = steps_ == 0 ? sqnr : std::max(a.sqnr_max, sqnr);
      a.sqnr_sum += sqnr;
      a.mse_sum += field(row, StatField::kMse);
      a.underflow_sum += field(row, StatField::kUnderflowFraction);
      a.clipped_sum += field(row, StatField::kClippedFraction);
    }
    // Format-independent statistics: the first row has them.
    double absmax = field(rows.data(), StatField::kAbsmax);
    out.absmax_max = steps_ == 0 ? absmax : std::max(out.absmax_max, absmax);
    out.absmax_sum += absmax;
    out.rms_sum += std::sqrt(field(rows.data(), StatField::kMeanSquare));
    out.zero_sum += field(rows.data(), StatField::kZeroFraction);
    out.nonfinite_sum += field(rows.data(), StatField::kNonfiniteFraction);
  }
  ++steps_;
}

// Sums add over the job's processes (over the replicas, then over the devices of each),
// extremes take the extreme: every process ends with the same totals.
std::vector<ProfileCollector::StatsOutput> ProfileCollector::combined(Collectives& job) const {
  std::vector<StatsOutput> all = outputs_;
  std::vector<double> sums, maxes;
  for (const StatsOutput& o : all) {
    for (const Accumulator& a : o.per_format) {
      sums.insert(sums.end(), {a.sqnr_sum, a.mse_sum, a.underflow_sum, a.clipped_sum});
      maxes.insert(maxes.end(), {-a.sqnr_min, a.sqnr_max});
    }
    sums.insert(sums.end(), {o.absmax_sum, o.rms_sum, o.zero_sum, o.nonfinite_sum});
    maxes.push_back(o.absmax_max);
  }
  for (DeviceGroup g : {DeviceGroup::kData, DeviceGroup::kTensor}) {
    job.allReduceSum(sums.data(), static_cast<int64_t>(sums.size()), g);
    job.allReduceMax(maxes.data(), static_cast<int64_t>(maxes.size()), g);
  }
  size_t s = 0, m = 0;
  for (StatsOutput& o : all) {
    for (Accumulator& a : o.per_format) {
      a.sqnr_sum = sums[s++], a.mse_sum = sums[s++], a.underflow_sum = sums[s++], a.clipped_sum = sums[s++];
      a.sqnr_min = -maxes[m++], a.sqnr_max = maxes[m++];
    }
    o.absmax_sum = sums[s++], o.rms_sum = sums[s++], o.zero_sum = sums[s++], o.nonfinite_sum = sums[s++];
    o.absmax_max = maxes[m++];
  }
  return all;
}

Profile ProfileCollector::profile(ProfileRun run, Collectives* job) const {
  PGQ_ASSERT(steps_ > 0, "no profiled steps");
  const int processes = job ? job->worldSize() : 1;
  const std::vector<StatsOutput> outputs = processes > 1 ? combined(*job) : outputs_;
  // The mean over every process's steps.
  const double n = static_cast<double>(steps_ * processes);
  // "label:side" -> the statistics node describing that operand.
  std::map<std::string, const StatsOutput*> by_use;
  for (const StatsOutput& out : outputs)
    for (const std::string& use : out.node->attrs().getStrings(AttrKey::kUses)) by_use[use] = &out;

  auto operand = [&](const std::string& label, const std::string& side, std::optional<OperandRole> role) {
    auto it = by_use.find(label + ":" + side);
    PGQ_ASSERT(it != by_use.end(), "no statistics for {}:{}", label, side);
    const StatsOutput& s = *it->second;
    const Node& tensor = *s.node->operand(0);
    OperandProfile o;
    o.side = side;
    o.role = role;
    o.tensor = tensor.name();
    o.shape.assign(tensor.shape().dims().begin(), tensor.shape().dims().end());
    o.contract_dims = s.node->attrs().getInts(AttrKey::kContractDims);
    o.batch_dims = s.node->attrs().getIntsOr(AttrKey::kBatchDims, {});
    o.absmax = s.absmax_max;
    o.absmax_mean = s.absmax_sum / n;
    o.rms = s.rms_sum / n;
    o.zero_fraction = s.zero_sum / n;
    o.nonfinite_fraction = s.nonfinite_sum / n;
    const auto& formats = s.node->attrs().getFormats(AttrKey::kFormats);
    for (size_t f = 0; f < formats.size(); ++f) {
      const Accumulator& a = s.per_format[f];
      o.formats.push_back({formats[f].toString(), a.sqnr_sum / n, a.sqnr_min, a.sqnr_max, a.mse_sum / n,
                           a.underflow_sum / n, a.clipped_sum / n});
    }
    return o;
  };

  Profile profile;
  profile.run = std::move(run);
  profile.run.profile_steps = steps_;
  profile.run.processes = processes;
  for (const Node* node : graph_.postOrder()) {
    // GEMMs the statistics describe (a dead matmul left by a rewrite has none).
    if (node->op() != Op::kMatMul || !by_use.count(node->attrs().getStringOr(AttrKey::kLabel, "") + ":lhs"))
      continue;
    const Attrs& a = node->attrs();
    GemmProfile g;
    g.label = a.getString(AttrKey::kLabel);
    g.direction = a.getDirection(AttrKey::kDirection);
    g.layer = a.getInt(AttrKey::kLayer);
    g.gemm_shape = a.getInts(AttrKey::kGemmShape);
    g.flops = a.getInt(AttrKey::kFlops);
    g.bytes = a.getInt(AttrKey::kBytes);
    g.sharding = a.getSharding(AttrKey::kSharding);
    g.devices = a.getInt(AttrKey::kDevices);
    g.device_shape = a.getInts(AttrKey::kDeviceShape);
    const OperandRoles& roles = a.getRoles(AttrKey::kRoles);
    g.operands.push_back(operand(g.label, "lhs", roles[0]));
    g.operands.push_back(operand(g.label, "rhs", roles[1]));
    if (by_use.count(g.label + ":out")) g.operands.push_back(operand(g.label, "out", std::nullopt));
    profile.gemms.push_back(std::move(g));
  }
  return profile;
}

}  // namespace pgq

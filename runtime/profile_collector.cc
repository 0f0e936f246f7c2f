#include "runtime/profile_collector.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "ir/analysis.h"
#include "ir/quant.h"
#include "kernels/quant_stats.h"
#include "support/errors.h"

namespace pgq {

ProfileCollector::ProfileCollector(const Graph& graph, int64_t amax_history)
    : graph_(graph), amax_history_(amax_history) {
  PGQ_ASSERT(amax_history >= 1, "amax history {}", amax_history);
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const Node* node = graph.outputs()[i];
    if (node->op() == Op::kErrorStats) errors_.push_back({i, node});
    if (node->op() != Op::kQuantStats) continue;
    outputs_.push_back({i, node, std::vector<Accumulator>(node->attrs().getFormats(AttrKey::kFormats).size())});
  }
  PGQ_ASSERT(!outputs_.empty(), "graph @{} has no statistics outputs (run instrument_stats)", graph.name());
}

void ProfileCollector::add(const Executor& executor, std::optional<WeightStepBound> update) {
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
      a.bias_sqnr_sum += field(row, StatField::kBiasSqnr);
    }
    // Format-independent statistics: the first row has them.
    double absmax = field(rows.data(), StatField::kAbsmax);
    out.absmax_max = steps_ == 0 ? absmax : std::max(out.absmax_max, absmax);
    out.absmax_sum += absmax;
    out.absmax_series.push_back(absmax);
    out.rms_sum += std::sqrt(field(rows.data(), StatField::kMeanSquare));
    out.zero_sum += field(rows.data(), StatField::kZeroFraction);
    out.nonfinite_sum += field(rows.data(), StatField::kNonfiniteFraction);
  }
  for (ErrorOutput& e : errors_) {
    std::span<const float> row = executor.output<float>(e.output_index);
    e.sqnr.push_back(row[static_cast<size_t>(ErrorStatField::kSqnr)]);
    e.mean_square.push_back(row[static_cast<size_t>(ErrorStatField::kMeanSquare)]);
    e.mse.push_back(row[static_cast<size_t>(ErrorStatField::kMse)]);
  }
  if (update) updates_.push_back(*update);
  else every_step_updated_ = false;
  ++steps_;
}

// Sums add over the job's processes (over the replicas, then over the devices of each),
// extremes take the extreme: every process ends with the same totals.
//
// The absmax series is combined step by step, as a max over the data-parallel replicas
// only: replicas scale an operand together (Transformer Engine reduces amax over the
// data-parallel group so that every replica uses the same scale), so a strategy clips
// at step t when the largest absmax any replica saw at t exceeds its prediction. Taking
// the max per step before computing the strategies, not after, matters: combining the
// replicas' clip fractions would count a spike on one replica as a clip even when
// another replica's larger history covers it. Each tensor-parallel device keeps its own
// series (it scales its own part of a split operand); scalingOf() combines the devices.
std::vector<ProfileCollector::StatsOutput> ProfileCollector::combined(Collectives& job) const {
  std::vector<StatsOutput> all = outputs_;
  std::vector<double> series;
  for (const StatsOutput& o : all) series.insert(series.end(), o.absmax_series.begin(), o.absmax_series.end());
  job.allReduceMax(series.data(), static_cast<int64_t>(series.size()), DeviceGroup::kData);
  for (size_t i = 0, at = 0; i < all.size(); ++i, at += static_cast<size_t>(steps_))
    std::copy_n(series.begin() + static_cast<std::ptrdiff_t>(at), steps_, all[i].absmax_series.begin());
  std::vector<double> sums, maxes;
  for (const StatsOutput& o : all) {
    for (const Accumulator& a : o.per_format) {
      sums.insert(sums.end(), {a.sqnr_sum, a.mse_sum, a.underflow_sum, a.clipped_sum, a.bias_sqnr_sum});
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
      a.bias_sqnr_sum = sums[s++];
      a.sqnr_min = -maxes[m++], a.sqnr_max = maxes[m++];
    }
    o.absmax_sum = sums[s++], o.rms_sum = sums[s++], o.zero_sum = sums[s++], o.nonfinite_sum = sums[s++];
    o.absmax_max = maxes[m++];
  }
  return all;
}

// The devices of a tensor-parallel group each scale their own part: a strategy's clip
// fraction and over-estimate are the mean over the devices, its worst ratio the worst
// any device saw. The devices of a replicated operand see the same series and agree.
std::vector<std::optional<ScalingStats>> ProfileCollector::scalingOf(const std::vector<StatsOutput>& outputs,
                                                                     Collectives* job) const {
  std::vector<std::optional<ScalingStats>> all(outputs.size());
  if (steps_ < 2) return all;
  std::span<const WeightStepBound> updates;
  if (every_step_updated_) updates = updates_;
  for (size_t i = 0; i < outputs.size(); ++i) all[i] = scalingStats(outputs[i].absmax_series, amax_history_, updates);
  const int devices = job ? job->size(DeviceGroup::kTensor) : 1;
  if (devices == 1) return all;
  std::vector<double> sums, maxes;
  for (const std::optional<ScalingStats>& s : all) {
    sums.push_back(s->delayed_clip_fraction);
    maxes.push_back(s->delayed_worst_ratio);
    if (const std::optional<PredictedScaling>& p = s->predicted) {
      sums.insert(sums.end(), {p->clip_fraction, p->overestimate, p->rigorous_clip_fraction, p->rigorous_overestimate});
      maxes.push_back(p->worst_ratio);
    }
  }
  job->allReduceSum(sums.data(), static_cast<int64_t>(sums.size()), DeviceGroup::kTensor);
  job->allReduceMax(maxes.data(), static_cast<int64_t>(maxes.size()), DeviceGroup::kTensor);
  size_t a = 0, m = 0;
  for (std::optional<ScalingStats>& s : all) {
    s->delayed_clip_fraction = sums[a++] / devices;
    s->delayed_worst_ratio = maxes[m++];
    if (std::optional<PredictedScaling>& p = s->predicted) {
      p->clip_fraction = sums[a++] / devices, p->overestimate = sums[a++] / devices;
      p->rigorous_clip_fraction = sums[a++] / devices, p->rigorous_overestimate = sums[a++] / devices;
      p->worst_ratio = maxes[m++];
    }
  }
  return all;
}

std::vector<ProfileCollector::OutputError> ProfileCollector::outputErrors(Collectives* job) const {
  const int devices = job ? job->size(DeviceGroup::kTensor) : 1;
  std::vector<double> mean_square, mse;
  for (const ErrorOutput& e : errors_) {
    mean_square.insert(mean_square.end(), e.mean_square.begin(), e.mean_square.end());
    mse.insert(mse.end(), e.mse.begin(), e.mse.end());
  }
  if (devices > 1) {
    job->allReduceSum(mean_square.data(), static_cast<int64_t>(mean_square.size()), DeviceGroup::kTensor);
    job->allReduceSum(mse.data(), static_cast<int64_t>(mse.size()), DeviceGroup::kTensor);
  }
  std::vector<double> sums, maxes;
  for (size_t i = 0, at = 0; i < errors_.size(); ++i) {
    double sum = 0, min = 0;
    for (int64_t t = 0; t < steps_; ++t, ++at) {
      // One device: the kernel's own ratio (of its double sums); several: their parts'.
      double sqnr = errors_[i].sqnr[static_cast<size_t>(t)];
      if (devices > 1) sqnr = mse[at] > 0 ? std::min(mean_square[at] / mse[at], kernels::kSqnrCap) : kernels::kSqnrCap;
      sum += sqnr;
      min = t == 0 ? sqnr : std::min(min, sqnr);
    }
    sums.push_back(sum);
    maxes.push_back(-min);
  }
  if (job && job->size(DeviceGroup::kData) > 1) {
    job->allReduceSum(sums.data(), static_cast<int64_t>(sums.size()), DeviceGroup::kData);
    job->allReduceMax(maxes.data(), static_cast<int64_t>(maxes.size()), DeviceGroup::kData);
  }
  std::vector<OutputError> out;
  for (size_t i = 0; i < errors_.size(); ++i) out.push_back({sums[i], -maxes[i]});
  return out;
}

// One reverse pass over the graph in dataflow order: a value reaches the weight-gradient
// GEMMs its users reach, and a weight-gradient GEMM itself; sets of GEMMs are bitsets.
// Statistics nodes reach nothing (the quantized copies read only by them then reach
// nothing either).
void ProfileCollector::fillReach(std::vector<GemmProfile>& gemms, const std::vector<const Node*>& nodes,
                                 const std::unordered_map<const Node*, double>& scatter_rms) const {
  std::vector<size_t> wgrads;  // indices into gemms
  std::unordered_map<const Node*, size_t> bit_of;
  for (size_t i = 0; i < gemms.size(); ++i)
    if (gemms[i].direction == GemmDirection::kBwdWgrad) {
      bit_of[nodes[i]] = wgrads.size();
      wgrads.push_back(i);
    }
  if (wgrads.empty()) return;
  const std::vector<Node*> order = graph_.postOrder();
  // The embeddings' gradients are scatter-adds, not GEMMs: they count too (their
  // elements, and their squared norms from their own statistics), so that the first
  // layer's data gradients, which reach only the embedding, do not look free.
  std::vector<double> scatter_elements, scatter_squares;
  bool scatter_norms = true;
  for (const Node* node : order)
    if (node->op() == Op::kScatterAdd && !isStatistics(*node)) {
      bit_of[node] = wgrads.size() + scatter_elements.size();
      scatter_elements.push_back(static_cast<double>(node->shape().numElements()));
      auto rms = scatter_rms.find(node);
      scatter_norms = scatter_norms && rms != scatter_rms.end();
      scatter_squares.push_back(rms != scatter_rms.end() ? scatter_elements.back() * rms->second * rms->second : 0.0);
    }
  const size_t sinks = wgrads.size() + scatter_elements.size();
  const size_t words = (sinks + 63) / 64;
  std::unordered_map<const Node*, size_t> position;
  for (size_t p = 0; p < order.size(); ++p) position[order[p]] = p;
  std::vector<uint64_t> bits(order.size() * words, 0);
  for (size_t p = order.size(); p-- > 0;) {
    const Node* node = order[p];
    if (isStatistics(*node)) continue;
    uint64_t* mine = &bits[p * words];
    for (const Node* user : node->users()) {
      const uint64_t* theirs = &bits[position.at(user) * words];
      for (size_t w = 0; w < words; ++w) mine[w] |= theirs[w];
    }
    if (auto it = bit_of.find(node); it != bit_of.end()) mine[it->second / 64] |= uint64_t{1} << (it->second % 64);
  }
  // Each weight gradient's elements, and its squared norm (elements x rms^2) when its
  // result was profiled.
  std::vector<double> elements, squares;
  bool norms = true;
  for (size_t i : wgrads) {
    const GemmProfile& g = gemms[i];
    elements.push_back(static_cast<double>(g.gemm_shape[0] * g.gemm_shape[1] * g.gemm_shape[3]));
    norms = norms && g.operands.size() > 2;
    squares.push_back(norms ? elements.back() * g.operands[2].rms * g.operands[2].rms : 0.0);
  }
  elements.insert(elements.end(), scatter_elements.begin(), scatter_elements.end());
  squares.insert(squares.end(), scatter_squares.begin(), scatter_squares.end());
  norms = norms && scatter_norms;
  double total_elements = 0, total_squares = 0;
  for (size_t w = 0; w < sinks; ++w) total_elements += elements[w], total_squares += squares[w];
  for (size_t i = 0; i < gemms.size(); ++i) {
    const uint64_t* mine = &bits[position.at(nodes[i]) * words];
    double reached_elements = 0, reached_squares = 0;
    for (size_t w = 0; w < sinks; ++w)
      if ((mine[w / 64] >> (w % 64)) & 1) reached_elements += elements[w], reached_squares += squares[w];
    gemms[i].reach = reached_elements / total_elements;
    gemms[i].gradient_reach = norms && total_squares > 0 ? reached_squares / total_squares : -1;
  }
}

Profile ProfileCollector::profile(ProfileRun run, Collectives* job) const {
  PGQ_ASSERT(steps_ > 0, "no profiled steps");
  const int processes = job ? job->worldSize() : 1;
  const std::vector<StatsOutput> outputs = processes > 1 ? combined(*job) : outputs_;
  const std::vector<std::optional<ScalingStats>> scaling = scalingOf(outputs, processes > 1 ? job : nullptr);
  const bool metrics = run.metrics;
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
    o.side = parseName<GemmOperand>(side);  // none for "out", the GEMM's result
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
    o.scaling = scaling[static_cast<size_t>(&s - outputs.data())];
    // Predicted scales model the optimizer moving a parameter: weights only.
    if (o.scaling && role != OperandRole::kWeight) o.scaling->predicted.reset();
    const auto& formats = s.node->attrs().getFormats(AttrKey::kFormats);
    const bool bias = metrics && s.node->attrs().has(AttrKey::kBias) && s.node->attrs().getInt(AttrKey::kBias) != 0;
    for (size_t f = 0; f < formats.size(); ++f) {
      const Accumulator& a = s.per_format[f];
      o.formats.push_back({formats[f], a.sqnr_sum / n, a.sqnr_min, a.sqnr_max, a.mse_sum / n,
                           a.underflow_sum / n, a.clipped_sum / n, bias ? a.bias_sqnr_sum / n : 0.0});
    }
    return o;
  };

  // label -> its output errors, in the order the pairs were built.
  std::map<std::string, std::vector<OutputErrorStats>> errors_of;
  if (metrics) {
    const std::vector<OutputError> errors = outputErrors(processes > 1 ? job : nullptr);
    // The mean over every replica's steps (the devices of a replica counted together).
    const double steps = static_cast<double>(steps_ * (job && processes > 1 ? job->size(DeviceGroup::kData) : 1));
    for (size_t i = 0; i < errors_.size(); ++i) {
      const Attrs& a = errors_[i].node->attrs();
      errors_of[a.getString(AttrKey::kLabel)].push_back({a.getFormat(AttrKey::kLhsFormat),
                                                         a.getFormat(AttrKey::kRhsFormat),
                                                         errors[i].sqnr_sum / steps, errors[i].sqnr_min});
    }
  }

  Profile profile;
  profile.run = std::move(run);
  profile.run.profile_steps = steps_;
  profile.run.processes = processes;
  std::vector<const Node*> nodes;  // each GEMM's matmul
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
    if (auto it = errors_of.find(g.label); it != errors_of.end()) g.output_errors = std::move(it->second);
    profile.gemms.push_back(std::move(g));
    nodes.push_back(node);
  }
  // Each backward GEMM's forward GEMM (autodiff's grad_of), which a profile file records
  // only in the backward GEMM's label.
  std::unordered_map<int64_t, std::string_view> forward_labels;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i]->attrs().has(AttrKey::kGemmId) && !nodes[i]->attrs().has(AttrKey::kGradOf))
      forward_labels.emplace(nodes[i]->attrs().getInt(AttrKey::kGemmId), profile.gemms[i].label);
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i]->attrs().has(AttrKey::kGradOf))
      if (auto it = forward_labels.find(nodes[i]->attrs().getInt(AttrKey::kGradOf)); it != forward_labels.end())
        profile.gemms[i].grad_of = it->second;
  if (metrics) {
    // The scatter-adds' rms, from the statistics of their results.
    std::unordered_map<const Node*, double> scatter_rms;
    for (const StatsOutput& out : outputs)
      if (out.node->operand(0)->op() == Op::kScatterAdd) scatter_rms[out.node->operand(0)] = out.rms_sum / n;
    fillReach(profile.gemms, nodes, scatter_rms);
  }
  return profile;
}

}  // namespace pgq

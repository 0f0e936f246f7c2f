#include "app/experiment_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/plot.h"
#include "app/sqnr_plot.h"
#include "plan/profile.h"
#include "plan/sqnr_table.h"
#include "runtime/metrics.h"
#include "runtime/run_layout.h"
#include "support/config_file.h"
#include "support/errors.h"
#include "support/escape.h"
#include "support/file_io.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string percent(double x) { return fmt::format("{:+.2f}%", 100 * x); }

const RunSummary* findRun(const std::vector<RunSummary>& runs, const std::string& name) {
  for (const RunSummary& r : runs)
    if (r.name == name) return &r;
  return nullptr;
}

}  // namespace

std::vector<RunStep> readMetrics(const std::string& path) {
  std::istringstream in(readTextFile(path, InputKind::kMetrics));
  std::string line;
  if (!std::getline(in, line)) throw Error(fmt::format("{}: empty metrics file", path));
  std::vector<std::string> columns = splitCsv(line);
  auto column = [&](const std::string& name) {
    auto it = std::find(columns.begin(), columns.end(), name);
    if (it == columns.end()) throw Error(fmt::format("{}: no '{}' column", path, name));
    return static_cast<size_t>(it - columns.begin());
  };
  size_t step_col = column("step"), loss_col = column("loss"), ms_col = column("step_ms"), val_col = column("val_loss");
  std::vector<RunStep> steps;
  while (std::getline(in, line)) {
    std::vector<std::string> cells = splitCsv(line);
    if (cells.size() != columns.size()) continue;  // a torn last line
    try {
      RunStep s;
      s.step = std::stoll(cells[step_col]);
      s.loss = std::stod(cells[loss_col]);
      s.step_ms = std::stod(cells[ms_col]);
      if (!cells[val_col].empty()) s.val_loss = std::stod(cells[val_col]);
      steps.push_back(s);
    } catch (const std::exception&) {
      throw Error(fmt::format("{}: malformed row '{}'", path, line));
    }
  }
  return steps;
}

std::string runSlug(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '>') out += "_gt_";
    else if (c == '<') out += "_lt_";
    else if (c == ' ' || c == '/' || c == ':') out += '_';
    else out += c;
  }
  // A policy named "." or ".." would put its run in runs/ itself or in the experiment's
  // folder.
  if (out.find_first_not_of('.') == std::string::npos) out.insert(out.begin(), '_');
  return out;
}

RunSummary summarizeRun(const std::string& name, const std::string& policy, const std::string& recipe,
                        const std::vector<RunStep>& steps) {
  RunSummary s;
  s.name = name;
  s.policy = policy;
  s.recipe = recipe;
  if (steps.empty()) return s;
  s.first_step = steps.front().step;
  s.last_step = steps.back().step;
  std::vector<double> ms;
  for (size_t i = 1; i < steps.size(); ++i) ms.push_back(steps[i].step_ms);
  s.step_ms = median(ms.empty() ? std::vector<double>{steps.front().step_ms} : ms);
  if (ms.size() >= 3 && s.step_ms > 0) {
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) { return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1) + 0.5)]; };
    s.step_spread = (at(0.9) - at(0.1)) / s.step_ms;
  }
  size_t half = steps.size() / 2;
  double sum = 0;
  for (size_t i = half; i < steps.size(); ++i) sum += steps[i].loss;
  s.mean_loss = sum / static_cast<double>(steps.size() - half);
  for (const RunStep& st : steps)
    if (st.val_loss) s.final_val_loss = *st.val_loss;
  return s;
}

void writeRunSummary(const std::string& path, const RunSummary& s) {
  writeFileAtomically(
      path, fmt::format("# A finished run of a pgq experiment (from its metrics.csv).\nname: {}\npolicy: {}\n"
                        "recipe: {}\nfirst_step: {}\nlast_step: {}\nstep_ms: {:.6g}\nstep_spread: {:.4g}\n"
                        "mean_loss: {:.9g}\nfinal_val_loss: {:.9g}\nfwd_quantized: {}\nfwd_total: {}\nbwd_quantized: {}\n"
                        "bwd_total: {}\nrecipe_hash: \"{}\"\nstart: \"{}\"\n",
                        quoted(s.name, QuoteStyle::kJson), quoted(s.policy, QuoteStyle::kJson),
                        quoted(s.recipe, QuoteStyle::kJson), s.first_step, s.last_step, s.step_ms, s.step_spread, s.mean_loss,
                        s.final_val_loss, s.fwd_quantized, s.fwd_total, s.bwd_quantized, s.bwd_total, s.recipe_hash,
                        s.start));
}

RunSummary loadRunSummary(const std::string& path) {
  ConfigNode n = ConfigNode::loadFile(path, InputKind::kRunSummary);
  n.allowOnly({"name", "policy", "recipe", "first_step", "last_step", "step_ms", "step_spread", "mean_loss",
               "final_val_loss", "fwd_quantized", "fwd_total", "bwd_quantized", "bwd_total",
               "fwd_int8", "bwd_int8",  // the counts' names before session 15
               "recipe_hash", "start"});
  RunSummary s;
  s.name = n.getString("name");
  s.policy = n.getString("policy");
  s.recipe = n.getString("recipe", "");
  s.first_step = n.getInt("first_step", 0);
  s.last_step = n.getInt("last_step", 0);
  s.step_ms = n.getDouble("step_ms", 0.0, 1e12);
  s.step_spread = n.getDouble("step_spread", 0.0, 0.0, 1e6);
  s.mean_loss = n.getDouble("mean_loss", 0.0, 1e6);
  s.final_val_loss = n.getDouble("final_val_loss", 0.0, 1e6);
  s.fwd_quantized = static_cast<int>(n.getInt(n.renamed("fwd_quantized", "fwd_int8"), 0));
  s.fwd_total = static_cast<int>(n.getInt("fwd_total", 0));
  s.bwd_quantized = static_cast<int>(n.getInt(n.renamed("bwd_quantized", "bwd_int8"), 0));
  s.bwd_total = static_cast<int>(n.getInt("bwd_total", 0));
  s.recipe_hash = n.getString("recipe_hash", "");
  s.start = n.getString("start", "");
  return s;
}

namespace {

}  // namespace

// Below this median step time the times move with the scheduler's jitter, not a busy
// machine.
constexpr double kJitterMs = 20;

std::string timingCheck(const std::vector<RunSummary>& runs, const RunSummary& f32_again) {
  const RunSummary& base = runs.front();
  std::vector<std::string> why;
  if (base.step_ms >= kJitterMs && f32_again.step_ms > 0 && std::abs(f32_again.step_ms / base.step_ms - 1) > 0.2)
    why.push_back(fmt::format("the f32 step took {:.1f} ms at the start and {:.1f} ms when timed again at the end "
                              "({:+.0f}%)",
                              base.step_ms, f32_again.step_ms, 100 * (f32_again.step_ms / base.step_ms - 1)));
  std::vector<std::string> spread;
  for (const RunSummary& r : runs)
    if (r.step_spread > 0.5 && r.step_ms >= kJitterMs) spread.push_back(fmt::format("{} ({:.0f}%)", markdownCode(r.name), 100 * r.step_spread));
  if (!spread.empty())
    why.push_back(fmt::format("the step times of {} spread by more than half their median (90th - 10th percentile)",
                              fmt::join(spread, ", ")));
  if (why.empty()) return "";
  return fmt::format("the machine's load changed during the experiment: {}. The step times and speedups compare "
                     "steps timed under different loads and are not reliable; the losses are (they do not depend "
                     "on timing). Re-run on a quiet machine for speedups",
                     fmt::join(why, "; "));
}

namespace {

// Table I: one row per run, the f32 continuation first.
std::pair<std::string, std::string> tableOne(const std::vector<RunSummary>& runs, const std::string& quantized_in) {
  const RunSummary& base = runs.front();
  std::string md = fmt::format(
      "| recipe | fwd GEMMs {0} | bwd GEMMs {0} | step ms | speedup | mean loss (last half) | vs f32 | val loss |\n"
      "|---|---|---|---|---|---|---|---|\n",
      quantized_in);
  std::string csv = "recipe,fwd_quantized,fwd_total,bwd_quantized,bwd_total,step_ms,speedup,mean_loss,delta,val_loss\n";
  for (const RunSummary& r : runs) {
    double speedup = base.step_ms / r.step_ms, delta = r.mean_loss / base.mean_loss - 1;
    md += fmt::format("| {}{} | {}/{} | {}/{} | {:.1f} | {:.2f}x | {:.4f} | {} | {:.4f} |\n", markdownCell(r.name),
                      r.adversarial ? " (adversarial)" : "", r.fwd_quantized,
                      r.fwd_total, r.bwd_quantized, r.bwd_total, r.step_ms, speedup, r.mean_loss,
                      &r == &base ? std::string("baseline") : percent(delta), r.final_val_loss);
    csv += fmt::format("{},{},{},{},{},{:.4f},{:.4f},{:.6f},{:.6f},{:.6f}\n", csvField(r.name), r.fwd_quantized, r.fwd_total,
                       r.bwd_quantized, r.bwd_total, r.step_ms, speedup, r.mean_loss, delta, r.final_val_loss);
  }
  return {md, csv};
}

// Fig. 4: training loss of every run (moving average of 10 steps) and, since every run
// sees the same batches, its difference to the f32 run at the same step (moving
// average of 25), which isolates what quantization changes.
void lossCurves(const std::string& out_dir, const std::vector<RunSummary>& runs) {
  auto movingAverage = [](const std::vector<double>& v, size_t window) {
    std::vector<double> out(v.size());
    double sum = 0;
    for (size_t j = 0; j < v.size(); ++j) {
      sum += v[j];
      if (j >= window) sum -= v[j - window];
      out[j] = sum / static_cast<double>(std::min(j + 1, window));
    }
    return out;
  };
  std::vector<std::pair<std::string, std::string>> data;
  std::vector<RunStep> base = readMetrics(RunLayout{fs::path(out_dir) / "runs" / runSlug(runs[0].name)}.metrics());
  std::string top = "plot ", bottom = "plot ";
  for (size_t i = 0; i < runs.size(); ++i) {
    std::vector<RunStep> steps =
        readMetrics(RunLayout{fs::path(out_dir) / "runs" / runSlug(runs[i].name)}.metrics());
    std::vector<double> loss, diff;
    for (size_t j = 0; j < steps.size(); ++j) {
      loss.push_back(steps[j].loss);
      diff.push_back(j < base.size() && base[j].step == steps[j].step ? steps[j].loss - base[j].loss : 0.0);
    }
    std::vector<double> smooth = movingAverage(loss, 10), smooth_diff = movingAverage(diff, 25);
    std::string rows;
    for (size_t j = 0; j < steps.size(); ++j)
      rows += fmt::format("{} {:.6f} {:.6f}\n", steps[j].step, smooth[j], smooth_diff[j]);
    std::string file = fmt::format("run{}.dat", i);
    data.emplace_back(file, rows);
    // gnuplot cycles 8 colours; runs past the eighth are told apart by dashes.
    std::string style = fmt::format("with lines lw {} dt {} title {}", i ? 1.5 : 3, i / 8 + 1, gnuplotText(runs[i].name));
    top += fmt::format("{}'{}' using 1:2 {}", i ? ", " : "", file, style);
    bottom += fmt::format("{}'{}' using 1:3 {}", i ? ", " : "", file, style);
  }
  std::string script =
      "set multiplot layout 2,1 title \"Fine-tuning from the f32 baseline, same batches for every recipe\"\n"
      "set grid\nset key outside right\nset ylabel \"training loss (avg of 10)\"\n" + top +
      "\nset xlabel \"step\"\nset ylabel \"loss - f32 loss (avg of 25)\"\n" + bottom + "\nunset multiplot\n";
  renderPlot(script, data, (fs::path(out_dir) / "loss_curves.png").string(), 1100, 800);
}

// Fig. 5: speedup vs loss of the SQNR-ordered recipes and of their adversarial twins.
void speedupVsLoss(const std::string& out_dir, const std::vector<RunSummary>& runs, const std::string& metric) {
  const RunSummary& base = runs.front();
  std::vector<std::pair<double, const RunSummary*>> sqnr, adversarial;
  // The thresholded recipes are F+B_SR>t / F+B_SR<t (or F+B>t / F+B<t with
  // round-to-nearest gradients); both curves start at F and end at the unthresholded one.
  bool sr = std::any_of(runs.begin(), runs.end(), [](const RunSummary& r) { return r.name.starts_with("F+B_SR>"); });
  std::string all = sr ? "F+B_SR" : "F+B";
  for (const RunSummary& r : runs) {
    bool ends = r.name == "F" || r.name == all;
    if (ends || r.name.starts_with(all + ">")) sqnr.emplace_back(base.step_ms / r.step_ms, &r);
    if (ends || r.name.starts_with(all + "<")) adversarial.emplace_back(base.step_ms / r.step_ms, &r);
  }
  auto rows = [&](std::vector<std::pair<double, const RunSummary*>> v) {
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second->bwd_quantized < b.second->bwd_quantized; });
    std::string out;
    for (auto& [speedup, r] : v) out += fmt::format("{:.4f} {:.6f} {}\n", speedup, r->mean_loss, gnuplotDatum(r->name));
    return out;
  };
  std::string others;
  for (const RunSummary& r : runs)
    if (r.name == "f32" || (sr && r.name == "F+B")) others += fmt::format("{:.4f} {:.6f} {}\n", base.step_ms / r.step_ms, r.mean_loss, gnuplotDatum(r.name));
  std::string script = fmt::format(
      "set title \"Speedup vs loss: backward GEMMs chosen by {2} vs adversarially (f32 loss {1:.4f})\"\n"
      "set xlabel \"step speedup over f32\"\nset ylabel \"mean training loss, last half of fine-tuning\"\nset grid\n"
      "set key top left\nset offsets graph 0.05, graph 0.1, graph 0.1, graph 0.1\n"
      "plot 'sqnr.dat' using 1:2 with linespoints pt 7 lw 2 lc rgb '#2ca02c' title 'highest {2} first ({0}>t)', \\\n"
      "     'adversarial.dat' using 1:2 with linespoints pt 9 lw 2 lc rgb '#d62728' title 'lowest {2} first ({0}<t)', \\\n"
      "     'others.dat' using 1:2 with points pt 5 ps 1.5 lc rgb '#1f77b4' title 'other recipes', \\\n"
      "     'sqnr.dat' using 1:2:3 with labels offset 0,1 font ',8' notitle, \\\n"
      "     'adversarial.dat' using 1:2:3 with labels offset 0,-1 font ',8' notitle, \\\n"
      "     'others.dat' using 1:2:3 with labels offset 0,1 font ',8' notitle\n",
      all, base.mean_loss, metric);
  renderPlot(script, {{"sqnr.dat", rows(sqnr)}, {"adversarial.dat", rows(adversarial)}, {"others.dat", others}},
             (fs::path(out_dir) / "speedup_vs_loss.png").string(), 1100, 650);
}

}  // namespace

ExperimentResult writeExperimentReport(const ReportInputs& in) {
  std::vector<RunSummary> runs = in.runs;
  PGQ_ASSERT(!runs.empty() && runs.front().name == "f32", "the report needs the f32 run first");
  // The f32 run has no recipe; its GEMM counts are those of any recipe.
  if (runs.size() > 1) {
    runs.front().fwd_total = runs[1].fwd_total;
    runs.front().bwd_total = runs[1].bwd_total;
  }
  fs::path dir(in.out_dir);
  auto [md, csv] = tableOne(runs, in.quantized_in);
  const std::string busy = in.f32_again ? timingCheck(runs, *in.f32_again) : "";
  if (!busy.empty()) md += fmt::format("\nTimings: {}.\n", busy);
  writeFileAtomically((dir / "table.md").string(), md);
  writeFileAtomically((dir / "table.csv").string(), csv);
  lossCurves(in.out_dir, runs);
  speedupVsLoss(in.out_dir, runs, in.metric);
  Profile profile = loadProfile((dir / "profile.yaml").string());
  const std::string sqnr_format = in.sqnr_format.toString();
  std::vector<SqnrRow> rows = sqnrRows(profile, in.sqnr_format);
  writeFileAtomically((dir / "sqnr.md").string(), sqnrTableMarkdown(rows, sqnr_format));
  writeSqnrPlot(rows, sqnr_format, (dir / "sqnr.png").string());

  // Findings, every number from the files above.
  const RunSummary& base = runs.front();
  std::string findings;
  findings += fmt::format("### Which GEMMs have the lowest SQNR (in {})\n\n", sqnr_format);
  for (size_t i = 0; i < std::min<size_t>(5, rows.size()); ++i) {
    const SqnrRow& r = rows[i];
    const SqnrInput& low = r.lhs.sqnr <= r.rhs.sqnr ? r.lhs : r.rhs;
    findings += fmt::format("{}. {} ({}): {} input, SQNR {:.3g} ({:.1f} dB)\n", i + 1, markdownCode(r.label), r.direction, low.role,
                            low.sqnr, low.db());
  }
  std::map<std::string, std::vector<double>> by_role;  // by name: the report lists roles alphabetically
  for (const GemmProfile& g : profile.gemms)
    for (const OperandProfile& o : g.operands)
      if (const FormatStats* f = o.find(in.sqnr_format)) by_role[std::string(o.roleName())].push_back(f->sqnr_mean);
  findings += fmt::format("\nMedian SQNR in {} by operand role:", sqnr_format);
  for (auto& [role, v] : by_role) findings += fmt::format(" {} {:.3g} ({} operands);", role, median(v), v.size());
  findings.back() = '.';
  findings += fmt::format(
      "\n\n### Is the {0} ordering informative?\n\n"
      "Each fraction quantizes the same number of backward GEMMs, chosen by highest {0} (`>`) or lowest (`<`){1}:\n\n"
      "| backward GEMMs in {2} | highest {0} first: loss vs f32 | lowest {0} first: loss vs f32 | gap |\n"
      "|---|---|---|---|\n",
      in.metric, in.metric == "SQNR" ? "" : " (docs/METRICS.md)", in.quantized_in);
  std::vector<const RunSummary*> high, low;
  for (const RunSummary& r : runs) {
    if (r.name.starts_with("F+B_SR>") || r.name.starts_with("F+B>")) high.push_back(&r);
    if (r.name.starts_with("F+B_SR<") || r.name.starts_with("F+B<")) low.push_back(&r);
  }
  for (size_t i = 0; i < std::min(high.size(), low.size()); ++i) {
    double dh = high[i]->mean_loss / base.mean_loss - 1, dl = low[i]->mean_loss / base.mean_loss - 1;
    findings += fmt::format("| {} and {} of {} | {} ({}) | {} ({}) | {} |\n", high[i]->bwd_quantized, low[i]->bwd_quantized,
                            high[i]->bwd_total, percent(dh), markdownCell(markdownCode(high[i]->name)), percent(dl),
                            markdownCell(markdownCode(low[i]->name)), percent(dl - dh));
  }
  findings += "\n### Speed and loss\n\n";
  if (!busy.empty()) findings += fmt::format("**Timings not reliable:** {}.\n\n", busy);
  else if (in.f32_again)
    findings += fmt::format("Timings: the f32 step took {:.1f} ms at the start and {:.1f} ms when timed again at the "
                            "end; no run's step times spread by more than half their median.\n\n",
                            base.step_ms, in.f32_again->step_ms);
  // Only real recipes are candidates: an adversarial one that happens to be fast and
  // close in loss says something about the metric, not a recipe to use.
  // A recipe that quantizes no GEMM is the f32 step again: its "speedup" is timing noise.
  const RunSummary* fastest_ok = nullptr;
  bool any_quantized = false;
  for (const RunSummary& r : runs) {
    if (&r == &base || r.adversarial) continue;
    if (r.fwd_quantized + r.bwd_quantized == 0) continue;
    any_quantized = true;
    double speedup = base.step_ms / r.step_ms, delta = r.mean_loss / base.mean_loss - 1;
    if (delta <= 0.01 && (!fastest_ok || speedup > base.step_ms / fastest_ok->step_ms)) fastest_ok = &r;
  }
  if (fastest_ok)
    findings += fmt::format("The fastest recipe within 1% of the f32 loss is {}: {:.2f}x faster per step, loss {}.\n",
                            markdownCode(fastest_ok->name), base.step_ms / fastest_ok->step_ms,
                            percent(fastest_ok->mean_loss / base.mean_loss - 1));
  else if (!any_quantized)
    findings += fmt::format("No recipe quantizes any GEMM here (on {} the roofline or the thresholds kept every "
                            "GEMM in high precision), so there is nothing to recommend.\n",
                            in.hardware);
  else
    findings += "No recipe stayed within 1% of the f32 loss.\n";
  std::string checks;
  for (const RunSummary& r : runs)
    if (r.adversarial)
      checks += fmt::format("{}{} ({:.2f}x, loss {})", checks.empty() ? "" : ", ", markdownCode(r.name), base.step_ms / r.step_ms,
                            percent(r.mean_loss / base.mean_loss - 1));
  if (!checks.empty())
    findings += fmt::format("The adversarial recipes {} quantize the lowest-{} GEMMs on purpose: they are checks of "
                            "the metric, not candidates.\n",
                            checks, in.metric);
  for (const char* name : {"F", "F+B", "F+B_SR"})
    if (const RunSummary* r = findRun(runs, name))
      findings += fmt::format("- `{}`: {:.2f}x, loss {}\n", name, base.step_ms / r->step_ms,
                              percent(r->mean_loss / base.mean_loss - 1));

  const ModelConfig& m = in.model;
  std::string model_text =
      m.imported() ? fmt::format("{} (imported from {}, seq {}, batch {}, vocab {})", markdownCode(m.name), markdownCode(m.onnx), m.seq_len,
                                 m.batch, m.vocab)
                   : fmt::format("{} (d_model {}, {} layers, {} heads, d_ff {}, seq {}, batch {})", markdownCode(m.name), m.d_model,
                                 m.n_layers, m.n_heads, m.d_ff, m.seq_len, m.batch);
  std::string report = fmt::format(
      "# pgq experiment report\n\n"
      "Model {}, corpus {}, hardware model {}, "
      "{} threads.\nf32 baseline trained for {} steps; GEMM statistics logged over its last {} steps; then every "
      "recipe fine-tuned from the baseline checkpoint for {} steps with the same data order and seed. Step times are "
      "medians of each run's own steps; losses are training losses averaged over the last half of fine-tuning. "
      "Everything below is computed from the files in this folder (`runs/*/metrics.csv`, `runs/*/result.yaml`, "
      "`profile.yaml`, `recipes/*.yaml`).\n\n"
      "## Table I\n\n{}\n(also `table.csv`)\n\n"
      "## Loss curves (Fig. 4)\n\n![loss curves](loss_curves.png)\n\n"
      "## Speedup vs loss (Fig. 5)\n\n![speedup vs loss](speedup_vs_loss.png)\n\n"
      "## Findings\n\n{}\n"
      "## SQNR of every GEMM input (Fig. 3)\n\n![SQNR per GEMM](sqnr.png)\n\nThe full table is in `sqnr.md`; the recipes, with "
      "the reason for every decision, are in `recipes/`.\n",
      model_text, markdownCode(in.corpus), markdownCode(in.hardware), in.threads, in.baseline_steps, in.profile_steps, in.finetune_steps, md,
      findings);
  std::string report_path = (dir / "REPORT.md").string();
  writeFileAtomically(report_path, report);
  return {report_path, (dir / "table.md").string()};
}

void writeSearchReport(const std::string& out_dir, const std::vector<RunSummary>& trials, const RunSummary& best,
                       double loss_budget, const std::string& quantized_in) {
  const RunSummary& base = trials.front();
  std::string md = fmt::format(
      "# pgq threshold search\n\nLoss budget: {0:.2f}% over the f32 trial's mean loss ({1:.4f}). Each trial fine-tunes "
      "from the baseline checkpoint; the backward threshold is bisected first (forward fixed at the prior 20), then "
      "the forward one.\n\n| trial | fwd {2} | bwd {2} | step ms | speedup | mean loss | vs f32 | within budget |\n"
      "|---|---|---|---|---|---|---|---|\n",
      100 * loss_budget, base.mean_loss, quantized_in);
  std::string csv = "trial,fwd_quantized,bwd_quantized,step_ms,speedup,mean_loss,delta,within_budget\n";
  for (const RunSummary& t : trials) {
    double delta = t.mean_loss / base.mean_loss - 1;
    md += fmt::format("| {} | {}/{} | {}/{} | {:.1f} | {:.2f}x | {:.4f} | {} | {} |\n", markdownCell(t.policy), t.fwd_quantized, t.fwd_total,
                      t.bwd_quantized, t.bwd_total, t.step_ms, base.step_ms / t.step_ms, t.mean_loss, percent(delta),
                      &t == &base ? "baseline" : t.within_budget ? "yes" : "no");
    csv += fmt::format("{},{},{},{:.4f},{:.4f},{:.6f},{:.6f},{}\n", csvField(t.policy), t.fwd_quantized, t.bwd_quantized, t.step_ms,
                       base.step_ms / t.step_ms, t.mean_loss, delta, t.within_budget ? 1 : 0);
  }
  if (best.fwd_quantized + best.bwd_quantized == 0)
    // Its speed against f32 is timing noise: nothing to recommend (it was reported as a
    // result "0.98x faster").
    md += fmt::format("\nResult: no recipe that quantizes a GEMM kept the loss within the budget in these trials: "
                      "train in f32, or allow a larger --loss-budget.\n");
  else
    md += fmt::format("\nResult: {} ({}), {}, loss {}. Its recipe is {}.\n", markdownCode(best.policy),
                      best.within_budget ? "within the budget"
                                         : "nothing was within the budget; the most conservative trial",
                      best.step_ms <= base.step_ms ? fmt::format("{:.2f}x faster than f32", base.step_ms / best.step_ms)
                                                   : fmt::format("{:.2f}x slower than f32", best.step_ms / base.step_ms),
                      percent(best.mean_loss / base.mean_loss - 1),
                      markdownCode("recipes/" + runSlug("trial " + best.policy) + ".yaml"));
  writeFileAtomically((fs::path(out_dir) / "SEARCH.md").string(), md);
  writeFileAtomically((fs::path(out_dir) / "trials.csv").string(), csv);
}

}  // namespace pgq

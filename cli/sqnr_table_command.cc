// `pgq sqnr-table`: the table (and plot) a user inspects after profiling, or with
// --scaling the table of how often FP8 scaling strategies would have clipped.
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "app/plot.h"
#include "app/sqnr_plot.h"
#include "cli/commands.h"
#include "cli/number_flags.h"
#include "plan/profile.h"
#include "plan/gemm_metric.h"
#include "plan/sqnr_table.h"
#include "support/quant_format.h"
#include "support/errors.h"
#include "support/file_io.h"

namespace pgq::cli {

void addSqnrTableCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("sqnr-table", "Show the SQNR of every GEMM input of a profile, lowest first");
  static std::string profile_path, format = "int8:channel:rtn", plot;
  static bool csv = false, json = false, scaling = false;
  static std::string compare;
  static size_t top = 15;
  cmd->add_option("PROFILE", profile_path, "Profile written by pgq train --profile-out")->required();
  cmd->add_option("--format", format, "Quantization format to show (one the profile measured)")->capture_default_str();
  auto* csv_flag = cmd->add_flag("--csv", csv, "Print CSV instead of a markdown table");
  cmd->add_flag("--json", json, "Print JSON instead of a markdown table")->excludes(csv_flag);
  auto* plot_option = cmd->add_option(
      "--plot", plot, "Also draw ln(1+SQNR) per GEMM (forward and backward panels) to FILE.svg or .png");
  auto* scaling_flag = cmd->add_flag("--scaling", scaling,
                                     "Show instead how often delayed scaling and predicted weight scales would have "
                                     "clipped each GEMM input (any format)")
                           ->excludes(plot_option);
  cmd->add_option("--compare", compare,
                  "Compare formats side by side: schemes (int8, fp8, fp8_e4m3, mxfp8, mxint8, moss_fp8) or formats, "
                  "comma-separated; shows ranks and rank shifts")
      ->check(kNonEmptyList)
      ->excludes(plot_option)
      ->excludes(scaling_flag);
  static std::string gradient_format, sort = "sqnr";
  cmd->add_option("--gradient-format", gradient_format,
                  "Format of gradient operands (e.g. int8:channel:sr), when it differs from --format");
  cmd->add_option("--sort", sort,
                  fmt::format("Order rows by this metric, lowest first: {}. Every metric the profile holds is shown "
                              "as a column (those beyond sqnr need pgq train --profile-metrics)",
                              metricNames()))
      ->capture_default_str();
  cmd->add_option("--top", top, "With --compare: how many inputs to list")->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->callback([] {
    const Metric sort_by = metricFromName(sort, "--sort");
    // The formats are parsed here, once: the table and its title show --format as given.
    const QuantFormat shown = QuantFormat::parse(format);
    std::optional<QuantFormat> gradient;
    if (!gradient_format.empty()) gradient = QuantFormat::parse(gradient_format);
    if (!plot.empty()) {  // before the table is printed: a plot that cannot be written is refused first
      const std::string ext = std::filesystem::path(plot).extension().string();
      if (ext != ".svg" && ext != ".png")
        throw Error(fmt::format("--plot {}: give a .svg or .png file (the extension picks the image format)", plot));
      OutputPlan outputs;
      outputs.reads(profile_path);
      outputs.writes("--plot", plot);
      outputs.check();
      requireGnuplot("--plot " + plot);
    }
    Profile profile = loadProfile(profile_path);
    if (!compare.empty()) {
      SqnrComparison c = compareSqnr(profile, listItems("--compare", compare));
      if (json) throw Error("--compare prints markdown or --csv, not --json");
      fmt::print("{}", csv ? sqnrComparisonCsv(c) : sqnrComparisonMarkdown(c, top));
      return;
    }
    if (scaling) {
      std::vector<ScalingRow> rows = scalingRows(profile);
      if (csv) fmt::print("{}", scalingTableCsv(rows));
      else if (json) fmt::print("{}", scalingTableJson(rows));
      else fmt::print("{}", scalingTableMarkdown(rows));
      return;
    }
    std::vector<SqnrRow> rows = sqnrRows(profile, shown, gradient, sort_by, profile_path);
    // The title says both formats when the backward rows' gradient operands differ.
    const std::string title =
        gradient ? fmt::format("{}, gradient operands in {}", format, gradient_format) : format;
    if (csv) fmt::print("{}", sqnrTableCsv(rows));
    else if (json) fmt::print("{}", sqnrTableJson(rows, format, gradient ? gradient_format : ""));
    else fmt::print("{}", sqnrTableMarkdown(rows, title));
    if (!plot.empty()) {
      writeSqnrPlot(rows, title, plot);
      fmt::print(stderr, "plot: {}\n", plot);
    }
  });
}

}  // namespace pgq::cli

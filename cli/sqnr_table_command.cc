// `pgq sqnr-table`: the table (and plot) a user inspects after profiling, or with
// --scaling the table of how often FP8 scaling strategies would have clipped.
#include <fmt/format.h>

#include "app/sqnr_plot.h"
#include "cli/commands.h"
#include "plan/profile.h"
#include "plan/sqnr_table.h"
#include "support/errors.h"

namespace pgq::cli {

void addSqnrTableCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("sqnr-table", "Show the SQNR of every GEMM input of a profile, lowest first");
  static std::string profile_path, format = "int8:channel:rtn", plot;
  static bool csv = false, json = false, scaling = false;
  cmd->add_option("PROFILE", profile_path, "Profile written by pgq train --profile-out")->required();
  cmd->add_option("--format", format, "Quantization format to show (one the profile measured)")->capture_default_str();
  auto* csv_flag = cmd->add_flag("--csv", csv, "Print CSV instead of a markdown table");
  cmd->add_flag("--json", json, "Print JSON instead of a markdown table")->excludes(csv_flag);
  auto* plot_option = cmd->add_option(
      "--plot", plot, "Also draw ln(1+SQNR) per GEMM (forward and backward panels) to FILE.svg or .png");
  cmd->add_flag("--scaling", scaling,
                "Show instead how often delayed scaling and predicted weight scales would have clipped each GEMM "
                "input (any format)")
      ->excludes(plot_option);
  cmd->callback([] {
    Profile profile = loadProfile(profile_path);
    if (scaling) {
      std::vector<ScalingRow> rows = scalingRows(profile);
      if (csv) fmt::print("{}", scalingTableCsv(rows));
      else if (json) fmt::print("{}", scalingTableJson(rows));
      else fmt::print("{}", scalingTableMarkdown(rows));
      return;
    }
    std::vector<SqnrRow> rows = sqnrRows(profile, format);
    if (csv) fmt::print("{}", sqnrTableCsv(rows));
    else if (json) fmt::print("{}", sqnrTableJson(rows, format));
    else fmt::print("{}", sqnrTableMarkdown(rows, format));
    if (!plot.empty()) {
      writeSqnrPlot(rows, format, plot);
      fmt::print(stderr, "plot: {}\n", plot);
    }
  });
}

}  // namespace pgq::cli

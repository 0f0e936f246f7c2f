#include "app/sqnr_plot.h"

#include <fmt/format.h>

#include "app/plot.h"

namespace pgq {

void writeSqnrPlot(const std::vector<SqnrRow>& rows, const std::string& format, const std::string& output) {
  // One data file per (panel, role): x = rank of the GEMM in its panel, y = ln(1+SQNR).
  std::vector<std::pair<std::string, std::string>> data;
  const OperandRole roles[] = {OperandRole::kWeight, OperandRole::kActivation, OperandRole::kGradient};
  int index = 0;
  for (const char* panel : {"fwd", "bwd"}) {
    std::string files[3];
    int rank = 0;
    for (const SqnrRow& r : rows) {
      bool forward = r.direction == GemmDirection::kFwd;
      if (forward != (std::string(panel) == "fwd")) continue;
      ++rank;
      for (const SqnrInput* in : {&r.lhs, &r.rhs})
        for (int k = 0; k < 3; ++k)
          if (in->role == roles[k]) files[k] += fmt::format("{} {:.6g} {}\n", rank, in->ln1p(), gnuplotDatum(r.label));
    }
    for (int k = 0; k < 3; ++k) data.emplace_back(fmt::format("{}_{}.dat", panel, roles[k]), files[k] + "\n");
    ++index;
  }
  std::string script = fmt::format(R"gp(
set multiplot layout 1,2 title {}
set ylabel "ln(1 + SQNR)"
set grid ytics
set key bottom right box opaque
set yrange [0:*]
set xlabel "forward GEMMs"
plot 'fwd_weight.dat' using 1:2 with points pt 5 ps 0.8 lc rgb '#1f77b4' title 'weight', \
     'fwd_activation.dat' using 1:2 with points pt 7 ps 0.8 lc rgb '#2ca02c' title 'activation', \
     'fwd_gradient.dat' using 1:2 with points pt 9 ps 0.9 lc rgb '#d62728' title 'gradient'
set xlabel "backward GEMMs"
plot 'bwd_weight.dat' using 1:2 with points pt 5 ps 0.8 lc rgb '#1f77b4' title 'weight', \
     'bwd_activation.dat' using 1:2 with points pt 7 ps 0.8 lc rgb '#2ca02c' title 'activation', \
     'bwd_gradient.dat' using 1:2 with points pt 9 ps 0.9 lc rgb '#d62728' title 'gradient'
unset multiplot
)gp",
                                    gnuplotText(fmt::format(
                                        "ln(1+SQNR) of GEMM inputs, {} (GEMMs ordered by their lower input SQNR)", format)));
  renderPlot(script, data, output, 1200, 500);
}

}  // namespace pgq

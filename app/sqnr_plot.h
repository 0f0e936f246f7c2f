#pragma once
// The SQNR plot of a profile, like the paper's Figure 3: ln(1+SQNR) of every GEMM
// input, forward GEMMs in one panel and backward GEMMs in the other, GEMMs ordered by
// their lower input SQNR, one marker per input coloured by its role.
#include <string>
#include <vector>

#include "plan/sqnr_table.h"

namespace pgq {

void writeSqnrPlot(const std::vector<SqnrRow>& rows, const std::string& format, const std::string& output);

}  // namespace pgq

#pragma once
// Plots through gnuplot (Debian's gnuplot-nox), the well-kept tool for this, rather
// than hand-drawn images. The caller writes a gnuplot script that reads its data files
// and sets no terminal or output; renderPlot picks the terminal from the output's
// extension (.svg or .png) and writes the image atomically.
#include <string>
#include <utility>
#include <vector>

namespace pgq {

// `data` holds (file name, content) pairs the script refers to by name; they are
// written to a scratch directory that is the script's working directory. Throws
// pgq::Error when gnuplot is missing or fails (with its message), or the output
// extension is neither .svg nor .png.
void renderPlot(const std::string& script, const std::vector<std::pair<std::string, std::string>>& data,
                const std::string& output, int width = 1000, int height = 600);

}  // namespace pgq

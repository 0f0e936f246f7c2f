#pragma once
// Plots through gnuplot (Debian's gnuplot-nox), the well-kept tool for this, rather
// than hand-drawn images. The caller writes a gnuplot script that reads its data files
// and sets no terminal or output; renderPlot picks the terminal from the output's
// extension (.svg or .png) and writes the image atomically.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pgq {

// `text` (a run, policy, label or hardware name: a user's) as a gnuplot string literal in
// a script: single-quoted, where gnuplot expands nothing, with each ' doubled and control
// characters as spaces. In double quotes, a policy named `x" . system("...") . "` ran
// that command when the experiment drew its plots.
std::string gnuplotText(std::string_view text);
// `text` as a quoted field of a data file: double-quoted, with " and control characters
// as ' and spaces (a data file has no escapes).
std::string gnuplotDatum(std::string_view text);

// Throws pgq::Error naming `needed_for` when gnuplot is not in PATH: commands that draw
// plots at their end call it before their work.
void requireGnuplot(const std::string& needed_for);

// `data` holds (file name, content) pairs the script refers to by name; they are
// written to a scratch directory that is the script's working directory. Throws
// pgq::Error when gnuplot is missing or fails (with its message), or the output
// extension is neither .svg nor .png.
void renderPlot(const std::string& script, const std::vector<std::pair<std::string, std::string>>& data,
                const std::string& output, int width = 1000, int height = 600);

}  // namespace pgq

#include "app/plot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "support/child_process.h"
#include "support/errors.h"
#include "support/scratch_dir.h"
#include "support/file_io.h"

namespace pgq {

std::string gnuplotText(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "''";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) out += ' ';
    else out += c;
  }
  return out + "'";
}

std::string gnuplotDatum(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '\'';
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) out += ' ';
    else out += c;
  }
  return out + "\"";
}

void renderPlot(const std::string& script, const std::vector<std::pair<std::string, std::string>>& data,
                const std::string& output, int width, int height) {
  namespace fs = std::filesystem;
  std::string ext = fs::path(output).extension().string();
  std::string terminal;
  if (ext == ".svg") terminal = fmt::format("svg size {},{} dynamic background rgb 'white'", width, height);
  else if (ext == ".png") terminal = fmt::format("pngcairo size {},{}", width, height);
  else throw Error(fmt::format("{}: plots are written as .svg or .png, not '{}'", output, ext));

  const ScratchDir scratch("pgq-plot", output + " (gnuplot)");
  const fs::path& dir = scratch.path();
  for (const auto& [name, content] : data) writeFileAtomically((dir / name).string(), content);
  fs::path image = dir / ("plot" + ext);
  // noenhanced: labels are names like F+B_SR or get_logits, not markup.
  writeFileAtomically((dir / "plot.gp").string(),
                      fmt::format("set terminal {}\nset termoption noenhanced\nset output '{}'\n{}\nunset output\n",
                                  terminal, image.string(), script));
  // A plot takes gnuplot well under a second; one that has not finished in a minute hangs.
  const ChildEnd end =
      runChild({.args = {"gnuplot", "plot.gp"}, .cwd = dir.string(), .stderr_file = "", .timeout_s = 60});
  if (end.signal != 0) {
    scratch.remove();
    endBySignal(end.signal);
  }
  if (end.spawn_error == ENOENT)
    throw Error("gnuplot is not installed (Debian package gnuplot-nox; scripts/setup.sh installs it)");
  if (end.spawn_error != 0) throw Error(fmt::format("{}: cannot run gnuplot: {}", output, std::strerror(end.spawn_error)));
  if (end.timed_out) throw Error(fmt::format("gnuplot did not finish drawing {} in 60 s; it was stopped", output));
  if (!WIFEXITED(end.status) || WEXITSTATUS(end.status) != 0 || !fs::exists(image))
    throw Error(fmt::format("gnuplot failed to draw {}:\n{}", output, end.output));
  // The image is copied (the scratch directory may be on another file system) by the
  // rule every output follows; its errors name the real errno.
  try {
    writeFileAtomically(output, readTextFile(image.string(), InputKind::kPlotImage));
  } catch (const Error& e) {
    throw Error(fmt::format("cannot write the plot: {}", e.what()));
  }
}

}  // namespace pgq

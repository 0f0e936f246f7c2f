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
#include "support/escape.h"
#include "support/scratch_dir.h"
#include "support/file_io.h"

namespace pgq {

std::string gnuplotText(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') out += "''";
    else if (isControlChar(c)) out += ' ';
    else out += c;
  }
  return out + "'";
}

std::string gnuplotDatum(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '\'';
    else if (isControlChar(c)) out += ' ';
    else out += c;
  }
  return out + "\"";
}

namespace {

const char kNoGnuplot[] = "gnuplot is not installed (Debian package gnuplot-nox; scripts/setup.sh installs it)";

// What gnuplot's pngcairo and svg terminals begin their files with: a gnuplot that exits
// 0 having written something else (a wrapper, a broken build) is not taken for a plot.
bool looksLikeImage(const std::string& bytes, const std::string& ext) {
  if (ext == ".png") return bytes.starts_with("\x89PNG\r\n\x1a\n");
  return bytes.find("<svg") != std::string::npos && bytes.find("</svg>") != std::string::npos;
}

}  // namespace

void requireGnuplot(const std::string& needed_for) {
  if (findProgram("gnuplot").empty()) throw Error(fmt::format("{}: {}", needed_for, kNoGnuplot));
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
  if (end.spawn_error == ENOENT) throw Error(kNoGnuplot);
  if (end.spawn_error != 0) throw Error(fmt::format("{}: cannot run gnuplot: {}", output, std::strerror(end.spawn_error)));
  if (end.timed_out) throw Error(fmt::format("gnuplot did not finish drawing {} in 60 s; it was stopped", output));
  if (!WIFEXITED(end.status) || WEXITSTATUS(end.status) != 0 || !fs::exists(image))
    throw Error(fmt::format("gnuplot failed to draw {}:\n{}", output, end.output));
  // The image is copied (the scratch directory may be on another file system) by the
  // rule every output follows; its errors name the real errno.
  const std::string bytes = readTextFile(image.string(), InputKind::kPlotImage);
  if (!looksLikeImage(bytes, ext))
    throw Error(fmt::format("gnuplot exited 0 but did not write a {} image for {} ({} bytes):\n{}", ext.substr(1),
                            output, bytes.size(), end.output));
  try {
    writeFileAtomically(output, bytes);
  } catch (const Error& e) {
    throw Error(fmt::format("cannot write the plot: {}", e.what()));
  }
}

}  // namespace pgq

#include "runtime/plot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "ir/errors.h"

namespace pgq {

void renderPlot(const std::string& script, const std::vector<std::pair<std::string, std::string>>& data,
                const std::string& output, int width, int height) {
  namespace fs = std::filesystem;
  std::string ext = fs::path(output).extension().string();
  std::string terminal;
  if (ext == ".svg") terminal = fmt::format("svg size {},{} dynamic background rgb 'white'", width, height);
  else if (ext == ".png") terminal = fmt::format("pngcairo size {},{}", width, height);
  else throw Error(fmt::format("{}: plots are written as .svg or .png, not '{}'", output, ext));

  char pattern[] = "/tmp/pgq-plot-XXXXXX";
  if (!::mkdtemp(pattern)) throw Error("cannot create a scratch directory for gnuplot");
  fs::path dir(pattern);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  for (const auto& [name, content] : data) std::ofstream(dir / name) << content;
  fs::path image = dir / ("plot" + ext);
  // noenhanced: labels are names like F+B_SR or get_logits, not markup.
  std::ofstream(dir / "plot.gp") << fmt::format("set terminal {}\nset termoption noenhanced\nset output '{}'\n{}\n"
                                                 "unset output\n",
                                                 terminal, image.string(), script);
  std::string cmd = fmt::format("cd '{}' && gnuplot plot.gp 2>&1", dir.string());
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) throw Error("cannot run gnuplot");
  std::string messages;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) messages.append(buf, n);
  int status = ::pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 127)
    throw Error("gnuplot is not installed (Debian package gnuplot-nox; scripts/setup.sh installs it)");
  if (WEXITSTATUS(status) != 0 || !fs::exists(image))
    throw Error(fmt::format("gnuplot failed to draw {}:\n{}", output, messages));
  // Same-filesystem rename is atomic; across filesystems copy to a temporary beside the
  // output first.
  fs::path tmp = fs::path(output).parent_path() / fmt::format(".{}.tmp-{}", fs::path(output).filename().string(), ::getpid());
  std::error_code ec;
  fs::copy_file(image, tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(tmp, output, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(fmt::format("{}: cannot write the plot: {}", output, ec.message()));
  }
}

}  // namespace pgq

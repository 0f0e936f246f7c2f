// Runs the pgq binary the way a user does and checks exit codes and messages.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "plan/profile.h"
#include "runtime/checkpoint.h"
#include "runtime/run_dir_lock.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int code;
  std::string out;  // stdout and stderr together
};

// Runs a shell command line and collects what it prints to standard output.
Result shell(const std::string& cmd) {
  FILE* pipe = popen(cmd.c_str(), "r");
  Result r{-1, ""};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kPgq = std::string(PGQ_BINARY_DIR) + "/pgq";

Result pgq(const std::string& args) { return shell(kPgq + " " + args + " 2>&1"); }

// For inputs that could hang pgq (a FIFO nobody writes): `timeout` turns a hang into
// exit code 124 and a failed test instead of a stuck suite.
Result pgqWithin20s(const std::string& args) { return shell("timeout 20 " + kPgq + " " + args + " 2>&1"); }

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("pgq_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  // A recipe that runs every GEMM in int8 (the weight-side operand int7 with `rounding`:
  // exact on CPUs without VNNI), written by hand as a user edits one: every tiny GEMM is
  // too small to win on this CPU, so a policy would keep them.
  std::string allInt8Recipe(const std::string& name, const std::string& rounding) {
    return write(name, "gemms:\n  - match: \".*\"\n    decision: int8\n    lhs_format: int8:channel:rtn\n"
                       "    rhs_format: int7:channel:" + rounding + "\n");
  }
  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // A profile of the tiny model (2 steps, 1 profiled) at dir_/NAME, its run in dir_/NAME.run.
  std::string tinyProfile(const std::string& name) {
    const std::string profile = (dir_ / name).string();
    Result r = pgq("train --model tiny --steps 2 --no-progress --profile-steps 1 --profile-out " + profile + " --out " +
                   profile + ".run");
    EXPECT_EQ(r.code, 0) << r.out;
    return profile;
  }
  fs::path dir_;
};

TEST_F(Cli, VersionAndHelp) {
  Result v = pgq("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("pgq 0."), std::string::npos);
  for (const char* sub : {"--help", "ir --help", "ir print --help", "ir opt --help", "train --help"}) {
    Result h = pgq(sub);
    EXPECT_EQ(h.code, 0) << sub;
    EXPECT_NE(h.out.find("Usage"), std::string::npos) << sub << ": " << h.out;
  }
}

TEST_F(Cli, GoldenFilesReprintIdenticallyThroughStdin) {
  for (const auto& entry : fs::directory_iterator(fs::path(PGQ_SOURCE_DIR) / "tests/ir/golden")) {
    Result r = pgq("ir print " + entry.path().string() + " | " + PGQ_BINARY_DIR + "/pgq ir print -");
    EXPECT_EQ(r.code, 0) << entry.path();
    Result once = pgq("ir print " + entry.path().string());
    EXPECT_EQ(r.out, once.out) << entry.path();
  }
}

TEST_F(Cli, OptShrinksADuplicatedSubexpression) {
  Result before = pgq("ir demo");
  EXPECT_EQ(before.code, 0);
  EXPECT_NE(before.out.find("after cse,dce (10 -> 7 nodes)"), std::string::npos) << before.out;
}

const char* kMlp = R"(graph @mlp {
  %x = input() : f32[64,32]
  %w = parameter() : f32[32,48]
  %h = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="up"} : f32[64,48]
  %w2 = parameter() : f32[48,32]
  %y = matmul(%h, %w2) {lhs_contract=[1], rhs_contract=[0], label="down"} : f32[64,32]
  return %y
}
)";

const char* kUpInInt8 = R"(gemms:
  - {label: up, decision: int8, lhs_format: "int8:channel:rtn", rhs_format: "int7:channel:rtn"}
  - {label: down, decision: keep}
)";

TEST_F(Cli, OptRunsAnyPassWithItsOptions) {
  std::string mlp = write("mlp.pgq", kMlp);
  std::string recipe = write("r.yaml", kUpInInt8);
  Result r = pgq("ir opt --passes 'tag_metadata,quantize_gemms{recipe=" + recipe + "},dce' " + mlp);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("%h.int8 = qmatmul(%h.lhs_q, %h.rhs_q, %h.lhs_scales, %h.rhs_scales)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("%y = matmul(%h.int8, %w2)"), std::string::npos) << r.out;  // down stays f32
  Result stats = pgq("ir opt --passes 'tag_metadata,instrument_stats{formats=[int8:channel:rtn,int4:tensor:rtn],seed=9}' " + mlp);
  EXPECT_EQ(stats.code, 0) << stats.out;
  EXPECT_NE(stats.out.find(R"(formats=["int8:channel:rtn","int4:tensor:rtn"], contract_dims=[1], uses=["up:lhs"], seed=9})"),
            std::string::npos)
      << stats.out;
  Result help = pgq("ir opt --help");
  EXPECT_EQ(help.code, 0);
  for (const char* listed : {"quantize_gemms", "recipe=<recipe.yaml>", "estimate_speedup", "hardware=<preset|hardware.yaml>",
                             "formats=[<format>,...]"})
    EXPECT_NE(help.out.find(listed), std::string::npos) << listed << "\n" << help.out;
}

// Bad pass options exit 2 with one line naming the pass, the key and the known keys.
TEST_F(Cli, OptRefusesBadPassOptionsWithOneLine) {
  std::string mlp = write("mlp.pgq", kMlp);
  std::string recipe = write("r.yaml", kUpInInt8);
  struct Case {
    std::string passes;
    std::string message;
  };
  std::vector<Case> cases = {
      {"tag_metadata,quantize_gemms{recpie=" + recipe + "}",
       "pass 'quantize_gemms': unknown option 'recpie' (options of quantize_gemms: recipe, seed)"},
      {"tag_metadata,quantize_gemms", "pass 'quantize_gemms': missing required option 'recipe'"},
      {"tag_metadata,quantize_gemms{recipe=" + recipe + ",seed=1,seed=2}", "option 'seed' given twice"},
      {"tag_metadata,quantize_gemms{recipe=" + recipe + ",seed=x}",
       "pass 'quantize_gemms': option 'seed': expected a 64-bit integer, got 'x'"},
      {"tag_metadata,quantize_gemms{recipe=" + (dir_ / "none.yaml").string() + "}",
       "pass 'quantize_gemms': option 'recipe': " + (dir_ / "none.yaml").string() + ": cannot open"},
      {"estimate_speedup{hardware=no-such-cpu}", "pass 'estimate_speedup': option 'hardware': "},
      {"instrument_stats{formats=[int9:channel:rtn]}", "option 'formats': format 'int9:channel:rtn'"},
      {"cse{", "missing '}'"},
      {"cse{x=1}", "pass 'cse': unknown option 'x' (cse takes no options)"},
      {"nope{x=1}", "unknown pass 'nope'"},
  };
  for (const Case& c : cases) {
    Result r = pgq("ir opt --passes '" + c.passes + "' " + mlp);
    EXPECT_EQ(r.code, 2) << c.passes << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.passes << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << c.passes << "\n" << r.out;
  }
  // A huge value is not echoed whole (session 15: 100 KB of it were): the line keeps its
  // start and end.
  Result huge = pgq("ir opt --passes " + std::string(100000, 'x') + " " + mlp);
  EXPECT_EQ(huge.code, 2);
  EXPECT_LT(huge.out.size(), 4000u) << huge.out.size();
  EXPECT_EQ(huge.out.rfind("pgq: error: unknown pass 'xxx", 0), 0u) << huge.out.substr(0, 200);
  EXPECT_NE(huge.out.find(" characters left out ...] "), std::string::npos);
  EXPECT_EQ(std::count(huge.out.begin(), huge.out.end(), '\n'), 1);
}

// `pgq ir model --compile` prints the graph as `pgq train` compiles it.
TEST_F(Cli, ModelCompilesWithTheTrainingPipeline) {
  std::string recipe = write("r.yaml", "gemms:\n  - {match: \"layer0/.*\", decision: int8, lhs_format: "
                                       "\"int8:channel:rtn\", rhs_format: \"int7:channel:rtn\"}\n");
  Result plain = pgq("ir model --model tiny");
  EXPECT_EQ(plain.code, 0);
  EXPECT_EQ(plain.out.find("device_shape="), std::string::npos);  // tag_metadata has not run
  Result compiled = pgq("ir model --model tiny --compile --precision bf16 --hardware epyc-zen3-2c --recipe " + recipe);
  EXPECT_EQ(compiled.code, 0) << compiled.out;
  for (const char* seen : {"device_shape=", "est_speedup=", "qmatmul(", ".bf16 = convert("})
    EXPECT_NE(compiled.out.find(seen), std::string::npos) << seen;
  Result profiled = pgq("ir model --model tiny --compile --profile");
  EXPECT_NE(profiled.out.find("quant_stats("), std::string::npos);
  Result needs = pgq("ir model --model tiny --recipe " + recipe);
  EXPECT_EQ(needs.code, 2);
  EXPECT_NE(needs.out.find("--recipe requires --compile"), std::string::npos) << needs.out;
}

TEST_F(Cli, BadInputExitsTwoWithOneMessage) {
  struct Case {
    std::string args;
    std::string message;
  };
  std::string bad_ir = write("bad.pgq", "graph @g {\n  %x = input() : f32[2]\n  %y = nope(%x) : f32[2]\n}\n");
  std::string binary = write("bin.pgq", std::string("\x7f\x45\x4c\x46\x00\x01", 6));
  std::string empty = write("empty.pgq", "");
  std::string bad_model = write("m.yaml", "d_model: 32\nn_layers: 2\nn_heads: 3\nd_ff: 8\nseq_len: 8\nbatch: 1\n");
  std::string tp_model =
      write("tp.yaml", "d_model: 32\nn_layers: 1\nn_heads: 2\nd_ff: 64\nseq_len: 8\nbatch: 1\ntensor_parallel: 2\n");
  std::vector<Case> cases = {
      {"ir print " + bad_ir, "bad.pgq:3:8: unknown op 'nope'"},
      {"ir print " + binary, "bin.pgq:1:1: unexpected byte 0x7f"},
      {"ir print " + empty, "empty.pgq:1:1: empty file"},
      {"ir print /nonexistent.pgq", "/nonexistent.pgq: cannot open"},
      {"ir opt --passes cse,nope " + bad_ir, "unknown pass 'nope'"},
      {"ir frobnicate", "A subcommand is required"},
      {"train --model " + bad_model + " --steps 1", "field 'n_heads': must divide d_model = 32, got 3"},
      {"train --model tiny --steps 0 --out " + (dir_ / "r").string(), "--steps: expected an integer in [1, "},
      {"train --model tiny --corpus /nonexistent --out " + (dir_ / "r").string(), "/nonexistent"},
      {"train --model nosuchmodel", "neither a preset"},
      {"train --precision f16", "f16"},
      {"train --model tiny --tensor-parallel 2 --steps 1 --out " + (dir_ / "tp").string(),
       "--tensor-parallel 2 needs 2 processes per model: start pgq with mpirun -np 2"},
      {"train --model " + tp_model + " --steps 1 --out " + (dir_ / "tp").string(),
       "model " + tp_model + ": field 'tensor_parallel' is 2, which needs 2 processes per model: start pgq with "
       "mpirun -np 2"},
      {"train --model tiny --tensor-parallel 4 --steps 1", "field 'tensor_parallel': must divide n_heads = 2"},
      {"roofline --model tiny --tensor-parallel 3 --hardware epyc-zen3-2c", "field 'tensor_parallel'"},
      {"roofline --model tiny --hardware nosuch", "neither a preset"},
      {"roofline --hardware h100-sxm --gemms " + write("g.csv", "m,k,n\n64,-1,64\n"),
       "g.csv:2: field 'k': expected an integer from 1 to 2^40 without leading zeros, got '-1'"},
      {"roofline --hardware h100-sxm --gemms " + write("h.csv", "m,n\n64,64\n"), "h.csv:1: field 'k': missing"},
      {"roofline --hardware h100-sxm --gemms " + write("i.csv", "m,k,n\n64,nan,64\n"), "i.csv:2: field 'k'"},
      {"roofline --hardware epyc-zen3-2c --gemms " + write("j.csv", "m,k,n\n64,64,64\n"), "runs no FP8"},
      {"roofline --hardware h100-sxm --model tiny --gemms " + write("k.csv", "m,k,n\n64,64,64\n"), "not both"},
      {"roofline --hardware h100-sxm --tensor-parallel 2 --gemms " + write("l.csv", "m,k,n\n64,64,64\n"),
       "--tensor-parallel applies to --model; --gemms estimates the CSV's shapes as they are"},
      {"roofline --hardware h100-sxm", "give --model (a preset, model YAML or ONNX file) or --gemms"},
      // quantize_gemms on an untagged graph: an error, not an internal assertion.
      {"ir opt --passes 'quantize_gemms{recipe=" + write("empty_recipe.yaml", "gemms: []\n") + "}' " +
           write("untagged.pgq", "graph @g {\n  %x = input() : f32[8,16]\n  %w = parameter() : f32[16,4]\n"
                                 "  %y = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label=\"up\"} : f32[8,4]\n"
                                 "  return %y\n}\n"),
       "quantize_gemms: matmul %y has no label/direction/roles; run tag_metadata first"},
      {"train --model tiny --steps 1 --collective-timeout nan", "--collective-timeout: expected a finite number"},
      {"hwprobe -o " + (dir_ / "missing" / "hw.yaml").string(), "folder " + (dir_ / "missing").string() + " does not exist"},
      {"experiment --model tiny --corpus /nonexistent --out " + (dir_ / "exp").string(),
       "corpus /nonexistent: no such file or directory"},
      {"experiment --model tiny --tensor-parallel 2 --out " + (dir_ / "exp").string(),
       "tensor_parallel is 2, but pgq experiment trains in one process"},
  };
  for (const Case& c : cases) {
    Result r = pgq(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("terminate called"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "exp"));  // refused before the results folder was made
}

// pgq roofline keeps GEMMs in the hardware's own high precision unless told otherwise,
// as pgq recipe does: bf16 on a GPU, f32 on a CPU.
TEST_F(Cli, RooflineDefaultsToTheHardwaresHighPrecision) {
  for (const auto& [args, heading] :
       {std::pair<std::string, std::string>{"--hardware h100-sxm", "on h100-sxm (bf16 GEMMs;"},
        {"--hardware h100-sxm --precision f32", "on h100-sxm (f32 GEMMs;"},
        {"--hardware epyc-zen3-2c", "on epyc-zen3-2c (f32 GEMMs;"}}) {
    Result r = pgq("roofline --model tiny " + args);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(heading), std::string::npos) << args << "\n" << r.out;
  }
}

// pgq gpuprobe on a machine without a GPU: one line, exit 2. Its fit and its YAML are the
// same code given recorded measurements (the H200's), and pgq loads what it wrote.
TEST_F(Cli, GpuprobeRefusesWithoutAGpuAndFitsRecordedTimes) {
  Result r = pgq("gpuprobe -o " + (dir_ / "hw.yaml").string() + " --python /usr/bin/python3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(r.out.find("gpuprobe: no CUDA device") != std::string::npos ||
              r.out.find("gpuprobe: cannot import torch") != std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "hw.yaml"));
  r = pgq("gpuprobe -o " + (dir_ / "hw.yaml").string() + " --python /nonexistent/python3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("cannot run '/nonexistent/python3'"), std::string::npos) << r.out;
  r = pgq("gpuprobe --name h200-probed -o " + (dir_ / "hw.yaml").string() + " --python /usr/bin/python3 --from " +
          PGQ_SOURCE_DIR "/tests/data/gpu/h200");
  ASSERT_EQ(r.code, 0) << r.out;
  std::string csv = write("g.csv", "m,k,n\n768,32768,768\n8192,4096,131072\n");
  r = pgq("roofline --hardware " + (dir_ / "hw.yaml").string() + " --gemms " + csv);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("b,m,k,n,bf16_us,fp8_us,a_cast_us,b_cast_us,extrapolation\n1,768,32768,768,"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(",4\n"), std::string::npos) << r.out;  // N = 131072: 4x beyond the measured 32768
  // A recorded folder without its GEMM times is refused by name.
  fs::create_directories(dir_ / "empty");
  r = pgq("gpuprobe -o " + (dir_ / "x.yaml").string() + " --python /usr/bin/python3 --from " +
          (dir_ / "empty").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no gemm.csv"), std::string::npos) << r.out;
  // Session 15: outputs are checked before the fit (a GPU's measuring takes minutes), -o
  // may not replace a measurement it fits, and --name is quoted in the YAML.
  fs::copy(fs::path(PGQ_SOURCE_DIR) / "tests/data/gpu/h200", dir_ / "h200");
  const std::string gemm = (dir_ / "h200" / "gemm.csv").string(), before = read(gemm);
  r = pgq("gpuprobe --python /usr/bin/python3 --from " + (dir_ / "h200").string() + " -o " + gemm);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("-o " + gemm + " is " + gemm + ", which this command reads"), std::string::npos) << r.out;
  EXPECT_EQ(read(gemm), before);
  for (const auto& [flags, message] :
       {std::pair{"-o " + (dir_ / "nowhere" / "x.yaml").string(), std::string("does not exist")},
        std::pair{"--keep " + write("keep_is_a_file", "x"), std::string("is not a folder")}}) {
    r = pgq("gpuprobe --python /nonexistent/python3 " + flags);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << flags << ": " << r.out;  // not Python's error: before it
  }
  r = pgq("gpuprobe --python /usr/bin/python3 --from " + (dir_ / "h200").string() + " --keep " + (dir_ / "k").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("give one of them"), std::string::npos) << r.out;
  r = pgq("gpuprobe --python /usr/bin/python3 --from " + (dir_ / "h200").string() + " --name 'h200: mine # 2' -o " +
          (dir_ / "named.yaml").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(read((dir_ / "named.yaml").string()).find("name: \"h200: mine # 2\"\n"), std::string::npos)
      << read((dir_ / "named.yaml").string()).substr(0, 400);
  r = pgq("roofline --hardware " + (dir_ / "named.yaml").string() + " --gemms " + csv);
  EXPECT_EQ(r.code, 0) << r.out;
  // A measurement cut short names its file and line (it was fitted as "no FP8 time"),
  // and a huge sms is refused (the fit searched for hours).
  std::string cut = before.substr(0, before.rfind(',', before.rfind(',', before.size() - 2) - 1));
  std::ofstream(gemm) << cut << "\n";
  r = pgq("gpuprobe --python /usr/bin/python3 --from " + (dir_ / "h200").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("gemm.csv:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fields, the header has 8 (a row cut short?)"), std::string::npos) << r.out;
  std::ofstream(gemm) << before;
  std::ofstream(dir_ / "h200" / "env.json") << "{\"sms\": 1000000}";
  r = pgq("gpuprobe --python /usr/bin/python3 --from " + (dir_ / "h200").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("env.json: field 'sms': expected an integer in [1, 1024], got 1000000"), std::string::npos)
      << r.out;
}

// SIGTERM to pgq gpuprobe (a job scheduler's, a `kill`) reaches only pgq: it left the
// measuring Python process running on the GPU and its scratch folder behind (session 15).
// Now the signal is passed on, the child waited for, the folder removed, and pgq ends by
// the signal.
TEST_F(Cli, GpuprobeStoppedBySigtermStopsItsPythonAndRemovesItsScratchFolder) {
  const fs::path pid = dir_ / "child.pid", script = dir_ / "script.path";
  const std::string fake = write("fake_python", "#!/bin/sh\necho \"$1\" > " + script.string() + "\necho $$ > " +
                                                    pid.string() + "\nexec sleep 60\n");
  fs::permissions(fake, fs::perms::owner_all);
  Result r = shell("(" + kPgq + " gpuprobe --python " + fake + " -o " + (dir_ / "hw.yaml").string() +
                   " & job=$!; for i in $(seq 200); do [ -s " + pid.string() + " ] && break; sleep 0.05; done; "
                   "kill -TERM $job; wait $job; echo \"rc=$?\") 2>&1");
  EXPECT_NE(r.out.find("rc=143"), std::string::npos) << r.out;  // 128 + SIGTERM
  const std::string child = read(pid).substr(0, read(pid).find('\n'));
  ASSERT_FALSE(child.empty()) << r.out;
  EXPECT_FALSE(fs::exists("/proc/" + child)) << "the probe's process " << child << " is still running";
  const fs::path folder = fs::path(read(script).substr(0, read(script).find('\n'))).parent_path();
  EXPECT_TRUE(folder.string().starts_with("/tmp/pgq-gpuprobe-")) << folder;
  EXPECT_FALSE(fs::exists(folder)) << folder;
  EXPECT_FALSE(fs::exists(dir_ / "hw.yaml"));
}

// gnuplot ran under popen: a SIGTERM to pgq left it running and /tmp/pgq-plot-* behind,
// and everything it wrote was kept in memory (a spewing gnuplot grew pgq past 1.8 GB).
// Fake gnuplots first in PATH stand for both.
TEST_F(Cli, PlotsPassStopSignalsToGnuplotAndKeepOnlyTheEndOfItsOutput) {
  const std::string profile = tinyProfile("plot.yaml");
  const fs::path bin = dir_ / "bin", where = dir_ / "gnuplot.cwd", pid = dir_ / "gnuplot.pid";
  fs::create_directories(bin);
  std::ofstream(bin / "gnuplot") << "#!/bin/sh\npwd > " << where.string() << "\necho $$ > " << pid.string()
                                 << "\nexec sleep 60\n";
  fs::permissions(bin / "gnuplot", fs::perms::owner_all);
  Result r = shell("(PATH=" + bin.string() + ":$PATH " + kPgq + " sqnr-table " + profile + " --plot " +
                   (dir_ / "p.svg").string() + " >/dev/null & job=$!; for i in $(seq 200); do [ -s " + pid.string() +
                   " ] && break; sleep 0.05; done; kill -TERM $job; wait $job; echo \"rc=$?\") 2>&1");
  EXPECT_NE(r.out.find("rc=143"), std::string::npos) << r.out;
  const std::string child = read(pid).substr(0, read(pid).find('\n'));
  ASSERT_FALSE(child.empty()) << r.out;
  EXPECT_FALSE(fs::exists("/proc/" + child)) << "gnuplot " << child << " is still running";
  const std::string folder = read(where).substr(0, read(where).find('\n'));
  EXPECT_TRUE(folder.starts_with("/tmp/pgq-plot-")) << folder;
  EXPECT_FALSE(fs::exists(folder)) << folder;
  // 400 MB of output, then a failure: pgq says so with the end of it, in bounded memory.
  std::ofstream(bin / "gnuplot", std::ios::trunc) << "#!/bin/sh\nhead -c 400000000 /dev/zero | tr '\\000' A\n"
                                                  << "echo; echo 'the last line'; exit 1\n";
  r = shell("PATH=" + bin.string() + ":$PATH /usr/bin/time -f 'peak %M KB' " + kPgq + " sqnr-table " + profile +
            " --plot " + (dir_ / "p.svg").string() + " 2>&1 >/dev/null | tail -c 300");
  EXPECT_NE(r.out.find("the last line"), std::string::npos) << r.out;
  const size_t peak = r.out.find("peak ");
  ASSERT_NE(peak, std::string::npos) << r.out;
  EXPECT_LT(std::stol(r.out.substr(peak + 5)), 200 * 1024) << r.out;  // KB
  EXPECT_FALSE(fs::exists(dir_ / "p.svg"));
}

// --profile-out naming the run's own files: the profile replaced the checkpoint (resume
// failed with "not a pgq checkpoint"), metrics.csv (its rows went to an unnamed file) or
// .pgq-lock (a second run got in); the run folder itself trained and then failed. Each
// is refused before any work, the checkpoint kept (session 17's hunt).
TEST_F(Cli, ProfileOutCannotBeTheRunsOwnFiles) {
  const fs::path run = dir_ / "run";
  ASSERT_EQ(pgq("train --model tiny --steps 6 --stop-after 3 --no-progress --out " + run.string()).code, 0);
  const std::string checkpoint = read(run / "checkpoint.pgqckpt");
  ASSERT_FALSE(checkpoint.empty());
  for (const std::string& target : {(run / "checkpoint.pgqckpt").string(), (run / "metrics.csv").string(),
                                    (run / "metrics.yaml").string(), (run / ".pgq-lock").string(), run.string(),
                                    (run / ".." / "run" / "checkpoint.pgqckpt").string()}) {
    Result r = pgq("train --model tiny --steps 6 --resume --no-progress --profile-warmup 3 --profile-steps 1 --out " +
                   run.string() + " --profile-out " + target);
    EXPECT_EQ(r.code, 2) << target << ": " << r.out;
    EXPECT_TRUE(r.out.find("is the run's own") != std::string::npos || r.out.find("is a directory") != std::string::npos)
        << r.out;
  }
  EXPECT_EQ(read(run / "checkpoint.pgqckpt"), checkpoint);
}

// Without gnuplot, `sqnr-table --plot` printed its whole table and `pgq experiment` trained
// every run before saying so; both now refuse first. A gnuplot that exits 0 without
// drawing (here, one that writes text) is not taken for an image.
TEST_F(Cli, PlotsNeedGnuplotBeforeTheWorkAndARealImage) {
  const std::string profile = tinyProfile("plot.yaml");
  const fs::path empty = dir_ / "empty_bin", fake = dir_ / "fake_bin";
  fs::create_directories(empty);
  fs::create_directories(fake);
  const std::string svg = (dir_ / "p.svg").string();
  Result r = shell("PATH=" + empty.string() + " " + kPgq + " sqnr-table " + profile + " --plot " + svg + " 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  // One line, the error: no table before it.
  EXPECT_EQ(r.out, "pgq: error: --plot " + svg + ": gnuplot is not installed (Debian package gnuplot-nox; "
                   "scripts/setup.sh installs it)\n");
  r = shell("PATH=" + empty.string() + " " + kPgq + " experiment --out " + (dir_ / "exp").string() +
            " --threads 1 --no-progress 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("pgq experiment draws its figures with gnuplot: gnuplot is not installed"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "exp"));
  // Exits 0 and writes something that is no image into the file it was told to draw.
  std::ofstream(fake / "gnuplot") << "#!/bin/sh\nout=$(sed -n \"s/^set output '\\(.*\\)'$/\\1/p\" \"$1\")\n"
                                  << "echo 'not an image' > \"$out\"\n";
  fs::permissions(fake / "gnuplot", fs::perms::owner_all);
  for (const char* ext : {".svg", ".png"}) {
    const std::string out = (dir_ / "q").string() + ext;
    r = shell("PATH=" + fake.string() + ":$PATH " + kPgq + " sqnr-table " + profile + " --plot " + out +
              " 2>&1 >/dev/null");
    EXPECT_EQ(r.code, 2) << ext << r.out;
    EXPECT_NE(r.out.find(fmt::format("gnuplot exited 0 but did not write a {} image", ext + 1)), std::string::npos)
        << r.out;
    EXPECT_FALSE(fs::exists(out)) << out;
  }
}

// Every numeric flag is checked before any work: a bad value exits 2 with one line that
// names the flag, and leaves no output behind.
TEST_F(Cli, BadNumbersExitTwoNamingTheFlagBeforeAnyWork) {
  struct Case {
    std::string command;  // train, experiment or hwprobe
    std::string flags;
    std::string flag;  // named in the message
  };
  const std::string int64_max = "9223372036854775807", overflow = "99999999999999999999";
  std::vector<Case> cases = {
      {"train", "--lr -1", "--lr"},
      {"train", "--lr nan", "--lr"},
      {"train", "--lr inf", "--lr"},
      {"train", "--lr=-inf", "--lr"},
      {"train", "--lr 0", "--lr"},
      {"train", "--lr 11", "--lr"},
      {"train", "--lr 1e400", "--lr"},
      {"train", "--lr 0.1x", "--lr"},
      {"train", "--lr ''", "--lr"},
      {"train", "--min-lr-ratio 2", "--min-lr-ratio"},
      {"train", "--min-lr-ratio nan", "--min-lr-ratio"},
      {"train", "--min-lr-ratio -0.5", "--min-lr-ratio"},
      {"train", "--warmup -5", "--warmup"},
      {"train", "--warmup " + int64_max, "--warmup"},
      {"train", "--warmup " + overflow, "--warmup"},
      {"train", "--steps 10 --warmup 11", "--warmup"},
      {"train", "--grad-clip nan", "--grad-clip"},
      {"train", "--grad-clip -1", "--grad-clip"},
      {"train", "--grad-clip inf", "--grad-clip"},
      {"train", "--grad-clip 1e7", "--grad-clip"},
      {"train", "--weight-decay -0.1", "--weight-decay"},
      {"train", "--weight-decay nan", "--weight-decay"},
      {"train", "--threads 100000", "--threads"},
      {"train", "--threads -1", "--threads"},
      {"train", "--threads 1.5", "--threads"},
      {"train", "--steps -1", "--steps"},
      {"train", "--steps " + int64_max, "--steps"},
      {"train", "--steps " + overflow, "--steps"},
      {"train", "--steps 1e3", "--steps"},
      {"train", "--steps 0x10", "--steps"},
      {"train", "--eval-batches " + int64_max, "--eval-batches"},
      {"train", "--eval-batches 0", "--eval-batches"},
      {"train", "--eval-every -1", "--eval-every"},
      {"train", "--checkpoint-every -1", "--checkpoint-every"},
      {"train", "--stop-after -1", "--stop-after"},
      {"train", "--stop-after " + int64_max, "--stop-after"},
      {"train", "--profile-warmup " + int64_max + " --profile-steps 1 --profile-out P", "--profile-warmup"},
      {"train", "--profile-steps " + int64_max + " --profile-out P", "--profile-steps"},
      {"train", "--steps 10 --profile-warmup 8 --profile-steps 5 --profile-out P", "--profile-warmup"},
      {"train", "--profile-steps -1 --profile-out P", "--profile-steps"},
      {"train", "--profile-bits 1", "--profile-bits"},
      {"train", "--profile-amax-history 0", "--profile-amax-history"},
      {"train", "--profile-amax-history -3", "--profile-amax-history"},
      {"train", "--profile-amax-history 1.5", "--profile-amax-history"},
      {"train", "--profile-bits 4294967304", "--profile-bits"},
      {"train", "--seed -1", "--seed"},
      {"train", "--seed nan", "--seed"},
      {"experiment", "--search --loss-budget nan", "--loss-budget"},
      {"experiment", "--search --loss-budget 0", "--loss-budget"},
      {"experiment", "--search --loss-budget -1", "--loss-budget"},
      {"experiment", "--search --loss-budget inf", "--loss-budget"},
      {"experiment", "--lr nan", "--lr"},
      {"experiment", "--lr -1", "--lr"},
      {"experiment", "--baseline-steps 0", "--baseline-steps"},
      {"experiment", "--baseline-steps " + int64_max, "--baseline-steps"},
      {"experiment", "--finetune-steps 1", "--finetune-steps"},
      {"experiment", "--finetune-steps " + overflow, "--finetune-steps"},
      {"experiment", "--search --loss-budget 0.01 --trial-steps 1", "--trial-steps"},
      {"experiment", "--profile-steps 0", "--profile-steps"},
      {"experiment", "--baseline-steps 20 --profile-steps 30", "--profile-steps"},
      {"experiment", "--fractions nan", "--fractions"},
      {"experiment", "--fractions 0.5,abc", "--fractions"},
      {"experiment", "--fractions 1", "--fractions"},
      {"experiment", "--bits 9", "--bits"},
      {"experiment", "--bits 1", "--bits"},
      {"experiment", "--threads 100000", "--threads"},
      {"hwprobe", "--seconds nan", "--seconds"},
      {"hwprobe", "--seconds 0", "--seconds"},
      {"hwprobe", "--seconds inf", "--seconds"},
      {"hwprobe", "--seconds 61", "--seconds"},
      {"hwprobe", "--threads 100000", "--threads"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string index = std::to_string(i);
    fs::path out = dir_ / ("out" + index), profile = dir_ / ("p" + index + ".yaml");
    std::string flags = c.flags;
    if (size_t at = flags.find("--profile-out P"); at != std::string::npos)
      flags.replace(at, 15, "--profile-out " + profile.string());
    std::string args = c.command + " " + flags;
    if (c.command == "hwprobe") args += " -o " + out.string();
    else args += " --model tiny --no-progress --out " + out.string();
    Result r = pgq(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(r.out.substr(0, 12), "pgq: error: ") << args << "\n" << r.out;
    EXPECT_EQ(r.out.substr(12, c.flag.size()), c.flag) << args << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << "\n" << r.out;
    EXPECT_FALSE(fs::exists(out)) << args;
    EXPECT_FALSE(fs::exists(profile)) << args;
  }
}

TEST_F(Cli, HelpShowsTheRangeOfEveryNumericFlag) {
  struct Case {
    std::string command, text;
  };
  std::vector<Case> cases = {
      {"train", "Peak learning rate; in (0, 10], default 0.001"},
      {"train", "in [0, --steps]"},
      {"train", "Global gradient norm clip (0: off); in [0, 1000000], default 1"},
      {"train", "More threads than processors only slow OpenMP down"},
      {"train", "(default: the model config's seed); in [0, 9223372036854775807]"},
      {"experiment", "allowed loss increase over f32, e.g. 0.01 for 1%; in (0, 10]"},
      {"experiment", "each in (0, 1)"},
      {"hwprobe", "Wall time per measurement in seconds; in [0.05, 60], default 0.3"},
  };
  for (const Case& c : cases) {
    Result r = pgq(c.command + " --help");
    EXPECT_EQ(r.code, 0);
    // CLI11 wraps long descriptions; compare with the line breaks and indents removed.
    std::string flat;
    for (size_t i = 0; i < r.out.size(); ++i) {
      if (r.out[i] != '\n') {
        flat += r.out[i];
        continue;
      }
      while (i + 1 < r.out.size() && r.out[i + 1] == ' ') ++i;
      flat += ' ';
    }
    EXPECT_NE(flat.find(c.text), std::string::npos) << c.command << ": " << c.text << "\n" << r.out;
  }
}

// A model far too large for the machine is refused from its config, in well under a
// second, with the estimate and what to change, before anything is allocated or written.
TEST_F(Cli, AModelTooLargeForTheMachineExitsTwoBeforeAllocating) {
  std::string huge = write("huge.yaml",
                           "name: huge\nd_model: 65536\nn_layers: 48\nn_heads: 16\nd_ff: 262144\n"
                           "seq_len: 4096\nbatch: 64\n");
  for (const std::string command : {"train", "experiment"}) {
    fs::path out = dir_ / ("out_" + command);
    auto start = std::chrono::steady_clock::now();
    Result r = pgq(command + " --model " + huge + " --no-progress --out " + out.string());
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.code, 2) << r.out;
    for (const char* part : {"pgq: error: model ", "huge.yaml: training needs about ", " TiB (parameters+AdamW ",
                             "at batch 64 x seq_len 4096, evaluation ", "overhead), this machine has ", "available; reduce batch, seq_len"})
      EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
    EXPECT_LT(seconds, 5.0);
    EXPECT_FALSE(fs::exists(out));
  }
}

TEST_F(Cli, TrainTinyEndToEnd) {
  std::string out = (dir_ / "run").string();
  Result r = pgq("train --model tiny --steps 30 --eval-every 10 --no-progress --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("trained tiny to step 30"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out + "/metrics.csv"));
  // A second run into the same directory must not clobber it.
  Result again = pgq("train --model tiny --steps 30 --no-progress --out " + out);
  EXPECT_EQ(again.code, 2);
  EXPECT_NE(again.out.find("--resume"), std::string::npos) << again.out;
  Result resumed = pgq("train --model tiny --steps 40 --no-progress --resume --out " + out);
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("to step 40"), std::string::npos) << resumed.out;
  // Another --lr on resume is allowed, as another --steps is, but said (it was silent).
  // The warmup is the schedule's: --steps 40 gave 40, given here so that only --lr moves.
  resumed = pgq("train --model tiny --steps 50 --warmup 40 --lr 0.002 --no-progress --resume --out " + out);
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("the run was trained with --lr 0.001 --warmup 40 --min-lr-ratio 0.1 --weight-decay 0.1 "
                             "--grad-clip 1, now --lr 0.002 --warmup 40"),
            std::string::npos)
      << resumed.out;
}

// A subword model end to end: pgq trains a SentencePiece vocabulary on the corpus's
// training split, then the model, and reports bits per byte; a second run maps the
// cached tokenizer and tokens instead of building them.
TEST_F(Cli, TrainsWithASentencePieceTokenizer) {
  std::string model = write("tiny_sp.yaml",
                            "name: tiny_sp\nvocab: 512\ntokenizer: sentencepiece\ntokenizer_model: bpe\nd_model: 32\n"
                            "n_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 4\nseed: 1234\n");
  std::string corpus = "/usr/share/games/fortunes/people";  // 150 KB of quotations
  std::string train = "PGQ_CACHE_DIR=" + (dir_ / "cache").string() + " " + kPgq + " train --model " + model +
                      " --corpus " + corpus + " --steps 20 --eval-every 10 --eval-batches 4 --lr 3e-3 --no-progress";
  Result r = shell(train + " --out " + (dir_ / "run").string() + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("tokenizer: built sentencepiece bpe vocab 512 of " + corpus), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bits per byte)"), std::string::npos) << r.out;

  std::ifstream csv(dir_ / "run/metrics.csv");
  std::string line;
  std::getline(csv, line);
  ASSERT_EQ(line.rfind("step,loss,val_loss,val_bpb,", 0), 0u) << line;
  std::vector<double> losses, bpbs;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    for (size_t begin = 0, end; begin <= line.size(); begin = end + 1) {
      end = std::min(line.find(',', begin), line.size());
      cells.push_back(line.substr(begin, end - begin));
    }
    losses.push_back(std::stod(cells[1]));
    if (!cells[3].empty()) bpbs.push_back(std::stod(cells[3]));
  }
  ASSERT_EQ(losses.size(), 20u);
  ASSERT_EQ(bpbs.size(), 2u);  // steps 10 and 20
  for (double bpb : bpbs) {
    EXPECT_TRUE(std::isfinite(bpb));
    EXPECT_GT(bpb, 0.5);
    EXPECT_LT(bpb, 8.0);
  }
  EXPECT_NEAR(losses.front(), std::log(512.0), 0.3);  // an untrained model is ~uniform
  EXPECT_LT(losses.back(), losses.front() - 0.3);

  Result again = shell(train + " --out " + (dir_ / "again").string() + " 2>&1");
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("tokenizer: reusing the cached sentencepiece bpe vocab 512"), std::string::npos)
      << again.out;
}

// A corpus where spaces are rarer than SentencePiece's character coverage (one line in
// 100 of random letters here; CJK text) trained a vocabulary without the space symbol,
// which then failed pgq's check that decoding gives the text back (session 17's hunt).
TEST_F(Cli, SentencePieceKeepsTheSpaceInACorpusThatRarelyHasOne) {
  std::string model = write("sp.yaml",
                            "name: sp\nvocab: 512\ntokenizer: sentencepiece\ntokenizer_model: bpe\nd_model: 32\n"
                            "n_layers: 1\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 2\n");
  std::string corpus;
  uint64_t state = 12345;
  for (int line = 0; line < 4000; ++line) {
    for (int i = 0; i < 60; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      corpus += static_cast<char>('a' + (state >> 33) % 26);
    }
    if (line % 100 == 0) corpus += " x";
    corpus += '\n';
  }
  write("rare_spaces.txt", corpus);
  Result r = shell("PGQ_CACHE_DIR=" + (dir_ / "cache").string() + " " + kPgq + " train --model " + model +
                   " --corpus " + (dir_ / "rare_spaces.txt").string() + " --steps 1 --no-progress --out " +
                   (dir_ / "run").string() + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("tokenizer: built sentencepiece bpe vocab 512"), std::string::npos) << r.out;
}

// A resumed run whose metrics.csv was removed or cut went on in silence, its loss curve
// missing the steps before (session 17's hunt): now it says so.
TEST_F(Cli, ResumingWithoutTheEarlierMetricsSaysSo) {
  const std::string run = (dir_ / "run").string();
  ASSERT_EQ(pgq("train --model tiny --steps 12 --stop-after 6 --no-progress --out " + run).code, 0);
  fs::remove(dir_ / "run" / "metrics.csv");
  Result r = pgq("train --model tiny --steps 12 --stop-after 3 --resume --no-progress --out " + run);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("metrics.csv: missing; the run resumes at step 6"), std::string::npos) << r.out;
  r = pgq("train --model tiny --steps 12 --resume --no-progress --out " + run);  // rows 7-9 there: resumes at 9
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("[warning] metrics"), std::string::npos) << r.out;
}

// A checkpoint without the kernels' states (an earlier pgq wrote it) still resumes, saying
// that delayed scaling starts anew; a state that does not fit its kernel (a forged
// file) is refused, naming the checkpoint and the kernel, before the run goes on.
TEST_F(Cli, ResumingWithoutTheScalingStateSaysSoAndABadOneIsRefused) {
  const std::string recipe = write("fp8.yaml", "gemms:\n  - {match: \".*\", decision: fp8, lhs_format: "
                                               "\"e4m3:tensor:rtn\", rhs_format: \"e4m3:tensor:rtn\", amax_history: 4}\n");
  const std::string run = (dir_ / "run").string(), path = run + "/checkpoint.pgqckpt";
  ASSERT_EQ(pgq("train --model tiny --steps 8 --stop-after 3 --no-progress --recipe " + recipe + " --out " + run).code, 0);
  auto rewrite = [&](auto change) {
    pgq::Checkpoint c = pgq::loadCheckpoint(path);
    change(c);
    pgq::saveCheckpoint(path, c);
  };
  // A forged history length: refused, exit 2, the step count unchanged.
  rewrite([](pgq::Checkpoint& c) {
    for (auto& [name, t] : c.tensors)
      if (name == "kernel_state/train/layer0/attn/q.lhs_scales") t.data<uint8_t>()[0] ^= 1;
  });
  Result bad = pgq("train --model tiny --steps 8 --resume --no-progress --recipe " + recipe + " --out " + run);
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find(path + ": the state of kernel %layer0/attn/q.lhs_scales"), std::string::npos) << bad.out;
  EXPECT_EQ(pgq::loadCheckpoint(path).step, 3);
  // None at all: a warning, and the run goes on.
  rewrite([](pgq::Checkpoint& c) {
    std::erase_if(c.tensors, [](const auto& entry) { return entry.first.starts_with("kernel_state/"); });
  });
  Result old = pgq("train --model tiny --steps 8 --resume --no-progress --recipe " + recipe + " --out " + run);
  EXPECT_EQ(old.code, 0) << old.out;
  EXPECT_NE(old.out.find("the checkpoint cannot give this run's delayed or predicted scaling its amax histories (it "
                         "keeps none: an earlier pgq wrote it)"),
            std::string::npos)
      << old.out;
  EXPECT_EQ(pgq::loadCheckpoint(path).step, 8);
}

// An int8 GEMM whose K passes exact int32 accumulation (a wgrad over 4200 x 16 tokens)
// was refused by the kernel at the first step, after the run had made its folder.
TEST_F(Cli, AnInt8GemmTooLongToAccumulateIsRefusedBeforeTheRun) {
  const std::string recipe =
      write("wgrad.yaml", "gemms:\n  - {match: \".*wgrad\", decision: int8, lhs_format: \"int8:channel:rtn\", "
                          "rhs_format: \"int7:channel:sr\"}\n");
  Result r = pgq("train --model tiny --batch 4200 --steps 2 --no-progress --recipe " + recipe + " --out " +
                 (dir_ / "run").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("with a contracting dimension K = 67200, beyond the 65793"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "run" / "metrics.csv"));
}

// --out that is a symlink to a missing folder said "cannot create the output directory:
// File exists".
TEST_F(Cli, ARunFolderLinkedToNothingIsNamed) {
  fs::create_symlink(dir_ / "missing", dir_ / "link");
  Result r = pgq("train --model tiny --steps 2 --no-progress --out " + (dir_ / "link").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("link: is a symlink to " + (dir_ / "missing").string() + ", which does not exist"),
            std::string::npos)
      << r.out;
}

// --out in the folder given as --corpus: the run's metrics.csv and .pgq-lock were read as
// corpus text, and --resume refused the checkpoint as "trained on another corpus".
TEST_F(Cli, TheRunFolderCannotBeTheCorpusFolder) {
  fs::create_directories(dir_ / "texts");
  fs::copy_file("/usr/share/games/fortunes/fortunes", dir_ / "texts" / "a.txt");
  const std::string texts = (dir_ / "texts").string();
  for (const std::string& command : {"train --model tiny --steps 2 --out " + texts + "/",
                                     "experiment --out " + texts + "/../texts"}) {
    Result r = pgq(command + " --corpus " + texts + " --no-progress");
    EXPECT_EQ(r.code, 2) << command << ": " << r.out;
    EXPECT_NE(r.out.find("is the --corpus folder"), std::string::npos) << r.out;
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "texts"), fs::directory_iterator()), 1);
  EXPECT_EQ(pgq("train --model tiny --steps 2 --corpus " + texts + " --no-progress --out " + texts + "/run").code, 0);
}

TEST_F(Cli, TokenizerAndCorpusMistakesExitTwoNamingTheFileAndField) {
  std::string cache = "PGQ_CACHE_DIR=" + (dir_ / "cache").string() + " ";
  std::string huge = write("huge.yaml",
                           "vocab: 60000\ntokenizer: sentencepiece\nd_model: 32\nn_layers: 1\nn_heads: 2\n"
                           "d_ff: 64\nseq_len: 16\nbatch: 4\n");
  Result r = shell(cache + kPgq + " train --model " + huge + " --corpus /usr/share/games/fortunes/people --out " +
                   (dir_ / "r1").string() + " 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("model " + huge + ": field 'vocab' is 60000: SentencePiece cannot build"), std::string::npos)
      << r.out;

  std::string bytes = write("bytes.yaml", "vocab: 300\nd_model: 32\nn_layers: 1\nn_heads: 2\nd_ff: 64\n"
                                          "seq_len: 16\nbatch: 4\n");
  r = pgq("train --model " + bytes + " --out " + (dir_ / "r2").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("model " + bytes + ": field 'vocab' is 300, but tokenizer bytes has exactly 256 tokens"),
            std::string::npos)
      << r.out;

  fs::create_directory(dir_ / "split");
  write("split/train.txt", "some text\n");
  r = pgq("train --model tiny --corpus " + (dir_ / "split").string() + " --out " + (dir_ / "r3").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find((dir_ / "split").string() + ": a pre-split corpus needs both train.txt and val.txt"),
            std::string::npos)
      << r.out;
}

// This test process holds the lock, as a live `pgq train` would: every command that
// writes into the directory stops at once and names it.
TEST_F(Cli, ALockedRunDirectoryExitsTwoNamingTheHolder) {
  std::string out = (dir_ / "run").string();
  ASSERT_EQ(pgq("train --model tiny --steps 2 --no-progress --out " + out).code, 0);
  pgq::RunDirLock held(out);
  std::string holder = out + " is in use by pgq pid " + std::to_string(::getpid()) + " on host ";
  for (const std::string& args : {"train --model tiny --steps 4 --no-progress --resume --out " + out,
                                  "train --model tiny --steps 2 --no-progress --out " + out,
                                  "experiment --model tiny --no-progress --out " + out}) {
    Result r = pgq(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(holder), std::string::npos) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("wait for it or choose another --out"), std::string::npos) << r.out;
  }
}

TEST_F(Cli, ProfileThenSqnrTable) {
  std::string out = (dir_ / "run").string(), profile = (dir_ / "p.yaml").string();
  Result r = pgq("train --model tiny --steps 4 --no-progress --profile-steps 2 --profile-out " + profile + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("pgq sqnr-table " + profile), std::string::npos) << r.out;
  Result table = pgq("sqnr-table " + profile + " --plot " + (dir_ / "sqnr.svg").string());
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("| 1 | get_logits:dgrad | bwd_dgrad | gradient, weight |"), std::string::npos) << table.out;
  EXPECT_TRUE(fs::file_size(dir_ / "sqnr.svg") > 1000);
  Result csv = pgq("sqnr-table --csv " + profile);
  EXPECT_EQ(csv.out.substr(0, 11), "rank,label,");
  Result json = pgq("sqnr-table --json --format int8:channel:rtn " + profile);
  EXPECT_EQ(json.out.substr(0, 30), "{\"format\": \"int8:channel:rtn\",");
  // A gradient format is said in the title and the JSON (session 15: the title named --format only).
  Result grad = pgq("sqnr-table --gradient-format int8:channel:sr " + profile);
  ASSERT_EQ(grad.code, 0) << grad.out;
  EXPECT_EQ(grad.out.substr(0, 79),
            "SQNR of GEMM inputs in int8:channel:rtn, gradient operands in int8:channel:sr (")
      << grad.out;
  Result grad_json = pgq("sqnr-table --json --gradient-format int8:channel:sr " + profile);
  EXPECT_EQ(grad_json.out.substr(0, 75),
            "{\"format\": \"int8:channel:rtn\", \"gradient_format\": \"int8:channel:sr\", \"rows\"")
      << grad_json.out;
  Result missing = pgq("sqnr-table --format int4:channel:rtn " + profile);
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.out.find(profile + ": layer0/attn/q lhs was not profiled in int4:channel:rtn, which --format asks "
                             "for"),
            std::string::npos)
      << missing.out;
  Result bad_plot = pgq("sqnr-table " + profile + " --plot " + (dir_ / "x.gif").string());
  EXPECT_EQ(bad_plot.code, 2);
  EXPECT_EQ(bad_plot.out, "pgq: error: --plot " + (dir_ / "x.gif").string() +
                              ": give a .svg or .png file (the extension picks the image format)\n");  // no table first
  // A plot that cannot be written says why (it once said "Success"), before the table is
  // printed.
  Result unwritable = pgq("sqnr-table " + profile + " --plot " + (dir_ / "no/such/dir/sqnr.svg").string());
  EXPECT_EQ(unwritable.code, 2);
  EXPECT_EQ(unwritable.out, "pgq: error: --plot " + (dir_ / "no/such/dir/sqnr.svg").string() + ": folder " +
                                (dir_ / "no/such/dir").string() + " does not exist\n");
  Result bad = pgq("sqnr-table " + write("bad.yaml", "version: 1\nrun: {}\n"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("bad.yaml"), std::string::npos) << bad.out;
  Result no_out = pgq("train --model tiny --steps 4 --profile-steps 2 --out " + (dir_ / "r2").string());
  EXPECT_EQ(no_out.code, 2);
  EXPECT_NE(no_out.out.find("--profile-steps needs --profile-out"), std::string::npos) << no_out.out;
}

// `--profile-metrics` records the statistics of the metrics beyond SQNR for every GEMM,
// and stage (ii) orders GEMMs by them.
TEST_F(Cli, ProfileMetricsRecordEveryGemmsStatistics) {
  const std::string profile = (dir_ / "m.yaml").string();
  Result r = pgq("train --model tiny --steps 3 --no-progress --profile-steps 2 --profile-metrics --profile-out " +
                 profile + " --out " + (dir_ / "run").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const pgq::Profile p = pgq::loadProfile(profile);
  EXPECT_TRUE(p.run.metrics);
  EXPECT_GT(p.run.metrics_step_ms, 0);
  ASSERT_EQ(p.gemms.size(), 51u);
  for (const pgq::GemmProfile& g : p.gemms) {
    SCOPED_TRACE(g.label);
    EXPECT_GE(g.reach, 0);
    EXPECT_EQ(g.gradient_reach, -1);  // the results were not profiled (--profile-outputs)
    EXPECT_FALSE(g.output_errors.empty());
    for (const pgq::OutputErrorStats& e : g.output_errors) EXPECT_GT(e.sqnr_min, 1);
    for (const pgq::OperandProfile& o : g.operands)
      for (const pgq::FormatStats& f : o.formats) EXPECT_GT(f.bias_sqnr_mean, 0) << o.sideName() << " " << f.format.toString();
  }
  EXPECT_NE(pgq("train --help").out.find("--profile-metrics"), std::string::npos);
  // A machine on which the tiny model's GEMMs pay off, so that the metric decides.
  const std::string fast = write("fast.yaml", "name: fast-int8\nthreads: 2\npeak_gflops: {f32: 100, bf16: 100, int8: 10000}\n"
                                              "gemm_gflops: {f32: 100, bf16: 100, int8: 10000}\nmemory_bandwidth_gbs: 10000\n"
                                              "quantize_gbs: {rtn: 100000, sr: 100000}\ncall_overhead_us: 0\n"
                                              "int8: {vnni: true, max_bits_one: 8, max_bits_both: 8}\n");
  for (const char* metric : {"bias", "output", "reach"}) {
    Result table = pgq("sqnr-table " + profile + " --sort " + metric);
    EXPECT_EQ(table.code, 0) << metric << "\n" << table.out;
    EXPECT_NE(table.out.find("| bias | output | reach |"), std::string::npos) << table.out;
    Result recipe = pgq("recipe --profile " + profile + " --hardware " + fast + " --policy 'F+B>2' --metric " + metric);
    EXPECT_EQ(recipe.code, 0) << metric << "\n" << recipe.out;
    EXPECT_NE(recipe.out.find(std::string(", ") + metric + " "), std::string::npos) << recipe.out;
  }
  // JSON: every row carries the metrics the table shows (effect is null: no gradient_reach).
  Result json = pgq("sqnr-table --json " + profile);
  ASSERT_EQ(json.code, 0) << json.out;
  YAML::Node rows = YAML::Load(json.out)["rows"];
  ASSERT_EQ(rows.size(), 51u);
  for (const YAML::Node& row : rows) {
    EXPECT_GT(row["metrics"]["sqnr"].as<double>(), 1) << row["label"];
    EXPECT_GT(row["metrics"]["bias"].as<double>(), 0) << row["label"];
    EXPECT_GT(row["metrics"]["output"].as<double>(), 0) << row["label"];
    EXPECT_FALSE(row["metrics"]["effect"].IsDefined()) << row["label"];
  }
}

TEST_F(Cli, RecipeThenQuantizedTraining) {
  std::string profile = (dir_ / "p.yaml").string();
  ASSERT_EQ(pgq("train --model tiny --steps 3 --no-progress --profile-steps 2 --profile-out " + profile + " --out " +
                (dir_ / "run").string())
                .code,
            0);
  std::string recipe = (dir_ / "r.yaml").string();
  Result r = pgq("recipe --profile " + profile + " --hardware epyc-zen3-2c --policy 'F+B_SR>1' -o " + recipe + " --explain");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("recipe F+B_SR>1 for model tiny on epyc-zen3-2c"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backward GEMMs:"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(recipe));
  // The PyTorch export: the JSON and the filter beside it; attention's batched GEMMs
  // are no modules.
  std::string exported = (dir_ / "F+B.json").string();
  Result e = pgq("recipe --profile " + profile + " --hardware epyc-zen3-2c --policy F+B --export-torch " + exported);
  ASSERT_EQ(e.code, 0) << e.out;
  EXPECT_NE(e.out.find("PyTorch export: " + exported + " and " + (dir_ / "F+B.py").string()), std::string::npos) << e.out;
  std::string json = read(exported);
  EXPECT_NE(json.find("\"layer0.attn.q\": {\n      \"label\": \"layer0/attn/q\""), std::string::npos) << json;
  EXPECT_NE(json.find("{\"label\": \"layer0/attn/scores\", \"direction\": \"fwd\""), std::string::npos) << json;
  EXPECT_NE(read(dir_ / "F+B.py").find("def module_filter_fn(module, fqn):"), std::string::npos);
  std::string forced = allInt8Recipe("forced.yaml", "sr");
  Result q = pgq("train --model tiny --steps 40 --eval-every 20 --no-progress --profile-ops --recipe " + forced +
                 " --hardware epyc-zen3-2c --out " + (dir_ / "q").string());
  ASSERT_EQ(q.code, 0) << q.out;
  EXPECT_NE(q.out.find("qmatmul"), std::string::npos) << q.out;
  std::ifstream csv(dir_ / "q/metrics.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find(",recipe"), std::string::npos);
  std::string first;
  std::getline(csv, first);
  EXPECT_NE(first.find("forced.yaml"), std::string::npos) << first;
  // Resuming with another recipe is refused.
  Result other = pgq("train --model tiny --steps 50 --no-progress --resume --recipe " + recipe + " --out " +
                     (dir_ / "q").string());
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.out.find("same recipe"), std::string::npos) << other.out;
}

TEST_F(Cli, ProfileOpsSplitsTrainingAndProfiledSteps) {
  // Every step profiled: only the profiled steps' split, with numbers (it once printed
  // the untouched training executor: 0 ms and -nan GFLOP/s).
  std::string profile = (dir_ / "p.yaml").string();
  Result all = pgq("train --model tiny --steps 3 --no-progress --profile-ops --profile-steps 3 --profile-out " + profile +
                   " --out " + (dir_ / "all").string());
  ASSERT_EQ(all.code, 0) << all.out;
  EXPECT_EQ(all.out.find("per-op time split of the training steps"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("per-op time split of the profiled steps (stage i) (3 steps"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("quant_stats"), std::string::npos) << all.out;
  EXPECT_EQ(all.out.find("nan"), std::string::npos) << all.out;
  // Some of each: both splits.
  Result both = pgq("train --model tiny --steps 5 --no-progress --profile-ops --profile-steps 2 --profile-out " + profile +
                    " --out " + (dir_ / "both").string());
  ASSERT_EQ(both.code, 0) << both.out;
  EXPECT_NE(both.out.find("per-op time split of the training steps (3 steps"), std::string::npos) << both.out;
  EXPECT_NE(both.out.find("per-op time split of the profiled steps (stage i) (2 steps"), std::string::npos) << both.out;
  // The plain steps' time outside the kernels; in f32 the update makes no int8 copies.
  EXPECT_NE(both.out.find("outside the graph's kernels (3 steps): gradient norm "), std::string::npos) << both.out;
  EXPECT_EQ(both.out.find("int8 copies"), std::string::npos) << both.out;
  EXPECT_EQ(all.out.find("outside the graph's kernels"), std::string::npos) << all.out;
  // With every GEMM in int8 (round to nearest), the update makes each weight's two copies
  // (K along its rows for the forward GEMM, along its columns for the input gradient's).
  std::string forced = allInt8Recipe("rtn.yaml", "rtn");
  Result q = pgq("train --model tiny --steps 2 --no-progress --profile-ops --recipe " + forced +
                 " --hardware epyc-zen3-2c --out " + (dir_ / "q").string());
  ASSERT_EQ(q.code, 0) << q.out;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(q.out, match, std::regex(R"(AdamW update [0-9.]+ ms/step \(it also makes ([0-9]+) int8 copies)")))
      << q.out;
  EXPECT_GT(std::stoi(match[1]), 0) << q.out;
  EXPECT_EQ(std::stoi(match[1]) % 2, 0) << q.out;
  // The attention's softmax kernels quantize P and dS item by item: the split says so.
  EXPECT_NE(q.out.find("  softmax+quantize "), std::string::npos) << q.out;
  EXPECT_NE(q.out.find("  softmax_grad+quantize "), std::string::npos) << q.out;
}

// Every operand of a profile records how often delayed scaling would have clipped it,
// and every weight how often predicted scales would have; `sqnr-table --scaling` shows it.
TEST_F(Cli, ProfileRecordsScalingStrategies) {
  std::string profile = (dir_ / "p.yaml").string();
  Result r = pgq("train --model tiny --steps 4 --no-progress --profile-steps 4 --profile-amax-history 2 " +
                 ("--profile-out " + profile) + " --out " + (dir_ / "run").string());
  ASSERT_EQ(r.code, 0) << r.out;
  pgq::Profile p = pgq::loadProfile(profile);
  int weights = 0, others = 0;
  for (const pgq::GemmProfile& g : p.gemms)
    for (const pgq::OperandProfile& o : g.operands) {
      SCOPED_TRACE(g.label + ":" + std::string(o.sideName()));
      ASSERT_TRUE(o.scaling.has_value());
      const pgq::ScalingStats& s = *o.scaling;
      EXPECT_EQ(s.steps, 4);
      EXPECT_EQ(s.delayed_history, 2);
      // Over 3 steps t >= 1: a multiple of 1/3.
      EXPECT_NEAR(s.delayed_clip_fraction * 3, std::round(s.delayed_clip_fraction * 3), 1e-6);
      EXPECT_EQ(s.delayed_clip_fraction == 0, s.delayed_worst_ratio == 1);
      EXPECT_EQ(s.predicted.has_value(), o.role == pgq::OperandRole::kWeight);
      if (!s.predicted) {
        ++others;
        continue;
      }
      ++weights;
      // AdamW's exact bound holds on f32 weights; it is at least MOSS's lr from step 1 on.
      EXPECT_EQ(s.predicted->rigorous_clip_fraction, 0.0);
      EXPECT_GE(s.predicted->rigorous_overestimate, s.predicted->overestimate);
      EXPECT_GE(s.predicted->rigorous_overestimate, 1.0);
      // An lr of at most 1e-3 on weights of absmax ~0.1: within a few percent.
      EXPECT_LT(s.predicted->rigorous_overestimate, 1.1);
    }
  EXPECT_GT(weights, 0);
  EXPECT_GT(others, weights);
  std::ifstream csv_file(dir_ / "p.csv");
  std::string header;
  std::getline(csv_file, header);
  EXPECT_NE(header.find(",delayed_clip_fraction,delayed_worst_ratio,predicted_clip_fraction"), std::string::npos)
      << header;

  Result table = pgq("sqnr-table --scaling " + profile);
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("over 4 logged steps"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("| predicted clips |"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("| 1 | "), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(" | weight | "), std::string::npos) << table.out;
  Result csv = pgq("sqnr-table --scaling --csv " + profile);
  ASSERT_EQ(csv.code, 0) << csv.out;
  EXPECT_EQ(csv.out.substr(0, 36), "rank,label,direction,side,role,steps");
  // The SQNR table is unchanged by the new record.
  Result sqnr = pgq("sqnr-table " + profile);
  EXPECT_NE(sqnr.out.find("| # | GEMM | direction | roles (lhs, rhs) |"), std::string::npos) << sqnr.out;
  Result plot = pgq("sqnr-table --scaling " + profile + " --plot " + (dir_ / "s.svg").string());
  EXPECT_NE(plot.code, 0);

  // One logged step has no step to compare with: no record, and the table says so.
  std::string one = (dir_ / "one.yaml").string();
  ASSERT_EQ(pgq("train --model tiny --steps 1 --no-progress --profile-steps 1 --profile-out " + one + " --out " +
                (dir_ / "run1").string())
                .code,
            0);
  EXPECT_FALSE(pgq::loadProfile(one).gemms[0].operands[0].scaling.has_value());
  Result none = pgq("sqnr-table --scaling " + one);
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.out.find("has no scaling record"), std::string::npos) << none.out;
}

TEST_F(Cli, StageTwoBadInputs) {
  std::string profile = (dir_ / "p.yaml").string();
  ASSERT_EQ(pgq("train --model tiny --steps 3 --no-progress --profile-steps 2 --profile-out " + profile + " --out " +
                (dir_ / "run").string())
                .code,
            0);
  std::string hw_missing = write("hw.yaml", "name: x\nthreads: 2\npeak_gflops: {f32: 100, bf16: 100}\n");
  std::string small_recipe = write("small.yaml", "gemms:\n  - {label: layer3/mlp/up, decision: keep}\n");
  std::string for_small = write("for_small.yaml", "model: small\ngemms:\n  - {label: layer0/mlp/up, decision: keep}\n");
  std::string wide = write("wide.yaml", "gemms:\n  - {label: layer0/mlp/up, decision: keep}\n  - {label: layer0/mlp/down, "
                                        "decision: int8, lhs_format: int8:channel:rtn, rhs_format: int8:channel:rtn}\n");
  std::string forced = write("forced.yaml", "name: forced\nforward: {quantize: true}\nbackward: {quantize: false}\n"
                                            "rules:\n  - {action: quantize, lhs_format: int8:channel:rtn, "
                                            "rhs_format: int8:channel:rtn}\n");
  std::string mx_recipe = write("mx.yaml", "gemms:\n  - {label: layer0/mlp/up, decision: mxfp8, lhs_format: mxfp8_e4m3, "
                                            "rhs_format: mxfp8_e4m3}\n");
  std::string zero_history = write("zero.yaml", "gemms:\n  - {label: layer0/mlp/up, decision: fp8, lhs_format: "
                                                "e4m3:tensor:rtn, rhs_format: e4m3:tensor:rtn, amax_history: 0}\n");
  std::string recipe = (dir_ / "r.yaml").string();
  ASSERT_EQ(pgq("recipe --profile " + profile + " --hardware epyc-zen3-2c --policy F -o " + recipe).code, 0);
  std::string text;
  {
    std::ifstream in(recipe);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string cut = write("cut.yaml", text.substr(0, text.rfind("\n  - ") + 1));
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy F+Q", "neither a standard policy"},
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy 'F+B_SR>x'", "neither a standard policy"},
      {"recipe --profile " + profile + " --hardware " + hw_missing + " --policy F", "field 'peak_gflops.int8': is missing"},
      {"recipe --profile " + profile + " --hardware no-such-cpu --policy F", "neither a preset"},
      {"recipe --profile /nonexistent.yaml --hardware epyc-zen3-2c --policy F", "/nonexistent.yaml: cannot open"},
      {"train --model tiny --steps 2 --no-progress --recipe " + small_recipe + " --out " + (dir_ / "t").string(),
       "GEMM 'layer3/mlp/up' is not in model tiny"},
      {"hwprobe --seconds 0", "--seconds"},
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy F --model small",
       "p.yaml:4: field 'run.model': the profile was made with model 'tiny', not with model 'small' (<preset small>)"},
      {"train --model tiny --steps 2 --no-progress --recipe " + for_small + " --out " + (dir_ / "t").string(),
       "for_small.yaml:1: field 'model': the recipe was made for model 'small', not for model 'tiny' (<preset tiny>)"},
      {"train --model tiny --steps 2 --no-progress --recipe " + cut + " --out " + (dir_ / "t").string(),
       "field 'entry_count': the recipe records 51 entries but lists 50"},
      {"train --model tiny --steps 2 --no-progress --hardware epyc-zen3-2c --recipe " + wide + " --out " +
           (dir_ / "t").string(),
       "wide.yaml:3: GEMM 'layer0/mlp/down': int8:channel:rtn x int8:channel:rtn cannot run exactly on hardware "
       "'epyc-zen3-2c' (no VNNI: exact up to 8 x 7 bits"},
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy F --export-torch " +
           (dir_ / "no/such/r.json").string(),
       "--export-torch " + (dir_ / "no/such/r.json").string() + ": directory '" + (dir_ / "no/such").string() +
           "' does not exist"},
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy F --export-torch " + dir_.string(),
       "--export-torch " + dir_.string() + ": is a directory"},
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy F --export-torch " + (dir_ / "r.py").string(),
       "the PyTorch export's JSON cannot end in .py"},
      // FP8 / MX: formats the hardware lacks, formats the profile lacks, bad scaling.
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy " + PGQ_SOURCE_DIR +
           "/recipes/policies/fp8-delayed.yaml",
       "policy fp8-delayed: field 'formats' asks for fp8, none of which hardware 'epyc-zen3-2c' runs natively"},
      {"recipe --profile " + profile + " --hardware h100-sxm --policy " + PGQ_SOURCE_DIR +
           "/recipes/policies/fp8-delayed.yaml",
       "the profile has no statistics for e4m3:tensor:rtn (scheme fp8); profile with pgq train --profile-formats fp8"},
      {"sqnr-table " + profile + " --compare int8,mxfp8", "profile with pgq train --profile-formats mxfp8"},
      {"recipe --profile " + profile + " --hardware h100-sxm --policy F --token-scale 0", "--token-scale"},
      {"train --model tiny --steps 2 --no-progress --profile-steps 1 --profile-out " + (dir_ / "q.yaml").string() +
           " --profile-formats fp9 --out " + (dir_ / "t").string(),
       "--profile-formats: 'fp9' is neither a format scheme"},
      {"train --model tiny --steps 2 --no-progress --hardware h100-sxm --recipe " + mx_recipe + " --out " +
           (dir_ / "t").string(),
       "mx.yaml:2: GEMM 'layer0/mlp/up': format e4m3:block32:rtn:scale=e8m0 (mxfp8) does not run on hardware "
       "'h100-sxm'"},
      {"train --model tiny --steps 2 --no-progress --recipe " + zero_history + " --out " + (dir_ / "t").string(),
       "zero.yaml:2: field 'gemms[0].amax_history': expected an integer in [1, 1048576], got 0"},
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy " + forced,
       "policy forced, rule (every GEMM): forces int8:channel:rtn x int8:channel:rtn on GEMM 'layer0/attn/q', which "
       "hardware 'epyc-zen3-2c' cannot run exactly"},
      // Metrics beyond SQNR: an unknown name, a profile without their statistics, a
      // random-ordering count <= 0.
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy 'F+B>3' --metric snr",
       "--metric: unknown metric 'snr'; expected one of sqnr, bias, output, reach, effect"},
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy 'F+B>3' --metric bias",
       profile + ": metric 'bias' needs statistics this profile was not made with (field bias_sqnr_mean of every "
                 "GEMM); profile with `pgq train --profile-metrics`"},
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy 'F+B>3' --metric effect",
       "profile with `pgq train --profile-metrics --profile-outputs`"},
      {"sqnr-table " + profile + " --sort output", "metric 'output' needs statistics this profile was not made with"},
      {"sqnr-table " + profile + " --sort loss", "--sort: unknown metric 'loss'"},
      {"experiment --model tiny --orderings --random-orderings 0 --out " + (dir_ / "e").string(),
       "--random-orderings: expected an integer in [1, 100], got 0"},
      {"experiment --model tiny --orderings --random-orderings -3 --out " + (dir_ / "e").string(),
       "--random-orderings: expected an integer in [1, 100], got -3"},
      // Session 15: CLI11 parsed these two, clamping or with its own words.
      {"experiment --model tiny --orderings --random-orderings 1e3 --out " + (dir_ / "e").string(),
       "--random-orderings: expected an integer in [1, 100], got '1e3'"},
      {"experiment --model tiny --orderings --pareto-steps 99999999999999999999 --out " + (dir_ / "e").string(),
       "--pareto-steps: expected an integer in [0, "},
      {"experiment --model tiny --fractions '' --out " + (dir_ / "e").string(),
       "--fractions: an empty list; give items or leave the flag out"},
      {"experiment --model tiny --orderings --points 0.5,1 --out " + (dir_ / "e").string(), "--points"},
      // Session 16: CLI11 dropped the empty item of a list, std::getline a trailing one.
      {"experiment --model tiny --fractions 0.5, --out " + (dir_ / "e").string(),
       "--fractions: item 2 of '0.5,' is empty"},
      {"train --model tiny --steps 2 --profile-steps 1 --profile-out " + (dir_ / "p.yaml").string() +
           " --profile-formats int8,,fp8 --out " + (dir_ / "pf").string(),
       "--profile-formats: item 2 of 'int8,,fp8' is empty"},
      {"sqnr-table " + profile + " --compare ,int8", "--compare: item 1 of ',int8' is empty"},
      {"experiment --model tiny --random-orderings 3 --out " + (dir_ / "e").string(), "only apply with --orderings"},
      {"experiment --model tiny --orderings --search --loss-budget 0.1 --out " + (dir_ / "e").string(),
       "--orderings and --search conflict"},
      {"experiment --model tiny --metric bais --out " + (dir_ / "e").string(), "--metric: unknown metric 'bais'"},
      {"experiment --model tiny --scheme fp9 --out " + (dir_ / "e").string(), "--scheme: unknown format scheme 'fp9'"},
      {"experiment --model tiny --scheme fp8 --out " + (dir_ / "e").string(),
       "--scheme fp8: hardware 'epyc-zen3-2c' does not run fp8 natively"},
      {"experiment --model tiny --scheme fp8 --granularity tensor --hardware h100-sxm --out " + (dir_ / "e").string(),
       "--bits and --granularity shape the int8 scheme"},
      {"experiment --model tiny --token-scale 0 --out " + (dir_ / "e").string(), "--token-scale: expected"},
      {"recipe --profile " + profile + " --hardware h100-sxm --policy F --token-scale -2", "--token-scale: expected"},
      // 4 bits (issue 33): Hopper has no FP4; the trainer exports take what TE can run.
      {"recipe --profile " + profile + " --hardware h100-sxm --policy " + PGQ_SOURCE_DIR +
           "/recipes/policies/nvfp4.yaml",
       "/recipes/policies/nvfp4.yaml: field 'formats' lists nvfp4, which hardware 'h100-sxm' does not run"},
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy " +
           write("int8_all.yaml", "name: int8-all\nforward: {quantize: true}\nbackward: {quantize: false}\n"
                                  "min_speedup: 0\n") +
           " --export-megatron " + (dir_ / "te.yaml").string(),
       "(family int8) has no Transformer Engine quantizer"},
      {"recipe --profile " + profile + " --hardware epyc-zen3-2c --policy F --export-megatron " +
           (dir_ / "te-precision.yaml").string(),
       "which is no Python identifier"},
  };
  for (const Case& c : cases) {
    Result r = pgq(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
  }
}

TEST_F(Cli, FifosDevicesDirectoriesAndHugeFilesAreRefused) {
  std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::string huge = (dir_ / "huge.yaml").string();
  int fd = ::open(huge.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t{65} << 20), 0);  // sparse: 65 MiB that take no disk
  ::close(fd);
  std::string out = " --steps 1 --no-progress --out " + (dir_ / "run").string();
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {"ir print " + fifo, fifo + ": is a FIFO, expected a regular file"},
      {"train --model " + fifo + out, fifo + ": is a FIFO, expected a regular file"},
      {"train --model tiny --recipe " + fifo + out, fifo + ": is a FIFO, expected a regular file"},
      {"train --model tiny --corpus " + fifo + out, "corpus " + fifo + ": is a FIFO, expected a regular file"},
      {"ir print /dev/zero", "/dev/zero: is a character device, expected a regular file"},
      {"train --model tiny --corpus /dev/zero" + out, "corpus /dev/zero: is a character device, expected a regular file"},
      {"ir print " + dir_.string(), dir_.string() + ": is a directory, expected a regular file"},
      {"train --model " + huge + out, huge + ": 65 MiB is more than the 64 MiB a model config may have"},
      {"ir print - < /dev/zero", "standard input: grew past the 64 MiB an IR text file may have while it was read"},
  };
  for (const Case& c : cases) {
    Result r = pgqWithin20s(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
  }
}

// hwprobe -o /dev/stdout writes the model there once (it printed it again after, with
// the path: a file with every field twice that roofline refused).
TEST_F(Cli, HwprobeToStandardOutputWritesALoadableModel) {
  const std::string hw = (dir_ / "hw.txt").string();
  Result r = shell(kPgq + " hwprobe --threads 1 --seconds 0.05 -o /dev/stdout > " + hw + " 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  r = pgq("roofline --model tiny --hardware " + hw);
  EXPECT_EQ(r.code, 0) << r.out << "\n" << read(hw);
}

TEST_F(Cli, LostStandardOutputIsAnError) {
  // stderr to the pipe, stdout to a device that takes nothing.
  // The sqnr-table of a profile is past stdio's buffer: the print itself fails (it gave
  // exit 3 and a second message, session 16).
  const std::string table = std::string("sqnr-table ") + PGQ_SOURCE_DIR + "/docs/profile_small_step4.yaml";
  for (const std::string& args : {std::string("--help"), std::string("ir demo"), table, table + " --csv"}) {
    Result r = shell(kPgq + " " + args + " 2>&1 >/dev/full");
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(r.out, "pgq: error: cannot write standard output: No space left on device\n") << args;
  }
}

TEST_F(Cli, OmpNumThreadsOutOfRangeIsRefusedBeforeOpenMpStarts) {
  // libgomp aborts when it cannot create 100000 threads; pgq refuses the number first.
  for (const char* value : {"100000", "0", "-1", "two", "99999999999999999999", "100000,2"}) {
    Result r = shell(fmt::format("OMP_NUM_THREADS={} {} train --model tiny --steps 1 2>&1", value, kPgq));
    EXPECT_EQ(r.code, 2) << value << "\n" << r.out;
    EXPECT_NE(r.out.find(fmt::format("pgq: error: OMP_NUM_THREADS={}: expected an integer in [1, ", value)),
              std::string::npos)
        << value << "\n" << r.out;
  }
  EXPECT_EQ(shell("OMP_NUM_THREADS=1 " + kPgq + " --version").code, 0);
}

TEST_F(Cli, OpenMpThreadsSpinBrieflyUnlessTheUserChoseAWaitPolicy) {
  // libgomp prints its settings at start-up with OMP_DISPLAY_ENV; the last print is the
  // one the running pgq uses (pgq runs itself again to set GOMP_SPINCOUNT).
  auto lastSpinCount = [](const std::string& out) {
    size_t at = out.rfind("GOMP_SPINCOUNT = '");
    if (at == std::string::npos) return std::string("(none)");
    at += std::string("GOMP_SPINCOUNT = '").size();
    return out.substr(at, out.find('\'', at) - at);
  };
  Result plain = shell("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose " + kPgq + " --version 2>&1");
  EXPECT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(lastSpinCount(plain.out), "1000") << plain.out;
  EXPECT_NE(plain.out.find("pgq 0."), std::string::npos) << plain.out;
  Result passive = shell("env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive OMP_DISPLAY_ENV=verbose " + kPgq + " --version 2>&1");
  EXPECT_EQ(lastSpinCount(passive.out), "0") << passive.out;
  Result chosen = shell("env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=50000 OMP_DISPLAY_ENV=verbose " + kPgq + " --version 2>&1");
  EXPECT_EQ(lastSpinCount(chosen.out), "50000") << chosen.out;
  // Arguments reach the second run unchanged.
  Result args = shell("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " + kPgq + " ir print --help 2>&1");
  EXPECT_EQ(args.code, 0) << args.out;
  EXPECT_NE(args.out.find("Usage: pgq ir print"), std::string::npos) << args.out;
}

TEST_F(Cli, OutputsFollowSymlinksAndWriteDevicesInPlace) {
  std::string real = write("real.yaml", "old\n"), link = (dir_ / "link.yaml").string();
  fs::create_symlink(real, link);
  Result r = pgq("hwprobe --seconds 0.05 --name linked -o " + link);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::is_symlink(link));
  std::ifstream in(real);
  std::string written(std::istreambuf_iterator<char>(in), {});
  EXPECT_NE(written.find("name: linked"), std::string::npos) << written;
  // /dev/stdout is this process's standard output, not a file to replace: the model is
  // written through it (here into the test's pipe).
  Result through = pgq("hwprobe --seconds 0.05 --name piped -o /dev/stdout");
  EXPECT_EQ(through.code, 0) << through.out;
  EXPECT_NE(through.out.find("name: piped"), std::string::npos) << through.out;
  Result full = pgq("hwprobe --seconds 0.05 -o /dev/full");
  EXPECT_EQ(full.code, 2) << full.out;
  EXPECT_NE(full.out.find("/dev/full: cannot write: No space left on device"), std::string::npos) << full.out;
}

TEST_F(Cli, HwprobeWritesALoadableModel) {
  std::string out = (dir_ / "hw.yaml").string();
  // A name YAML would read otherwise is written quoted, and loads back.
  Result r = pgq("hwprobe --seconds 0.05 --name 'here: #1' -o " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "hardware model: " + out + "\n");
  r.out = read(out);
  EXPECT_NE(r.out.find("name: \"here: #1\"\n"), std::string::npos) << r.out;
  // The model names the CPU it was probed on: CPUs of one name (AMD EPYC: Zen 3, Zen 5)
  // differ by family and model, read here from /proc/cpuinfo as well.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string family, model;
  for (std::string line; std::getline(cpuinfo, line) && (family.empty() || model.empty());) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || colon + 2 > line.size()) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (key == "cpu family" && family.empty()) family = line.substr(colon + 2);
    if (key == "model" && model.empty()) model = line.substr(colon + 2);
  }
  ASSERT_FALSE(family.empty() || model.empty());
  EXPECT_NE(r.out.find(fmt::format("(family {}, model {}), oneDNN ISA ", family, model)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("source: \"pgq hwprobe on "), std::string::npos) << r.out;
  std::string profile = (dir_ / "p.yaml").string();
  ASSERT_EQ(pgq("train --model tiny --steps 2 --no-progress --profile-steps 1 --profile-out " + profile + " --out " +
                (dir_ / "run").string())
                .code,
            0);
  Result recipe = pgq("recipe --profile " + profile + " --hardware " + out + " --policy F");
  EXPECT_EQ(recipe.code, 0) << recipe.out;
  EXPECT_NE(recipe.out.find("hardware: \"here: #1\""), std::string::npos) << recipe.out;
}

// Issue 29, 10: a file written with a sidecar (the profile's CSV, the PyTorch export's
// Python filter) has both paths decided before either is written.
TEST_F(Cli, SidecarsAreCheckedBeforeAnythingIsWritten) {
  Result p = pgq("train --model tiny --steps 2 --no-progress --profile-steps 1 --profile-out /dev/null --out " +
                 (dir_ / "run").string());
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_NE(p.out.find("--profile-out /dev/null: /dev/null is a character device; it and /dev/null.csv need regular "
                       "files"),
            std::string::npos)
      << p.out;
  EXPECT_FALSE(fs::exists("/dev/null.csv"));
  EXPECT_FALSE(fs::exists(dir_ / "run"));  // refused before the run started
  fs::create_directories(dir_ / "prof.csv");
  Result d = pgq("train --model tiny --steps 2 --no-progress --profile-steps 1 --profile-out " +
                 (dir_ / "prof.yaml").string() + " --out " + (dir_ / "run").string());
  EXPECT_EQ(d.code, 2) << d.out;
  EXPECT_NE(d.out.find((dir_ / "prof.csv").string() + " (written beside " + (dir_ / "prof.yaml").string() +
                       ") is a directory"),
            std::string::npos)
      << d.out;

  std::string profile = (dir_ / "p.yaml").string();
  ASSERT_EQ(pgq("train --model tiny --steps 2 --no-progress --profile-steps 1 --profile-out " + profile + " --out " +
                (dir_ / "run2").string())
                .code,
            0);
  const std::string recipe = "recipe --profile " + profile + " --hardware epyc-zen3-2c --policy F --export-torch ";
  Result dev = pgq(recipe + "/dev/null");
  EXPECT_EQ(dev.code, 2) << dev.out;
  EXPECT_NE(dev.out.find("--export-torch /dev/null: /dev/null is a character device"), std::string::npos) << dev.out;
  EXPECT_FALSE(fs::exists("/dev/null.py"));
  fs::create_directories(dir_ / "export.py");
  Result dir = pgq(recipe + (dir_ / "export.json").string());
  EXPECT_EQ(dir.code, 2) << dir.out;
  EXPECT_NE(dir.out.find("export.py (written beside"), std::string::npos) << dir.out;
  EXPECT_FALSE(fs::exists(dir_ / "export.json"));
}

// An output never replaces a file the command reads, nor another output; and every
// export text is made before any file is written (issue 34's bug hunt).
TEST_F(Cli, OutputsThatAreInputsOrEachOtherAreRefusedBeforeWork) {
  const std::string profile = tinyProfile("p.yaml");
  const std::string original = read(profile);
  fs::create_symlink(profile, dir_ / "link.yaml");
  const std::string recipe = "recipe --profile " + profile + " --hardware h100-sxm --policy F+B ";
  for (const std::string& out : {profile, (dir_ / "link.yaml").string()}) {
    Result r = pgq(recipe + "-o " + out);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("-o " + out + " is " + profile + ", which this command reads"), std::string::npos) << r.out;
  }
  EXPECT_EQ(read(profile), original);
  const std::string x = (dir_ / "x").string();
  Result filter = pgq(recipe + "-o " + x + ".py --export-torch " + x + ".json");
  EXPECT_EQ(filter.code, 2) << filter.out;
  EXPECT_NE(filter.out.find("-o " + x + ".py and --export-torch " + x + ".py (written beside " + x +
                            ".json) are one file"),
            std::string::npos)
      << filter.out;
  Result both = pgq(recipe + "--export-torch " + x + ".json --export-megatron " + x + ".yaml");
  EXPECT_EQ(both.code, 2) << both.out;
  EXPECT_NE(both.out.find("are one file"), std::string::npos) << both.out;
  // /dev/stdout is written in place: a sidecar beside it would be /dev/stdout.py.
  // (Redirected to a regular file, it stats as one.)
  const std::string redirected = (dir_ / "stdout.txt").string();
  Result stream = pgq(recipe + "--export-torch /dev/stdout > " + redirected);
  EXPECT_EQ(stream.code, 2) << read(redirected);
  EXPECT_NE(read(redirected).find("/dev/stdout is written in place"), std::string::npos) << read(redirected);
  // A policy that puts int8 on an H100 has no Transformer Engine quantizer: the Megatron
  // export refuses the recipe, and neither the recipe nor the PyTorch export asked beside
  // it is written (a file already there keeps its content).
  const std::string policy = write("i8.yaml", "name: i8\nforward: {quantize: true, threshold: 0}\n"
                                              "backward: {quantize: true, threshold: 0}\nmin_speedup: 0.01\n");
  const std::string r = write("r.yaml", "precious\n"), t = (dir_ / "t.json").string(), m = (dir_ / "m.yaml").string();
  Result late = pgq("recipe --profile " + profile + " --hardware h100-sxm --policy " + policy + " -o " + r +
                    " --export-torch " + t + " --export-megatron " + m);
  EXPECT_EQ(late.code, 2) << late.out;
  EXPECT_NE(late.out.find("--export-megatron: "), std::string::npos) << late.out;
  EXPECT_NE(late.out.find("has no Transformer Engine quantizer"), std::string::npos) << late.out;
  EXPECT_EQ(read(r), "precious\n");
  for (const std::string& f : {t, (dir_ / "t.py").string(), m, (dir_ / "m.py").string()}) EXPECT_FALSE(fs::exists(f)) << f;
  // train: the profile may not replace the model it trains.
  fs::copy(fs::path(PGQ_SOURCE_DIR) / "tests/data/onnx_modern/llama", dir_ / "llama");
  const std::string onnx = (dir_ / "llama/model.onnx").string();
  Result t_out = pgq("train --model " + onnx + " --batch 2 --seq 16 --steps 1 --no-progress --profile-steps 1 " +
                     "--profile-out " + onnx + " --out " + (dir_ / "run2").string());
  EXPECT_EQ(t_out.code, 2) << t_out.out;
  EXPECT_NE(t_out.out.find("--profile-out " + onnx + " is " + onnx + ", which this command reads"), std::string::npos)
      << t_out.out;
  EXPECT_FALSE(fs::exists(dir_ / "run2"));
  // A new run does not replace the metrics of an earlier one that left no checkpoint.
  fs::create_directories(dir_ / "stopped");
  const std::string rows = write("stopped/metrics.csv", "step,loss\n1,5.5\n");
  Result again = pgq("train --model tiny --steps 1 --no-progress --out " + (dir_ / "stopped").string());
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_NE(again.out.find(rows + " holds the metrics of an earlier run (with no checkpoint to resume)"),
            std::string::npos)
      << again.out;
  EXPECT_EQ(read(rows), "step,loss\n1,5.5\n");
}

// Issue 29, 8: a checkpoint of another model is refused before any work, in one line
// naming the fields that differ.
TEST_F(Cli, ACheckpointOfAnotherModelIsRefusedBeforeWorkNamingTheFields) {
  const std::string run = (dir_ / "tiny").string();
  ASSERT_EQ(pgq("train --model tiny --steps 3 --no-progress --out " + run).code, 0);
  const std::string ckpt = run + "/checkpoint.pgqckpt";
  const std::string out = (dir_ / "exp").string();
  Result e = pgq("experiment --model small --from-checkpoint " + ckpt + " --out " + out);
  EXPECT_EQ(e.code, 2) << e.out;
  EXPECT_EQ(std::count(e.out.begin(), e.out.end(), '\n'), 1) << e.out;
  EXPECT_NE(e.out.find(ckpt + ": the checkpoint was trained with another model config (only batch, seed and "
                             "tensor_parallel may change in a new run from it): "),
            std::string::npos)
      << e.out;
  EXPECT_NE(e.out.find("d_model is 32 there, 256 here"), std::string::npos) << e.out;
  EXPECT_FALSE(fs::exists(out));
  Result t = pgq("train --model small --steps 3 --no-progress --init-from " + ckpt + " --out " + (dir_ / "t").string());
  EXPECT_EQ(t.code, 2) << t.out;
  EXPECT_NE(t.out.find("n_layers is 2 there, 4 here"), std::string::npos) << t.out;
  // A new run may change the seed and batch.
  EXPECT_EQ(pgq("train --model tiny --steps 4 --batch 2 --seed 7 --no-progress --init-from " + ckpt + " --out " +
                (dir_ / "t2").string())
                .code,
            0);
  // A baseline shorter than the experiment's default warmup (40 steps at the quick
  // preset): its fine-tuning schedules warm up over what they have (the user gave no
  // --warmup to blame).
  Result short_baseline = pgq("experiment --model tiny --from-checkpoint " + ckpt +
                              " --profile-steps 2 --finetune-steps 4 --no-progress --out " + out);
  EXPECT_EQ(short_baseline.code, 0) << short_baseline.out;
}

// A resume that is refused says only why (session 15: it first warned that the schedule
// changes, for a run that then did not start).
TEST_F(Cli, AResumePastTheStepsIsRefusedWithoutAWarning) {
  const std::string out = (dir_ / "run").string();
  ASSERT_EQ(pgq("train --model tiny --steps 2 --no-progress --out " + out).code, 0);
  Result r = pgq("train --model tiny --steps 1 --resume --no-progress --out " + out);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("the checkpoint is already at step 2; ask for more --steps than that"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("planned for"), std::string::npos) << r.out;
}

// An interrupted stage-(i) run resumed with its own command line: its profile steps lie
// before the checkpoint. The refusal says how to go on, with no warning about the
// schedule first (the run does not start), and both ways it names work.
TEST_F(Cli, AResumedProfilingRunSaysHowToGoOn) {
  const std::string out = (dir_ / "run").string();
  const std::string profile = (dir_ / "p.yaml").string();
  ASSERT_EQ(pgq("train --model tiny --steps 2 --no-progress --out " + out).code, 0);
  Result r = pgq("train --model tiny --steps 6 --profile-warmup 1 --profile-steps 2 --profile-out " + profile +
                 " --resume --no-progress --out " + out);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--profile-warmup 1 starts before the checkpoint's step 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("drop the --profile-* flags; to profile from here, give --profile-warmup 2 or more"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("planned for"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(profile));
  Result from_here = pgq("train --model tiny --steps 6 --profile-warmup 2 --profile-steps 2 --profile-out " +
                         profile + " --resume --no-progress --out " + out);
  EXPECT_EQ(from_here.code, 0) << from_here.out;
  EXPECT_TRUE(std::filesystem::exists(profile));
  EXPECT_EQ(pgq("train --model tiny --steps 8 --resume --no-progress --out " + out).code, 0);
}

// A --resume of a run that does not exist is refused before the folder is made (it left
// an empty run folder holding only a lock file).
TEST_F(Cli, AResumeOfNoRunMakesNoFolder) {
  const std::string out = (dir_ / "none").string();
  Result r = pgq("train --model tiny --steps 2 --resume --no-progress --out " + out);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--resume: no checkpoint at " + out + "/checkpoint.pgqckpt"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// Issue 29, minor: an empty output path is refused, not taken as the flag left out; the
// flags that say what a profile records need a profile.
TEST_F(Cli, EmptyOutputPathsAndOrphanProfileFlagsAreRefused) {
  for (const std::string& args : {std::string("train --model tiny --steps 2 --out ''"),
                                  std::string("hwprobe --seconds 0.05 -o ''"),
                                  std::string("experiment --out ''"),
                                  std::string("train --model tiny --steps 2 --recipe ''"),
                                  std::string("train --model tiny --steps 2 --hardware ''")}) {
    Result r = pgq(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("an empty path; give a path or leave the flag out"), std::string::npos) << r.out;
  }
  // Session 15: the flags with defaults (bits, scales, amax history, warmup) were ignored.
  // Session 17: given at their defaults, they were accepted and did nothing.
  for (const char* flag : {"--profile-formats fp8", "--profile-metrics", "--profile-outputs", "--profile-bits 6",
                           "--profile-granularity tensor", "--profile-amax-history 4", "--profile-warmup 1",
                           "--profile-bits 8", "--profile-granularity channel", "--profile-amax-history 16",
                           "--profile-warmup 0"}) {
    Result r = pgq(std::string("train --model tiny --steps 2 --no-progress --out ") + (dir_ / "orphan").string() + " " +
                   flag);
    EXPECT_EQ(r.code, 2) << flag << ": " << r.out;
    EXPECT_NE(r.out.find("says what a profile records: give --profile-steps N and --profile-out FILE too"),
              std::string::npos)
        << r.out;
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    EXPECT_EQ(r.out.find("error: " + name + " says"), 5u) << flag << ": the message names it first: " << r.out;
  }
  // pgq import profiles only with --profile-out.
  Result r = pgq("import " + std::string(PGQ_SOURCE_DIR) + "/tests/data/onnx_modern/llama/model.onnx --profile-bits 4");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--profile-bits says what the profile records: give --profile-out FILE"), std::string::npos)
      << r.out;
  r = pgq("import " + std::string(PGQ_SOURCE_DIR) + "/tests/data/onnx_modern/llama/model.onnx --profile-bits 8");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--profile-bits says what the profile records"), std::string::npos) << r.out;
}

}  // namespace

// The performance smoke test that CI runs (scripts/test.sh): ten speed ratios, each
// measured inside this one process on this one machine, with bounds wide enough that
// machine noise never trips them and a 2x regression of the measured code always does.
//
//   gemm      f32 GEMM time / (dynamic quantization of both operands + int8 GEMM), at
//             [2048,1024] x [1024,256], 1 thread. Expected ~1.6-1.9x; fails below 1.25x.
//   quantize  round-to-nearest quantize of a [2048,1024] activation (per-row scales) /
//             a memcpy of the same f32 buffer, 1 thread. Expected ~0.7-1.0x (the copy
//             writes 4 bytes an element, quantize 1; 1.45x on a Zen 5 with the 256-bit
//             path, 0.76x with the 512-bit one); fails above 2x (a per-call CPUID once
//             made it 3.4x, and quantize 8x slower).
//   q/scales  the same quantize / its scales pass (computeQuantParams), 1 thread.
//             Expected ~1.3-2.2x (1.27-1.94x on an AMX Xeon since symmetric scales read
//             magnitudes only, 1.89-2.11x on a Zen 3; on a Zen 5 2.86x with the 256-bit
//             quantize, 1.46x with the 512-bit one, kernels::avx512Kernels()); fails
//             above 3.0x (the per-call CPUID made it ~11x).
//   threads   f32 GEMM on 1 thread / on every processor, same shape, 1 thread first.
//             Expected ~1.8-2.0x on 2 processors; fails below 1.3x (a primitive cache
//             that ignored the thread count made it 1.0x). Not measured on 1 processor.
//   bf16      f32 GEMM / native bf16 GEMM (f32 accumulation), same shape, 1 thread, on
//             CPUs with bf16 dot products (AVX512-BF16, AMX; not measured elsewhere).
//             Fails below 1.2x (bf16 GEMMs that fell back to f32 arithmetic).
//   stats512  a gradient operand's statistics pass (int8 per channel, rtn and sr, one
//             many-format call) with pgq's 256-bit paths / with its 512-bit ones, on a
//             [2048,1024] activation, 1 thread, on CPUs with AVX-512 (not measured
//             elsewhere). Expected ~1.3-1.4x on a Zen 5 (full-width 512-bit units; a
//             CPU that splits them, like Zen 4, may gain little); fails below 0.9x: a
//             512-bit path slower than the one it replaces.
//   fused     the separate kernels of an attention's scaled, causally masked softmax and
//             of SwiGLU, forward and backward / the fused kernels fuse_softmax and
//             fuse_swiglu run instead, at `medium`'s shapes (scores [16 x 256, 256],
//             [2048, 1024] activations), 1 thread. Expected ~1.4-1.5x on a Zen 5; fails
//             below 1.0x: the fused kernels slower than what they replace (a masked store
//             at each softmax row's end once made the fused forward slower than the
//             separate kernels).
//   step      f32 training step of `small` / the same step with the F+B recipe, all
//             threads. Expected ~2.0x with VNNI, ~1.4-1.6x without; fails below 1.2x.
//   profiled  the stage (i) step (statistics of every GEMM operand) / the plain f32
//             step of `small`, all threads. Expected ~1.3-1.5x; fails above 2.0x.
//   contended the f32 step of `small` beside one busy process / alone, all threads
//             (medians of 5, interleaved). Expected ~1.8-1.9x on 2 processors; fails
//             above 2.5x (libgomp's default spinning made it 3.0x).
//
// Every figure is the minimum over interleaved repetitions (the minimum is what the
// code can do; noise only adds). A group of ratios with one outside its bound is measured
// again after a pause, up to twice, and the last measurement counts (a busy neighbour can
// hold a processor through a whole measurement; a regression fails every time). The full
// benchmarks are bench/gemm_bench, bench/quant_bench and bench/train_step_bench
// (docs/PERFORMANCE.md).
//
//   build/bench/perf_smoke [--no-step]
#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kernels/convert.h"
#include "kernels/cpu_isa.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/threads.h"
#include "kernels/quant_stats.h"
#include "kernels/quantize.h"
#include "kernels/softmax.h"
#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/recipe_generator.h"
#include "runtime/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

double millisOf(const std::function<void()>& work) {
  auto start = Clock::now();
  work();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Minimum times of `a` and `b` over `reps` interleaved repetitions, after one warm-up
// call of each (first touch, oneDNN primitive creation).
std::pair<double, double> minTimes(int reps, const std::function<void()>& a, const std::function<void()>& b) {
  a();
  b();
  double ta = 1e300, tb = 1e300;
  for (int i = 0; i < reps; ++i) {
    ta = std::min(ta, millisOf(a));
    tb = std::min(tb, millisOf(b));
  }
  return {ta, tb};
}

std::vector<float> randomData(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

struct Check {
  std::string name;
  std::string what;
  double value;
  double bound;
  bool at_least;  // value must be >= bound (else <= bound)
  std::string full_benchmark;
  bool passed() const { return at_least ? value >= bound : value <= bound; }
};

Check gemmRatio() {
  using namespace pgq::kernels;
  omp_set_num_threads(1);
  const GemmShape shape{1, 2048, 256, 1024};  // [2048,1024] x [1024,256] -> [2048,256]
  const std::vector<float> a = randomData(size_t(shape.sizeA()), 1), b = randomData(size_t(shape.sizeB()), 2);
  std::vector<float> c(size_t(shape.sizeC()));
  const GemmFormats f = defaultGemmFormats(8, Rounding::kNearest, Rounding::kNearest, GemmSide::kRhs);
  const OperandView va = lhsView(shape), vb = rhsView(shape);
  std::vector<float> pa(quantParamCount(va, f.lhs)), pb(quantParamCount(vb, f.rhs));
  std::vector<uint8_t> qa(a.size());
  std::vector<int8_t> qb(b.size());
  auto [f32, int8] = minTimes(
      15, [&] { gemmF32(shape, a, b, c); },
      [&] {
        quantizeDynamic(a, va, f.lhs, pa, qa);
        quantizeDynamic(b, vb, f.rhs, pb, qb);
        int8Gemm(shape, qa, f.lhs, pa, qb, f.rhs, pb, c);
      });
  return {"gemm", fmt::format("f32 {:.2f} ms / int8 with dynamic quantization {:.2f} ms at 2048x1024x256, 1 thread", f32, int8),
          f32 / int8, 1.25, true, "build/bench/gemm_bench"};
}

// Round-to-nearest quantize of an activation against two passes over the same buffer:
// a memcpy (the yardstick; the copy writes 4 bytes an element where quantize
// writes 1, and its own speed moves by up to 2x between runs here) and the scales pass
// (computeQuantParams: the same read, little arithmetic), whose ratio to quantize is
// stable to ~15% and so catches a 2x regression with margin to spare.
std::vector<Check> quantizeRatios() {
  using namespace pgq::kernels;
  omp_set_num_threads(1);
  const OperandView view{1, 2048, 1024, true};
  const std::vector<float> x = randomData(size_t(view.elements()), 3);
  std::vector<float> copy(x.size());
  const QuantFormat format = perChannelFormat(8, Rounding::kNearest);
  std::vector<float> params(quantParamCount(view, format));
  std::vector<int8_t> q(x.size());
  computeQuantParams(x, view, format, params);
  auto quantizeOnce = [&] { quantize(x, view, format, params, q); };
  auto [quant, plain] = minTimes(
      25, quantizeOnce, [&] { std::memcpy(copy.data(), x.data(), x.size() * sizeof(float)); });
  std::vector<float> scratch(params.size());
  auto [quant2, scales] = minTimes(25, quantizeOnce, [&] { computeQuantParams(x, view, format, scratch); });
  return {{"quantize", fmt::format("RTN quantize {:.3f} ms / memcpy {:.3f} ms of a 2048x1024 f32 tensor, 1 thread", quant, plain),
           quant / plain, 2.0, false, "build/bench/quant_bench"},
          {"q/scales", fmt::format("RTN quantize {:.3f} ms / its scales pass {:.3f} ms, same tensor, 1 thread", quant2, scales),
           quant2 / scales, 3.0, false, "build/bench/quant_bench --benchmark_filter=act2048x1024"}};
}

// The f32 step of `small` beside one CPU-bound process / alone, all threads: the busy
// process is a child spinning in a loop, stopped (SIGSTOP) for the quiet steps and let
// run (SIGCONT) for the busy ones, interleaved; medians of 5 each, since under
// contention the minimum is a lucky step. Expected ~1.8-1.9x on 2 processors (one of
// the step's two threads shares its core); fails above 2.5x: with libgomp's default
// spinning (GOMP_SPINCOUNT=300000, kernels/threads.h) it was 3.0x.
Check contentionRatio(const std::function<void()>& step) {
  const pid_t spinner = ::fork();
  if (spinner == 0) {  // only spins: safe in the child of a threaded process
    volatile uint64_t spins = 0;
    while (true) spins = spins + 1;
  }
  ::kill(spinner, SIGSTOP);
  step();  // warm
  std::vector<double> quiet, busy;
  for (int i = 0; i < 5; ++i) {
    quiet.push_back(millisOf(step));
    ::kill(spinner, SIGCONT);
    busy.push_back(millisOf(step));
    ::kill(spinner, SIGSTOP);
  }
  ::kill(spinner, SIGKILL);
  ::waitpid(spinner, nullptr, 0);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double q = median(quiet), b = median(busy);
  return {"contended", fmt::format("f32 step {:.1f} ms beside one busy process / {:.1f} ms alone, small, {} threads", b, q,
                                   omp_get_max_threads()),
          b / q, 2.5, false, "bench/shared_machine.sh build/pgq small 10"};
}

std::vector<Check> stepRatios() {
  omp_set_num_threads(omp_get_num_procs());
  pgq::TrainOptions options;
  options.model = pgq::loadModelConfig("small");
  options.steps = 1 << 30;
  options.progress = false;
  pgq::Profile profile;
  {
    pgq::TrainingSession session(options);
    for (int i = 0; i < 2; ++i) session.step(i, true);
    profile = session.profile();
  }
  const std::string recipe_path = fmt::format("/tmp/pgq_perf_smoke_{}.yaml", ::getpid());
  pgq::writeRecipe(recipe_path, pgq::generateRecipe(profile, pgq::loadHardwareModel("epyc-zen3-2c"),
                                                    pgq::loadPolicy("F+B"), "perf_smoke"));
  pgq::TrainingSession f32(options);
  options.recipe_path = recipe_path;
  pgq::TrainingSession int8(options);
  std::remove(recipe_path.c_str());
  int64_t step = 0;
  auto [tf, tq] = minTimes(3, [&] { f32.step(step++); }, [&] { int8.step(step++); });
  auto [plain, profiled] = minTimes(3, [&] { f32.step(step++); }, [&] { f32.step(step++, true); });
  const Check contention = contentionRatio([&] { f32.step(step++); });
  return {{"step", fmt::format("f32 step {:.1f} ms / F+B step {:.1f} ms of small, {} threads", tf, tq, omp_get_max_threads()),
           tf / tq, 1.2, true, "build/bench/train_step_bench --benchmark_filter=small"},
          {"profiled", fmt::format("profiled (stage i) step {:.1f} ms / plain f32 step {:.1f} ms of small, {} threads",
                                   profiled, plain, omp_get_max_threads()),
           profiled / plain, 2.0, false, "build/bench/train_step_bench --benchmark_filter='f32Step/small|profiledStep'"},
          contention};
}

// The f32 GEMM on 1 thread / on every processor, in that order in one process: oneDNN
// fixes a primitive's thread count when it is made, and a cache keyed without it once ran
// every shape on 1 thread after a 1-thread call (this ratio was 1.0x). Expected ~1.8-2.0x
// on 2 processors; fails below 1.3x. Needs 2 processors (reported, not checked, on 1).
std::optional<Check> threadsRatio() {
  using namespace pgq::kernels;
  const int procs = omp_get_num_procs();
  if (procs < 2) {
    fmt::print("perf smoke threads: not measured: this machine has 1 processor\n");
    return std::nullopt;
  }
  const GemmShape shape{1, 2048, 256, 1024};
  const std::vector<float> a = randomData(size_t(shape.sizeA()), 4), b = randomData(size_t(shape.sizeB()), 5);
  std::vector<float> c(size_t(shape.sizeC()));
  auto timeAt = [&](int threads) {
    omp_set_num_threads(threads);
    gemmF32(shape, a, b, c);  // primitive creation
    double best = 1e300;
    for (int i = 0; i < 15; ++i) best = std::min(best, millisOf([&] { gemmF32(shape, a, b, c); }));
    return best;
  };
  const double one = timeAt(1), all = timeAt(procs);
  return Check{"threads", fmt::format("f32 GEMM {:.2f} ms on 1 thread / {:.2f} ms on {} at 2048x1024x256", one, all, procs),
               one / all, 1.3, true, "build/bench/gemm_bench --benchmark_filter=small.up/fwd/f32"};
}

// The f32 GEMM / the native bf16 GEMM (bf16 operands, f32 accumulation: the
// `--precision bf16` path on CPUs with bf16 dot products), same shape, 1 thread; the
// operands' conversion to bf16 is not timed (a training step converts each value once
// for all the GEMMs that read it). Fails below 1.2x: bf16 GEMMs that fell back to f32
// arithmetic (widening, or oneDNN's reference kernel) come out at or below 1.0x. Not
// measured on CPUs without bf16 dot products, where bf16 GEMMs are f32 GEMMs.
std::optional<Check> bf16Ratio() {
  using namespace pgq::kernels;
  if (!hasBf16Gemm()) {
    fmt::print("perf smoke bf16: not measured: this CPU ({}) has no bf16 dot products\n", int8Caps().isa_name);
    return std::nullopt;
  }
  omp_set_num_threads(1);
  const GemmShape shape{1, 2048, 256, 1024};
  const std::vector<float> a = randomData(size_t(shape.sizeA()), 6), b = randomData(size_t(shape.sizeB()), 7);
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  f32ToBf16(a.data(), a16.data(), static_cast<int64_t>(a.size()));
  f32ToBf16(b.data(), b16.data(), static_cast<int64_t>(b.size()));
  std::vector<float> c(size_t(shape.sizeC()));
  auto [f32, bf16] = minTimes(15, [&] { gemmF32(shape, a, b, c); }, [&] { gemmBf16(shape, a16, b16, c); });
  return Check{"bf16", fmt::format("f32 GEMM {:.2f} ms / bf16 GEMM {:.2f} ms at 2048x1024x256 ({}), 1 thread", f32,
                                   bf16, int8Caps().isa_name),
               f32 / bf16, 1.2, true, "build/bench/gemm_bench --benchmark_filter=bf16"};
}

// The statistics pass of stage (i) with the 256-bit paths / with the 512-bit ones
// (kernels::setAvx512Kernels), 1 thread: a gradient operand's int8 rtn and sr in one
// call, as the statistics node runs it (the scales are computed once, outside the
// timing). The profiles are equal either way (QuantStats tests); this guards the speed.
std::optional<Check> stats512Ratio() {
  using namespace pgq::kernels;
  if (!avx512Kernels()) {
    fmt::print("perf smoke stats512: not measured: this CPU has no AVX-512 (F, BW, VL)\n");
    return std::nullopt;
  }
  omp_set_num_threads(1);
  const OperandView view{1, 2048, 1024, true};
  const std::vector<float> x = randomData(size_t(view.elements()), 8);
  const QuantFormat formats[] = {perChannelFormat(8), perChannelFormat(8, Rounding::kStochastic)};
  std::vector<float> params(quantParamCount(view, formats[0]));
  computeQuantParams(x, view, formats[0], params);
  const std::span<const float> both[] = {params, params};
  uint64_t step = 0;
  auto statsAt = [&](bool wide) {
    return [&, wide] {
      setAvx512Kernels(wide);
      volatile double sink = quantStatsWithParams(x, view, formats, both, {7, step++}, true)[0].sqnr;
      (void)sink;
    };
  };
  auto [narrow, wide] = minTimes(15, statsAt(false), statsAt(true));
  setAvx512Kernels(true);
  return Check{"stats512", fmt::format("statistics (int8 rtn + sr) {:.3f} ms with 256-bit / {:.3f} ms with 512-bit "
                                       "vectors, 2048x1024, 1 thread", narrow, wide),
               narrow / wide, 0.9, true, "build/bench/quant_bench --benchmark_filter=grad2"};
}

Check fusedRatio() {
  using namespace pgq::kernels;
  omp_set_num_threads(1);
  const int64_t heads = 16, t = 256, rows = heads * t, scores = rows * t, act = 2048 * 1024;
  const std::vector<float> x = randomData(size_t(scores), 9), dp = randomData(size_t(scores), 10);
  const std::vector<float> gate = randomData(size_t(act), 11), up = randomData(size_t(act), 12),
                           dact = randomData(size_t(act), 13);
  std::vector<float> a(static_cast<size_t>(scores)), p(a.size()), ds(a.size());
  std::vector<float> s(static_cast<size_t>(act)), y(s.size()), dg(s.size()), du(s.size());
  const float scale[1] = {0.0625f};
  const SoftmaxPrologue prologue{.scale = 0.0625f, .causal = true, .fill = -INFINITY, .tq = t};
  auto separate = [&] {
    binary(BinaryOp::kMul, x.data(), Bcast::kFull, scale, Bcast::kScalar, a.data(), rows, t);
    causalMask(a.data(), a.data(), heads, t, t, -INFINITY);
    softmax(a.data(), p.data(), rows, t);
    softmaxGrad(p.data(), dp.data(), ds.data(), rows, t);
    causalMask(ds.data(), ds.data(), heads, t, t, 0.0f);
    binary(BinaryOp::kMul, ds.data(), Bcast::kFull, scale, Bcast::kScalar, ds.data(), rows, t);
    unary(UnaryOp::kSilu, gate.data(), s.data(), act);
    binary(BinaryOp::kMul, s.data(), Bcast::kFull, up.data(), Bcast::kFull, y.data(), 1, act);
    binary(BinaryOp::kMul, dact.data(), Bcast::kFull, up.data(), Bcast::kFull, du.data(), 1, act);
    siluGrad(gate.data(), du.data(), dg.data(), act);
    binary(BinaryOp::kMul, dact.data(), Bcast::kFull, s.data(), Bcast::kFull, du.data(), 1, act);
  };
  auto fused = [&] {
    softmax(x.data(), p.data(), rows, t, prologue);
    softmaxGrad(p.data(), dp.data(), ds.data(), rows, t, prologue);
    swiglu(gate.data(), up.data(), y.data(), act);
    swigluGrad(SwigluOperand::kGate, gate.data(), up.data(), dact.data(), dg.data(), act);
    swigluGrad(SwigluOperand::kUp, gate.data(), nullptr, dact.data(), du.data(), act);
  };
  auto [t_separate, t_fused] = minTimes(15, separate, fused);
  return Check{"fused", fmt::format("attention softmax and SwiGLU, forward and backward: separate kernels {:.3f} ms / "
                                    "fused {:.3f} ms, 1 thread", t_separate, t_fused),
               t_separate / t_fused, 1.0, true,
               "build/bench/elementwise_bench --benchmark_filter='BM_(AttentionSoftmax|Swiglu)'"};
}

}  // namespace

int main(int argc, char** argv) {
  pgq::kernels::useSpinWaitPolicy(argv);  // as pgq runs (kernels/threads.h)
  bool with_step = !(argc > 1 && std::strcmp(argv[1], "--no-step") == 0);
  // A measurement that may return no check (not measured on this machine) as a group.
  auto asGroup = [](std::optional<Check> (*measure)()) {
    return [measure] {
      std::optional<Check> c = measure();
      return c ? std::vector<Check>{std::move(*c)} : std::vector<Check>{};
    };
  };
  std::vector<std::function<std::vector<Check>()>> groups = {[] { return std::vector<Check>{gemmRatio()}; },
                                                             quantizeRatios, asGroup(threadsRatio),
                                                             asGroup(bf16Ratio), asGroup(stats512Ratio),
                                                             [] { return std::vector<Check>{fusedRatio()}; }};
  if (with_step) groups.emplace_back(stepRatios);
  std::vector<Check> checks;
  for (const auto& measure : groups) {
    std::vector<Check> group = measure();
    // A machine shared with other jobs can take a processor away for seconds (seen on a
    // 2-vCPU machine: threads 1.10x, then 1.69x and 2.08x in the next two runs, and
    // 1.77x then 1.16x within one). A group with a ratio outside its bound is measured
    // again after a pause, up to twice, and the last measurement counts: a regression is
    // outside every time.
    for (int again = 0; again < 2; ++again) {
      auto outside = std::find_if(group.begin(), group.end(), [](const Check& c) { return !c.passed(); });
      if (outside == group.end()) break;
      fmt::print("perf smoke {}: {:.2f}x, outside its bound ({}); measuring its group again in 3 s\n",
                 outside->name, outside->value, outside->what);
      std::this_thread::sleep_for(std::chrono::seconds(3));
      group = measure();
    }
    for (Check& c : group) checks.push_back(std::move(c));
  }
  int failed = 0;
  for (const Check& c : checks) {
    fmt::print("perf smoke {:<9} {:5.2f}x (bound {} {:.2f}x)  {}  {}\n", c.name, c.value, c.at_least ? ">=" : "<=",
               c.bound, c.passed() ? "ok" : "FAILED", c.what);
  }
  for (const Check& c : checks) {
    if (c.passed()) continue;
    ++failed;
    fmt::print(stderr,
               "perf smoke: the {} ratio is {:.2f}x, outside its bound ({} {:.2f}x): a performance regression. "
               "Measure it with {} and see docs/PERFORMANCE.md.\n",
               c.name, c.value, c.at_least ? ">=" : "<=", c.bound, c.full_benchmark);
  }
  return failed == 0 ? 0 : 1;
}

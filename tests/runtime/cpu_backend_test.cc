// The CPU backend's two answers about a node, supports() and lower(), must agree for
// every op of ops.def: a node it accepts lowers to a kernel, and a node it refuses is a
// pgq::Error naming the node and its op.
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ir/parser.h"
#include "runtime/backend.h"
#include "runtime/collectives.h"
#include "runtime/executor.h"
#include "support/errors.h"

namespace pgq {
namespace {

constexpr Op kEveryOp[] = {
#define OP(id, text, arity, rule, ...) Op::k##id,
#include "ir/ops.def"
#undef OP
};

// The ops all_ops.pgq leaves out (quantization, collectives over a group of one), and
// nodes the backend refuses: bf16 elementwise, a convert to s32, an all_gather over more
// devices than this process's group has, and a quantize without the seed of its
// stochastic rounding.
constexpr const char* kMoreOps = R"pgq(graph @cpu_ops {
  %x = input() : f32[8,4]
  %w = parameter() {init="normal(0.02)"} : f32[4,6]
  %xs = quant_params(%x) {format="int8:channel:rtn", side="lhs", contract_dims=[1]} : f32[8]
  %ws = quant_params(%w) {format="int7:channel:rtn", side="rhs", contract_dims=[0]} : f32[6]
  %xq = quantize(%x, %xs) {format="int8:channel:rtn", side="lhs", contract_dims=[1], seed=1} : u8[8,4]
  %wq = quantize(%w, %ws) {format="int7:channel:rtn", side="rhs", contract_dims=[0], seed=2} : s8[4,6]
  %h = qmatmul(%xq, %wq, %xs, %ws) {lhs_contract=[1], rhs_contract=[0], lhs_format="int8:channel:rtn", rhs_format="int7:channel:rtn"} : f32[8,6]
  %fs = quant_params(%x) {format="e4m3:tensor:rtn", side="lhs", contract_dims=[1]} : f32[1]
  %fq = fake_quant(%x, %fs) {format="e4m3:tensor:rtn", side="lhs", contract_dims=[1], seed=3} : f32[8,4]
  %sm = smooth_scales(%x, %w) {lhs_contract=[1], rhs_contract=[0], alpha=0.5} : f32[4]
  %st = quant_stats(%x) {formats=["int8:channel:rtn"], contract_dims=[1], seed=1} : f32[1,9]
  %ref = matmul(%fq, %w) {lhs_contract=[1], rhs_contract=[0]} : f32[8,6]
  %es = error_stats(%ref, %h) {label="g", lhs_format="int8:channel:rtn", rhs_format="int8:channel:rtn"} : f32[3]
  %ar = all_reduce(%h) {group="tp", reduce="sum"} : f32[8,6]
  %ag = all_gather(%ar) {axis=1, devices=1, group="tp"} : f32[8,6]
  %rs = reduce_scatter(%ag) {axis=0, devices=1, group="tp"} : f32[8,6]
  %sh = shard(%rs) {axis=1, devices=1, group="tp"} : f32[8,6]
  %b = convert(%x) : bf16[8,4]
  %bf16_add = add(%b, %b) : bf16[8,4]
  %to_s32 = convert(%x) : s32[8,4]
  %ag2 = all_gather(%sh) {axis=1, devices=2, group="tp"} : f32[8,12]
  %no_seed = quantize(%x, %xs) {format="int8:channel:sr", side="lhs", contract_dims=[1]} : u8[8,4]
  return %sm, %st, %es, %ag2, %bf16_add, %to_s32, %no_seed
}
)pgq";

// Slots for lower(): the result is 0, operand i is i + 1, scratch buffers follow.
class FakeLowering : public LoweringContext {
 public:
  explicit FakeLowering(const Node& node) : node_(node) {}
  OperandRef operand(int index) override { return {index + 1, node_.operand(index), nullptr}; }
  int result() override { return 0; }
  int scratch(size_t bytes) override { return next_++; }
  OperandRef operandOf(const Node& value, int index) override { return {next_++, value.operand(index), nullptr}; }
  int resultOf(const Node& value) override { return next_++; }

 private:
  const Node& node_;
  int next_ = 8;
};

class CpuBackendOps : public ::testing::Test {
 protected:
  void SetUp() override {
    graphs_.push_back(parseGraphFile((std::filesystem::path(PGQ_SOURCE_DIR) / "tests/ir/golden/all_ops.pgq").string()));
    graphs_.push_back(parseGraph(kMoreOps));
  }
  std::vector<const Node*> nodes() const {
    std::vector<const Node*> all;
    for (const auto& g : graphs_)
      for (const Node* node : g->nodes()) all.push_back(node);
    return all;
  }
  const Node& node(const std::string& name) const { return *graphs_.back()->find(name); }

  std::vector<std::unique_ptr<Graph>> graphs_;
  std::unique_ptr<Backend> backend_ = makeCpuBackend();
};

TEST_F(CpuBackendOps, EveryOpOfOpsDefHasANodeHere) {
  for (Op op : kEveryOp) {
    bool found = false;
    for (const Node* node : nodes()) found = found || node->op() == op;
    EXPECT_TRUE(found) << "add a node of op " << opName(op) << " to this test's graphs";
  }
}

TEST_F(CpuBackendOps, SupportsAndLowerAgreeOnEveryNode) {
  int supported = 0, refused = 0;
  for (const Node* node : nodes()) {
    SCOPED_TRACE(fmt::format("%{} ({})", node->name(), opName(node->op())));
    std::string why;
    FakeLowering ctx(*node);
    if (backend_->supports(*node, &why)) {
      ++supported;
      Kernel kernel;
      EXPECT_NO_THROW(kernel = backend_->lower(*node, ctx));
      EXPECT_TRUE(static_cast<bool>(kernel));
    } else {
      ++refused;
      EXPECT_FALSE(why.empty());
      EXPECT_THROW(backend_->lower(*node, ctx), Error);
    }
  }
  EXPECT_EQ(refused, 4);  // %bf16_add, %to_s32, %ag2, %no_seed
  EXPECT_GT(supported, 60);
}

TEST_F(CpuBackendOps, AnUnsupportedNodeIsAnErrorNamingItsOp) {
  auto lowerError = [&](const std::string& name) {
    FakeLowering ctx(node(name));
    try {
      backend_->lower(node(name), ctx);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(lowerError("bf16_add"),
            "cpu backend: unsupported node %bf16_add (add): add on bf16 (elementwise kernels are f32 only)");
  EXPECT_EQ(lowerError("to_s32"), "cpu backend: unsupported node %to_s32 (convert): convert f32 -> s32 (only f32 <-> bf16)");
  EXPECT_EQ(lowerError("ag2"),
            "cpu backend: unsupported node %ag2 (all_gather): all_gather over 2 devices, but this job's tp group has 1 "
            "process(es); start it with mpirun so that --tensor-parallel matches the model's split");
  EXPECT_EQ(lowerError("no_seed"),
            "cpu backend: unsupported node %no_seed (quantize): quantize without a seed (its stochastic rounding's stream)");
  // The executor refuses such a graph before it allocates anything, with the same reason.
  auto g = parseGraph("graph @g {\n  %x = input() : bf16[4]\n  %y = add(%x, %x) : bf16[4]\n  return %y\n}\n");
  try {
    Executor executor(*g);
    ADD_FAILURE() << "a graph with a bf16 add compiled";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "backend cpu cannot run %y (add): add on bf16 (elementwise kernels are f32 only)");
  }
}

}  // namespace
}  // namespace pgq

namespace pgq {
namespace {

// A process of a tensor-parallel group of two, for kernels that only ask for their rank
// (no collective runs in the graphs below).
class RankOf2 final : public Collectives {
 public:
  explicit RankOf2(int rank) : rank_(rank) {}
  int worldRank() const override { return rank_; }
  int worldSize() const override { return 2; }
  int rank(DeviceGroup group) const override { return group == DeviceGroup::kTensor ? rank_ : 0; }
  int size(DeviceGroup group) const override { return group == DeviceGroup::kTensor ? 2 : 1; }
  int localSize() const override { return 2; }
  void allReduceSum(float*, int64_t, DeviceGroup) override { unused(); }
  void allReduceSum(double*, int64_t, DeviceGroup) override { unused(); }
  void allReduceMax(double*, int64_t, DeviceGroup) override { unused(); }
  void allGather(const float*, float*, int64_t, DeviceGroup) override { unused(); }
  void reduceScatterSum(const float*, float*, int64_t, DeviceGroup) override { unused(); }
  void broadcast(void*, int64_t, int) override { unused(); }
  void broadcast(void*, int64_t, DeviceGroup) override { unused(); }
  std::vector<std::string> allGatherStrings(const std::string&) override { unused(); }
  void barrier() override { unused(); }

 private:
  [[noreturn]] static void unused() { throw InternalError("RankOf2: no collective runs here"); }
  int rank_;
};

// Stochastic rounding under tensor parallelism: the two devices quantize their parts of a
// split value (split=[1,2]) with their own noise, and a value both hold whole with the
// same noise (they must agree on it); device 0 rounds as a single process does. The same
// values go in on both devices, so any difference is the noise's.
TEST(CpuBackendNoise, DevicesRoundTheirPartsOfASplitValueWithTheirOwnNoise) {
  auto g = parseGraph(R"pgq(graph @sr {
  %a = input() : f32[64,96]
  %part = add(%a, %a) {split=[1,2]} : f32[64,96]
  %whole = add(%a, %a) : f32[64,96]
  %ps = quant_params(%part) {format="int4:channel:sr", side="lhs", contract_dims=[1]} : f32[64]
  %pq = quantize(%part, %ps) {format="int4:channel:sr", side="lhs", contract_dims=[1], seed=11} : u8[64,96]
  %ws = quant_params(%whole) {format="int4:channel:sr", side="lhs", contract_dims=[1]} : f32[64]
  %wq = quantize(%whole, %ws) {format="int4:channel:sr", side="lhs", contract_dims=[1], seed=11} : u8[64,96]
  return %pq, %wq
}
)pgq");
  Tensor a(g->find("a")->type());
  float* p = a.data<float>();
  for (int64_t i = 0; i < a.numElements(); ++i) p[i] = std::sin(0.37f * float(i));
  RankOf2 zero(0), one(1);
  Executor single(*g), first(*g, {}, makeCpuBackend(&zero)), second(*g, {}, makeCpuBackend(&one));
  std::vector<std::vector<uint8_t>> part, whole;
  for (Executor* e : {&single, &first, &second}) {
    e->bind("a", a);
    e->run(5);
    part.emplace_back(e->output<uint8_t>(0).begin(), e->output<uint8_t>(0).end());
    whole.emplace_back(e->output<uint8_t>(1).begin(), e->output<uint8_t>(1).end());
  }
  EXPECT_EQ(part[0], part[1]);  // device 0 is a single process
  EXPECT_EQ(whole[0], whole[1]);
  EXPECT_EQ(whole[1], whole[2]);  // a whole value rounds alike on every device
  size_t differ = 0;
  for (size_t i = 0; i < part[1].size(); ++i) differ += part[1][i] != part[2][i];
  // Independent noise on 4-bit grids: a sizeable share of elements round the other way.
  EXPECT_GT(differ, part[1].size() / 10) << differ << " of " << part[1].size();
}

}  // namespace
}  // namespace pgq

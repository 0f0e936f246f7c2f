#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "support/errors.h"

namespace pgq {
namespace {

std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Golden files may start with comment lines; the printer does not write comments.
std::string withoutComments(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (!line.starts_with("#")) out += line + "\n";
  return out;
}

std::vector<std::filesystem::path> goldenFiles() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(PGQ_SOURCE_DIR) / "tests/ir/golden"))
    if (entry.path().extension() == ".pgq") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(Text, GoldenFilesRoundTripExactly) {
  auto files = goldenFiles();
  ASSERT_GE(files.size(), 3u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    std::string text = withoutComments(readFile(file));
    auto graph = parseGraph(text, file.string());
    verify(*graph);
    std::string printed = printGraph(*graph);
    EXPECT_EQ(printed, text);
    EXPECT_EQ(printGraph(*parseGraph(printed)), printed);
  }
}

// Graph::clone copies every node, attribute and output: the copy prints as the original
// does, and editing the copy leaves the original as it was.
TEST(Text, CloneIsAnIndependentCopy) {
  for (const auto& file : goldenFiles()) {
    SCOPED_TRACE(file.string());
    auto graph = parseGraph(withoutComments(readFile(file)), file.string());
    const std::string before = printGraph(*graph);
    std::unordered_map<const Node*, Node*> copies;
    auto copy = graph->clone(&copies);
    verify(*copy);
    EXPECT_EQ(printGraph(*copy), before);
    ASSERT_EQ(copies.size(), graph->size());
    for (const auto& [original, twin] : copies) {
      EXPECT_EQ(copy->find(original->name()), twin);
      EXPECT_NE(original, twin);
    }
    ASSERT_FALSE(copy->outputs().empty());
    copy->setOutputs({});
    copy->removeDead();
    EXPECT_EQ(printGraph(*graph), before);
  }
}

TEST(Text, BuiltGraphRoundTrips) {
  Graph g("built");
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{2, 3}});
  Node* c = b.constant(-0.1, {DType::kF32, Shape()});
  Node* k = b.broadcast(c, Shape{2, 3}, {});
  Node* y = b.mul(x, k, "y");
  Node* m = b.causalMask(y, -std::numeric_limits<double>::infinity());
  Node* p = b.parameter("p", {DType::kF32, Shape{3}}, "weird \"init\"\t\\");
  g.addOutput(m);
  g.addOutput(p);
  std::string text = printGraph(g);
  auto parsed = parseGraph(text);
  EXPECT_EQ(printGraph(*parsed), text);
  EXPECT_EQ(parsed->find("p")->attrs().getString(AttrKey::kInit), "weird \"init\"\t\\");
  EXPECT_EQ(parsed->find(c->name())->attrs().getFloat(AttrKey::kValue), -0.1);
}

TEST(Text, ImporterOpsRoundTrip) {
  Graph g("importer");
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{2, 3, 5}});
  Node* c = b.input("c", {DType::kF32, Shape{2, 3, 5}});
  Node* act = b.unary(Op::kGeluErf, b.unary(Op::kSilu, b.unary(Op::kErf, b.unary(Op::kSigmoid,
                                                                                   b.unary(Op::kSqrt, x)))));
  Node* grads = b.binary(Op::kGeluErfGrad, x, b.binary(Op::kSiluGrad, x, act));
  Node* sel = b.select(c, grads, x, "sel");
  Node* sl = b.slice(sel, {0, 1, 2}, {2, 3, 4}, "sl");
  Node* pd = b.pad(sl, {0, 1, 0}, {3, 0, 3}, "pd");
  Node* cat = b.concat(pd, x, 0, "cat");
  g.addOutput(cat);
  std::string text = printGraph(g);
  EXPECT_NE(text.find("%sl = slice(%sel) {starts=[0,1,2], limits=[2,3,4]} : f32[2,2,2]"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%pd = pad(%sl) {low=[0,1,0], high=[3,0,3]} : f32[5,3,5]"), std::string::npos) << text;
  EXPECT_NE(text.find("%cat = concat(%pd, %x) {axis=0} : f32[7,3,5]"), std::string::npos) << text;
  auto parsed = parseGraph(text);
  verify(*parsed);
  EXPECT_EQ(printGraph(*parsed), text);
}

TEST(Text, RopeRoundTripsWithItsRotation) {
  Graph g("rope");
  Builder b(g);
  Node* x = b.input("x", {DType::kF32, Shape{2, 3, 5, 8}});
  Node* back = b.rope(b.rope(x, 10000.0, RopeRotation::kForward, "q"), 1e6, RopeRotation::kInverse, "back");
  g.addOutput(back);
  std::string text = printGraph(g);
  EXPECT_NE(text.find("%q = rope(%x) {theta=10000.0, rotation=\"forward\"} : f32[2,3,5,8]"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%back = rope(%q) {theta=1000000.0, rotation=\"inverse\"} : f32[2,3,5,8]"), std::string::npos)
      << text;
  auto parsed = parseGraph(text);
  verify(*parsed);
  EXPECT_EQ(printGraph(*parsed), text);
  EXPECT_EQ(parsed->find("back")->attrs().getRotation(AttrKey::kRotation), RopeRotation::kInverse);
}

TEST(Text, CollectivesRoundTripWithTheirGroups) {
  const std::string text = R"(graph @c {
  %x = input() : f32[4,6]
  %s = all_reduce(%x) {group="tp", reduce="sum"} : f32[4,6]
  %g = all_gather(%s) {axis=1, devices=2, group="tp"} : f32[4,12]
  %r = reduce_scatter(%g) {axis=0, devices=4, group="tp"} : f32[1,12]
  %p = shard(%r) {axis=1, devices=3, group="tp"} : f32[1,4]
  %m = all_reduce(%p) {group="dp", reduce="mean"} : f32[1,4]
  return %m
}
)";
  auto g = parseGraph(text);
  verify(*g);
  EXPECT_EQ(printGraph(*g), text);
  EXPECT_EQ(g->find("m")->attrs().getGroup(AttrKey::kGroup), DeviceGroup::kData);
  EXPECT_EQ(g->find("s")->attrs().getReduction(AttrKey::kReduce), Reduction::kSum);
  auto errorOf = [](const std::string& body) {
    try {
      parseGraph("graph @e {\n  %x = input() : f32[4,6]\n" + body + "  return %y\n}\n");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(errorOf("  %y = shard(%x) {axis=1, devices=4, group=\"tp\"} : f32[4,1]\n").find("does not split into 4"),
            std::string::npos);
  EXPECT_NE(errorOf("  %y = all_reduce(%x) {reduce=\"sum\"} : f32[4,6]\n").find("missing attribute 'group'"),
            std::string::npos);
  EXPECT_NE(errorOf("  %y = all_reduce(%x) {group=\"pp\", reduce=\"sum\"} : f32[4,6]\n").find("pp"),
            std::string::npos);
}

TEST(Text, FloatAttributesRoundTripBitExactly) {
  for (double v : {0.1, 1.0 / 3.0, 1e-300, -2.5e17, 1e-5, 123456789.0, 0.0, -0.0,
                   std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::denorm_min()}) {
    Graph g;
    Builder(g).constant(v, {DType::kF32, Shape()}, "c");
    std::string text = printGraph(g);
    auto parsed = parseGraph(text);
    double back = parsed->find("c")->attrs().getFloat(AttrKey::kValue);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(back));
    } else {
      EXPECT_EQ(std::signbit(back), std::signbit(v)) << text;
      EXPECT_EQ(back, v) << text;
    }
    EXPECT_EQ(printGraph(*parsed), text);
  }
}

struct BadInput {
  const char* what;
  std::string text;
  std::string message;  // expected "file:line:col: ..." prefix and content
};

class TextErrors : public ::testing::TestWithParam<BadInput> {};

TEST_P(TextErrors, GiveOneClearMessageWithLocation) {
  const BadInput& bad = GetParam();
  try {
    parseGraph(bad.text, "bad.pgq");
    FAIL() << "no error for " << bad.what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad.message), std::string::npos)
        << bad.what << ": got '" << e.what() << "'";
  }
}

const std::string kHead = "graph @g {\n  %x = input() : f32[4,8]\n";

INSTANTIATE_TEST_SUITE_P(
    Parser, TextErrors,
    ::testing::Values(
        BadInput{"empty file", "", "bad.pgq:1:1: empty file"},
        BadInput{"only comments", "# nothing\n", "bad.pgq:2:1: empty file"},
        BadInput{"unknown op", kHead + "  %y = frobnicate(%x) : f32[4,8]\n  return %y\n}\n",
                 "bad.pgq:3:8: unknown op 'frobnicate'"},
        BadInput{"wrong arity", kHead + "  %y = add(%x) : f32[4,8]\n  return %y\n}\n",
                 "bad.pgq:3:8: add expects 2 operand(s), got 1"},
        BadInput{"shape mismatch", kHead + "  %y = exp(%x) : f32[4,9]\n  return %y\n}\n",
                 "bad.pgq:3:8: exp: result type is f32[4,8], but f32[4,9] was written"},
        BadInput{"matmul contraction mismatch",
                 kHead + "  %w = parameter() : f32[7,2]\n"
                         "  %y = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0]} : f32[4,2]\n"
                         "  return %y\n}\n",
                 "bad.pgq:4:8: matmul: matmul contracting dims differ"},
        BadInput{"undefined value", kHead + "  %y = exp(%z) : f32[4,8]\n  return %y\n}\n",
                 "bad.pgq:3:12: use of undefined value %z"},
        BadInput{"undefined output", kHead + "  return %nope\n}\n",
                 "bad.pgq:3:10: use of undefined value %nope"},
        BadInput{"duplicate name", kHead + "  %x = exp(%x) : f32[4,8]\n  return %x\n}\n",
                 "bad.pgq:3:3: %x is defined twice"},
        BadInput{"truncated file", kHead + "  %y = exp(%x",
                 "bad.pgq:3:14: expected ')', found end of file (is the file truncated?)"},
        BadInput{"missing closing brace", kHead + "  return %x\n",
                 "expected '}', found end of file"},
        BadInput{"binary garbage", std::string("\x7f" "ELF\x02\x01\x01\0\0", 9),
                 "bad.pgq:1:1: unexpected byte 0x7f"},
        BadInput{"garbage inside", kHead + "  %y = exp(%x) : f32[4,8] \x01\n", "bad.pgq:3:27: unexpected byte 0x01"},
        BadInput{"unknown attribute", kHead + "  %y = exp(%x) {colour=1} : f32[4,8]\n  return %y\n}\n",
                 "bad.pgq:3:17: unknown attribute 'colour'"},
        BadInput{"attribute the op lacks", kHead + "  %y = exp(%x) {perm=[1,0]} : f32[4,8]\n  return %y\n}\n",
                 "bad.pgq:3:17: exp has no attribute 'perm'"},
        BadInput{"wrong attribute kind", kHead + "  %y = transpose(%x) {perm=\"x\"} : f32[8,4]\n}\n",
                 "bad.pgq:3:28: expected '[', found a string"},
        BadInput{"integer overflow", kHead + "  %y = transpose(%x) {perm=[99999999999999999999,0]} : f32[8,4]\n}\n",
                 "integer 99999999999999999999 is out of range"},
        BadInput{"zero dim", "graph @g {\n  %x = input() : f32[4,0]\n", "bad.pgq:2:21: shape [4,0] has a dimension 0 < 1"},
        BadInput{"huge shape", "graph @g {\n  %x = input() : f32[1000000,1000000,1000000]\n",
                 "more than 2^40 elements"},
        BadInput{"unknown dtype", "graph @g {\n  %x = input() : f64[4]\n", "bad.pgq:2:18: unknown dtype 'f64'"},
        BadInput{"missing type", kHead + "  %y = exp(%x)\n  return %y\n}\n", "bad.pgq:4:3: expected ':'"},
        BadInput{"unterminated string", kHead + "  %p = parameter() {init=\"abc} : f32[2]\n",
                 "bad.pgq:3:26: unterminated string"},
        BadInput{"text after the graph", kHead + "  return %x\n}\ngraph", "bad.pgq:5:1: expected end of file"},
        BadInput{"missing required attribute", kHead + "  %y = transpose(%x) : f32[8,4]\n  return %y\n}\n",
                 "transpose: missing attribute 'perm'"},
        BadInput{"slice past the end",
                 kHead + "  %y = slice(%x) {starts=[0,2], limits=[4,9]} : f32[4,7]\n  return %y\n}\n",
                 "bad.pgq:3:8: slice: dim 1 of [4,8]: needs 0 <= start < limit <= 8, got start 2 and limit 9"},
        BadInput{"empty slice",
                 kHead + "  %y = slice(%x) {starts=[1,0], limits=[1,8]} : f32[1,8]\n  return %y\n}\n",
                 "slice: dim 0 of [4,8]: needs 0 <= start < limit <= 4, got start 1 and limit 1"},
        BadInput{"slice without one start per dim",
                 kHead + "  %y = slice(%x) {starts=[0], limits=[4,8]} : f32[4,8]\n  return %y\n}\n",
                 "slice: starts [0] must have one entry per dim of f32[4,8]"},
        BadInput{"negative pad",
                 kHead + "  %y = pad(%x) {low=[0,-1], high=[0,0]} : f32[4,7]\n  return %y\n}\n",
                 "bad.pgq:3:8: pad: dim 1 of [4,8]: low and high must be >= 0, got -1 and 0"},
        BadInput{"concat with mismatched dims",
                 kHead + "  %z = input() : f32[3,4]\n  %y = concat(%x, %z) {axis=0} : f32[7,8]\n  return %y\n}\n",
                 "bad.pgq:4:8: concat: operands f32[4,8] and f32[3,4] must have the same dtype and equal dims "
                 "except axis 0"},
        BadInput{"concat axis out of range",
                 kHead + "  %y = concat(%x, %x) {axis=2} : f32[4,16]\n  return %y\n}\n",
                 "concat: axis 2 is not a dim of f32[4,8]"},
        BadInput{"select with a condition of another shape",
                 kHead + "  %c = input() : f32[4,4]\n  %y = select(%c, %x, %x) : f32[4,8]\n  return %y\n}\n",
                 "select: condition f32[4,4] must have the shape of f32[4,8]"},
        BadInput{"rope of a matrix",
                 kHead + "  %y = rope(%x) {theta=10000.0, rotation=\"forward\"} : f32[4,8]\n  return %y\n}\n",
                 "bad.pgq:3:8: rope: operand must be [batch, heads, positions, head_dim], got f32[4,8]"},
        BadInput{"rope of an odd head dim",
                 "graph @g {\n  %x = input() : f32[1,2,4,5]\n"
                 "  %y = rope(%x) {theta=10000.0, rotation=\"forward\"} : f32[1,2,4,5]\n  return %y\n}\n",
                 "rope: the head dim pairs dim i with i + head_dim/2, so it must be even, got f32[1,2,4,5]"},
        BadInput{"rope with theta 0",
                 "graph @g {\n  %x = input() : f32[1,2,4,6]\n"
                 "  %y = rope(%x) {theta=0.0, rotation=\"forward\"} : f32[1,2,4,6]\n  return %y\n}\n",
                 "rope: theta must be > 0, got 0"},
        BadInput{"rope without a rotation",
                 "graph @g {\n  %x = input() : f32[1,2,4,6]\n"
                 "  %y = rope(%x) {theta=10000.0} : f32[1,2,4,6]\n  return %y\n}\n",
                 "rope: missing attribute 'rotation'"},
        BadInput{"rope with an unknown rotation",
                 "graph @g {\n  %x = input() : f32[1,2,4,6]\n"
                 "  %y = rope(%x) {theta=10000.0, rotation=\"sideways\"} : f32[1,2,4,6]\n  return %y\n}\n",
                 "bad.pgq:3:42: rotation must be one of forward, inverse, got \"sideways\""},
        BadInput{"error_stats of values of different shapes",
                 kHead + "  %z = input() : f32[8,4]\n  %y = error_stats(%x, %z) {label=\"g\", "
                          "lhs_format=\"int8:channel:rtn\", rhs_format=\"int8:channel:rtn\"} : f32[3]\n"
                          "  return %y\n}\n",
                 "bad.pgq:4:8: error_stats: operands 0 and 1 must have the same type, got f32[4,8] and f32[8,4]"},
        BadInput{"error_stats without its GEMM's label",
                 kHead + "  %y = error_stats(%x, %x) {lhs_format=\"int8:channel:rtn\", "
                         "rhs_format=\"int8:channel:rtn\"} : f32[3]\n  return %y\n}\n",
                 "error_stats: missing attribute 'label'"},
        BadInput{"quant_stats with a bias flag other than 0 or 1",
                 kHead + "  %y = quant_stats(%x) {formats=[\"int8:channel:rtn\"], contract_dims=[1], bias=2, "
                         "seed=0} : f32[1,9]\n  return %y\n}\n",
                 "quant_stats: bias must be 0 or 1, got 2"},
        BadInput{"declared-type op without a match",
                 kHead + "  %y = reshape(%x) : f32[5]\n  return %y\n}\n",
                 "cannot reshape [4,8] (32 elements) to [5] (5 elements)"}),
    [](const ::testing::TestParamInfo<BadInput>& info) {
      std::string name = info.param.what;
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return name;
    });

TEST(Text, ReadsFilesAndReportsMissingOnes) {
  EXPECT_THROW(parseGraphFile("/nonexistent/file.pgq"), Error);
  try {
    parseGraphFile("/nonexistent/file.pgq");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/file.pgq: cannot open"), std::string::npos);
  }
  EXPECT_THROW(parseGraphFile(PGQ_SOURCE_DIR), Error);  // a directory
}

}  // namespace
}  // namespace pgq

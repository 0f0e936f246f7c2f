// Pass options from text: `name{key=value,...}` (passes/pass_options.h).
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pipeline.h"
#include "passes/registry.h"
#include "support/errors.h"
#include "tests/passes/pass_test_util.h"

namespace pgq {
namespace {

using testing::kMlp;

class PassOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    recipe_ = (std::filesystem::path(::testing::TempDir()) / fmt::format("pgq_pass_options_{}.yaml", ::getpid())).string();
    std::ofstream(recipe_) << R"(gemms:
  - {label: up, decision: int8, lhs_format: "int8:channel:rtn", rhs_format: "int7:channel:sr"}
  - {label: down, decision: keep}
)";
  }
  void TearDown() override { std::filesystem::remove(recipe_); }

  // The message of the pgq::Error that creating `pipeline` throws.
  static std::string errorOf(const std::string& pipeline) {
    try {
      parsePipeline(pipeline);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }

  std::string recipe_;
};

TEST_F(PassOptions, SplitsNameAndOptions) {
  PassSpec spec = parsePassSpec(" instrument_stats{ formats=[int8:channel:rtn, int4:tensor:rtn] ,outputs = true} ");
  EXPECT_EQ(spec.name, "instrument_stats");
  ASSERT_EQ(spec.options.size(), 2u);
  EXPECT_EQ(spec.options[0].key, "formats");
  EXPECT_EQ(spec.options[0].value, "[int8:channel:rtn, int4:tensor:rtn]");
  EXPECT_EQ(spec.options[1].key, "outputs");
  EXPECT_EQ(spec.options[1].value, "true");
  EXPECT_TRUE(parsePassSpec("cse{}").options.empty());
  EXPECT_EQ(splitOutsideBrackets("a, b{c=1,d=[x,y]},e", "pipeline"),
            (std::vector<std::string_view>{"a", "b{c=1,d=[x,y]}", "e"}));
}

// An option table of a pass to come: an integer with a lower bound, and a required flag.
struct BoundedOptions {
  int64_t degree = 1;
  bool on = false;
};
constexpr PassOption<BoundedOptions> kBoundedOptions[] = {
    {.key = "degree", .member = &BoundedOptions::degree, .help = "a degree", .min = 1},
    {.key = "on", .member = &BoundedOptions::on, .help = "a flag", .required = true},
};

TEST_F(PassOptions, IntegersKeepTheirLowerBound) {
  auto parse = [](const char* text) {
    return parsePassOptions<BoundedOptions>(parsePassSpec(text), kBoundedOptions);
  };
  BoundedOptions o = parse("bounded{degree=4,on=true}");
  EXPECT_EQ(o.degree, 4);
  EXPECT_TRUE(o.on);
  EXPECT_EQ(parse("bounded{on=false}").degree, 1);  // the default
  try {
    parse("bounded{degree=0,on=true}");
    FAIL() << "degree=0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass 'bounded': option 'degree': expected an integer >= 1, got 0"),
              std::string::npos) << e.what();
  }
}

TEST_F(PassOptions, RunsQuantizeGemmsWithARecipeFileAndASeed) {
  auto pipeline = parsePipeline(fmt::format("tag_metadata, quantize_gemms{{recipe={},seed=3}},dce", recipe_));
  EXPECT_EQ(pipeline->passNames(), (std::vector<std::string_view>{"tag_metadata", "quantize_gemms", "dce"}));
  auto g = parseGraph(kMlp);
  PassContext ctx;
  EXPECT_TRUE(pipeline->run(*g, ctx));
  std::string text = printGraph(*g);
  // The stochastic rhs takes the second stream from the seed; round to nearest, none (0).
  EXPECT_NE(text.find(R"(%h.lhs_q = quantize(%x, %h.lhs_scales) {format="int8:channel:rtn", side="lhs", contract_dims=[1], seed=0})"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(format="int7:channel:sr", side="rhs", contract_dims=[0], seed=4} : s8[32,48])"), std::string::npos)
      << text;
}

TEST_F(PassOptions, RunsInstrumentStatsWithFormatLists) {
  auto g = parseGraph(kMlp);
  PassContext ctx;
  parsePipeline("tag_metadata,"
                "instrument_stats{formats=[int8:channel:rtn,int4:tensor:rtn],gradient_formats=[int8:channel:sr],"
                "outputs=true,seed=-7}")
      ->run(*g, ctx);
  std::string text = printGraph(*g);
  EXPECT_NE(text.find(R"(%x.stats = quant_stats(%x) {formats=["int8:channel:rtn","int4:tensor:rtn"], contract_dims=[1], uses=["up:lhs"], seed=-7})"),
            std::string::npos) << text;
  EXPECT_NE(text.find(R"(uses=["down:out"])"), std::string::npos) << text;  // outputs=true
}

TEST_F(PassOptions, DeclaredDefaultsParseBack) {
  for (const PassHelp& pass : passHelp()) {
    bool required = false;
    for (const OptionHelp& option : pass.options) required |= option.required;
    if (required) continue;
    for (const OptionHelp& option : pass.options) {
      std::string spec = fmt::format("{}{{{}={}}}", pass.name, option.key, option.default_value);
      EXPECT_NO_THROW(createPass(spec)) << spec;
    }
  }
}

TEST_F(PassOptions, RefusesBadKeysNamingThePassTheKeyAndTheKnownKeys) {
  std::string recipe = "recipe=" + recipe_;
  struct Case {
    std::string pipeline;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"quantize_gemms{recpie=r.yaml}",
       "pass 'quantize_gemms': unknown option 'recpie' (options of quantize_gemms: recipe, seed)"},
      {"quantize_gemms{" + recipe + ",seed=1,seed=2}",
       "pass 'quantize_gemms': option 'seed' given twice (options of quantize_gemms: recipe, seed)"},
      {"quantize_gemms{seed=1}",
       "pass 'quantize_gemms': missing required option 'recipe' (options of quantize_gemms: recipe, seed)"},
      {"quantize_gemms", "pass 'quantize_gemms': missing required option 'recipe'"},
      {"cse{x=1}", "pass 'cse': unknown option 'x' (cse takes no options)"},
      {"tag_metadata,nope{a=1}", "unknown pass 'nope' (known passes: dce, cse, fuse_decomposed, fuse_softmax, fuse_swiglu, bf16_gemms, propagate_sharding, tag_metadata"},
  };
  for (const Case& c : cases) EXPECT_NE(errorOf(c.pipeline).find(c.message), std::string::npos) << errorOf(c.pipeline);
}

TEST_F(PassOptions, RefusesMalformedValues) {
  std::string recipe = "recipe=" + recipe_;
  struct Case {
    std::string pipeline;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"quantize_gemms{" + recipe + ",seed=x}",
       "pass 'quantize_gemms': option 'seed': expected a 64-bit integer, got 'x' (options of quantize_gemms: recipe, seed)"},
      {"quantize_gemms{" + recipe + ",seed=99999999999999999999}", "option 'seed': expected a 64-bit integer"},
      {"quantize_gemms{" + recipe + ",seed=3.5}", "option 'seed': expected a 64-bit integer, got '3.5'"},
      {"quantize_gemms{" + recipe + ",seed=}", "option 'seed': expected a 64-bit integer, got ''"},
      {"tag_metadata{tensor_parallel=2}", "pass 'tag_metadata': unknown option 'tensor_parallel' (tag_metadata takes no options)"},
      {"instrument_stats{outputs=yes}", "option 'outputs': expected true or false, got 'yes'"},
      {"instrument_stats{formats=int8:channel:rtn}", "option 'formats': expected a list of formats in brackets"},
      {"instrument_stats{formats=[int9:channel:rtn]}", "option 'formats': format 'int9:channel:rtn':"},
      {"instrument_stats{formats=[int8:channel:rtn,int8:channel:rtn]}", "format 'int8:channel:rtn' listed twice"},
      {"instrument_stats{formats=[]}", "option 'formats': expected at least one format"},
      {"quantize_gemms{recipe=/nonexistent/r.yaml}", "pass 'quantize_gemms': option 'recipe': /nonexistent/r.yaml"},
      {"estimate_speedup{hardware=no-such-cpu}", "pass 'estimate_speedup': option 'hardware': "},
  };
  for (const Case& c : cases) EXPECT_NE(errorOf(c.pipeline).find(c.message), std::string::npos) << errorOf(c.pipeline);
}

TEST_F(PassOptions, RefusesMalformedSyntax) {
  for (const char* bad : {"", "cse,", ",cse", "cse,,dce", "cse{", "cse}", "cse{a=1", "{a=1}", "quantize_gemms{seed}",
                          "quantize_gemms{=3}", "quantize_gemms{seed=1,}", "quantize_gemms{seed=1}x",
                          "cse{a=1}{b=2}", "instrument_stats{formats=[int8:channel:rtn}",
                          "instrument_stats{formats=int8:channel:rtn]}"}) {
    EXPECT_NE(errorOf(bad), "no error") << bad;
  }
  EXPECT_NE(errorOf("quantize_gemms{seed}").find("option 'seed' has no value (expected seed=value)"), std::string::npos)
      << errorOf("quantize_gemms{seed}");
  EXPECT_NE(errorOf("cse{").find("pipeline 'cse{': missing '}' at the end"), std::string::npos) << errorOf("cse{");
}

}  // namespace
}  // namespace pgq

#include <gtest/gtest.h>

#include "frontend/model_config.h"
#include "support/config_file.h"
#include "frontend/transformer.h"
#include "ir/verifier.h"
#include "support/errors.h"

namespace pgq {
namespace {

std::string errorOf(const std::string& yaml) {
  try {
    parseModelConfig(yaml, "m.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::string kValid = "d_model: 32\nn_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 4\n";

TEST(ModelConfig, PresetsLoadAndBuild) {
  for (const std::string& name : modelPresetNames()) {
    SCOPED_TRACE(name);
    ModelConfig c = loadModelConfig(name);
    EXPECT_EQ(c.name, name);
    TransformerGraph t = buildTransformer(c);
    EXPECT_NO_THROW(verify(*t.graph));
  }
  ModelConfig small = loadModelConfig("small");
  EXPECT_EQ(small.d_model, 256);
  EXPECT_EQ(small.n_layers, 4);
  EXPECT_EQ(small.d_ff, 1024);
  EXPECT_EQ(small.seq_len, 128);
  EXPECT_EQ(small.batch, 16);
}

TEST(ModelConfig, YamlRoundTrip) {
  ModelConfig c = loadModelConfig("small");
  c.norm = NormKind::kLayerNorm;
  c.activation = Activation::kRelu;
  c.tied_embeddings = false;
  ModelConfig back = parseModelConfig(c.toYaml(), "round-trip");
  EXPECT_EQ(back.toYaml(), c.toYaml());
}

// A name YAML would read otherwise (a colon, a comment sign, a word meaning null) is
// written quoted, so that --batch/--seq (which re-read the config) keep it; a plain one
// is written as before, so that older profiles and checkpoints compare equal.
TEST(ModelConfig, NamesThatNeedQuotesRoundTrip) {
  for (const std::string name : {"my model: v2", "#1", "null", "[x", "a\"b\\c", "two\nlines", "-x", "gpt2-124m.v1/x"}) {
    ModelConfig c = parseModelConfig(kValid, "m.yaml");
    c.name = name;
    ModelConfig back = parseModelConfig(c.toYaml(), "round-trip");
    EXPECT_EQ(back.name, name) << c.toYaml();
    EXPECT_EQ(back.toYaml(), c.toYaml());
  }
  ModelConfig plain = parseModelConfig("name: gpt2-124m\n" + kValid, "m.yaml");
  EXPECT_EQ(plain.toYaml().substr(0, 16), "name: gpt2-124m\n");
}

// yaml-cpp reads 010 as octal 8, YAML 1.2 as decimal 10: refused either way.
TEST(ModelConfig, AnIntegerWithALeadingZeroIsRefused) {
  EXPECT_EQ(errorOf("d_model: 32\nn_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 010\n"),
            "m.yaml:6: field 'batch': '010' has a leading zero, which YAML readers take as octal or decimal; write it "
            "without");
  EXPECT_EQ(errorOf("d_model: 32\nn_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: -04\n"),
            "m.yaml:6: field 'batch': '-04' has a leading zero, which YAML readers take as octal or decimal; write it "
            "without");
  EXPECT_EQ(parseModelConfig("d_model: 32\nn_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 0x10\n", "m.yaml")
                .batch,
            16);
}

// yaml-cpp's "bad file" for a file nested past its recursion limit says what is wrong.
TEST(ModelConfig, DeepNestingSaysSo) {
  EXPECT_EQ(errorOf(std::string(100000, '[') + std::string(100000, ']')).substr(0, 49),
            "m.yaml:1:1: nested too deeply for the YAML parser");
}

// A file of many small nodes took yaml-cpp ~700 bytes a node before any check: 30 MB of
// `[[],[],...]` needed 7.3 GB (session 17's hunt). Refused from a count of the characters
// that start nodes, before parsing.
TEST(ModelConfig, AFileOfTooManyNodesIsRefusedBeforeParsing) {
  std::string text = "d_model: [";
  for (size_t i = 0; i < kMaxYamlNodes / 2 + 1; ++i) text += "[],";
  text += "[]]\n";
  EXPECT_EQ(errorOf(text).substr(0, 28), "m.yaml: too large to read: 4");
}

// Session 15: `vocab:` with no value is YAML null; it gave the default vocabulary silently.
TEST(ModelConfig, AFieldWithNoValueIsRefused) {
  const std::string base = "d_model: 32\nn_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 2\n";
  EXPECT_EQ(errorOf(base + "vocab:\n"), "m.yaml:7: field 'vocab': has no value; give one, or remove the line for the "
                                         "default");
  EXPECT_EQ(errorOf(base + "rope_theta: ~\n"),
            "m.yaml:7: field 'rope_theta': has no value; give one, or remove the line for the default");
  EXPECT_EQ(errorOf(base + "name:\n"), "m.yaml:7: field 'name': has no value; give one, or remove the line for the "
                                        "default");
  EXPECT_EQ(parseModelConfig(base, "m.yaml").vocab, 256);
}

// The sizes given on the command line are checked as the file's own, and the error names
// the flags, not a line of the rewritten text.
TEST(ModelConfig, AnOverrideErrorNamesTheFlags) {
  auto errorWith = [](const std::string& spec, int64_t batch, int64_t seq, int64_t tensor_parallel) {
    ModelOverrides o;
    o.batch = batch, o.seq_len = seq, o.tensor_parallel = tensor_parallel;
    try {
      loadModelConfig(spec, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(errorWith("small", 0, 1048576, 0), "<preset small> with --seq 1048576: field 'batch': batch x seq_len = "
                                               "16777216 tokens is more than 1048576");
  EXPECT_EQ(errorWith("tiny", 3, 0, 4), "<preset tiny> with --batch 3 --tensor-parallel 4: field 'tensor_parallel': "
                                        "must divide n_heads = 2 and d_ff = 64, got 4");
}

TEST(ModelConfig, LlamaConfigRoundTrips) {
  ModelConfig c = parseModelConfig(
      "name: llama\nd_model: 64\nn_layers: 2\nn_heads: 8\nn_kv_heads: 2\nd_ff: 172\nseq_len: 32\nbatch: 2\n"
      "activation: swiglu\nposition: rope\nrope_theta: 500000.0\ntied_embeddings: false\n",
      "llama.yaml");
  EXPECT_EQ(c.activation, Activation::kSwiGlu);
  EXPECT_EQ(c.position, Position::kRope);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.kvHeads(), 2);
  EXPECT_FALSE(c.tied_embeddings);
  const std::string yaml = c.toYaml();
  for (const char* line : {"activation: swiglu\n", "position: rope\n", "rope_theta: 500000.0\n", "n_kv_heads: 2\n",
                           "tied_embeddings: false\n"})
    EXPECT_NE(yaml.find(line), std::string::npos) << line << "\n" << yaml;
  ModelConfig back = parseModelConfig(yaml, "round-trip");
  EXPECT_EQ(back.toYaml(), yaml);
  EXPECT_EQ(back.activation, Activation::kSwiGlu);
  EXPECT_EQ(back.position, Position::kRope);
  EXPECT_EQ(back.n_kv_heads, 2);
  // n_kv_heads 0 (the default) is written out as n_heads and reads back the same.
  ModelConfig mha = parseModelConfig(kValid, "m.yaml");
  EXPECT_EQ(mha.kvHeads(), 2);
  EXPECT_EQ(parseModelConfig(mha.toYaml(), "round-trip").toYaml(), mha.toYaml());
}

TEST(ModelConfig, BadLlamaOptionsNameFileLineAndField) {
  EXPECT_EQ(errorOf(kValid + "n_kv_heads: 3\n"), "m.yaml:7: field 'n_kv_heads': must divide n_heads = 2, got 3");
  EXPECT_EQ(errorOf(kValid + "n_kv_heads: 4\n"), "m.yaml:7: field 'n_kv_heads': must divide n_heads = 2, got 4");
  EXPECT_EQ(errorOf(kValid + "n_kv_heads: -1\n"),
            "m.yaml:7: field 'n_kv_heads': expected an integer in [0, 1048576], got -1");
  EXPECT_EQ(errorOf("d_model: 30\nn_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 4\nposition: rope\n"),
            "m.yaml:7: field 'position': rotary embeddings rotate pairs of dimensions: the head dimension d_model / "
            "n_heads = 15 must be even");
  EXPECT_EQ(errorOf(kValid + "activation: tanh\n"),
            "m.yaml:7: field 'activation': expected one of gelu, relu, swiglu, got 'tanh'");
  EXPECT_EQ(errorOf(kValid + "position: alibi\n"),
            "m.yaml:7: field 'position': expected one of learned, rope, got 'alibi'");
  EXPECT_EQ(errorOf(kValid + "rope_theta: 0\n"),
            "m.yaml:7: field 'rope_theta': expected a number in [1, 1000000000], got 0");
  // Each device computes whole k and v heads.
  EXPECT_EQ(errorOf(kValid + "n_kv_heads: 1\ntensor_parallel: 2\n"),
            "m.yaml:8: field 'tensor_parallel': must divide n_kv_heads = 1 (each device computes whole k and v "
            "heads), got 2");
}

TEST(ModelConfig, DefaultsForOptionalFields) {
  ModelConfig c = parseModelConfig(kValid, "m.yaml");
  EXPECT_EQ(c.vocab, 256);
  EXPECT_EQ(c.norm, NormKind::kRmsNorm);
  EXPECT_TRUE(c.tied_embeddings);
}

TEST(ModelConfig, BadConfigsNameFileLineAndField) {
  EXPECT_EQ(errorOf("n_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 4\n"),
            "m.yaml:1: field 'd_model': is missing");
  EXPECT_EQ(errorOf("d_model: -32\nn_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 4\n"),
            "m.yaml:1: field 'd_model': expected an integer in [1, 1048576], got -32");
  EXPECT_EQ(errorOf("d_model: 30\nn_layers: 2\nn_heads: 4\nd_ff: 64\nseq_len: 16\nbatch: 4\n"),
            "m.yaml:3: field 'n_heads': must divide d_model = 30, got 4");
  EXPECT_EQ(errorOf(kValid + "norm: batchnorm\n"),
            "m.yaml:7: field 'norm': expected one of rmsnorm, layernorm, got 'batchnorm'");
  EXPECT_NE(errorOf(kValid + "dmodel: 3\n").find("m.yaml:7: unknown field 'dmodel' (known fields: name, vocab"),
            std::string::npos);
  EXPECT_EQ(errorOf(kValid + "tied_embeddings: maybe\n"),
            "m.yaml:7: field 'tied_embeddings': expected true or false, got 'maybe'");
  EXPECT_EQ(errorOf(kValid + "vocab: 100\n"),
            "m.yaml:7: field 'vocab': expected an integer in [256, 1048576], got 100");
  EXPECT_EQ(errorOf(kValid + "d_ff: 128\n"), "m.yaml:7: field 'd_ff' is given twice");
  EXPECT_EQ(errorOf("d_ff: [1, 2]\nd_model: 32\nn_layers: 2\nn_heads: 2\nseq_len: 16\nbatch: 4\n"),
            "m.yaml:1: field 'd_ff': expected an integer in [1, 1048576], got a list");
  EXPECT_NE(errorOf("d_model: 32\n  bad indent: [\n").find("m.yaml:"), std::string::npos);
  EXPECT_EQ(errorOf(""), "m.yaml: is empty");
  EXPECT_EQ(errorOf("- 1\n- 2\n"), "m.yaml:1: expected a mapping of 'key: value' lines");
  EXPECT_NE(errorOf(std::string("d_model: 3\0\x01", 13)).find("NUL"), std::string::npos);
}

// Every tensor size computed from a config must fit int64 with room for sums over the
// graph: each size, the tokens of a batch and the attention scores are bounded.
TEST(ModelConfig, SizesAreBoundedSoTensorSizesFitInt64) {
  EXPECT_EQ(errorOf("d_model: 2097152\nn_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 4\n"),
            "m.yaml:1: field 'd_model': expected an integer in [1, 1048576], got 2097152");
  EXPECT_EQ(errorOf("d_model: 32\nn_layers: 2000\nn_heads: 2\nd_ff: 64\nseq_len: 16\nbatch: 4\n"),
            "m.yaml:2: field 'n_layers': expected an integer in [1, 1024], got 2000");
  EXPECT_EQ(errorOf("d_model: 32\nn_layers: 2\nn_heads: 2\nd_ff: 64\nseq_len: 1048576\nbatch: 2\n"),
            "m.yaml:6: field 'batch': batch x seq_len = 2097152 tokens is more than 1048576");
  // 2^20 tokens x 1024 heads x 2^20 positions = 2^50 scores.
  EXPECT_EQ(errorOf("d_model: 1024\nn_layers: 1\nn_heads: 1024\nd_ff: 8\nseq_len: 1048576\nbatch: 1\n"),
            "m.yaml:3: field 'n_heads': the attention scores, batch x n_heads x seq_len x seq_len = 1 x 1024 x "
            "1048576 x 1048576, have more than 1099511627776 elements; reduce batch, n_heads or seq_len");
  // The largest accepted sizes still give int64 sizes everywhere.
  ModelConfig largest = parseModelConfig(
      "vocab: 1048576\nd_model: 1048576\nn_layers: 1024\nn_heads: 1\nd_ff: 1048576\nseq_len: 1048576\n"
      "batch: 1\n",
      "m.yaml");
  EXPECT_LE(largest.tokens() * largest.n_heads * largest.seq_len, kMaxModelElements);
}

TEST(ModelConfig, RemembersWhereItWasRead) {
  EXPECT_EQ(loadModelConfig("tiny").source, "<preset tiny>");
  EXPECT_EQ(parseModelConfig(kValid, "m.yaml").source, "m.yaml");
}

TEST(ModelConfig, UnknownPresetOrMissingFile) {
  try {
    loadModelConfig("nonexistent_model");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither a preset (gpt2-124m, medium, small, tiny) nor an existing file"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pgq

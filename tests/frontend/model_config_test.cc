#include <gtest/gtest.h>

#include "frontend/model_config.h"
#include "frontend/transformer.h"
#include "ir/errors.h"
#include "ir/verifier.h"

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

TEST(ModelConfig, UnknownPresetOrMissingFile) {
  try {
    loadModelConfig("nonexistent_model");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither a preset (small, tiny) nor an existing file"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pgq

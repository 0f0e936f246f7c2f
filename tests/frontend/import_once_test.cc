// One import of a model file per process (frontend/onnx/import_once.h): the config's
// sizes and every graph built from them come from one parse of the file, each graph is
// its own copy, the weights are shared and held once, and a changed file or other
// options import again.
#include "frontend/onnx/import_once.h"

#include <chrono>
#include <filesystem>

#include <gtest/gtest.h>

#include "frontend/model_config.h"
#include "frontend/transformer.h"
#include "ir/printer.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

class ImportOnce : public test::TempDirTest {
 protected:
  // A copy of a PyTorch 2.11 export (and its external weights) in this test's folder,
  // so that no other test shares its cache entry.
  std::string copyModel() {
    const fs::path from = fs::path(PGQ_SOURCE_DIR) / "tests/data/onnx_modern/gpt2";
    for (const auto& entry : fs::directory_iterator(from))
      if (entry.is_regular_file()) fs::copy_file(entry.path(), dir_ / entry.path().filename());
    return (dir_ / "model.onnx").string();
  }
};

TEST_F(ImportOnce, TheConfigAndEveryGraphShareOneImport) {
  const std::string path = copyModel();
  const int64_t before = onnxImportCount();
  const ImportedSizes sizes = importedSizes({path});
  EXPECT_EQ(onnxImportCount(), before + 1);
  ImportedModel direct = importOnnx({path});  // what a fresh import gives, for comparison
  EXPECT_EQ(sizes.batch, direct.batch);
  EXPECT_EQ(sizes.seq_len, direct.seq_len);
  EXPECT_EQ(sizes.vocab, direct.vocab);
  EXPECT_EQ(sizes.fingerprint, direct.fingerprint);

  // The sizes found, asked for explicitly, are the same import.
  TransformerGraph train = importedGraph({path, sizes.batch, sizes.seq_len}, true);
  TransformerGraph eval = importedGraph({path, sizes.batch, sizes.seq_len}, false);
  TransformerGraph again = importedGraph({path}, true);
  EXPECT_EQ(onnxImportCount(), before + 1);

  // Each graph is its own, equal to a fresh import's, with its nodes mapped.
  const std::string printed = printGraph(*direct.net.graph);
  EXPECT_EQ(printGraph(*train.graph), printed);
  EXPECT_EQ(printGraph(*eval.graph), printed);
  EXPECT_NE(train.graph.get(), eval.graph.get());
  ASSERT_EQ(train.params.size(), direct.net.params.size());
  for (size_t i = 0; i < train.params.size(); ++i) {
    EXPECT_EQ(train.params[i], train.graph->find(direct.net.params[i]->name()));
    EXPECT_EQ(eval.params[i], eval.graph->find(direct.net.params[i]->name()));
  }
  EXPECT_EQ(train.tokens, train.graph->find(direct.net.tokens->name()));
  EXPECT_EQ(train.loss, train.graph->outputs()[0]);
  ASSERT_EQ(train.constants.size(), direct.constants.size());
  train.graph->setOutputs({});
  train.graph->removeDead();
  EXPECT_EQ(printGraph(*eval.graph), printed);  // editing one leaves the others alone

  // One copy of the weights, shared by the graphs that asked for them.
  ASSERT_TRUE(train.values);
  EXPECT_EQ(train.values, again.values);
  EXPECT_FALSE(eval.values);
  EXPECT_EQ(*train.values, direct.values);

  // Once no graph holds them, a graph that wants them reads the file again; one that
  // does not is still a copy.
  train.values.reset();
  again.values.reset();
  TransformerGraph shapes = importedGraph({path}, false);
  EXPECT_EQ(onnxImportCount(), before + 1);
  TransformerGraph reread = importedGraph({path}, true);
  EXPECT_EQ(onnxImportCount(), before + 2);
  ASSERT_TRUE(reread.values);
  EXPECT_EQ(*reread.values, direct.values);
}

TEST_F(ImportOnce, AChangedFileOrOtherOptionsImportAgain) {
  const std::string path = copyModel();
  const int64_t before = onnxImportCount();
  importedSizes({path});
  importedSizes({path});
  EXPECT_EQ(onnxImportCount(), before + 1);
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::hours(1));
  importedSizes({path});
  EXPECT_EQ(onnxImportCount(), before + 2);
  OnnxImportOptions frozen{path};
  frozen.frozen = ".*ln_f.*";
  TransformerGraph g = importedGraph(frozen, true);
  EXPECT_EQ(onnxImportCount(), before + 3);
  EXPECT_LT(g.params.size(), importOnnx({path}).net.params.size());
}

// ModelConfig's import is the one the graphs reuse.
TEST_F(ImportOnce, LoadingAModelConfigImportsOnce) {
  const std::string path = copyModel();
  const int64_t before = onnxImportCount();
  ModelConfig c = loadModelConfig(path);
  EXPECT_EQ(onnxImportCount(), before + 1);
  TransformerGraph t = buildModel(c);
  TransformerGraph e = buildModel(c, false);
  EXPECT_EQ(onnxImportCount(), before + 1);
  EXPECT_TRUE(t.values);
  EXPECT_FALSE(e.values);
}

}  // namespace
}  // namespace pgq

// Writes everything the PyTorch parity check needs, as .npy files in OUT_DIR: the
// initial parameters of a model config, one batch of the default corpus, and the loss
// and every parameter gradient pgq computes for that batch (f32, executor).
//   pgq_parity_dump MODEL.yaml|preset OUT_DIR
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frontend/autodiff.h"
#include "frontend/transformer.h"
#include "runtime/corpus.h"
#include "runtime/data_loader.h"
#include "runtime/executor.h"
#include "runtime/param_init.h"
#include "runtime/trainer.h"

namespace {

// NumPy's .npy format, version 1.0: magic, header length, a Python dict literal.
void writeNpy(const std::filesystem::path& path, const void* data, pgq::DType dtype, const pgq::Shape& shape) {
  std::string descr = dtype == pgq::DType::kF32 ? "<f4" : "<i4";
  std::string dims = shape.rank() == 0 ? "" : fmt::format("{},", fmt::join(shape.dims(), ","));
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(shape.numElements() * 4));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string fileName(const std::string& param) {
  std::string s = param;
  for (char& c : s)
    if (c == '/') c = '.';
  return s + ".npy";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL OUT_DIR\n", argv[0]);
    return 2;
  }
  pgq::ModelConfig config = pgq::loadModelConfig(argv[1]);
  std::filesystem::path out(argv[2]);
  std::filesystem::create_directories(out / "params");
  std::filesystem::create_directories(out / "grads");
  pgq::TransformerGraph t = pgq::buildTransformer(config);
  std::vector<pgq::Node*> grads = pgq::appendBackward(*t.graph, t.loss, t.params);
  pgq::Executor exec(*t.graph);
  std::vector<pgq::Tensor> params;
  params.reserve(t.params.size());
  for (pgq::Node* p : t.params) {
    params.emplace_back(p->type());
    pgq::initParameter(*p, config.seed, params.back());
    exec.bind(p, params.back());
    writeNpy(out / "params" / fileName(p->name()), params.back().raw(), pgq::DType::kF32, p->shape());
  }
  pgq::Corpus corpus = pgq::loadCorpus(pgq::kDefaultCorpus);
  pgq::BatchSampler sampler(corpus.train, config.batch, config.seq_len, config.seed);
  pgq::Tensor tokens(t.tokens->type()), targets(t.targets->type());
  sampler.sample(0, tokens, targets);
  exec.bind(t.tokens, tokens);
  exec.bind(t.targets, targets);
  exec.run();
  writeNpy(out / "tokens.npy", tokens.raw(), pgq::DType::kS32, tokens.shape());
  writeNpy(out / "targets.npy", targets.raw(), pgq::DType::kS32, targets.shape());
  writeNpy(out / "loss.npy", exec.outputData(0), pgq::DType::kF32, pgq::Shape());
  for (size_t i = 0; i < grads.size(); ++i)
    writeNpy(out / "grads" / fileName(t.params[i]->name()), exec.outputData(i + 1), pgq::DType::kF32,
             t.params[i]->shape());
  std::ofstream(out / "model.yaml") << config.toYaml();
  return 0;
}

// Fuzzes the ONNX importer: the input is a model file (the seeds are real PyTorch
// exports, so mutations stay close to what users have). A clean import or a pgq::Error
// is fine; a crash, a sanitizer report, an internal assertion (pgq::InternalError, left
// uncaught so that libFuzzer reports it) or a timeout is a bug. The file is written to
// a folder of its own, so that external data locations resolve there.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "frontend/onnx/importer.h"
#include "support/errors.h"

namespace {

// The folder, removed when the fuzzer exits (each run left one in /tmp).
struct ModelDir {
  ModelDir() : dir(std::filesystem::temp_directory_path() / ("pgq_onnx_fuzz_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir);
  }
  ~ModelDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  std::filesystem::path dir;
};

std::string modelPath() {
  static const ModelDir model_dir;
  static const std::string path = (model_dir.dir / "model.onnx").string();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = modelPath();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  for (const bool forward_only : {false, true}) {
    pgq::OnnxImportOptions options;
    options.path = path;
    options.forward_only = forward_only;
    try {
      pgq::importOnnx(options);
    } catch (const pgq::Error&) {
      // refused with a message: fine
    }
  }
  return 0;
}

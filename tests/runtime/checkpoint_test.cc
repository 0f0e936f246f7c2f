#include "runtime/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "runtime/trainer.h"
#include "support/errors.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

using test::errorOf;

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "pgq_checkpoint_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = (dir_ / "run.ckpt").string();
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all);
    fs::remove_all(dir_);
  }

  // The directory's entries other than the checkpoint itself (temporary files).
  std::vector<std::string> strayFiles() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_))
      if (entry.path().filename() != "run.ckpt") names.push_back(entry.path().filename());
    return names;
  }

  fs::path dir_;
  std::string path_;
};

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

Tensor randomTensor(DType dtype, Shape shape, uint32_t seed) {
  Tensor t(TensorType{dtype, std::move(shape)});
  std::mt19937 rng(seed);
  auto* bytes = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.bytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
  return t;
}

// A checkpoint with every dtype, a scalar, special float values and one tensor larger
// than the writer's 1 MiB buffer.
Checkpoint sampleCheckpoint() {
  Checkpoint c;
  c.step = 1234;
  c.seed = 0xDEADBEEFCAFEF00Dull;
  c.threads = 2;
  c.model_config = "vocab: 256\nd_model: 64\nlayers: 2\n";
  c.recipe = "ops:\n  - match: {role: fwd}\n    format: s8\n";
  c.info = {{"corpus_fingerprint", "0123456789abcdef"}, {"empty", ""}};
  Tensor special(TensorType{DType::kF32, Shape{6}});
  float specials[6] = {-0.0f, std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::denorm_min(), 1.0f / 3.0f, -1e30f};
  std::memcpy(special.raw(), specials, sizeof specials);
  c.tensors.emplace_back("embed.weight", randomTensor(DType::kF32, Shape{256, 64}, 1));
  c.tensors.emplace_back("special", std::move(special));
  c.tensors.emplace_back("big.adam_m", randomTensor(DType::kF32, Shape{300, 1000}, 2));
  c.tensors.emplace_back("bf16", randomTensor(DType::kBF16, Shape{5}, 3));
  c.tensors.emplace_back("s8", randomTensor(DType::kS8, Shape{2, 3, 2}, 4));
  c.tensors.emplace_back("u8", randomTensor(DType::kU8, Shape{7}, 5));
  c.tensors.emplace_back("scalar.step", randomTensor(DType::kS32, Shape(std::vector<int64_t>{}), 6));
  return c;
}

void expectEqual(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.threads, b.threads);
  EXPECT_EQ(a.model_config, b.model_config);
  EXPECT_EQ(a.recipe, b.recipe);
  EXPECT_EQ(a.info, b.info);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    ASSERT_EQ(a.tensors[i].second.type(), b.tensors[i].second.type()) << a.tensors[i].first;
    EXPECT_EQ(std::memcmp(a.tensors[i].second.raw(), b.tensors[i].second.raw(),
                          a.tensors[i].second.bytes()),
              0)
        << a.tensors[i].first;
  }
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Crc32, MatchesTheStandardCheckValueAndChains) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  // Slice-by-8 against the bitwise definition, at every length and alignment mix.
  std::mt19937 rng(3);
  std::vector<uint8_t> bytes(200);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  for (size_t n = 0; n <= bytes.size(); ++n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= bytes[i];
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    ASSERT_EQ(crc32(bytes.data(), n), ~c) << n;
    size_t half = n / 3;
    ASSERT_EQ(crc32(bytes.data() + half, n - half, crc32(bytes.data(), half)), ~c) << n;
  }
}

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  Checkpoint saved = sampleCheckpoint();
  saveCheckpoint(path_, saved);
  expectEqual(loadCheckpoint(path_), saved);
  EXPECT_TRUE(strayFiles().empty());
  // Saving again replaces the file.
  saved.step = 99;
  saved.tensors.pop_back();
  saveCheckpoint(path_, saved);
  expectEqual(loadCheckpoint(path_), saved);
  // An empty checkpoint is valid too.
  saveCheckpoint(path_, Checkpoint{});
  expectEqual(loadCheckpoint(path_), Checkpoint{});
}

TEST_F(CheckpointTest, DiskFullKeepsTheOldCheckpointAndLeavesNoTempFile) {
  Checkpoint old;
  old.step = 7;
  old.tensors.emplace_back("w", randomTensor(DType::kF32, Shape{10}, 1));
  saveCheckpoint(path_, old);
  // A file size limit makes write(2) fail with EFBIG part-way, like a full disk.
  struct rlimit saved_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved_limit), 0);
  auto saved_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved_limit;
  small.rlim_cur = 100000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error = errorOf([&] { saveCheckpoint(path_, sampleCheckpoint()); });
  ::setrlimit(RLIMIT_FSIZE, &saved_limit);
  std::signal(SIGXFSZ, saved_handler);
  EXPECT_TRUE(contains(error, "cannot write the temporary file")) << error;
  EXPECT_TRUE(contains(error, "previous checkpoint is unchanged")) << error;
  expectEqual(loadCheckpoint(path_), old);
  EXPECT_TRUE(strayFiles().empty());
}

TEST_F(CheckpointTest, FailedRenameLeavesNoTempFile) {
  fs::create_directory(dir_ / "run.ckpt");
  fs::create_directory(dir_ / "run.ckpt" / "occupied");
  std::string error = errorOf([&] { saveCheckpoint(path_, sampleCheckpoint()); });
  EXPECT_TRUE(contains(error, "is a directory, expected a file")) << error;
  EXPECT_TRUE(strayFiles().empty());
  EXPECT_TRUE(contains(errorOf([&] { loadCheckpoint(path_); }), "is a directory, expected a regular file"));
  EXPECT_TRUE(contains(errorOf([&] { saveCheckpoint((dir_ / "no/such/dir").string(), {}); }),
                       "no/such/dir"));
}

TEST_F(CheckpointTest, TruncationIsReportedWithItsLocation) {
  saveCheckpoint(path_, sampleCheckpoint());
  std::string bytes = readBytes(path_);
  std::string cut_path = (dir_ / "cut.ckpt").string();
  // Every 40th of the file plus the edges of the header and trailer.
  std::vector<size_t> cuts = {0, 3, 8, 11, 12, 20, 23, 24, 30, bytes.size() - 4,
                              bytes.size() - 1};
  for (size_t i = 1; i < 40; ++i) cuts.push_back(bytes.size() * i / 40);
  for (size_t cut : cuts) {
    writeBytes(cut_path, bytes.substr(0, cut));
    std::string error = errorOf([&] { loadCheckpoint(cut_path); });
    EXPECT_TRUE(contains(error, cut_path + " is truncated")) << "cut at " << cut << ": " << error;
  }
  // Inside the data of the big tensor: named, with the byte offset of its data.
  size_t name_at = bytes.find("big.adam_m");
  ASSERT_NE(name_at, std::string::npos);
  writeBytes(cut_path, bytes.substr(0, name_at + 1000));
  std::string error = errorOf([&] { loadCheckpoint(cut_path); });
  EXPECT_TRUE(contains(error, "inside tensor 'big.adam_m' (3 of 7), whose data needs 1200000 "
                              "bytes at byte offset"))
      << error;
  writeBytes(cut_path, bytes.substr(0, 40));
  error = errorOf([&] { loadCheckpoint(cut_path); });
  EXPECT_TRUE(contains(error, "inside the run fields")) << error;
  writeBytes(cut_path, bytes.substr(0, bytes.size() - 2));
  error = errorOf([&] { loadCheckpoint(cut_path); });
  EXPECT_TRUE(contains(error, "inside the final checksum")) << error;
}

TEST_F(CheckpointTest, FlippedBytesAreDetected) {
  saveCheckpoint(path_, sampleCheckpoint());
  std::string bytes = readBytes(path_);
  std::string bad_path = (dir_ / "bad.ckpt").string();
  auto flipped = [&](size_t at) {
    std::string copy = bytes;
    copy[at] = static_cast<char>(copy[at] ^ 0x10);
    writeBytes(bad_path, copy);
    return errorOf([&] { loadCheckpoint(bad_path); });
  };
  EXPECT_TRUE(contains(flipped(0), "not a pgq checkpoint"));
  EXPECT_TRUE(contains(flipped(8), "format version 17 is not supported"));
  for (size_t at : {12, 19, 20, 23})
    EXPECT_TRUE(contains(flipped(at), "header checksum mismatch")) << at;
  std::vector<size_t> positions = {24, 40, 50, bytes.size() - 5, bytes.size() - 1};
  for (size_t i = 1; i < 60; ++i) positions.push_back(24 + (bytes.size() - 24) * i / 60);
  for (size_t at : positions) {
    std::string error = flipped(at);
    EXPECT_TRUE(contains(error, "checksum mismatch")) << "byte " << at << ": " << error;
  }
}

TEST_F(CheckpointTest, WrongMagicVersionAndMissingFile) {
  writeBytes(path_, "step,loss\n1,2.5\n");
  EXPECT_EQ(errorOf([&] { loadCheckpoint(path_); }),
            "checkpoint " + path_ + ": not a pgq checkpoint (the file does not start with "
                                    "\"PGQ-CKPT\")");
  writeBytes(path_, "XY");
  EXPECT_TRUE(contains(errorOf([&] { loadCheckpoint(path_); }), "not a pgq checkpoint"));
  writeBytes(path_, "PG");  // A prefix of the magic: a cut checkpoint.
  EXPECT_TRUE(contains(errorOf([&] { loadCheckpoint(path_); }), "is truncated"));
  saveCheckpoint(path_, Checkpoint{});
  std::string bytes = readBytes(path_);
  bytes[8] = 2;
  writeBytes(path_, bytes);
  EXPECT_EQ(errorOf([&] { loadCheckpoint(path_); }),
            "checkpoint " + path_ + ": format version 2 is not supported; this pgq reads version 1");
  std::string missing = (dir_ / "missing.ckpt").string();
  EXPECT_EQ(errorOf([&] { loadCheckpoint(missing); }),
            "checkpoint " + missing + ": cannot open: No such file or directory");
}

// Corrupt lengths behind a valid checksum (a crafted file, or corruption the CRC
// missed) are caught by the bounds checks before anything is allocated.
TEST_F(CheckpointTest, AbsurdLengthsAreRejectedWithoutAllocating) {
  Checkpoint small;
  small.model_config = "vocab: 256\n";
  small.tensors.emplace_back("w", randomTensor(DType::kF32, Shape{4}, 1));
  saveCheckpoint(path_, small);
  const std::string bytes = readBytes(path_);
  auto patched = [&](size_t at, uint64_t value, size_t width) {
    std::string copy = bytes;
    std::memcpy(copy.data() + at, &value, width);
    uint32_t crc = crc32(copy.data(), copy.size() - 4);
    std::memcpy(copy.data() + copy.size() - 4, &crc, 4);
    writeBytes(path_, copy);
    return errorOf([&] { loadCheckpoint(path_); });
  };
  // Offsets: header 24, step/seed/threads 20, config 8+11, recipe 8, info count 4, then
  // the tensor count (75), name 8+1, dtype 8+3 (96..99), rank 4, dims (103), byte count.
  const size_t config_length_at = 44, tensor_count_at = 75, dtype_at = 96, dim_at = 103;
  ASSERT_EQ(bytes.substr(dtype_at, 3), "f32");
  std::string error = patched(config_length_at, uint64_t{1} << 60, 8);
  EXPECT_TRUE(contains(error, "is corrupt at byte offset 52 (in the model config)")) << error;
  EXPECT_TRUE(contains(error, "needs 1152921504606846976 bytes")) << error;

  error = patched(tensor_count_at, 0xFFFFFFFFu, 4);
  EXPECT_TRUE(contains(error, "tensor count 4294967295 cannot fit")) << error;

  error = patched(dim_at, uint64_t{1} << 38, 8);
  EXPECT_TRUE(contains(error, "tensor 'w' (1 of 1)")) << error;
  EXPECT_TRUE(contains(error, "data byte count 16, expected 1099511627776")) << error;
  error = patched(dim_at, uint64_t{1} << 62, 8);
  EXPECT_TRUE(contains(error, "more than 2^40 elements")) << error;
  error = patched(dtype_at, 0x343666, 3);  // "f64"
  EXPECT_TRUE(contains(error, "unknown dtype 'f64'")) << error;
}

// Rewrites the size the header records and both checksums after an edit, as a forger
// would: the file then passes every integrity check and only the field checks remain.
void reseal(std::string& bytes) {
  uint64_t size = bytes.size();
  std::memcpy(bytes.data() + 12, &size, 8);
  uint32_t header_crc = crc32(bytes.data(), 20);
  std::memcpy(bytes.data() + 20, &header_crc, 4);
  uint32_t crc = crc32(bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
}

template <typename T>
std::string withScalar(std::string bytes, size_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof value);
  reseal(bytes);
  return bytes;
}

// The run fields (offsets 24 step, 32 seed, 40 threads) out of the range any writer
// produces, behind a valid checksum.
TEST_F(CheckpointTest, ForgedRunFieldsAreRefusedByName) {
  Checkpoint small;
  small.step = 3;
  small.threads = 2;
  small.tensors.emplace_back("w", randomTensor(DType::kF32, Shape{4}, 1));
  saveCheckpoint(path_, small);
  const std::string bytes = readBytes(path_);
  auto load = [&](const std::string& forged) {
    writeBytes(path_, forged);
    return errorOf([&] { loadCheckpoint(path_); });
  };
  EXPECT_EQ(load(withScalar<int64_t>(bytes, 24, -1)),
            "checkpoint " + path_ + ": field 'step' is -1, expected a step count >= 0");
  EXPECT_EQ(load(withScalar<int64_t>(bytes, 24, INT64_MIN)),
            "checkpoint " + path_ + ": field 'step' is -9223372036854775808, expected a step count >= 0");
  for (int32_t threads : {0, -7, 1 << 30})
    EXPECT_EQ(load(withScalar<int32_t>(bytes, 40, threads)),
              fmt::format("checkpoint {}: field 'threads' is {}, expected a thread count in [1, 1048576]", path_,
                          threads));
  // Any seed is a valid one; only the run it continues can judge it (ForgedCheckpoint).
  EXPECT_EQ(load(withScalar<uint64_t>(bytes, 32, 99)), "no error");
}

// A real run's checkpoint with one field forged, resumed (or started from) the way a
// user would: refused with the file and the field, never resumed and never an
// assertion.
class ForgedCheckpoint : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    run_.model = loadModelConfig("tiny");
    run_.steps = 10;
    run_.stop_after = 3;
    run_.eval_every = 0;
    run_.eval_batches = 1;
    run_.optimizer.warmup = 2;
    run_.out_dir = (dir_ / "run").string();
    run_.progress = false;
    train(run_);
    run_.stop_after = 0;
    run_.resume = true;
    checkpoint_ = run_.out_dir + "/checkpoint.pgqckpt";
    genuine_ = readBytes(checkpoint_);
  }

  // Resumes the run from `forged`; the message, or "no error".
  std::string resume(const std::string& forged) {
    writeBytes(checkpoint_, forged);
    return errorOf([&] { train(run_); });
  }

  // The checkpoint with the value of info entry `key` replaced.
  std::string withInfo(const std::string& key, const std::string& value) const {
    std::string bytes = genuine_;
    size_t at = bytes.find(key);
    EXPECT_NE(at, std::string::npos) << key;
    at += key.size();
    uint64_t old_size;
    std::memcpy(&old_size, bytes.data() + at, 8);
    uint64_t new_size = value.size();
    std::memcpy(bytes.data() + at, &new_size, 8);
    bytes.replace(at + 8, old_size, value);
    reseal(bytes);
    return bytes;
  }

  TrainOptions run_;
  std::string checkpoint_;
  std::string genuine_;
};

TEST_F(ForgedCheckpoint, EveryFieldIsCheckedAgainstTheRun) {
  auto expectRefused = [&](const std::string& forged, const std::string& message) {
    std::string error = resume(forged);
    EXPECT_NE(error.find("checkpoint " + checkpoint_ + ": " + message), std::string::npos) << error;
  };
  expectRefused(withScalar<int64_t>(genuine_, 24, -5), "field 'step' is -5, expected a step count >= 0");
  expectRefused(withScalar<int64_t>(genuine_, 24, 11), "field 'step' is 11, past the run's planned_steps 10");
  expectRefused(withScalar<uint64_t>(genuine_, 32, 1235),
                "field 'seed' is 1235, but this run's seed is 1234 (the model config's `seed`, or --seed)");
  expectRefused(withScalar<int32_t>(genuine_, 40, -1), "field 'threads' is -1, expected a thread count in [1,");
  for (const char* planned : {"0", "-10", "ten", "10 ", "", "99999999999999999999", "9007199254740993"})
    expectRefused(withInfo("planned_steps", planned),
                  fmt::format("field 'planned_steps' is '{}', expected an integer in [1, 2^53]", planned));
  expectRefused(withInfo("precision", "f16"), "field 'precision' is 'f16', expected f32 or bf16");

  // Tensors: one missing, one of another shape.
  writeBytes(checkpoint_, genuine_);
  Checkpoint fewer = loadCheckpoint(checkpoint_);
  std::string dropped = fewer.tensors.back().first;
  fewer.tensors.pop_back();
  saveCheckpoint(checkpoint_, fewer);
  std::string error = errorOf([&] { train(run_); });
  EXPECT_NE(error.find("checkpoint " + checkpoint_ + " does not match the model: missing tensor '" + dropped + "'"),
            std::string::npos)
      << error;
  Checkpoint reshaped = loadCheckpoint((dir_ / "run/checkpoint.pgqckpt").string());
  reshaped.tensors.emplace_back(dropped, randomTensor(DType::kF32, Shape{3}, 1));
  saveCheckpoint(checkpoint_, reshaped);
  error = errorOf([&] { train(run_); });
  EXPECT_NE(error.find("tensor '" + dropped + "' is f32[3], expected f32["), std::string::npos) << error;

  // Starting a new run from a forged checkpoint is refused the same way.
  std::string forged_path = (dir_ / "forged.ckpt").string();
  writeBytes(forged_path, withScalar<int64_t>(genuine_, 24, -5));
  TrainOptions next = run_;
  next.resume = false;
  next.init_from = forged_path;
  next.out_dir = (dir_ / "next").string();
  error = errorOf([&] { train(next); });
  EXPECT_NE(error.find("checkpoint " + forged_path + ": field 'step' is -5"), std::string::npos) << error;

  // The genuine checkpoint still resumes: nothing above was too strict.
  EXPECT_EQ(resume(genuine_), "no error");
}

TEST(CheckpointMatches, ReportsEveryDifferenceByName) {
  Checkpoint c;
  c.tensors.emplace_back("a", Tensor(TensorType{DType::kF32, Shape{2, 3}}));
  c.tensors.emplace_back("b", Tensor(TensorType{DType::kF32, Shape{4}}));
  c.tensors.emplace_back("c", Tensor(TensorType{DType::kBF16, Shape{4}}));
  c.tensors.emplace_back("extra", Tensor(TensorType{DType::kS8, Shape{1}}));
  std::vector<std::pair<std::string, TensorType>> expected = {
      {"a", TensorType{DType::kF32, Shape{2, 3}}},
      {"b", TensorType{DType::kF32, Shape{5}}},
      {"c", TensorType{DType::kF32, Shape{4}}},
      {"missing", TensorType{DType::kF32, Shape{8}}},
  };
  EXPECT_EQ(errorOf([&] { checkCheckpointMatches(c, expected, "x.ckpt"); }),
            "checkpoint x.ckpt does not match the model: tensor 'b' is f32[4], expected f32[5]; "
            "tensor 'c' is bf16[4], expected f32[4]; missing tensor 'missing' (expected "
            "f32[8]); unexpected tensor 'extra' (s8[1])");
  expected = {{"a", TensorType{DType::kF32, Shape{2, 3}}},
              {"b", TensorType{DType::kF32, Shape{4}}},
              {"c", TensorType{DType::kBF16, Shape{4}}},
              {"extra", TensorType{DType::kS8, Shape{1}}}};
  EXPECT_NO_THROW(checkCheckpointMatches(c, expected, "x.ckpt"));
}

}  // namespace
}  // namespace pgq

#include "runtime/corpus.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <optional>
#include <string>

#include "support/errors.h"
#include "support/hash.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

using test::errorOf;

namespace fs = std::filesystem;

class CorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "pgq_corpus_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const fs::path& name, const std::string& content) {
    fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }

  fs::path dir_;
};

std::string text(size_t size) {
  std::string s;
  for (size_t i = 0; i < size; ++i) s += static_cast<char>('a' + i % 26);
  return s;
}

std::string bytesOf(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

TEST_F(CorpusTest, FileSplitsIntoTrainThenValidation) {
  std::string content = text(1000);
  fs::path path = write("corpus.txt", content);
  Corpus corpus = loadCorpus(path.string(), 0.1);
  EXPECT_EQ(corpus.source, path.string());
  EXPECT_EQ(corpus.files, 1);
  ASSERT_EQ(corpus.train.size(), 900u);
  ASSERT_EQ(corpus.val.size(), 100u);
  EXPECT_EQ(bytesOf(corpus.train), content.substr(0, 900));
  EXPECT_EQ(bytesOf(corpus.val), content.substr(900));
  EXPECT_EQ(corpus.fingerprint,
            fnv1a64(reinterpret_cast<const uint8_t*>(content.data()), content.size()));
  // FNV-1a 64 of "a" is a published test vector.
  const uint8_t a = 'a';
  EXPECT_EQ(fnv1a64(&a, 1), 0xaf63dc4c8601ec8cull);
}

TEST_F(CorpusTest, DirectoryConcatenatesTextFilesInNameOrder) {
  fs::create_directory(dir_ / "text");
  write("text/b", "second file\n");
  write("text/a", "first file\n");
  write("text/a.dat", std::string("\0\0\0\x02index", 9));  // Binary: skipped.
  fs::create_symlink("a", dir_ / "text" / "a.u8");         // Symlink: skipped.
  fs::create_directory(dir_ / "text" / "sub");             // Subdirectory: skipped.
  write("text/sub/c", "not read\n");
  Corpus corpus = loadCorpus((dir_ / "text").string(), 0.25);
  EXPECT_EQ(corpus.files, 2);
  EXPECT_EQ(bytesOf(corpus.train) + bytesOf(corpus.val), "first file\nsecond file\n");
  EXPECT_EQ(corpus.val.size(), 5u);  // floor(23 * 0.25)
}

TEST_F(CorpusTest, ErrorsNameThePathAndTheProblem) {
  std::string missing = (dir_ / "missing.txt").string();
  EXPECT_NE(errorOf([&] { loadCorpus(missing); }).find(missing + ": no such file"),
            std::string::npos);

  fs::path empty = write("empty.txt", "");
  EXPECT_NE(errorOf([&] { loadCorpus(empty.string()); }).find("empty"), std::string::npos);

  fs::path binary = write("binary.bin", std::string("abc\0def", 7));
  EXPECT_NE(errorOf([&] { loadCorpus(binary.string()); }).find("byte offset 3 is a NUL byte"),
            std::string::npos);

  fs::create_directory(dir_ / "nothing");
  write("nothing/x.dat", std::string("\0", 1));
  fs::create_symlink("x.dat", dir_ / "nothing" / "x.u8");
  EXPECT_NE(errorOf([&] { loadCorpus((dir_ / "nothing").string()); }).find("no text file"),
            std::string::npos);

  fs::path ok = write("ok.txt", text(100));
  EXPECT_NE(errorOf([&] { loadCorpus(ok.string(), 0.0); }).find("must be in (0, 1)"),
            std::string::npos);
  EXPECT_NE(errorOf([&] { loadCorpus(ok.string(), 1.0); }).find("must be in (0, 1)"),
            std::string::npos);
}

TEST_F(CorpusTest, FitsChecksBothSplitsAgainstSeqLen) {
  fs::path path = write("corpus.txt", text(1200));
  Corpus corpus = loadCorpus(path.string(), 0.1);
  ASSERT_EQ(corpus.val.size(), 120u);
  EXPECT_NO_THROW(checkCorpusFits(corpus, 119));
  EXPECT_EQ(errorOf([&] { checkCorpusFits(corpus, 128); }),
            "corpus " + path.string() +
                ": validation split has 120 bytes, needs at least seq_len+1 = 129; use a longer "
                "text or a smaller seq_len");
  corpus.val.resize(5000);
  EXPECT_NE(errorOf([&] { checkCorpusFits(corpus, 1080); })
                .find("training split has 1080 bytes, needs at least seq_len+1 = 1081"),
            std::string::npos);
}

TEST_F(CorpusTest, APreSplitDirectoryIsUsedAsItIsSplit) {
  fs::create_directory(dir_ / "split");
  write("split/train.txt", "training text\n");
  write("split/val.txt", "held out\n");
  write("split/SOURCES.txt", "not read\n");
  Corpus corpus = loadCorpus((dir_ / "split").string(), 0.5);  // the fraction does not apply
  EXPECT_EQ(bytesOf(corpus.train), "training text\n");
  EXPECT_EQ(bytesOf(corpus.val), "held out\n");
  EXPECT_EQ(corpus.files, 2);
  EXPECT_EQ(corpus.fingerprint, fnv1a64(reinterpret_cast<const uint8_t*>("training text\nheld out\n"), 23));

  const std::string split = (dir_ / "split").string();
  fs::remove(dir_ / "split" / "val.txt");
  EXPECT_EQ(errorOf([&] { loadCorpus(split); }),
            "corpus " + split + ": a pre-split corpus needs both train.txt and val.txt; val.txt is missing");
  write("split/val.txt", "");
  EXPECT_EQ(errorOf([&] { loadCorpus(split); }),
            "corpus " + split + ": val.txt is empty; a pre-split corpus needs text in both splits");
  write("split/val.txt", std::string("a\0b", 3));
  EXPECT_NE(errorOf([&] { loadCorpus(split); }).find("val.txt: byte offset 1 is a NUL byte"), std::string::npos);
}

TEST_F(CorpusTest, EnglishNamesTheAssembledCorpus) {
  const char* saved = std::getenv("PGQ_DATA_DIR");
  std::optional<std::string> restore = saved ? std::optional<std::string>(saved) : std::nullopt;
  ::setenv("PGQ_DATA_DIR", dir_.c_str(), 1);
  const std::string english = (dir_ / "english").string();
  EXPECT_EQ(errorOf([] { loadCorpus("english"); }),
            "corpus english: " + english + " has no train.txt and val.txt (from PGQ_DATA_DIR); run "
            "scripts/setup.sh to assemble it (or scripts/make_english_corpus.py " + english + ")");
  fs::create_directory(dir_ / "english");
  write("english/train.txt", "In the beginning\n");
  write("english/val.txt", "was the word\n");
  Corpus corpus = loadCorpus("english");
  EXPECT_EQ(corpus.source, english);
  EXPECT_EQ(bytesOf(corpus.val), "was the word\n");
  EXPECT_EQ(resolveCorpusPath("other"), "other");
  if (restore) ::setenv("PGQ_DATA_DIR", restore->c_str(), 1);
  else ::unsetenv("PGQ_DATA_DIR");
}

// Debian's `fortunes` package (installed by scripts/setup.sh) is the default corpus.
TEST(CorpusFortunes, LoadsTheInstalledDirectory) {
  const std::string dir = "/usr/share/games/fortunes";
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing: scripts/setup.sh installs `fortunes`";
  Corpus corpus = loadCorpus(dir);
  size_t total = corpus.train.size() + corpus.val.size();
  EXPECT_GT(total, size_t{2} << 20);  // about 2.5 MB of text
  EXPECT_GT(corpus.files, 10);
  size_t plain = 0;
  for (const std::vector<uint8_t>* part : {&corpus.train, &corpus.val})
    for (uint8_t c : *part) {
      EXPECT_NE(c, 0);
      plain += (c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t';
    }
  EXPECT_GT(static_cast<double>(plain) / static_cast<double>(total), 0.99);
  EXPECT_NO_THROW(checkCorpusFits(corpus, 256));
}

}  // namespace
}  // namespace pgq

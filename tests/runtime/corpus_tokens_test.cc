#include "runtime/corpus_tokens.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "support/errors.h"
#include "support/hash.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;
using test::englishLikeText;
using test::errorOf;

std::vector<uint32_t> idsOf(TokenSpan tokens) {
  std::vector<uint32_t> ids(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) ids[i] = tokens[i];
  return ids;
}

std::string textOf(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }

class CorpusTokensTest : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    corpus_ = loadCorpus(write("corpus.txt", englishLikeText(300'000)));
    model_ = loadModelConfig("tiny");
    model_.source = "tiny_sp.yaml";
    model_.tokenizer = TokenizerKind::kSentencePiece;
    model_.vocab = 400;
    cache_ = path("cache");
  }

  CorpusTokens tokens() const { return CorpusTokens(corpus_, model_, cache_); }
  // The cache file of this corpus and model with the given suffix (".tokenizer",
  // ".train.tokens"), named as corpus_tokens.h says.
  fs::path cacheFile(const std::string& suffix) const {
    return fs::path(cache_) / "sentencepiece" /
           fmt::format("{:016x}-{}-bpe-{}-v{}{}", corpus_.fingerprint, corpus_.train.size(), model_.vocab,
                       kCacheFormatVersion, suffix);
  }

  Corpus corpus_;
  ModelConfig model_;
  std::string cache_;
};

TEST_F(CorpusTokensTest, BytesAreTheCorpusItself) {
  model_ = loadModelConfig("tiny");
  CorpusTokens bytes(corpus_, model_, cache_);
  EXPECT_EQ(bytes.train().width(), 1);
  EXPECT_EQ(bytes.train().size(), corpus_.train.size());
  EXPECT_EQ(bytes.val()[0], corpus_.val[0]);
  EXPECT_EQ(bytes.tokenizerHash(), 0u);
  EXPECT_FALSE(fs::exists(cache_));  // bytes need no cache
}

TEST_F(CorpusTokensTest, TokenFilesHoldTheEncodingAndASecondLoadReusesThem) {
  CorpusTokens first = tokens();
  EXPECT_FALSE(first.reused());
  EXPECT_EQ(first.tokenizer().vocabSize(), 400);
  // The mapped ids are the encoding of each split, and decode back to its bytes.
  for (auto [split, bytes] : {std::pair{first.train(), &corpus_.train}, std::pair{first.val(), &corpus_.val}}) {
    std::vector<uint32_t> expected;
    first.tokenizer().encode(textOf(*bytes), expected);
    EXPECT_EQ(split.width(), 2);  // vocab <= 65536: uint16
    EXPECT_EQ(idsOf(split), expected);
    EXPECT_EQ(first.tokenizer().decode(expected), textOf(*bytes));
  }
  EXPECT_EQ(fs::file_size(cacheFile(".train.tokens")), 64 + 2 * first.train().size());

  auto model_time = fs::last_write_time(cacheFile(".tokenizer"));
  auto tokens_time = fs::last_write_time(cacheFile(".train.tokens"));
  CorpusTokens second = tokens();
  EXPECT_TRUE(second.reused());
  EXPECT_EQ(fs::last_write_time(cacheFile(".tokenizer")), model_time);  // not trained again
  EXPECT_EQ(fs::last_write_time(cacheFile(".train.tokens")), tokens_time);
  EXPECT_EQ(second.tokenizerHash(), first.tokenizerHash());
  EXPECT_EQ(idsOf(second.train()), idsOf(first.train()));
  EXPECT_EQ(idsOf(second.val()), idsOf(first.val()));
}

// A cache directory that cannot take the files (here: files over 16 KiB refused with
// EFBIG by RLIMIT_FSIZE, as a full disk refuses them with ENOSPC) does not stop the run:
// the ids stay in memory, the same as cached ones, and no file or temporary is left.
TEST_F(CorpusTokensTest, ACacheThatCannotTakeTheFilesLeavesTheIdsInMemory) {
  std::vector<uint32_t> expected;
  {
    CorpusTokens reference(corpus_, model_, path("reference"));
    expected = idsOf(reference.train());
  }
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 16384;
  auto previous = std::signal(SIGXFSZ, SIG_IGN);  // else the write kills the process
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::optional<CorpusTokens> t;
  std::string error;
  try {
    t.emplace(tokens());
  } catch (const Error& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  ASSERT_TRUE(t) << error;
  EXPECT_FALSE(t->reused());
  EXPECT_EQ(idsOf(t->train()), expected);
  EXPECT_GT(expected.size() * 2, 16384u);  // the limit did refuse the ids
  EXPECT_FALSE(fs::exists(cacheFile(".train.tokens")));
  for (const auto& entry : fs::directory_iterator(fs::path(cache_) / "sentencepiece"))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
}

TEST_F(CorpusTokensTest, DamagedEntriesAreRebuilt) {
  const std::vector<uint32_t> good = idsOf(tokens().train());
  auto model_time = fs::last_write_time(cacheFile(".tokenizer"));
  // A flipped payload byte: the hash differs; only the token file is rebuilt.
  {
    std::fstream f(cacheFile(".train.tokens"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 10);
    f.put('\x7f');
  }
  CorpusTokens flipped = tokens();
  EXPECT_FALSE(flipped.reused());
  EXPECT_EQ(idsOf(flipped.train()), good);
  EXPECT_EQ(fs::last_write_time(cacheFile(".tokenizer")), model_time);
  // A truncated file and a file that is not ours at all.
  fs::resize_file(cacheFile(".val.tokens"), 100);
  write("cache/sentencepiece/" + cacheFile(".train.tokens").filename().string(), "garbage");
  CorpusTokens truncated = tokens();
  EXPECT_FALSE(truncated.reused());
  EXPECT_EQ(idsOf(truncated.train()), good);
  EXPECT_TRUE(tokens().reused());
}

TEST_F(CorpusTokensTest, AModelThatDoesNotLoadOrHasAnotherVocabIsRetrained) {
  const std::vector<uint32_t> good = idsOf(tokens().train());
  const fs::path model_path = cacheFile(".tokenizer");
  const std::string original = content(model_path.string());
  // A header that is right for a payload that is not a SentencePiece model: the header's
  // count (offset 32) and payload hash (offset 40) updated by hand, as the format says.
  auto withPayload = [&](const std::string& payload) {
    std::string file = original.substr(0, 64) + payload;
    uint64_t count = payload.size();
    uint64_t hash = fnv1a64(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
    std::memcpy(file.data() + 32, &count, 8);
    std::memcpy(file.data() + 40, &hash, 8);
    write("cache/sentencepiece/" + model_path.filename().string(), file);
  };
  withPayload("not a model");
  CorpusTokens retrained = tokens();
  EXPECT_FALSE(retrained.reused());
  // Training is deterministic: the same model (the header's build time differs).
  EXPECT_EQ(content(model_path.string()).substr(64), original.substr(64));
  EXPECT_EQ(idsOf(retrained.train()), good);

  // A valid model of another vocabulary under this key.
  model_.vocab = 350;
  tokens();
  const std::string other = content(cacheFile(".tokenizer").string());
  model_.vocab = 400;
  withPayload(other.substr(64));
  EXPECT_FALSE(tokens().reused());
  EXPECT_EQ(content(model_path.string()).substr(64), original.substr(64));
}

TEST_F(CorpusTokensTest, EntriesOfAnotherKeyAreNotReused) {
  const std::vector<uint32_t> good = idsOf(tokens().train());
  const fs::path train_400 = cacheFile(".train.tokens");
  model_.vocab = 350;
  CorpusTokens other = tokens();
  EXPECT_FALSE(other.reused());  // another vocabulary: its own entry
  EXPECT_NE(idsOf(other.train()), good);
  // The other vocabulary's ids put in this one's place are refused by their key.
  fs::copy_file(cacheFile(".train.tokens"), train_400, fs::copy_options::overwrite_existing);
  model_.vocab = 400;
  CorpusTokens again = tokens();
  EXPECT_FALSE(again.reused());
  EXPECT_EQ(idsOf(again.train()), good);
  // Another corpus (other bytes) is another key too.
  corpus_ = loadCorpus(write("other.txt", englishLikeText(300'000, 2)));
  EXPECT_FALSE(tokens().reused());
}

TEST_F(CorpusTokensTest, CacheDirectoryComesFromTheEnvironment) {
  struct SavedEnv {
    const char* name;
    std::optional<std::string> value;
  };
  std::vector<SavedEnv> saved;
  for (const char* name : {"PGQ_CACHE_DIR", "XDG_CACHE_HOME", "HOME"}) {
    const char* value = std::getenv(name);
    saved.push_back({name, value ? std::optional<std::string>(value) : std::nullopt});
  }
  ::setenv("PGQ_CACHE_DIR", "/tmp/pgq-cache", 1);
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(tokenCacheDirectory(), "/tmp/pgq-cache");
  ::setenv("PGQ_CACHE_DIR", "cache", 1);  // pgq's own variable: refused, not ignored (session 15)
  EXPECT_EQ(errorOf([] { tokenCacheDirectory(); }),
            "PGQ_CACHE_DIR=cache: expected an absolute path (the cache must not depend on the folder pgq is started "
            "in)");
  ::setenv("PGQ_CACHE_DIR", "", 1);
  EXPECT_EQ(tokenCacheDirectory(), "/tmp/xdg/pgq");
  ::unsetenv("PGQ_CACHE_DIR");
  EXPECT_EQ(tokenCacheDirectory(), "/tmp/xdg/pgq");
  ::setenv("XDG_CACHE_HOME", "relative", 1);  // ignored, as XDG says
  EXPECT_EQ(tokenCacheDirectory(), "/home/someone/.cache/pgq");
  ::unsetenv("XDG_CACHE_HOME");
  ::unsetenv("HOME");
  EXPECT_NE(errorOf([] { tokenCacheDirectory(); }).find("PGQ_CACHE_DIR"), std::string::npos);
  for (const SavedEnv& env : saved) {
    if (env.value) ::setenv(env.name, env.value->c_str(), 1);
    else ::unsetenv(env.name);
  }
}

TEST_F(CorpusTokensTest, BadInputsNameTheFileAndTheField) {
  // More pieces than the text can give.
  model_.vocab = 50'000;
  std::string message = errorOf([&] { tokens(); });
  EXPECT_NE(message.find("model tiny_sp.yaml: field 'vocab' is 50000: SentencePiece cannot build"), std::string::npos)
      << message;
  EXPECT_NE(message.find("Vocabulary size"), std::string::npos) << message;
  // A validation split that holds a window of bytes but not of tokens.
  model_.vocab = 400;
  fs::create_directory(dir_ / "split");
  write("split/train.txt", englishLikeText(300'000));
  write("split/val.txt", englishLikeText(100, 3));
  corpus_ = loadCorpus(path("split"));
  model_.seq_len = 64;
  message = errorOf([&] { tokens(); });
  EXPECT_NE(message.find("corpus " + path("split") + ": validation split has "), std::string::npos) << message;
  EXPECT_NE(message.find(" tokens, needs at least seq_len+1 = 65"), std::string::npos) << message;
  // A cache entry that is not a regular file is refused, not removed.
  model_.seq_len = 16;
  corpus_ = loadCorpus(path("corpus.txt"));
  tokens();
  fs::path entry = cacheFile(".train.tokens");
  fs::remove(entry);
  fs::create_directory(entry);
  message = errorOf([&] { tokens(); });
  EXPECT_NE(message.find(entry.string() + ": is not a regular file"), std::string::npos) << message;
}

}  // namespace
}  // namespace pgq

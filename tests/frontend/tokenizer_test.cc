#include "frontend/tokenizer.h"

#include <algorithm>

#include <gtest/gtest.h>

#include <numeric>

#include "support/errors.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

using test::englishLikeText;
using test::errorOf;

// Text the training data never showed: other scripts, an emoji, control characters, runs
// of spaces and tabs at the start and the end of lines, a carriage return, blank lines,
// no final newline.
const std::string kUnseen =
    "  Leading spaces, \t tabs\tand   runs   of spaces.  \n"
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80 \x01\x7f\r\n"
    "\n\nlast line without a newline ";

uint64_t byteCount(const Tokenizer& tokenizer, const std::vector<uint32_t>& ids) {
  uint64_t bytes = 0;
  for (uint32_t id : ids) bytes += tokenizer.pieceBytes()[id];
  return bytes;
}

TEST(Tokenizer, BytesIsTheIdentity) {
  std::unique_ptr<Tokenizer> bytes = bytesTokenizer();
  EXPECT_EQ(bytes->vocabSize(), 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::vector<uint32_t> ids;
  bytes->encode(all, ids);
  ASSERT_EQ(ids.size(), 256u);
  for (uint32_t b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(bytes->decode(ids), all);
  EXPECT_EQ(byteCount(*bytes, ids), 256u);
}

class SentencePieceTest : public ::testing::TestWithParam<SentencePieceModel> {};

TEST_P(SentencePieceTest, RoundTripsEveryTextExactlyAndCountsItsBytes) {
  const std::string corpus = englishLikeText(200'000);
  std::unique_ptr<Tokenizer> tokenizer = loadSentencePiece(trainSentencePiece(corpus, GetParam(), 500));
  EXPECT_EQ(tokenizer->vocabSize(), 500);
  for (const std::string& text : {corpus, kUnseen, englishLikeText(5'000, 99), std::string()}) {
    std::vector<uint32_t> ids;
    tokenizer->encode(text, ids);
    EXPECT_EQ(tokenizer->decode(ids), text);
    EXPECT_EQ(byteCount(*tokenizer, ids), text.size());
    for (uint32_t id : ids) EXPECT_LT(id, 500u);
  }
  // Subwords, not bytes: the training text takes far fewer tokens than bytes.
  std::vector<uint32_t> ids;
  tokenizer->encode(corpus, ids);
  EXPECT_LT(static_cast<double>(ids.size()), 0.5 * static_cast<double>(corpus.size()));
  // Encoding appends.
  std::vector<uint32_t> twice = ids;
  tokenizer->encode(corpus, twice);
  EXPECT_EQ(twice.size(), 2 * ids.size());
}

TEST_P(SentencePieceTest, TrainingIsDeterministic) {
  const std::string corpus = englishLikeText(100'000, 5);
  EXPECT_EQ(trainSentencePiece(corpus, GetParam(), 400), trainSentencePiece(corpus, GetParam(), 400));
}

// Issue 29, 13: SentencePiece skips lines over 4192 bytes; a corpus on one line trains
// as well as the same text broken into lines (pgq cuts long lines for training only).
TEST_P(SentencePieceTest, ACorpusOnOneLineTrains) {
  std::string one_line = englishLikeText(60'000);
  std::replace(one_line.begin(), one_line.end(), '\n', ' ');
  ASSERT_EQ(one_line.find('\n'), std::string::npos);
  std::unique_ptr<Tokenizer> tokenizer = loadSentencePiece(trainSentencePiece(one_line, GetParam(), 400));
  EXPECT_EQ(tokenizer->vocabSize(), 400);
  std::vector<uint32_t> ids;
  tokenizer->encode(one_line, ids);
  EXPECT_EQ(tokenizer->decode(ids), one_line);
  EXPECT_LT(ids.size(), one_line.size() / 2);  // pieces, not bytes
}

INSTANTIATE_TEST_SUITE_P(Models, SentencePieceTest,
                         ::testing::Values(SentencePieceModel::kBpe, SentencePieceModel::kUnigram),
                         [](const auto& info) { return info.param == SentencePieceModel::kBpe ? "bpe" : "unigram"; });

TEST(SentencePiece, AVocabularyTheTextCannotFillIsAnErrorWithSentencePiecesReason) {
  std::string message = errorOf([] { trainSentencePiece(englishLikeText(20'000), SentencePieceModel::kBpe, 20'000); });
  EXPECT_NE(message.find("Vocabulary size"), std::string::npos) << message;
}

TEST(SentencePiece, LoadRefusesWhatIsNotALosslessModel) {
  EXPECT_NE(errorOf([] { loadSentencePiece("not a model"); }).find("not a SentencePiece model"), std::string::npos);
  EXPECT_NE(errorOf([] { loadSentencePiece(""); }), "no error");
}

}  // namespace
}  // namespace pgq

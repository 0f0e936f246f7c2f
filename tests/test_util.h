#pragma once
// What many test files need: the message of the pgq::Error a call throws, a fixture
// with a fresh temporary directory and small file helpers, and a synthetic text.
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "support/errors.h"

namespace pgq::test {

// The message of the pgq::Error `f` throws, or "no error".
inline std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A test with its own temporary directory `dir_`, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "pgq_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `bytes` to dir_/name and returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return path(name);
  }
  static std::string content(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::filesystem::path dir_;
};

// `bytes` of text with the statistics a tokenizer trains on: lines of words drawn from a
// fixed list, frequent ones more often, with punctuation. The same for a seed on every
// platform (std::mt19937 is specified exactly).
inline std::string englishLikeText(size_t bytes, uint32_t seed = 1) {
  static constexpr std::string_view kWords[] = {
      "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
      "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
      "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when",
      "will", "would", "who", "so", "no", "time", "people", "water", "word", "number", "evening", "morning",
      "light", "earth", "heaven", "river", "mountain", "dictionary", "meaning", "language", "quantize",
      "gradient", "training", "loss", "fortune", "cookie", "computer", "program", "through", "between",
      "without", "something", "everything", "question", "answer", "beginning", "knowledge", "wisdom"};
  constexpr size_t kCount = std::size(kWords);
  std::mt19937 rng(seed);
  std::string text;
  size_t line = 0;
  while (text.size() < bytes) {
    // The product of two uniform draws favours small indexes: a rough Zipf law.
    size_t index = static_cast<size_t>(rng() % kCount) * (rng() % kCount) / kCount;
    std::string_view word = kWords[index];
    if (line == 0) {
      text += static_cast<char>(word[0] - 'a' + 'A');
      text += word.substr(1);
    } else {
      text += word;
    }
    line += word.size() + 1;
    uint32_t r = rng() % 20;
    if (line > 60 + r) {
      text += ".\n";
      line = 0;
    } else {
      text += r == 0 ? ", " : " ";
    }
  }
  text.resize(bytes - 1);
  return text + "\n";
}

}  // namespace pgq::test

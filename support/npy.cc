#include "support/npy.h"

#include <bit>
#include <cstring>
#include <limits>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"
#include "support/escape.h"
#include "support/file_io.h"

namespace pgq {
namespace {

// The data is copied byte for byte into host-order integers and floats.
static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

constexpr std::string_view kMagic = "\x93NUMPY";

int64_t itemSize(std::string_view descr) {
  if (descr == "<f4" || descr == "<i4") return 4;
  if (descr == "<f8" || descr == "<i8") return 8;
  if (descr == "|b1") return 1;
  return 0;
}

// "(2, 3)" as NumPy prints a shape, for messages.
std::string shapeText(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

// The header is a Python dict literal written by NumPy's repr, e.g.
// "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }": string keys, and
// values that are a string, True/False or a tuple of integers.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  void parse(NpyArray& array) {
    bool have_descr = false, have_order = false, have_shape = false, fortran = false;
    expect('{');
    while (!peek('}')) {
      std::string key = string();
      expect(':');
      if (key == "descr") {
        array.descr = string();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        have_order = true;
      } else if (key == "shape") {
        array.shape = tuple();
        have_shape = true;
      } else {
        fail(fmt::format("unexpected key '{}'", key));
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    if (!have_descr || !have_order || !have_shape)
      fail("the header lacks one of 'descr', 'fortran_order' and 'shape'");
    if (fortran)
      throw Error(fmt::format("{}: fortran_order is True; pgq reads C-order arrays only "
                              "(save np.ascontiguousarray(a))", path_));
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    // The header as one line: it ends in a newline and may hold control characters.
    std::string shown;
    for (char c : text_) {
      if (c == '\n') shown += "\\n";
      else if (isControlChar(c)) shown += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      else shown += c;
    }
    throw Error(fmt::format("{}: malformed .npy header at character {}: {} (header: {})", path_, pos_, what, shown));
  }
  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n')) ++pos_;
  }
  bool peek(char c) {
    skipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string string() {
    skipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) fail("expected a quoted string");
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }
  bool boolean() {
    skipSpace();
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}})
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    fail("expected True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (!peek(')')) {
      int64_t dim = 0;
      bool digits = false;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (dim > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("dimension too large");
        dim = dim * 10 + (text_[pos_++] - '0');
        digits = true;
      }
      if (!digits) fail("expected a non-negative integer");
      dims.push_back(dim);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return dims;
  }

  std::string_view text_;
  const std::string& path_;
  size_t pos_ = 0;
};

uint32_t littleEndian(const uint8_t* bytes, int count) {
  uint32_t value = 0;
  for (int i = count - 1; i >= 0; --i) value = value << 8 | bytes[i];
  return value;
}

[[noreturn]] void wrongType(const NpyArray& array, const std::string& path, const char* expected) {
  throw Error(fmt::format("{}: the array is {}, expected {}", path, array.descr, expected));
}

}  // namespace

int64_t NpyArray::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

NpyArray readNpy(const std::string& path) {
  InputFile file = openInputFile(path, InputKind::kNpyArray);
  std::vector<uint8_t> bytes;
  readRest(file, bytes);
  const size_t preamble = kMagic.size() + 2;
  if (bytes.size() < preamble || std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0)
    throw Error(fmt::format("{}: not a NumPy .npy file (it does not start with \\x93NUMPY)", path));
  int major = bytes[kMagic.size()], minor = bytes[kMagic.size() + 1];
  if (major != 1 && major != 2)
    throw Error(fmt::format("{}: .npy format version {}.{}; pgq reads versions 1.0 and 2.0", path, major, minor));
  const int length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < preamble + length_bytes) throw Error(fmt::format("{}: truncated in the .npy header", path));
  const uint64_t header_length = littleEndian(bytes.data() + preamble, length_bytes);
  const uint64_t data_offset = preamble + length_bytes + header_length;
  if (bytes.size() < data_offset) throw Error(fmt::format("{}: truncated in the .npy header", path));

  NpyArray array;
  std::string_view header(reinterpret_cast<const char*>(bytes.data()) + preamble + length_bytes, header_length);
  HeaderParser(header, path).parse(array);
  const int64_t item = itemSize(array.descr);
  if (item == 0)
    throw Error(fmt::format("{}: unsupported dtype '{}'; pgq reads <f4, <f8, <i8, <i4 and |b1", path, array.descr));
  // The byte count the shape needs, refusing one that overflows before comparing.
  uint64_t expected = static_cast<uint64_t>(item);
  for (int64_t dim : array.shape) {
    if (dim != 0 && expected > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(dim))
      throw Error(fmt::format("{}: shape {} is too large", path, shapeText(array.shape)));
    expected *= static_cast<uint64_t>(dim);
  }
  const uint64_t actual = bytes.size() - data_offset;
  if (actual != expected)
    throw Error(fmt::format("{}: {} of data, but shape {} of {} needs {} bytes{}", path,
                            byteSizeText(actual), shapeText(array.shape), array.descr, expected,
                            actual < expected ? " (truncated)" : ""));
  array.data.assign(bytes.begin() + static_cast<ptrdiff_t>(data_offset), bytes.end());
  return array;
}

void writeNpy(const std::string& path, const std::vector<int64_t>& shape, std::span<const float> values) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    PGQ_ASSERT(dim >= 0, "{}: negative dimension in shape {}", path, shapeText(shape));
    count *= dim;
  }
  PGQ_ASSERT(count == static_cast<int64_t>(values.size()), "{}: shape {} has {} elements, given {}", path,
             shapeText(shape), count, values.size());
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': {}, }}", shapeText(shape));
  // NumPy pads the header with spaces and a newline so that the data starts 64-aligned.
  const size_t unpadded = kMagic.size() + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  PGQ_ASSERT(header.size() <= 0xFFFF, "{}: header too long for .npy format 1.0", path);
  std::string text(kMagic);
  text.push_back('\x01');
  text.push_back('\x00');
  text.push_back(static_cast<char>(header.size() & 0xFF));
  text.push_back(static_cast<char>(header.size() >> 8));
  text += header;
  text.append(reinterpret_cast<const char*>(values.data()), values.size_bytes());
  writeFileAtomically(path, text);
}

std::vector<float> npyAsFloats(const NpyArray& array, const std::string& path) {
  std::vector<float> out(static_cast<size_t>(array.numElements()));
  if (array.descr == "<f4") {
    std::memcpy(out.data(), array.data.data(), out.size() * sizeof(float));
  } else if (array.descr == "<f8") {
    for (size_t i = 0; i < out.size(); ++i) {
      double value;
      std::memcpy(&value, array.data.data() + i * sizeof value, sizeof value);
      out[i] = static_cast<float>(value);
    }
  } else {
    wrongType(array, path, "float32 (<f4) or float64 (<f8)");
  }
  return out;
}

std::vector<int32_t> npyAsInt32(const NpyArray& array, const std::string& path) {
  std::vector<int32_t> out(static_cast<size_t>(array.numElements()));
  if (array.descr == "<i4") {
    std::memcpy(out.data(), array.data.data(), out.size() * sizeof(int32_t));
  } else if (array.descr == "<i8") {
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t value;
      std::memcpy(&value, array.data.data() + i * sizeof value, sizeof value);
      if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max())
        throw Error(fmt::format("{}: element {} is {}, outside the int32 range", path, i, value));
      out[i] = static_cast<int32_t>(value);
    }
  } else {
    wrongType(array, path, "int32 (<i4) or int64 (<i8)");
  }
  return out;
}

}  // namespace pgq

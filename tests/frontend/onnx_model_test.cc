// Reading ONNX model files and their constant tensors (frontend/onnx/onnx_model.h):
// every encoding of an initializer, external data, and the files that are not models.
#include "frontend/onnx/onnx_model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <limits>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/errors.h"
#include "support/hash.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

using test::errorOf;

namespace fs = std::filesystem;
using onnx::TensorProto;

const fs::path kNodeTests = "/usr/share/libonnx-testdata/data/node";

class OnnxModelTest : public test::TempDirTest {
 protected:
  ConstTensor read(const TensorProto& t) const { return tensorFromProto(t, dir_, "m.onnx"); }
  std::string readError(const TensorProto& t) const {
    return errorOf([&] { read(t); });
  }
};

std::string fileBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <typename T>
std::string rawBytes(std::initializer_list<T> values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

TensorProto tensor(const std::string& name, int32_t dtype, std::initializer_list<int64_t> dims) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(dtype);
  for (int64_t d : dims) t.add_dims(d);
  return t;
}

void setExternal(TensorProto& t, std::initializer_list<std::pair<std::string, std::string>> entries) {
  t.set_data_location(TensorProto::EXTERNAL);
  for (const auto& [key, value] : entries) {
    onnx::StringStringEntryProto* e = t.add_external_data();
    e->set_key(key);
    e->set_value(value);
  }
}

TEST_F(OnnxModelTest, ReadsARealModelAndItsOpset) {
  onnx::ModelProto model = readOnnxModel((kNodeTests / "test_add" / "model.onnx").string());
  EXPECT_EQ(model.graph().node(0).op_type(), "Add");
  EXPECT_GE(defaultOpset(model), 7);
}

TEST_F(OnnxModelTest, RefusesATextFile) {
  std::string file = write("notes.onnx", "this is a text file, not a model\n");
  EXPECT_EQ(errorOf([&] { readOnnxModel(file); }),
            file + ": not an ONNX model: it is not a valid ONNX protobuf or is truncated");
}

TEST_F(OnnxModelTest, RefusesATruncatedModel) {
  std::string bytes = fileBytes(kNodeTests / "test_gather_0" / "model.onnx");
  ASSERT_GT(bytes.size(), 100u);
  std::string file = write("half.onnx", bytes.substr(0, bytes.size() / 2));
  EXPECT_EQ(errorOf([&] { readOnnxModel(file); }),
            file + ": not an ONNX model: it is not a valid ONNX protobuf or is truncated");
}

TEST_F(OnnxModelTest, RefusesAnEmptyFileAndAModelWithoutGraphOrOpset) {
  std::string empty = write("empty.onnx", "");
  EXPECT_EQ(errorOf([&] { readOnnxModel(empty); }),
            empty + ": not an ONNX model: it has no graph (not a valid ONNX protobuf, or truncated)");
  onnx::ModelProto model = readOnnxModel((kNodeTests / "test_add" / "model.onnx").string());
  model.clear_opset_import();
  model.add_opset_import()->set_domain("com.microsoft");
  std::string no_opset = write("no_opset.onnx", model.SerializeAsString());
  EXPECT_EQ(errorOf([&] { readOnnxModel(no_opset); }),
            no_opset + ": the model imports no opset of the default ONNX domain (\"\" or \"ai.onnx\")");
  model.add_opset_import()->set_domain("ai.onnx");
  model.mutable_opset_import(1)->set_version(17);
  EXPECT_EQ(defaultOpset(model), 17);
}

TEST_F(OnnxModelTest, RefusesAModelOver2GiB) {
  std::string file = (dir_ / "huge.onnx").string();
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, (off_t{1} << 31) + 10), 0);  // sparse: takes no disk space
  ::close(fd);
  EXPECT_EQ(errorOf([&] { readOnnxModel(file); }), file + ": 2147483658 bytes is more than the 2 GiB an ONNX model may have");
}

TEST_F(OnnxModelTest, ParsesAModelOver64MiB) {
  // Protobuf's default limit is 64 MiB; weights inside the model may take more.
  onnx::ModelProto model = readOnnxModel((kNodeTests / "test_add" / "model.onnx").string());
  TensorProto* w = model.mutable_graph()->add_initializer();
  *w = tensor("w", TensorProto::FLOAT, {17 << 20});
  w->mutable_raw_data()->assign(size_t{68} << 20, '\0');
  std::string file = write("big.onnx", model.SerializeAsString());
  onnx::ModelProto back = readOnnxModel(file);
  ASSERT_EQ(back.graph().initializer_size(), 1);
  EXPECT_EQ(back.graph().initializer(0).raw_data().size(), size_t{68} << 20);
}

// readOnnxModel with `weights` leaves large initializers' bytes in the file (the parsed
// model holds them once as values, not also as protobuf bytes): every tensor reads as
// it does from a full parse, the small ones stay inline, the fingerprint is the file's.
TEST_F(OnnxModelTest, LeavesLargeInitializersInTheFile) {
  onnx::ModelProto model = readOnnxModel((kNodeTests / "test_add" / "model.onnx").string());
  const int64_t n = static_cast<int64_t>(kInlineWeightBytes / sizeof(float)) + 3;  // just over the threshold
  std::vector<float> big(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) big[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i % 1000) - 7.0f;
  TensorProto* w = model.mutable_graph()->add_initializer();
  *w = tensor("w", TensorProto::FLOAT, {n});
  w->set_raw_data(std::string(reinterpret_cast<const char*>(big.data()), big.size() * sizeof(float)));
  TensorProto* h = model.mutable_graph()->add_initializer();  // a 16-bit one, decoded from the file
  *h = tensor("h", TensorProto::FLOAT16, {int64_t{40000}});
  h->set_raw_data(std::string(80000, '\x3c'));
  TensorProto* s = model.mutable_graph()->add_initializer();  // small: parsed with the model
  *s = tensor("s", TensorProto::FLOAT, {2});
  s->set_raw_data(rawBytes<float>({1.5f, -2}));
  const std::string bytes = model.SerializeAsString();
  std::string file = write("weights.onnx", bytes);

  uint64_t full_hash = 0, lazy_hash = 0;
  onnx::ModelProto full = readOnnxModel(file, &full_hash);
  ExternalData weights;
  onnx::ModelProto lazy = readOnnxModel(file, &lazy_hash, &weights);
  EXPECT_EQ(full_hash, fnv1a64(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  EXPECT_EQ(lazy_hash, full_hash);
  ASSERT_EQ(lazy.graph().initializer_size(), 3);
  EXPECT_FALSE(lazy.graph().initializer(0).has_raw_data());
  EXPECT_FALSE(lazy.graph().initializer(1).has_raw_data());
  EXPECT_EQ(lazy.graph().initializer(2).raw_data(), full.graph().initializer(2).raw_data());
  EXPECT_EQ(lazy.graph().node(0).op_type(), "Add");  // the rest of the model is as parsed
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const TensorProto& l = lazy.graph().initializer(i);
    const TensorProto& f = full.graph().initializer(i);
    EXPECT_EQ(tensorFromProto(l, dir_, file, &weights).values, tensorFromProto(f, dir_, file).values);
    EXPECT_EQ(floatsFromProto(l, dir_, file, &weights, nullptr), floatsFromProto(f, dir_, file, nullptr, nullptr));
  }
  EXPECT_EQ(floatsFromProto(lazy.graph().initializer(0), dir_, file, &weights, nullptr), big);
  // Without the object that kept the file, the tensor has no data, and says so.
  EXPECT_EQ(errorOf([&] { tensorFromProto(lazy.graph().initializer(0), dir_, file); }),
            fmt::format("{}: initializer 'w': has 0 values, but its dims {} need {}", file, n, n));
}

TEST_F(OnnxModelTest, LeftInTheFileChecksLengthsAndNames) {
  onnx::ModelProto model = readOnnxModel((kNodeTests / "test_add" / "model.onnx").string());
  TensorProto* w = model.mutable_graph()->add_initializer();
  *w = tensor("w", TensorProto::FLOAT, {3});
  w->set_raw_data(std::string(kInlineWeightBytes, '\0'));
  std::string file = write("short.onnx", model.SerializeAsString());
  ExternalData weights;
  onnx::ModelProto lazy = readOnnxModel(file, nullptr, &weights);
  EXPECT_EQ(errorOf([&] { floatsFromProto(lazy.graph().initializer(0), dir_, file, &weights, nullptr); }),
            fmt::format("{}: initializer 'w': raw_data has {} bytes, but 3 elements of FLOAT need 12", file,
                        kInlineWeightBytes));
  EXPECT_EQ(errorOf([&] { tensorFromProto(lazy.graph().initializer(0), dir_, file, &weights); }),
            fmt::format("{}: initializer 'w': raw_data has {} bytes, but 3 elements of FLOAT need 12", file,
                        kInlineWeightBytes));
  *model.mutable_graph()->add_initializer() = *w;  // the same name twice
  std::string twice = write("twice.onnx", model.SerializeAsString());
  ExternalData more;
  EXPECT_EQ(errorOf([&] { readOnnxModel(twice, nullptr, &more); }), twice + ": two initializers are named \"w\"");
  // A model cut inside a skipped tensor is as truncated as one cut anywhere else.
  std::string bytes = model.SerializeAsString();
  std::string cut = write("cut.onnx", bytes.substr(0, bytes.size() - 100));
  ExternalData cut_weights;
  EXPECT_EQ(errorOf([&] { readOnnxModel(cut, nullptr, &cut_weights); }),
            cut + ": not an ONNX model: it is not a valid ONNX protobuf or is truncated");
}

TEST_F(OnnxModelTest, ReadsRawData) {
  TensorProto f = tensor("f", TensorProto::FLOAT, {2, 2});
  f.set_raw_data(rawBytes<float>({1.5f, -2, 0.1f, 4}));
  ConstTensor t = read(f);
  EXPECT_EQ(t.dtype, TensorProto::FLOAT);
  EXPECT_EQ(t.dims, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t.values, (std::vector<double>{1.5, -2, static_cast<double>(0.1f), 4}));
  EXPECT_EQ(t.floats(), (std::vector<float>{1.5f, -2, 0.1f, 4}));
  EXPECT_TRUE(t.isFloat());

  TensorProto i = tensor("i", TensorProto::INT64, {3});
  i.set_raw_data(rawBytes<int64_t>({-7, int64_t{1} << 53, std::numeric_limits<int64_t>::max()}));
  ConstTensor ti = read(i);
  EXPECT_TRUE(ti.isInteger());
  EXPECT_EQ(ti.ints(), (std::vector<int64_t>{-7, int64_t{1} << 53, std::numeric_limits<int64_t>::max()}));

  TensorProto b = tensor("b", TensorProto::BOOL, {3});
  b.set_raw_data(std::string("\x01\x00\x02", 3));
  EXPECT_EQ(read(b).values, (std::vector<double>{1, 0, 1}));

  TensorProto h = tensor("h", TensorProto::FLOAT16, {2});
  h.set_raw_data(rawBytes<uint16_t>({0x3c00, 0xc000}));  // 1.0, -2.0
  EXPECT_EQ(read(h).values, (std::vector<double>{1, -2}));

  TensorProto bf = tensor("bf", TensorProto::BFLOAT16, {1});
  bf.set_raw_data(rawBytes<uint16_t>({0x3fc0}));  // 1.5
  EXPECT_EQ(read(bf).values, (std::vector<double>{1.5}));

  TensorProto u8 = tensor("u8", TensorProto::UINT8, {2});
  u8.set_raw_data(std::string("\xff\x01", 2));
  EXPECT_EQ(read(u8).values, (std::vector<double>{255, 1}));

  TensorProto i8 = tensor("i8", TensorProto::INT8, {2});
  i8.set_raw_data(std::string("\xff\x01", 2));
  EXPECT_EQ(read(i8).values, (std::vector<double>{-1, 1}));
}

TEST_F(OnnxModelTest, ReadsTypedFields) {
  TensorProto f = tensor("f", TensorProto::FLOAT, {2});
  f.add_float_data(0.5f);
  f.add_float_data(3);
  EXPECT_EQ(read(f).values, (std::vector<double>{0.5, 3}));
  TensorProto d = tensor("d", TensorProto::DOUBLE, {});
  d.add_double_data(0.1);
  ConstTensor td = read(d);
  EXPECT_TRUE(td.dims.empty());
  EXPECT_EQ(td.values, (std::vector<double>{0.1}));
  TensorProto i = tensor("i", TensorProto::INT64, {2});
  i.add_int64_data(-3);
  i.add_int64_data(9);
  EXPECT_EQ(read(i).ints(), (std::vector<int64_t>{-3, 9}));
  TensorProto i32 = tensor("i32", TensorProto::INT32, {1});
  i32.add_int32_data(-5);
  EXPECT_EQ(read(i32).values, (std::vector<double>{-5}));
  TensorProto h = tensor("h", TensorProto::FLOAT16, {1});
  h.add_int32_data(0x3800);  // 0.5
  EXPECT_EQ(read(h).values, (std::vector<double>{0.5}));
  TensorProto b = tensor("b", TensorProto::BOOL, {2});
  b.add_int32_data(1);
  b.add_int32_data(0);
  EXPECT_EQ(read(b).values, (std::vector<double>{1, 0}));
}

TEST_F(OnnxModelTest, RefusesBadInitializers) {
  TensorProto s = tensor("names", TensorProto::STRING, {1});
  s.add_string_data("a");
  EXPECT_EQ(readError(s), "m.onnx: initializer 'names': dtype STRING is not supported");
  TensorProto c = tensor("z", TensorProto::COMPLEX64, {1});
  EXPECT_EQ(readError(c), "m.onnx: initializer 'z': dtype COMPLEX64 is not supported");

  TensorProto few = tensor("w", TensorProto::FLOAT, {2, 3});
  few.add_float_data(1);
  EXPECT_EQ(readError(few), "m.onnx: initializer 'w': has 1 values, but its dims 2x3 need 6");
  TensorProto raw = tensor("w", TensorProto::FLOAT, {3});
  raw.set_raw_data(std::string(8, '\0'));
  EXPECT_EQ(readError(raw), "m.onnx: initializer 'w': raw_data has 8 bytes, but 3 elements of FLOAT need 12");
  TensorProto negative = tensor("w", TensorProto::FLOAT, {-1});
  EXPECT_EQ(readError(negative), "m.onnx: initializer 'w': dimension -1 is negative");

  TensorProto big = tensor("i", TensorProto::INT64, {1});
  big.add_int64_data((int64_t{1} << 53) + 1);
  EXPECT_EQ(readError(big), "m.onnx: initializer 'i': value 9007199254740993 is beyond 2^53, which pgq cannot hold exactly");
  ConstTensor half;
  half.values = {0.5};
  EXPECT_EQ(errorOf([&] { half.ints(); }), "constant value 0.5 is not an integer");
}

TEST_F(OnnxModelTest, ReadsExternalData) {
  write("weights.bin", "XXXX" + rawBytes<float>({1, 2, 3}) + "YY");
  TensorProto w = tensor("w", TensorProto::FLOAT, {3});
  setExternal(w, {{"location", "weights.bin"}, {"offset", "4"}, {"length", "12"}});
  EXPECT_EQ(read(w).values, (std::vector<double>{1, 2, 3}));

  // Without a length, the data runs to the end of the file.
  fs::create_directories(dir_ / "sub");
  write("sub/tail.bin", "ab" + rawBytes<int32_t>({7, -8}));
  TensorProto tail = tensor("t", TensorProto::INT32, {2});
  setExternal(tail, {{"location", "./sub/../sub/tail.bin"}, {"offset", "2"}});
  EXPECT_EQ(read(tail).values, (std::vector<double>{7, -8}));
}

TEST_F(OnnxModelTest, RefusesBadExternalData) {
  TensorProto missing = tensor("w", TensorProto::FLOAT, {3});
  setExternal(missing, {{"location", "weights.bin"}});
  EXPECT_EQ(readError(missing), "m.onnx: initializer 'w': missing external data file " +
                                    (dir_ / "weights.bin").string());

  write("weights.bin", rawBytes<float>({1, 2}));
  TensorProto short_file = tensor("w", TensorProto::FLOAT, {3});
  setExternal(short_file, {{"location", "weights.bin"}});
  EXPECT_EQ(readError(short_file), "m.onnx: initializer 'w': external data in " + (dir_ / "weights.bin").string() +
                                       " is 8 bytes, but its dims and dtype need 12");
  TensorProto past_end = tensor("w", TensorProto::FLOAT, {2});
  setExternal(past_end, {{"location", "weights.bin"}, {"offset", "4"}, {"length", "8"}});
  EXPECT_EQ(readError(past_end), "m.onnx: initializer 'w': external data at offset 4 for 8 bytes runs past the end of " +
                                     (dir_ / "weights.bin").string() + " (8 bytes)");

  for (const char* location : {"/etc/passwd", "../weights.bin", "sub/../../weights.bin"}) {
    TensorProto escape = tensor("w", TensorProto::FLOAT, {2});
    setExternal(escape, {{"location", location}});
    EXPECT_EQ(readError(escape), fmt::format("m.onnx: initializer 'w': external data location '{}' is not a path "
                                             "inside the model's folder",
                                             location));
  }
  TensorProto no_location = tensor("w", TensorProto::FLOAT, {2});
  setExternal(no_location, {{"offset", "0"}});
  EXPECT_EQ(readError(no_location), "m.onnx: initializer 'w': external data has no 'location'");
  TensorProto bad_offset = tensor("w", TensorProto::FLOAT, {2});
  setExternal(bad_offset, {{"location", "weights.bin"}, {"offset", "-4"}});
  EXPECT_EQ(readError(bad_offset), "m.onnx: initializer 'w': external data offset '-4' is not a byte count");
}

TEST_F(OnnxModelTest, MapsEachExternalFileOnceAndReadsToItsEndWithoutALength) {
  write("model.onnx.data", rawBytes<float>({1, 2, 3, 4, 5}));
  ExternalData files;
  TensorProto head = tensor("head", TensorProto::FLOAT, {2});
  setExternal(head, {{"location", "model.onnx.data"}, {"offset", "0"}, {"length", "8"}});
  TensorProto tail = tensor("tail", TensorProto::FLOAT, {3});
  setExternal(tail, {{"location", "model.onnx.data"}, {"offset", "8"}});  // no length: to the end
  EXPECT_EQ(tensorFromProto(head, dir_, "m.onnx", &files).values, (std::vector<double>{1, 2}));
  EXPECT_EQ(tensorFromProto(tail, dir_, "m.onnx", &files).values, (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(files.mappedFiles(), 1u);

  // A Constant's value reads through the same mappings.
  onnx::AttributeProto value;
  value.set_name("value");
  *value.mutable_t() = tail;
  EXPECT_EQ(attributeTensor(value, dir_, "m.onnx", "c0", &files).values, (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(files.mappedFiles(), 1u);

  // Without a length, everything after the offset must be the tensor's.
  TensorProto longer = tensor("w", TensorProto::FLOAT, {2});
  setExternal(longer, {{"location", "model.onnx.data"}, {"offset", "4"}});
  EXPECT_EQ(readError(longer), "m.onnx: initializer 'w': external data in " + (dir_ / "model.onnx.data").string() +
                                   " is 16 bytes, but its dims and dtype need 8");
  // An empty file holds an empty tensor (mmap cannot map it; nothing needs to).
  write("empty.bin", "");
  TensorProto none = tensor("e", TensorProto::FLOAT, {0, 3});
  setExternal(none, {{"location", "empty.bin"}});
  ConstTensor empty = read(none);
  EXPECT_EQ(empty.dims, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(empty.values.empty());
}

TEST_F(OnnxModelTest, RefusesExternalRangesPastTheEndOrOverflowing) {
  write("weights.bin", rawBytes<float>({1, 2}));
  auto error = [&](std::initializer_list<std::pair<std::string, std::string>> entries) {
    TensorProto t = tensor("w", TensorProto::FLOAT, {2});
    setExternal(t, entries);
    return readError(t);
  };
  const std::string file = (dir_ / "weights.bin").string();
  EXPECT_EQ(error({{"location", "weights.bin"}, {"offset", "4"}, {"length", "8"}}),
            "m.onnx: initializer 'w': external data at offset 4 for 8 bytes runs past the end of " + file +
                " (8 bytes)");
  // offset + length would wrap around 2^64 to 7.
  EXPECT_EQ(error({{"location", "weights.bin"}, {"offset", "18446744073709551615"}, {"length", "8"}}),
            "m.onnx: initializer 'w': external data offset 18446744073709551615 is past the end of " + file +
                " (8 bytes)");
  EXPECT_EQ(error({{"location", "weights.bin"}, {"offset", "9"}}),
            "m.onnx: initializer 'w': external data offset 9 is past the end of " + file + " (8 bytes)");
  EXPECT_EQ(error({{"location", "weights.bin"}, {"offset", "0"}, {"length", "18446744073709551615"}}),
            "m.onnx: initializer 'w': external data in " + file +
                " is 18446744073709551615 bytes, but its dims and dtype need 8");
  for (const char* text : {"18446744073709551616", "+4", " 4", "4k", "0x4", ""})
    EXPECT_EQ(error({{"location", "weights.bin"}, {"offset", text}}),
              fmt::format("m.onnx: initializer 'w': external data offset '{}' is not a byte count", text));
}

TEST_F(OnnxModelTest, RefusesATensorOverTheMemoryBudgetBeforeReadingIt) {
  // 2^29 floats: 2 GiB in the file (sparse, no disk space), 4 GiB as doubles.
  const std::string data = path("big.bin");
  int fd = ::open(data.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t{1} << 31), 0);
  ::close(fd);
  ExternalData files;
  TensorProto big = tensor("w", TensorProto::FLOAT, {1 << 20, 1 << 9});
  setExternal(big, {{"location", "big.bin"}});
  EXPECT_EQ(errorOf([&] { tensorFromProto(big, dir_, "m.onnx", &files); }),
            "m.onnx: initializer 'w': its dims 1048576x512 make more than 268435456 elements, the most pgq holds "
            "in one constant tensor (2 GiB as 8-byte doubles)");
  EXPECT_EQ(files.mappedFiles(), 0u);  // refused before the file was opened

  // Dims whose product overflows 64 bits, with no data at all.
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(readError(tensor("h", TensorProto::INT8, {huge, huge, 2})),
            fmt::format("m.onnx: initializer 'h': its dims {0}x{0}x2 make more than 268435456 elements, the most "
                        "pgq holds in one constant tensor (2 GiB as 8-byte doubles)",
                        huge));
  // The budget is on elements: 2^28 is the most, and a zero dim makes any other fine.
  TensorProto at_limit = tensor("l", TensorProto::FLOAT, {1 << 28});
  EXPECT_EQ(readError(at_limit), "m.onnx: initializer 'l': has 0 values, but its dims 268435456 need 268435456");
  EXPECT_TRUE(read(tensor("z", TensorProto::FLOAT, {huge, 0})).values.empty());
}

TEST_F(OnnxModelTest, FollowsSymlinksThatStayInTheModelsFolder) {
  fs::create_directories(dir_ / "shards");
  write("shards/weights.bin", rawBytes<float>({1, 2, 3}));
  fs::create_symlink("shards/weights.bin", dir_ / "weights.link");  // a relative link
  fs::create_symlink(dir_ / "shards", dir_ / "linked_shards");      // an absolute link to a folder inside
  ExternalData files;
  for (const char* location : {"weights.link", "linked_shards/weights.bin", "shards/weights.bin"}) {
    TensorProto w = tensor("w", TensorProto::FLOAT, {3});
    setExternal(w, {{"location", location}});
    EXPECT_EQ(tensorFromProto(w, dir_, "m.onnx", &files).values, (std::vector<double>{1, 2, 3})) << location;
  }
  EXPECT_EQ(files.mappedFiles(), 1u);  // one file under three names: keyed by its real path
}

TEST_F(OnnxModelTest, RefusesSymlinksThatLeaveTheModelsFolder) {
  const fs::path model_dir = dir_ / "model";
  fs::create_directories(model_dir);
  fs::create_directories(dir_ / "private");
  write("private/secret.bin", rawBytes<float>({6, 6}));
  fs::create_symlink(dir_ / "private" / "secret.bin", model_dir / "secret_link");
  fs::create_symlink("../private/secret.bin", model_dir / "relative_link");
  fs::create_symlink("secret_link", model_dir / "chained_link");  // inside, then out
  fs::create_symlink(dir_ / "private", model_dir / "shards");      // a folder that leads out
  fs::create_symlink("/dev/zero", model_dir / "zeros");
  const fs::path real_model = fs::canonical(model_dir);
  const fs::path real_secret = fs::canonical(dir_ / "private" / "secret.bin");
  for (const char* location : {"secret_link", "relative_link", "chained_link", "shards/secret.bin", "zeros"}) {
    TensorProto w = tensor("w", TensorProto::FLOAT, {2});
    setExternal(w, {{"location", location}});
    const std::string target = std::string(location) == "zeros" ? "/dev/zero" : real_secret.string();
    EXPECT_EQ(errorOf([&] { tensorFromProto(w, model_dir, "m.onnx"); }),
              fmt::format("m.onnx: initializer 'w': external data location '{}' leads to {}, outside the model's "
                          "folder {}",
                          location, target, real_model.string()));
  }
}

TEST_F(OnnxModelTest, RefusesExternalDataThatIsNotARegularFileWithoutOpeningIt) {
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0644), 0);
  fs::create_symlink("pipe", dir_ / "pipe_link");
  fs::create_directories(dir_ / "folder");
  const fs::path real_dir = fs::canonical(dir_);
  for (const auto& [location, real, type] : {std::tuple{"pipe", "pipe", "a FIFO"},
                                             std::tuple{"pipe_link", "pipe", "a FIFO"},
                                             std::tuple{"folder", "folder", "a directory"}}) {
    TensorProto w = tensor("w", TensorProto::FLOAT, {2});
    setExternal(w, {{"location", location}});
    // Opening the FIFO for reading would wait for a writer: give it one after 10 s so
    // that the test fails rather than hangs.
    std::future<std::string> message = std::async(std::launch::async, [&] { return readError(w); });
    if (message.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
      int writer = ::open(path("pipe").c_str(), O_WRONLY | O_NONBLOCK);
      if (writer >= 0) ::close(writer);
      ADD_FAILURE() << location << ": reading blocked";
    }
    EXPECT_EQ(message.get(), fmt::format("m.onnx: initializer 'w': external data location '{}': {}: is {}, "
                                         "expected a regular file",
                                         location, (real_dir / real).string(), type));
  }
}

TEST_F(OnnxModelTest, ReadsConstantAttributes) {
  onnx::AttributeProto a;
  a.set_name("value_ints");
  a.add_ints(3);
  a.add_ints(-1);
  ConstTensor ints = attributeTensor(a);
  EXPECT_EQ(ints.dtype, TensorProto::INT64);
  EXPECT_EQ(ints.dims, (std::vector<int64_t>{2}));
  EXPECT_EQ(ints.ints(), (std::vector<int64_t>{3, -1}));

  onnx::AttributeProto f;
  f.set_name("value_float");
  f.set_f(0.25f);
  ConstTensor scalar = attributeTensor(f);
  EXPECT_TRUE(scalar.dims.empty());
  EXPECT_EQ(scalar.values, (std::vector<double>{0.25}));

  onnx::AttributeProto v;
  v.set_name("value");
  *v.mutable_t() = tensor("", TensorProto::INT32, {2});
  v.mutable_t()->add_int32_data(4);
  v.mutable_t()->add_int32_data(5);
  EXPECT_EQ(attributeTensor(v).values, (std::vector<double>{4, 5}));

  onnx::AttributeProto s;
  s.set_name("value_string");
  EXPECT_EQ(errorOf([&] { attributeTensor(s, {}, "m.onnx", "c0"); }),
            "m.onnx: node 'c0': attribute 'value_string': is not a constant value pgq reads (value, value_float(s) "
            "or value_int(s))");
}

TEST(OnnxDtype, RoundsLikeTheRuntimeType) {
  EXPECT_EQ(roundToDtype(TensorProto::FLOAT, 0.1), static_cast<double>(0.1f));
  EXPECT_EQ(roundToDtype(TensorProto::FLOAT16, 1.0 + 1.0 / 4096), 1.0);  // below half's epsilon
  EXPECT_EQ(roundToDtype(TensorProto::BFLOAT16, 1.0 + 1.0 / 512), 1.0);
  EXPECT_EQ(roundToDtype(TensorProto::INT8, 130), -126);
  EXPECT_EQ(roundToDtype(TensorProto::UINT8, -1), 255);
  EXPECT_EQ(roundToDtype(TensorProto::INT32, -2.7), -2);
  EXPECT_EQ(roundToDtype(TensorProto::INT64, 2.7), 2);
  EXPECT_EQ(roundToDtype(TensorProto::BOOL, -3), 1);
  EXPECT_EQ(dtypeName(TensorProto::BFLOAT16), "BFLOAT16");
}

}  // namespace
}  // namespace pgq

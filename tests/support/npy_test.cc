// NumPy .npy reading and writing (support/npy.h): round trips, files NumPy itself
// writes and reads (when the system Python has numpy), and every malformed input.
#include "support/npy.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/errors.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

using test::errorOf;

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// An .npy file's bytes: magic, version, header length, header, data. The header is
// used as given (no padding), which the format allows.
std::string npyBytes(const std::string& header, const std::string& data, int major = 1) {
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  uint32_t length = static_cast<uint32_t>(header.size());
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out.push_back(static_cast<char>(length >> (8 * i) & 0xFF));
  return out + header + data;
}

std::string bytesOf(const void* data, size_t size) { return std::string(static_cast<const char*>(data), size); }

const char* kF4Header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n";

class NpyTest : public test::TempDirTest {
 protected:
  // Runs a Python program with the system interpreter (Debian's python3-numpy).
  static int python(const std::string& program) {
    return std::system(("/usr/bin/python3 -c '" + program + "'").c_str());
  }
  static bool haveNumpy() { return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0; }
};

TEST_F(NpyTest, RoundTripsFloat32) {
  std::vector<float> values = {1.5f, -2.0f, 0.0f, 3.25e-7f, std::numeric_limits<float>::infinity(), -1e30f};
  std::string file = path("a.npy");
  writeNpy(file, {2, 3}, values);
  NpyArray array = readNpy(file);
  EXPECT_EQ(array.descr, "<f4");
  EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(array.numElements(), 6);
  EXPECT_EQ(npyAsFloats(array, file), values);
  // The data starts 64-byte aligned, as NumPy writes it.
  EXPECT_EQ((content(file).size() - values.size() * sizeof(float)) % 64, 0u);
}

TEST_F(NpyTest, RoundTripsScalarsVectorsAndEmptyArrays) {
  std::vector<float> one = {2.5f};
  writeNpy(path("scalar.npy"), {}, one);
  NpyArray scalar = readNpy(path("scalar.npy"));
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(npyAsFloats(scalar, "scalar.npy"), one);
  EXPECT_THAT(content(path("scalar.npy")), HasSubstr("'shape': (), "));

  writeNpy(path("vector.npy"), {1}, one);
  EXPECT_THAT(content(path("vector.npy")), HasSubstr("'shape': (1,), "));
  EXPECT_EQ(readNpy(path("vector.npy")).shape, std::vector<int64_t>{1});

  writeNpy(path("empty.npy"), {0, 4}, {});
  NpyArray empty = readNpy(path("empty.npy"));
  EXPECT_EQ(empty.shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(empty.numElements(), 0);
}

TEST_F(NpyTest, WritingReplacesAFileAtomically) {
  std::string file = write("old.npy", "old content");
  std::vector<float> values = {1, 2};
  writeNpy(file, {2}, values);
  EXPECT_EQ(npyAsFloats(readNpy(file), file), values);
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  EXPECT_THAT(errorOf([&] { writeNpy(dir_.string(), {2}, values); }), HasSubstr(dir_.string()));
}

TEST_F(NpyTest, ReadsEveryDtypeFromHandWrittenFiles) {
  double f8[] = {0.5, -1e300};
  NpyArray array = readNpy(write("f8.npy", npyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                                                    bytesOf(f8, sizeof f8))));
  std::vector<float> floats = npyAsFloats(array, "f8.npy");
  EXPECT_EQ(floats[0], 0.5f);
  EXPECT_EQ(floats[1], -std::numeric_limits<float>::infinity());

  int32_t i4[] = {7, -3, 2147483647};
  array = readNpy(write("i4.npy", npyBytes("{'descr': '<i4', 'fortran_order': False, 'shape': (3,)}",
                                           bytesOf(i4, sizeof i4))));
  EXPECT_EQ(npyAsInt32(array, "i4.npy"), (std::vector<int32_t>{7, -3, 2147483647}));

  int64_t i8[] = {5, -2147483648LL};
  array = readNpy(write("i8.npy", npyBytes("{\"shape\": (1, 2), \"fortran_order\": False, \"descr\": \"<i8\"}",
                                           bytesOf(i8, sizeof i8))));
  EXPECT_EQ(array.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(npyAsInt32(array, "i8.npy"), (std::vector<int32_t>{5, -2147483648}));

  array = readNpy(write("b1.npy", npyBytes("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                                           std::string("\x01\x00\x01", 3))));
  EXPECT_EQ(array.descr, "|b1");
  EXPECT_EQ(array.data, (std::vector<char>{1, 0, 1}));

  // Format 2.0 differs only in a 4-byte header length.
  float f4[] = {1, 2};
  array = readNpy(write("v2.npy", npyBytes(kF4Header, bytesOf(f4, sizeof f4), 2)));
  EXPECT_EQ(npyAsFloats(array, "v2.npy"), (std::vector<float>{1, 2}));
}

TEST_F(NpyTest, RefusesWhatItCannotRead) {
  float f4[] = {1, 2};
  std::string data = bytesOf(f4, sizeof f4);
  auto error = [&](const std::string& name, const std::string& bytes) {
    return errorOf([&] { readNpy(write(name, bytes)); });
  };
  EXPECT_EQ(error("magic.npy", "PK\x03\x04 a zip file, as np.savez writes"),
            path("magic.npy") + ": not a NumPy .npy file (it does not start with \\x93NUMPY)");
  EXPECT_EQ(error("empty.npy", ""), path("empty.npy") + ": not a NumPy .npy file (it does not start with \\x93NUMPY)");
  EXPECT_EQ(error("v3.npy", npyBytes(kF4Header, data, 3)),
            path("v3.npy") + ": .npy format version 3.0; pgq reads versions 1.0 and 2.0");
  EXPECT_EQ(error("short.npy", std::string("\x93NUMPY\x01\x00\x40", 9)), path("short.npy") + ": truncated in the .npy header");
  EXPECT_EQ(error("cut.npy", npyBytes(kF4Header, "").substr(0, 30)), path("cut.npy") + ": truncated in the .npy header");
  EXPECT_EQ(error("fortran.npy", npyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data)),
            path("fortran.npy") + ": fortran_order is True; pgq reads C-order arrays only (save np.ascontiguousarray(a))");
  EXPECT_EQ(error("big.npy", npyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", data)),
            path("big.npy") + ": unsupported dtype '>f4'; pgq reads <f4, <f8, <i8, <i4 and |b1");
  EXPECT_EQ(error("f2.npy", npyBytes("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", data)),
            path("f2.npy") + ": unsupported dtype '<f2'; pgq reads <f4, <f8, <i8, <i4 and |b1");
  EXPECT_EQ(error("truncated.npy", npyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data)),
            path("truncated.npy") + ": 8 bytes of data, but shape (2, 3) of <f4 needs 24 bytes (truncated)");
  EXPECT_EQ(error("long.npy", npyBytes(kF4Header, data + "x")),
            path("long.npy") + ": 9 bytes of data, but shape (2,) of <f4 needs 8 bytes");
  EXPECT_EQ(error("huge.npy",
                  npyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", data)),
            path("huge.npy") + ": shape (4294967296, 4294967296) is too large");
  EXPECT_EQ(errorOf([&] { readNpy(path("missing.npy")); }).rfind(path("missing.npy") + ": ", 0), 0u);
  EXPECT_EQ(errorOf([&] { readNpy(dir_.string()); }), dir_.string() + ": is a directory, expected a regular file");
}

TEST_F(NpyTest, RefusesMalformedHeaders) {
  float f4[] = {1, 2};
  std::string data = bytesOf(f4, sizeof f4);
  auto error = [&](const std::string& header) {
    return errorOf([&] { readNpy(write("h.npy", npyBytes(header, data))); });
  };
  EXPECT_THAT(error("{'descr': '<f4', 'shape': (2,), }"), HasSubstr("lacks one of 'descr', 'fortran_order' and 'shape'"));
  EXPECT_THAT(error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}"),
              HasSubstr("unexpected key 'extra'"));
  EXPECT_THAT(error("{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}"), HasSubstr("expected True or False"));
  EXPECT_THAT(error("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}"),
              HasSubstr("expected a non-negative integer"));
  EXPECT_THAT(error("{'descr': '<f4', 'fortran_order': False, 'shape': [2]}"), HasSubstr("expected '('"));
  EXPECT_THAT(error("{'descr' '<f4'}"), HasSubstr("expected ':'"));
  EXPECT_THAT(error("{'descr: 1}"), HasSubstr("unterminated string"));
  EXPECT_THAT(error("'descr'"), HasSubstr("expected '{'"));
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,) "),
            path("h.npy") + ": malformed .npy header at character 55: expected ',' (header: "
                            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,) )");
  // Issue 29: the message is one line, whatever the header holds.
  EXPECT_EQ(error("{'descr': '<f4',\n\t'shape' (2,)}"),
            path("h.npy") + ": malformed .npy header at character 17: expected a quoted string (header: "
                            "{'descr': '<f4',\\n\\x09'shape' (2,)})");
}

TEST_F(NpyTest, ConversionsRefuseOtherTypesAndOutOfRangeIntegers) {
  std::vector<float> values = {1, 2};
  writeNpy(path("f.npy"), {2}, values);
  NpyArray floats = readNpy(path("f.npy"));
  EXPECT_EQ(errorOf([&] { npyAsInt32(floats, "f.npy"); }), "f.npy: the array is <f4, expected int32 (<i4) or int64 (<i8)");

  int64_t i8[] = {1, int64_t{1} << 31};
  NpyArray ints = readNpy(write("i8.npy", npyBytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
                                                   bytesOf(i8, sizeof i8))));
  EXPECT_EQ(errorOf([&] { npyAsInt32(ints, "i8.npy"); }), "i8.npy: element 1 is 2147483648, outside the int32 range");
  EXPECT_EQ(errorOf([&] { npyAsFloats(ints, "i8.npy"); }),
            "i8.npy: the array is <i8, expected float32 (<f4) or float64 (<f8)");
}

TEST_F(NpyTest, ReadsWhatNumpyWritesAndNumpyReadsWhatItWrites) {
  ASSERT_TRUE(haveNumpy()) << "no numpy in /usr/bin/python3: scripts/setup.sh installs python3-numpy";
  ASSERT_EQ(python("import numpy as np, os; os.chdir(\"" + dir_.string() + "\");"
                   "np.save(\"f4.npy\", np.arange(6, dtype=np.float32).reshape(2, 3) / 4);"
                   "np.save(\"f8.npy\", np.array([[0.1], [2.0]]));"
                   "np.save(\"i8.npy\", np.array([[3, -4, 5]]));"
                   "np.save(\"i4.npy\", np.array([7], dtype=np.int32));"
                   "np.save(\"b1.npy\", np.array([True, False]));"
                   "np.save(\"scalar.npy\", np.float32(1.5));"
                   "np.save(\"fortran.npy\", np.asfortranarray(np.ones((2, 3), np.float32)));"
                   "np.save(\"big.npy\", np.ones(2, \">f4\"));"
                   "np.lib.format.write_array(open(\"v2.npy\", \"wb\"), np.ones(3, np.float32), version=(2, 0))"),
            0);
  NpyArray f4 = readNpy(path("f4.npy"));
  EXPECT_EQ(f4.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(npyAsFloats(f4, "f4.npy"), (std::vector<float>{0, 0.25, 0.5, 0.75, 1, 1.25}));
  NpyArray f8 = readNpy(path("f8.npy"));
  EXPECT_EQ(f8.descr, "<f8");
  EXPECT_EQ(npyAsFloats(f8, "f8.npy"), (std::vector<float>{0.1f, 2.0f}));
  EXPECT_EQ(npyAsInt32(readNpy(path("i8.npy")), "i8.npy"), (std::vector<int32_t>{3, -4, 5}));
  EXPECT_EQ(npyAsInt32(readNpy(path("i4.npy")), "i4.npy"), std::vector<int32_t>{7});
  EXPECT_EQ(readNpy(path("b1.npy")).data, (std::vector<char>{1, 0}));
  NpyArray scalar = readNpy(path("scalar.npy"));
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(npyAsFloats(scalar, "scalar.npy"), std::vector<float>{1.5f});
  EXPECT_EQ(npyAsFloats(readNpy(path("v2.npy")), "v2.npy"), (std::vector<float>{1, 1, 1}));
  EXPECT_THAT(errorOf([&] { readNpy(path("fortran.npy")); }), HasSubstr("fortran_order is True"));
  EXPECT_THAT(errorOf([&] { readNpy(path("big.npy")); }), HasSubstr("unsupported dtype '>f4'"));

  std::vector<float> values = {1.5f, -2.0f, 0.0f, 3.25e-7f};
  writeNpy(path("ours.npy"), {2, 1, 2}, values);
  std::vector<float> one = {4.0f};
  writeNpy(path("ours_scalar.npy"), {}, one);
  EXPECT_EQ(python("import numpy as np, os; os.chdir(\"" + dir_.string() + "\");"
                   "a = np.load(\"ours.npy\"); s = np.load(\"ours_scalar.npy\");"
                   "assert a.dtype == np.float32 and a.shape == (2, 1, 2) and a.flags.c_contiguous;"
                   "assert (a.ravel() == np.array([1.5, -2.0, 0.0, 3.25e-7], np.float32)).all();"
                   "assert s.shape == () and s == 4.0"),
            0);
}

}  // namespace
}  // namespace pgq

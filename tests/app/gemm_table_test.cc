// `pgq roofline --gemms`: the CSV of GEMM shapes it reads and the estimates it prints.
#include <gtest/gtest.h>

#include "app/gemm_table.h"
#include "support/errors.h"

#include <fmt/format.h>

namespace pgq {
namespace {

std::string errorOf(const std::string& csv) {
  try {
    parseGemmShapes(csv, "g.csv");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GemmTable, ReadsShapesInAnyColumnOrder) {
  auto shapes = parseGemmShapes("m,k,n\n768,32768,768\n\n# a comment\n 4096 , 8192 , 11008 \n", "g.csv");
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0], (std::array<int64_t, 4>{1, 768, 32768, 768}));
  EXPECT_EQ(shapes[1], (std::array<int64_t, 4>{1, 4096, 8192, 11008}));
  // A measured table reads as it is: b and other columns (empty ones too).
  shapes = parseGemmShapes("b,m,k,n,bf16_us,fp8_us\n1024,256,64,256,76.7,\n", "g.csv");
  EXPECT_EQ(shapes[0], (std::array<int64_t, 4>{1024, 256, 64, 256}));
}

TEST(GemmTable, BadInputNamesFileLineAndField) {
  EXPECT_EQ(errorOf("m,k,n\n1,2,3\n"), "no error");
  EXPECT_EQ(errorOf("m,n\n1,2\n"),
            "g.csv:1: field 'k': missing; the header must name the columns m, k and n (and optionally b), got 'm,n'");
  EXPECT_EQ(errorOf("m,k,n\n1,2,3\n4,-5,6\n"), "g.csv:3: field 'k': expected an integer from 1 to 2^40 without leading zeros, got '-5'");
  EXPECT_NE(errorOf("m,k,n\n1,nan,3\n").find("g.csv:2: field 'k'"), std::string::npos);
  EXPECT_NE(errorOf("m,k,n\n1,2,3.5\n").find("g.csv:2: field 'n'"), std::string::npos);
  EXPECT_NE(errorOf("b,m,k,n\n0,1,2,3\n").find("g.csv:2: field 'b'"), std::string::npos);
  EXPECT_NE(errorOf("m,k,n\n1,,3\n").find("g.csv:2: field 'k'"), std::string::npos);
  EXPECT_NE(errorOf("m,k,n\n1,2\n").find("g.csv:2: expected 3 fields as the header has, got 2"), std::string::npos);
  EXPECT_NE(errorOf("m,k,n\n").find("lists no GEMM"), std::string::npos);
  EXPECT_NE(errorOf("").find("no header line"), std::string::npos);
  EXPECT_EQ(errorOf("m,m,k,n\n1,2,3,4\n"), "g.csv:1: field 'm': the header names it twice, got 'm,m,k,n'");
  // A spreadsheet's UTF-8 byte order mark is not part of the first column's name.
  EXPECT_EQ(errorOf("\xEF\xBB\xBFm,k,n\n1,2,3\n"), "no error");
  // 2^40 x 2^40 x 2^40 x 2^40 multiply-adds was estimated (as inf or nonsense), and `064`
  // read as 64 where YAML and the command line refuse it (session 17).
  EXPECT_EQ(errorOf("b,m,k,n\n1,1099511627776,1099511627776,1099511627776\n"),
            "g.csv:2: b x m x k x n = 1 x 1099511627776 x 1099511627776 x 1099511627776 is more than 2^52 "
            "multiply-adds");
  EXPECT_EQ(errorOf("m,k,n\n65536,65536,1048576\n"), "no error");  // 2^52 exactly
  EXPECT_NE(errorOf("m,k,n\n65536,65536,1048577\n").find("more than 2^52"), std::string::npos);
  EXPECT_NE(errorOf("m,k,n\n064,2,3\n").find("g.csv:2: field 'm'"), std::string::npos);
  EXPECT_NE(errorOf("m,k,n\n1,\"2,3\n").find("g.csv:2: a quoted field is not closed"), std::string::npos);
}

// A name column holding a comma in quotes (RFC 4180) is one field: it was split in two
// and the row refused for its field count.
TEST(GemmTable, QuotedFieldsMayHoldCommas) {
  auto shapes = parseGemmShapes("name,m,k,n\n\"attn, qkv\",768,32768,\"2304\"\n\"say \"\"hi\"\"\", 1, 2, 3\n", "g.csv");
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0], (std::array<int64_t, 4>{1, 768, 32768, 2304}));
  EXPECT_EQ(shapes[1], (std::array<int64_t, 4>{1, 1, 2, 3}));
}

TEST(GemmTable, PrintsTheRecipeGeneratorsNumbers) {
  HardwareModel hw = loadHardwareModel("h100-sxm");
  std::string csv = gemmEstimatesCsv(hw, {{1, 768, 32768, 768}, {1, 8192, 4096, 11008}});
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "b,m,k,n,bf16_us,fp8_us,a_cast_us,b_cast_us,extrapolation");
  GpuGemmEstimate e = estimateGpuGemm(hw, {1, 768, 32768, 768});
  EXPECT_NE(csv.find(fmt::format("1,768,32768,768,{:.2f},{:.2f},{:.2f},{:.2f},1\n", e.bf16_us, e.fp8_us, e.a_cast_us,
                                 e.b_cast_us)),
            std::string::npos)
      << csv;
  try {
    gemmEstimatesCsv(loadHardwareModel("epyc-zen3-2c"), {{1, 64, 64, 64}});
    FAIL() << "a CPU without FP8 estimated FP8 GEMMs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hardware 'epyc-zen3-2c' runs no FP8"), std::string::npos);
  }
}

}  // namespace
}  // namespace pgq

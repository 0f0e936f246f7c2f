#pragma once
// How a GEMM operand is quantized: bits, scale granularity, rounding, zero point and
// clipping. The IR, profiles and recipes store a format as its text form
// (`int8:channel:rtn`, `int7:channel:sr`, `int8:block64:rtn:clip=mse`), so that form is
// part of the file formats: toString() and parse() round-trip and stay stable.
//
// Text grammar:  <element>:<granularity>:<rounding>[:scale=e8m0|scale=two_level][:asym]
//                 [:clip=mse|clip=p<percent>]
//   element      int<bits>, bits 2..8 (a symmetric or asymmetric integer grid), an
//                OCP FP8 element: e4m3 (max 448, subnormals down to 2^-9, no infinity)
//                or e5m2 (max 57344, subnormals down to 2^-16), or OCP MX's FP4 element
//                e2m1 (values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives; 0.5 is
//                its one subnormal), or bf16 (f32's exponent range with 7 mantissa
//                bits: a bf16 GEMM's operands; it takes no scale, s = 1, so only
//                tensor granularity and no scale field); FP8 and FP4 conversions
//                saturate to the largest finite value, as OCP's saturating mode; bf16
//                rounds beyond its max to Inf, as torch's .to(torch.bfloat16)
//   granularity  tensor | channel | block<N>   (N = block length along the contracting dim)
//                | block<N>x<N>  (2-D: N x N tiles of the stored matrix, so a weight
//                quantizes to the same values whichever dimension a GEMM contracts:
//                NVFP4's 16x16 weight scales)
//   rounding     rtn (round to nearest, ties to even) | sr (stochastic rounding)
//   asym         asymmetric grid with a zero point (default: symmetric, no zero point)
//   clip=p99.9   clip at the 99.9th percentile of |x| (of x per tail when asymmetric)
//   clip=mse     clip at the ratio of the range that minimizes the quantization MSE
//   scale=e8m0   each group's scale is a power of two, as OCP Microscaling (MX) stores
//                it: 2^(floor(log2 absmax) - emax of the element). MXFP8 E4M3 is
//                e4m3:block32:rtn:scale=e8m0, MXINT8 int8:block32:rtn:scale=e8m0.
//   scale=two_level  MOSS: one f32 scale per tensor (absmax / max element) times a
//                power-of-two local scale per group, 2^ceil(log2(group absmax /
//                tensor absmax)), so no group clips
//   scale=e4m3   NVFP4: an E4M3 scale per block times one f32 scale per tensor
//                (kernels/float_quant.h has the arithmetic, as Transformer Engine's).
//                NVFP4 is e2m1:block16:rtn:scale=e4m3, MXFP4 e2m1:block32:rtn:scale=e8m0
//   rht          a random Hadamard transform along the contracting dimension before
//                quantizing (16x16 blocks, random signs drawn per step and shared by
//                both operands of the GEMM, so the product is unchanged up to the
//                quantization); needs a float element and a contracting length that
//                is a multiple of 16
// Aliases parse to their canonical form: mxfp8_e4m3, mxfp8_e5m2, mxint8, nvfp4, mxfp4 and bf16
// (bf16:tensor:rtn), each optionally followed by :rtn or :sr (default rtn).
// Float elements take no asym or clip fields; scale=e8m0, two_level and e4m3 need
// block<N> granularity, two_level an FP8 element and e4m3 the e2m1 element.
// A format other than an integer grid with f32 scales is *emulated* on CPUs: the GEMM
// reads the dequantized values (exactly the values the format represents) in f32.
// toString() writes the optional fields in that order (rht last); parse() accepts them in any
// order but each at most once.
#include <cstdint>
#include <string>
#include <string_view>

namespace pgq {

enum class Granularity { kPerTensor, kPerChannel, kPerBlock };
enum class Rounding { kNearest, kStochastic };
enum class Clipping { kNone, kPercentile, kMse };
enum class Element { kInt, kE4M3, kE5M2, kE2M1, kBf16 };
enum class ScaleKind { kF32, kE8M0, kTwoLevel, kE4M3 };

struct QuantFormat {
  Element element = Element::kInt;
  int bits = 8;  // 8 for FP8 elements, 4 for e2m1, 16 for bf16 (elementBits())
  // One scale for the whole tensor, one per channel (non-contracting index, per batch),
  // or one per block of `block` elements of a channel along the contracting dimension.
  Granularity granularity = Granularity::kPerChannel;
  // Block length for kPerBlock (>= 1; the last block of a channel may be shorter);
  // must be 0 otherwise.
  int block = 0;
  // kPerBlock only: the groups are block x block tiles of each stored matrix (rows x
  // columns, whichever is contracting) instead of blocks of one channel.
  bool block2d = false;
  // Random Hadamard transform along the contracting dimension (the grammar's rht).
  bool hadamard = false;
  Rounding rounding = Rounding::kNearest;
  bool asymmetric = false;
  Clipping clipping = Clipping::kNone;
  // For kPercentile: in (0, 100]; 100 means no clipping. Ignored otherwise.
  double percentile = 100.0;
  ScaleKind scale = ScaleKind::kF32;

  bool isFloat() const { return element != Element::kInt; }
  // Runs as quantize -> dequantize -> f32 GEMM on CPUs (everything but int grids with
  // f32 scales, which run as int8 GEMMs).
  bool isEmulated() const { return isFloat() || scale != ScaleKind::kF32; }

  // Throws pgq::Error naming the bad field and what was expected.
  void validate() const;
  std::string toString() const;
  // Throws pgq::Error on malformed text or an invalid format.
  static QuantFormat parse(std::string_view text);

  // Equal when the text forms are equal: fields a format ignores (bits of an FP8
  // element, block without per-block scales, percentile without percentile clipping)
  // do not count.
  bool operator==(const QuantFormat& other) const;
};

// Common formats.
QuantFormat perChannelFormat(int bits, Rounding rounding = Rounding::kNearest);
QuantFormat perTensorFormat(int bits, Rounding rounding = Rounding::kNearest);
QuantFormat perBlockFormat(int bits, int block, Rounding rounding = Rounding::kNearest);

// Scale groups of `format` for an operand of `batch` matrices of `channels`
// (non-contracting) by `contract` (contracting) elements: 1 per tensor, one per channel,
// or one per block of a channel. quantParamCount() adds the zero points of asymmetric
// formats (one float per group).
// Blocks along a channel of `contract` elements: 1 unless per-block (the last block may
// be shorter).
int64_t quantBlockCount(const QuantFormat& format, int64_t contract);
int64_t quantGroupCount(const QuantFormat& format, int64_t batch, int64_t channels, int64_t contract);
int64_t quantParamCount(const QuantFormat& format, int64_t batch, int64_t channels, int64_t contract);

// The length of a Hadamard block and of the NVFP4 1-D and 2-D scale blocks.
inline constexpr int kHadamardBlock = 16;

// Element value limits: the largest finite value, the smallest normal exponent and
// the mantissa bits of a float element (int: qmax, 0, 0).
struct ElementLimits {
  double max = 0;
  int emin = 0;       // exponent of the smallest normal value
  int emax = 0;       // exponent of the largest normal value (OCP MX's emax_elem)
  int mantissa = 0;   // stored mantissa bits
};
ElementLimits elementLimits(const QuantFormat& format);
const char* elementName(Element element);  // int | e4m3 | e5m2 | e2m1 | bf16
// The bits a float element takes (8 for FP8, 4 for e2m1, 16 for bf16); 0 for int (format.bits).
int elementBits(Element element);

const char* granularityName(Granularity granularity);

}  // namespace pgq

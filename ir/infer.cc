#include "ir/infer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/dot_dims.h"
#include "ir/quant.h"
#include "support/errors.h"

namespace pgq {
namespace {

class Rule {
 public:
  Rule(Op op, std::span<const TensorType> operands, const Attrs& attrs,
       const std::optional<TensorType>& declared)
      : op_(op), operands_(operands), attrs_(attrs), declared_(declared) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("{}: {}", opName(op_), what));
  }

  const TensorType& operand(size_t i) const { return operands_[i]; }

  void requireAttr(AttrKey key) const {
    if (!attrs_.has(key)) fail(fmt::format("missing attribute '{}'", attrName(key)));
  }

  const TensorType& declared() const {
    if (!declared_) fail("needs its result type written out");
    return *declared_;
  }

  void requireFloat(size_t i) const {
    if (!isFloat(operands_[i].dtype))
      fail(fmt::format("operand {} must be f32 or bf16, got {}", i, operands_[i].toString()));
  }

  void requireDType(size_t i, DType dtype) const {
    if (operands_[i].dtype != dtype)
      fail(fmt::format("operand {} must be {}, got {}", i, dtypeName(dtype),
                       operands_[i].toString()));
  }

  void requireSameType(size_t a, size_t b) const {
    if (!(operands_[a] == operands_[b]))
      fail(fmt::format("operands {} and {} must have the same type, got {} and {}", a, b,
                       operands_[a].toString(), operands_[b].toString()));
  }

  void requireMinRank(size_t i, int rank) const {
    if (operands_[i].shape.rank() < rank)
      fail(fmt::format("operand {} must have rank >= {}, got {}", i, rank,
                       operands_[i].toString()));
  }

  void requirePositiveEps() const {
    requireAttr(AttrKey::kEps);
    double eps = attrs_.getFloat(AttrKey::kEps);
    if (!(eps > 0.0) || !std::isfinite(eps)) fail(fmt::format("eps must be > 0, got {}", eps));
  }

  // softmax's optional prologue: a finite nonzero scale; a causal mask needs [.., tq, tk].
  void requireSoftmaxPrologue() const {
    if (attrs_.has(AttrKey::kScale)) {
      const double scale = attrs_.getFloat(AttrKey::kScale);
      const auto f = static_cast<float>(scale);  // the kernels' scale
      if (!std::isfinite(f) || f == 0.0f) fail(fmt::format("scale must be a finite nonzero f32, got {}", scale));
    }
    if (attrs_.has(AttrKey::kCausal)) requireMinRank(0, 2);
  }

  // Sorted, unique, in-range axes.
  std::vector<int64_t> axes(AttrKey key, int rank) const {
    requireAttr(key);
    const auto& axes = attrs_.getInts(key);
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i] < 0 || axes[i] >= rank)
        fail(fmt::format("{} [{}] has an entry outside [0, {})", attrName(key),
                         fmt::join(axes, ","), rank));
      if (i > 0 && axes[i] <= axes[i - 1])
        fail(fmt::format("{} [{}] must be strictly increasing", attrName(key),
                         fmt::join(axes, ",")));
    }
    return axes;
  }

  TensorType run() const;

 private:
  TensorType elementwise(size_t arity) const {
    for (size_t i = 0; i < arity; ++i) requireFloat(i);
    if (arity == 2) requireSameType(0, 1);
    return operand(0);
  }
  TensorType graphInterface() const;
  TensorType convert() const;
  TensorType reshape() const;
  TensorType transpose() const;
  TensorType broadcast() const;
  TensorType slice() const;
  TensorType pad() const;
  TensorType concat() const;
  TensorType select() const;
  TensorType rope() const;
  TensorType gather() const;
  TensorType scatterAdd() const;
  TensorType crossEntropy() const;
  TensorType collective() const;
  // The Ints attribute `key`, which must hold one entry per dim of operand 0.
  const std::vector<int64_t>& perDim(AttrKey key) const;
  TensorType reduce() const;
  TensorType matmul() const;
  TensorType qmatmul() const;
  TensorType quantStats() const;
  TensorType errorStats() const;
  TensorType smoothScales() const;
  TensorType quantParams() const;
  TensorType fakeQuant() const;
  TensorType quantize() const;
  void gemmTags() const;
  // The operand of a quantization op seen as a matrix, per its contract/batch dims.
  QuantOperandShape quantShape(const Shape& shape, AttrKey contract, AttrKey batch) const;
  const QuantFormat& format(AttrKey key) const;
  GemmOperand side() const;

  Op op_;
  std::span<const TensorType> operands_;
  const Attrs& attrs_;
  const std::optional<TensorType>& declared_;
};

TensorType Rule::transpose() const {
  const Shape& in = operand(0).shape;
  requireAttr(AttrKey::kPerm);
  const auto& perm = attrs_.getInts(AttrKey::kPerm);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool is_perm = static_cast<int>(perm.size()) == in.rank();
  for (size_t i = 0; is_perm && i < sorted.size(); ++i) is_perm = sorted[i] == static_cast<int64_t>(i);
  if (!is_perm)
    fail(fmt::format("perm [{}] is not a permutation of the {} dims of {}", fmt::join(perm, ","),
                     in.rank(), in.toString()));
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(in.dim(static_cast<int>(p)));
  return {operand(0).dtype, Shape(std::move(dims))};
}

TensorType Rule::broadcast() const {
  const TensorType& out = declared();
  const Shape& in = operand(0).shape;
  if (out.dtype != operand(0).dtype)
    fail(fmt::format("result dtype {} differs from operand dtype {}", dtypeName(out.dtype),
                     dtypeName(operand(0).dtype)));
  std::vector<int64_t> dims = axes(AttrKey::kDims, out.shape.rank());
  if (static_cast<int>(dims.size()) != in.rank())
    fail(fmt::format("dims [{}] must name one result dim per operand dim of {}",
                     fmt::join(dims, ","), in.toString()));
  for (int i = 0; i < in.rank(); ++i)
    if (in.dim(i) != out.shape.dim(static_cast<int>(dims[static_cast<size_t>(i)])))
      fail(fmt::format("operand {} dim {} does not match result {} dim {}", in.toString(), i,
                       out.shape.toString(), dims[static_cast<size_t>(i)]));
  return out;
}

const std::vector<int64_t>& Rule::perDim(AttrKey key) const {
  requireAttr(key);
  const auto& values = attrs_.getInts(key);
  if (static_cast<int>(values.size()) != operand(0).shape.rank())
    fail(fmt::format("{} [{}] must have one entry per dim of {}", attrName(key),
                     fmt::join(values, ","), operand(0).toString()));
  return values;
}

TensorType Rule::slice() const {
  const Shape& in = operand(0).shape;
  const auto& starts = perDim(AttrKey::kStarts);
  const auto& limits = perDim(AttrKey::kLimits);
  std::vector<int64_t> dims;
  for (int i = 0; i < in.rank(); ++i) {
    const int64_t start = starts[static_cast<size_t>(i)], limit = limits[static_cast<size_t>(i)];
    // start < limit: the IR has no empty tensors.
    if (!(start >= 0 && start < limit && limit <= in.dim(i)))
      fail(fmt::format("dim {} of {}: needs 0 <= start < limit <= {}, got start {} and limit {}",
                       i, in.toString(), in.dim(i), start, limit));
    dims.push_back(limit - start);
  }
  return {operand(0).dtype, Shape(std::move(dims))};
}

TensorType Rule::pad() const {
  const Shape& in = operand(0).shape;
  const auto& low = perDim(AttrKey::kLow);
  const auto& high = perDim(AttrKey::kHigh);
  std::vector<int64_t> dims;
  for (int i = 0; i < in.rank(); ++i) {
    const int64_t lo = low[static_cast<size_t>(i)], hi = high[static_cast<size_t>(i)];
    if (lo < 0 || hi < 0)
      fail(fmt::format("dim {} of {}: low and high must be >= 0, got {} and {}", i,
                       in.toString(), lo, hi));
    if (lo > Shape::kMaxElements || hi > Shape::kMaxElements)  // keeps the sum from overflowing
      fail(fmt::format("dim {} of {}: low {} and high {} exceed 2^40 elements", i, in.toString(),
                       lo, hi));
    dims.push_back(lo + in.dim(i) + hi);
  }
  try {
    return {operand(0).dtype, Shape(std::move(dims))};
  } catch (const Error& e) {
    fail(e.what());
  }
}

TensorType Rule::concat() const {
  const TensorType& a = operand(0);
  const TensorType& b = operand(1);
  requireAttr(AttrKey::kAxis);
  const int64_t axis = attrs_.getInt(AttrKey::kAxis);
  if (axis < 0 || axis >= a.shape.rank())
    fail(fmt::format("axis {} is not a dim of {}", axis, a.toString()));
  bool fits = a.dtype == b.dtype && a.shape.rank() == b.shape.rank();
  for (int i = 0; fits && i < a.shape.rank(); ++i)
    fits = i == axis || a.shape.dim(i) == b.shape.dim(i);
  if (!fits)
    fail(fmt::format("operands {} and {} must have the same dtype and equal dims except axis {}",
                     a.toString(), b.toString(), axis));
  std::vector<int64_t> dims(a.shape.dims().begin(), a.shape.dims().end());
  dims[static_cast<size_t>(axis)] += b.shape.dim(static_cast<int>(axis));
  try {
    return {a.dtype, Shape(std::move(dims))};
  } catch (const Error& e) {
    fail(e.what());
  }
}

TensorType Rule::select() const {
  requireDType(0, DType::kF32);
  requireFloat(1);
  requireSameType(1, 2);
  if (operand(0).shape != operand(1).shape)
    fail(fmt::format("condition {} must have the shape of {}", operand(0).toString(),
                     operand(1).toString()));
  return operand(1);
}

TensorType Rule::rope() const {
  const TensorType& x = operand(0);
  if (x.shape.rank() != 4)
    fail(fmt::format("operand must be [batch, heads, positions, head_dim], got {}", x.toString()));
  if (x.shape.dim(3) % 2 != 0)
    fail(fmt::format("the head dim pairs dim i with i + head_dim/2, so it must be even, got {}", x.toString()));
  requireAttr(AttrKey::kTheta);
  requireAttr(AttrKey::kRotation);
  const double theta = attrs_.getFloat(AttrKey::kTheta);
  if (!(theta > 0.0) || !std::isfinite(theta)) fail(fmt::format("theta must be > 0, got {}", theta));
  return elementwise(1);
}

// all_gather multiplies `axis` by `devices`; reduce_scatter and shard divide it, which
// must be exact. all_reduce keeps the type.
TensorType Rule::collective() const {
  requireFloat(0);
  requireAttr(AttrKey::kGroup);
  if (op_ == Op::kAllReduce) {
    requireAttr(AttrKey::kReduce);
    return operand(0);
  }
  requireAttr(AttrKey::kAxis);
  requireAttr(AttrKey::kDevices);
  const Shape& in = operand(0).shape;
  const int64_t axis = attrs_.getInt(AttrKey::kAxis);
  const int64_t devices = attrs_.getInt(AttrKey::kDevices);
  if (axis < 0 || axis >= in.rank()) fail(fmt::format("axis {} is not a dim of {}", axis, operand(0).toString()));
  if (devices < 1 || devices > 65536) fail(fmt::format("devices must be in [1, 65536], got {}", devices));
  std::vector<int64_t> dims(in.dims().begin(), in.dims().end());
  int64_t& d = dims[static_cast<size_t>(axis)];
  if (op_ == Op::kAllGather) {
    if (d > Shape::kMaxElements / devices) fail(fmt::format("{} parts of {} exceed 2^40 elements", devices, in.toString()));
    d *= devices;
  } else {
    if (d % devices != 0)
      fail(fmt::format("dim {} of {} does not split into {} equal parts", axis, operand(0).toString(), devices));
    d /= devices;
  }
  try {
    return {operand(0).dtype, Shape(std::move(dims))};
  } catch (const Error& e) {
    fail(e.what());
  }
}

TensorType Rule::reduce() const {
  requireFloat(0);
  const Shape& in = operand(0).shape;
  std::vector<int64_t> reduced = axes(AttrKey::kAxes, in.rank());
  if (reduced.empty()) fail("axes must name at least one dim");
  std::vector<int64_t> dims;
  for (int i = 0; i < in.rank(); ++i)
    if (std::find(reduced.begin(), reduced.end(), i) == reduced.end()) dims.push_back(in.dim(i));
  return {operand(0).dtype, Shape(std::move(dims))};
}

void Rule::gemmTags() const {
  for (AttrKey key : {AttrKey::kGemmShape, AttrKey::kDeviceShape})
    if (attrs_.has(key) && attrs_.getInts(key).size() != 4)
      fail(fmt::format("{} must be [batch, M, K, N]", attrName(key)));
  if (attrs_.has(AttrKey::kGradOf) != attrs_.has(AttrKey::kWrt))
    fail("grad_of and wrt go together: the forward GEMM and which of its operands this GEMM differentiates");
}

TensorType Rule::matmul() const {
  requireFloat(0);
  requireFloat(1);
  if (operand(0).dtype != operand(1).dtype)
    fail(fmt::format("operands must have the same dtype, got {} and {}", operand(0).toString(),
                     operand(1).toString()));
  requireAttr(AttrKey::kLhsContract);
  requireAttr(AttrKey::kRhsContract);
  gemmTags();
  try {
    return {DType::kF32, dotResultShape(operand(0).shape, operand(1).shape,
                                        DotDims::fromAttrs(attrs_))};
  } catch (const Error& e) {
    fail(e.what());
  }
}

QuantOperandShape Rule::quantShape(const Shape& shape, AttrKey contract, AttrKey batch) const {
  requireAttr(contract);
  try {
    return quantOperandShape(shape, attrs_.getInts(contract), attrs_.getIntsOr(batch, {}));
  } catch (const Error& e) {
    fail(e.what());
  }
}

const QuantFormat& Rule::format(AttrKey key) const {
  requireAttr(key);
  return attrs_.getFormat(key);
}

GemmOperand Rule::side() const {
  requireAttr(AttrKey::kSide);
  return attrs_.getOperand(AttrKey::kSide);
}

TensorType Rule::qmatmul() const {
  requireDType(0, DType::kU8);
  requireDType(1, DType::kS8);
  requireDType(2, DType::kF32);
  requireDType(3, DType::kF32);
  requireAttr(AttrKey::kLhsContract);
  requireAttr(AttrKey::kRhsContract);
  gemmTags();
  Shape result;
  try {
    result = dotResultShape(operand(0).shape, operand(1).shape, DotDims::fromAttrs(attrs_));
  } catch (const Error& e) {
    fail(e.what());
  }
  const QuantFormat& lf = format(AttrKey::kLhsFormat);
  const QuantFormat& rf = format(AttrKey::kRhsFormat);
  int64_t lp = quantParamCount(quantShape(operand(0).shape, AttrKey::kLhsContract, AttrKey::kLhsBatch), lf);
  int64_t rp = quantParamCount(quantShape(operand(1).shape, AttrKey::kRhsContract, AttrKey::kRhsBatch), rf);
  if (operand(2).shape != Shape({lp}) || operand(3).shape != Shape({rp}))
    fail(fmt::format("params must be f32[{}] and f32[{}] for formats {} and {}, got {} and {}", lp, rp, lf.toString(), rf.toString(),
                     operand(2).toString(), operand(3).toString()));
  return {DType::kF32, result};
}

// parameter and constant hold f32 or bf16 values (a constant also its `value`); an
// input may be of any dtype (token ids are s32).
TensorType Rule::graphInterface() const {
  if (op_ == Op::kInput) return declared();
  if (!isFloat(declared().dtype))
    fail(fmt::format("must be f32 or bf16, got {}", declared().toString()));
  if (op_ == Op::kConstant) requireAttr(AttrKey::kValue);
  return declared();
}

TensorType Rule::convert() const {
  if (declared().shape != operand(0).shape)
    fail(fmt::format("result shape {} differs from operand shape {}",
                     declared().shape.toString(), operand(0).shape.toString()));
  return declared();
}

TensorType Rule::reshape() const {
  if (declared().dtype != operand(0).dtype)
    fail(fmt::format("result dtype {} differs from operand dtype {}",
                     dtypeName(declared().dtype), dtypeName(operand(0).dtype)));
  if (declared().shape.numElements() != operand(0).shape.numElements())
    fail(fmt::format("cannot reshape {} ({} elements) to {} ({} elements)",
                     operand(0).shape.toString(), operand(0).shape.numElements(),
                     declared().shape.toString(), declared().shape.numElements()));
  return declared();
}

TensorType Rule::gather() const {
  requireFloat(0);
  requireDType(1, DType::kS32);
  if (operand(0).shape.rank() != 2)
    fail(fmt::format("table must be [rows, cols], got {}", operand(0).toString()));
  std::vector<int64_t> dims(operand(1).shape.dims().begin(), operand(1).shape.dims().end());
  dims.push_back(operand(0).shape.dim(1));
  return {operand(0).dtype, Shape(std::move(dims))};
}

TensorType Rule::scatterAdd() const {
  requireFloat(0);
  requireDType(1, DType::kS32);
  const TensorType& out = declared();
  std::vector<int64_t> expect(operand(1).shape.dims().begin(), operand(1).shape.dims().end());
  if (out.shape.rank() != 2 || out.dtype != operand(0).dtype)
    fail(fmt::format("result must be a {} table [rows, cols], got {}",
                     dtypeName(operand(0).dtype), out.toString()));
  expect.push_back(out.shape.dim(1));
  if (operand(0).shape != Shape(expect))
    fail(fmt::format("gradient {} must be the indices shape {} plus the table width {}",
                     operand(0).toString(), operand(1).shape.toString(), out.shape.dim(1)));
  return out;
}

// cross_entropy is the scalar loss; cross_entropy_grad has the logits' type.
TensorType Rule::crossEntropy() const {
  requireFloat(0);
  requireDType(1, DType::kS32);
  const Shape& logits = operand(0).shape;
  if (logits.rank() != 2 || operand(1).shape != Shape({logits.dim(0)}))
    fail(fmt::format("needs logits [N,V] and targets s32[N], got {} and {}",
                     operand(0).toString(), operand(1).toString()));
  if (op_ == Op::kCrossEntropy) return {DType::kF32, Shape()};
  if (!(operand(2) == TensorType{DType::kF32, Shape()}))
    fail(fmt::format("loss gradient must be f32[], got {}", operand(2).toString()));
  return operand(0);
}

TensorType Rule::quantStats() const {
  requireFloat(0);
  requireAttr(AttrKey::kFormats);
  const auto& formats = attrs_.getFormats(AttrKey::kFormats);
  if (formats.empty()) fail("formats must list at least one format");
  if (attrs_.has(AttrKey::kBias) && attrs_.getInt(AttrKey::kBias) != 0 && attrs_.getInt(AttrKey::kBias) != 1)
    fail(fmt::format("bias must be 0 or 1, got {}", attrs_.getInt(AttrKey::kBias)));
  quantShape(operand(0).shape, AttrKey::kContractDims, AttrKey::kBatchDims);
  return {DType::kF32, Shape{static_cast<int64_t>(formats.size()), kStatFields}};
}

TensorType Rule::errorStats() const {
  requireDType(0, DType::kF32);
  requireSameType(0, 1);
  requireAttr(AttrKey::kLabel);
  format(AttrKey::kLhsFormat);
  format(AttrKey::kRhsFormat);
  return {DType::kF32, Shape{kErrorStatFields}};
}

TensorType Rule::smoothScales() const {
  requireDType(0, DType::kF32);
  requireDType(1, DType::kF32);
  requireAttr(AttrKey::kLhsContract);
  requireAttr(AttrKey::kRhsContract);
  requireAttr(AttrKey::kAlpha);
  double alpha = attrs_.getFloat(AttrKey::kAlpha);
  if (!(alpha >= 0 && alpha <= 1)) fail(fmt::format("alpha must be in [0, 1], got {}", alpha));
  try {
    dotResultShape(operand(0).shape, operand(1).shape, DotDims::fromAttrs(attrs_));
  } catch (const Error& e) {
    fail(e.what());
  }
  GemmSizes g = gemmSizes(operand(0).shape, operand(1).shape, DotDims::fromAttrs(attrs_));
  return {DType::kF32, Shape{g.k}};
}

TensorType Rule::quantParams() const {
  requireDType(0, DType::kF32);
  side();
  if (attrs_.has(AttrKey::kAmaxHistory)) {
    int64_t h = attrs_.getInt(AttrKey::kAmaxHistory);
    if (h < 0) fail(fmt::format("amax_history must be >= 0, got {}", h));
    if (h > 0 && !format(AttrKey::kFormat).isEmulated())
      fail(fmt::format("amax_history (delayed scaling) is for FP8/MX formats, got {}",
                       format(AttrKey::kFormat).toString()));
    if (h > 0 && format(AttrKey::kFormat).granularity != Granularity::kPerTensor)
      fail(fmt::format("amax_history (delayed scaling) needs a per-tensor format, got {}",
                       format(AttrKey::kFormat).toString()));
  }
  if (attrs_.has(AttrKey::kPredictScale) && attrs_.getInt(AttrKey::kPredictScale) != 0) {
    const QuantFormat& f = format(AttrKey::kFormat);
    if (!f.isEmulated() || f.granularity != Granularity::kPerTensor)
      fail(fmt::format("predict_scale needs a per-tensor FP8/MX format, got {}", f.toString()));
    if (attrs_.has(AttrKey::kAmaxHistory) && attrs_.getInt(AttrKey::kAmaxHistory) > 0)
      fail("predict_scale and amax_history are two scaling strategies: give one");
  }
  if (attrs_.has(AttrKey::kAmaxCompute)) {
    const std::string& c = attrs_.getString(AttrKey::kAmaxCompute);
    if (c != "max" && c != "most_recent") fail(fmt::format("amax_compute must be max or most_recent, got '{}'", c));
  }
  int64_t count = quantParamCount(quantShape(operand(0).shape, AttrKey::kContractDims, AttrKey::kBatchDims),
                                  format(AttrKey::kFormat));
  return {DType::kF32, Shape{count}};
}

TensorType Rule::fakeQuant() const {
  requireDType(0, DType::kF32);
  requireDType(1, DType::kF32);
  side();
  const QuantFormat& f = format(AttrKey::kFormat);
  if (!f.isEmulated())
    fail(fmt::format("format {} runs as int8 (quantize + qmatmul), not fake_quant", f.toString()));
  int64_t count = quantParamCount(quantShape(operand(0).shape, AttrKey::kContractDims, AttrKey::kBatchDims), f);
  if (operand(1).shape != Shape({count}))
    fail(fmt::format("params must be f32[{}], got {}", count, operand(1).toString()));
  return {DType::kF32, operand(0).shape};
}

TensorType Rule::quantize() const {
  requireDType(0, DType::kF32);
  requireDType(1, DType::kF32);
  GemmOperand s = side();
  if (format(AttrKey::kFormat).isEmulated())
    fail(fmt::format("format {} has no int8 storage here: it runs as fake_quant",
                     format(AttrKey::kFormat).toString()));
  int64_t count = quantParamCount(quantShape(operand(0).shape, AttrKey::kContractDims, AttrKey::kBatchDims),
                                  format(AttrKey::kFormat));
  if (operand(1).shape != Shape({count}))
    fail(fmt::format("params must be f32[{}], got {}", count, operand(1).toString()));
  return {s == GemmOperand::kLhs ? DType::kU8 : DType::kS8, operand(0).shape};
}

// Every op of ops.def names its rule here; there is no default, so an op left out is a
// compiler warning (-Wswitch) and, at run time, the error below.
TensorType Rule::run() const {
  switch (op_) {
    case Op::kParameter: case Op::kConstant: case Op::kInput:
      return graphInterface();

    case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kDiv: case Op::kMax: case Op::kGe:
    case Op::kReluGrad: case Op::kGeluGrad: case Op::kSiluGrad: case Op::kGeluErfGrad:
      return elementwise(2);
    case Op::kSoftmaxGrad:
      requireSoftmaxPrologue();
      return elementwise(2);
    case Op::kNeg: case Op::kExp: case Op::kLog: case Op::kRsqrt: case Op::kTanh:
    case Op::kRelu: case Op::kGelu: case Op::kSqrt: case Op::kSigmoid: case Op::kErf:
    case Op::kSilu: case Op::kGeluErf:
      return elementwise(1);
    case Op::kSelect: return select();
    case Op::kSwiglu: return elementwise(2);
    case Op::kSwigluGrad:
      requireAttr(AttrKey::kWrt);
      return elementwise(3);
    case Op::kConvert: return convert();

    case Op::kTranspose: return transpose();
    case Op::kReshape: return reshape();
    case Op::kBroadcast: return broadcast();
    case Op::kSlice: return slice();
    case Op::kPad: return pad();
    case Op::kConcat: return concat();
    case Op::kReduceSum: case Op::kReduceMax: case Op::kReduceMean:
      return reduce();

    case Op::kSoftmax:
      requireMinRank(0, 1);
      requireSoftmaxPrologue();
      return elementwise(1);
    case Op::kCausalMask:
      requireMinRank(0, 2);
      requireAttr(AttrKey::kValue);
      return elementwise(1);
    case Op::kRope: return rope();
    case Op::kRmsNorm: case Op::kLayerNorm:
      requireMinRank(0, 1);
      requirePositiveEps();
      return elementwise(1);
    case Op::kRmsNormGrad: case Op::kLayerNormGrad:
      requireMinRank(0, 1);
      requirePositiveEps();
      return elementwise(2);
    case Op::kGather: return gather();
    case Op::kScatterAdd: return scatterAdd();
    case Op::kCrossEntropy: case Op::kCrossEntropyGrad:
      return crossEntropy();

    case Op::kMatMul: return matmul();
    case Op::kAllReduce: case Op::kAllGather: case Op::kReduceScatter: case Op::kShard:
      return collective();

    case Op::kQMatMul: return qmatmul();
    case Op::kQuantStats: return quantStats();
    case Op::kErrorStats: return errorStats();
    case Op::kSmoothScales: return smoothScales();
    case Op::kQuantParams: return quantParams();
    case Op::kFakeQuant: return fakeQuant();
    case Op::kQuantize: return quantize();
  }
  fail("has no type rule");
}

}  // namespace

TensorType inferType(Op op, std::span<const TensorType> operands, const Attrs& attrs,
                     const std::optional<TensorType>& declared) {
  if (static_cast<int>(operands.size()) != opArity(op))
    throw Error(fmt::format("{}: expects {} operand(s), got {}", opName(op), opArity(op),
                            operands.size()));
  for (const auto& [key, value] : attrs.entries())
    if (!opAllowsAttr(op, key))
      throw Error(fmt::format("{}: has no attribute '{}'", opName(op), attrName(key)));
  TensorType result = Rule(op, operands, attrs, declared).run();
  if (attrs.has(AttrKey::kSplit)) {
    const std::vector<int64_t>& split = attrs.getInts(AttrKey::kSplit);
    if (split.size() != 2 || split[0] < 0 || split[0] >= result.shape.rank() || split[1] < 1)
      throw Error(fmt::format("{}: split must be [dim, devices] with a dim of {} and devices >= 1, got [{}]",
                              opName(op), result.toString(), fmt::join(split, ",")));
  }
  if (declared && !(result == *declared))
    throw Error(fmt::format("{}: result type is {}, but {} was written", opName(op),
                            result.toString(), declared->toString()));
  return result;
}

}  // namespace pgq

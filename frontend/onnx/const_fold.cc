#include "frontend/onnx/const_fold.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"

namespace pgq {
namespace {

using onnx::TensorProto;
using Dims = std::vector<int64_t>;

// Beyond this many multiply-adds a MatMul would stall the import for minutes.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr int64_t kMaxMatMulWork = int64_t{1} << 26;  // within libFuzzer's per-input timeout
#else
constexpr int64_t kMaxMatMulWork = int64_t{1} << 32;
#endif
constexpr double kTwo53 = 9007199254740992.0;
constexpr double kTwo63 = 9223372036854775808.0;

Dims stridesOf(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) strides[d - 1] = strides[d] * dims[d];
  return strides;
}

int64_t product(const Dims& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t d = begin; d < end; ++d) p *= dims[d];
  return p;
}

// Calls f(offsets) for every element of `out` in row-major order, where offsets[k] is
// the position of that element in input k (broadcast: a dimension of 1 or a missing
// leading dimension repeats). `ins` must broadcast to `out`.
template <typename F>
void forEachBroadcast(const Dims& out, const std::vector<const Dims*>& ins, F&& f) {
  const size_t rank = out.size();
  const size_t n = ins.size();
  std::vector<Dims> strides(n, Dims(rank, 0));
  for (size_t k = 0; k < n; ++k) {
    const Dims& dims = *ins[k];
    Dims own = stridesOf(dims);
    size_t lead = rank - dims.size();
    for (size_t d = 0; d < dims.size(); ++d) strides[k][lead + d] = dims[d] == 1 ? 0 : own[d];
  }
  int64_t total = product(out, 0, rank);
  Dims index(rank, 0);
  std::vector<int64_t> offsets(n, 0);
  for (int64_t i = 0; i < total; ++i) {
    f(std::as_const(offsets));
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      for (size_t k = 0; k < n; ++k) offsets[k] += strides[k][d];
      if (index[d] < out[d]) break;
      for (size_t k = 0; k < n; ++k) offsets[k] -= strides[k][d] * out[d];
      index[d] = 0;
    }
  }
}

bool isIntegerDtype(int32_t dtype) {
  ConstTensor t;
  t.dtype = dtype;
  return t.isInteger();
}

// A double holding an integer as int64, saturating at the +-2^63 sentinels.
int64_t toInt64(double v) {
  if (v >= kTwo63) return std::numeric_limits<int64_t>::max();
  if (v <= -kTwo63) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

// The dtypes a folded constant may have (those ConstTensor holds and roundToDtype knows).
bool isFoldedDtype(int32_t dtype) {
  switch (dtype) {
    case TensorProto::FLOAT: case TensorProto::DOUBLE: case TensorProto::FLOAT16: case TensorProto::BFLOAT16:
    case TensorProto::INT8: case TensorProto::INT16: case TensorProto::INT32: case TensorProto::INT64:
    case TensorProto::UINT8: case TensorProto::UINT16: case TensorProto::UINT32: case TensorProto::UINT64:
    case TensorProto::BOOL: return true;
    default: return false;
  }
}

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// An attribute of `op` that exists from opset `since` and, when `to_input` is not kNever,
// is replaced by input `input` from opset `to_input` on. Folding follows the node's
// opset: such an attribute at an opset without it, or that input where the opset wants
// the attribute, is refused, as ONNX's checker refuses it, rather than guessed at.
struct VersionedAttribute {
  std::string op;
  std::string name;
  int64_t since = 1;
  int64_t to_input = kNever;
  size_t input = 0;
};

const std::vector<VersionedAttribute>& versionedAttributes();
const VersionedAttribute& versionedAttribute(const std::string& op, const std::string& name);

class Folder {
 public:
  Folder(const onnx::NodeProto& node, std::span<const ConstTensor* const> inputs, int64_t opset,
         const std::string& model_file)
      : node_(node), inputs_(inputs), opset_(opset), model_file_(model_file) {}

  using Result = std::optional<std::vector<ConstTensor>>;
  // How one op folds; nullopt when it leaves this node to the importer.
  using Rule = std::function<Result(const Folder&)>;

  // Every op folded and its rule: the one list of them.
  static const std::map<std::string, Rule>& rules();

  Result fold() const;

 private:
  using Unary = std::function<double(double)>;
  using Binary = std::function<double(double, double)>;

  // What a reduction computes: each element mapped, then combined from `init`, then the
  // result finished given the count of elements reduced (an empty reduction gives
  // finish(init, 0)).
  struct Reduction {
    double init = 0;
    Unary map;
    Binary combine;
    std::function<double(double, int64_t)> finish;
  };

  [[noreturn]] void fail(const std::string& message) const {
    std::string where = fmt::format("node '{}' ({})", node_.name(), node_.op_type());
    throw Error(model_file_.empty() ? fmt::format("{}: {}", where, message)
                                    : fmt::format("{}: {}: {}", model_file_, where, message));
  }

  // ---- Inputs and attributes ----

  const ConstTensor* optionalInput(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  const ConstTensor& input(size_t i) const {
    if (const ConstTensor* t = optionalInput(i)) return *t;
    fail(fmt::format("input {} is missing", i));
  }
  std::vector<int64_t> ints(const ConstTensor& t, const char* what) const {
    try {
      return t.ints();
    } catch (const Error& e) {
      fail(fmt::format("{}: {}", what, e.what()));
    }
  }
  int64_t scalarInt(const ConstTensor& t, const char* what) const {
    if (t.numElements() != 1) fail(fmt::format("{} must have one element, not {}", what, t.numElements()));
    return ints(t, what)[0];
  }
  const onnx::AttributeProto* attribute(const std::string& name) const {
    for (const onnx::AttributeProto& a : node_.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  int64_t intAttribute(const std::string& name, int64_t fallback) const {
    const onnx::AttributeProto* a = attribute(name);
    return a ? a->i() : fallback;
  }
  std::optional<Dims> intsAttribute(const std::string& name) const {
    const onnx::AttributeProto* a = attribute(name);
    if (!a) return std::nullopt;
    return Dims(a->ints().begin(), a->ints().end());
  }
  // The integers of `name`, an attribute of this op that became an input at some opset
  // (versionedAttributes): the attribute before that opset, the input from it on.
  std::optional<Dims> attributeOrInput(const std::string& name) const {
    const VersionedAttribute& v = versionedAttribute(node_.op_type(), name);
    if (opset_ < v.to_input) return intsAttribute(name);
    const ConstTensor* t = optionalInput(v.input);
    if (!t) return std::nullopt;
    return ints(*t, name.c_str());
  }
  // Refuses an attribute or input of this op that the node's opset does not have.
  void checkOpset() const {
    for (const VersionedAttribute& v : versionedAttributes()) {
      if (v.op != node_.op_type()) continue;
      const bool has_attribute = attribute(v.name) != nullptr;
      if (has_attribute && opset_ < v.since)
        fail(fmt::format("attribute '{}' does not exist at opset {} (it was added at opset {})", v.name, opset_,
                         v.since));
      if (has_attribute && opset_ >= v.to_input)
        fail(fmt::format("at opset {} '{}' is input {}, not an attribute (since opset {})", opset_, v.name,
                         v.input, v.to_input));
      if (opset_ < v.to_input && v.to_input != kNever && optionalInput(v.input))
        fail(fmt::format("at opset {} '{}' is an attribute, not input {} (it becomes one at opset {})", opset_,
                         v.name, v.input, v.to_input));
    }
  }

  // `axis` in [-rank, rank) as a dimension index.
  size_t normalizeAxis(int64_t axis, size_t rank, const char* what = "axis") const {
    int64_t r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= r) fail(fmt::format("{} {} is out of range for rank {}", what, axis, rank));
    return static_cast<size_t>(axis < 0 ? axis + r : axis);
  }
  std::vector<size_t> normalizeAxes(const Dims& axes, size_t rank) const {
    std::vector<size_t> out;
    for (int64_t a : axes) out.push_back(normalizeAxis(a, rank));
    if (std::set<size_t>(out.begin(), out.end()).size() != out.size())
      fail(fmt::format("axes [{}] repeat an axis", fmt::join(axes, ", ")));
    return out;
  }

  // ---- Results ----

  // An empty result of `dtype` and `dims`, refusing one too large to fold.
  ConstTensor make(int32_t dtype, Dims dims) const {
    int64_t count = 1;
    for (int64_t d : dims) {
      if (d < 0) fail(fmt::format("result dimension {} is negative", d));
      if (d != 0 && count > kMaxFoldedElements / d) count = kMaxFoldedElements + 1;
      else count *= d;
    }
    if (count > kMaxFoldedElements)
      fail(fmt::format("folding would give a huge constant of shape [{}] (more than 2^{} elements)",
                       fmt::join(dims, ", "), kMaxFoldedElementsLog2));
    ConstTensor t;
    t.dtype = dtype;
    t.dims = std::move(dims);
    t.values.reserve(static_cast<size_t>(count));
    return t;
  }
  // Rounds every value to what its dtype holds; refuses integers pgq cannot hold exactly.
  ConstTensor finish(ConstTensor t) const {
    const bool is_int64 = t.dtype == TensorProto::INT64 || t.dtype == TensorProto::UINT64;
    const bool is_int = isIntegerDtype(t.dtype) && t.dtype != TensorProto::BOOL;
    for (double& v : t.values) {
      if (is_int && !std::isfinite(v))
        fail(fmt::format("{} cannot hold {}", dtypeName(t.dtype), v));
      v = roundToDtype(t.dtype, v);
      if (is_int64 && std::abs(v) > kTwo53 && std::abs(v) != kTwo63)
        fail(fmt::format("integer result {} is beyond 2^53, which pgq cannot hold exactly", v));
    }
    return t;
  }
  std::vector<ConstTensor> one(ConstTensor t) const {
    std::vector<ConstTensor> out;
    out.push_back(finish(std::move(t)));
    return out;
  }

  // ---- Shared kernels ----

  Dims broadcastDims(const std::vector<const Dims*>& ins) const {
    size_t rank = 0;
    for (const Dims* d : ins) rank = std::max(rank, d->size());
    Dims out(rank, 1);
    for (const Dims* dims : ins) {
      size_t lead = rank - dims->size();
      for (size_t d = 0; d < dims->size(); ++d) {
        int64_t have = out[lead + d], next = (*dims)[d];
        if (have == 1) out[lead + d] = next;
        else if (next != 1 && next != have)
          fail(fmt::format("shapes do not broadcast: dimension {} is {} in one input and {} in another", d, have,
                           next));
      }
    }
    return out;
  }
  // f applied elementwise with broadcasting to every input (absent ones are refused).
  ConstTensor nary(int32_t dtype, const std::function<double(const double*)>& f) const {
    std::vector<const ConstTensor*> ins;
    std::vector<const Dims*> dims;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      ins.push_back(&input(i));
      dims.push_back(&ins.back()->dims);
    }
    if (ins.empty()) fail("has no inputs");
    ConstTensor out = make(dtype, broadcastDims(dims));
    std::vector<double> args(ins.size());
    forEachBroadcast(out.dims, dims, [&](const std::vector<int64_t>& offsets) {
      for (size_t k = 0; k < ins.size(); ++k) args[k] = ins[k]->values[static_cast<size_t>(offsets[k])];
      out.values.push_back(f(args.data()));
    });
    return out;
  }
  ConstTensor binary(int32_t dtype, const Binary& f) const {
    if (inputs_.size() != 2) fail(fmt::format("takes 2 inputs, not {}", inputs_.size()));
    return nary(dtype, [&](const double* a) { return f(a[0], a[1]); });
  }
  // f applied to each element of input 0, giving `dtype` (by default input 0's).
  ConstTensor unary(const Unary& f, std::optional<int32_t> dtype = std::nullopt) const {
    ConstTensor out = input(0);
    for (double& v : out.values) v = f(v);
    if (dtype) out.dtype = *dtype;
    return out;
  }
  // Variadic Min/Max/Sum/Mean: a fold of f over the inputs.
  ConstTensor variadic(const Binary& f, bool mean = false) const {
    size_t n = inputs_.size();
    return nary(input(0).dtype, [&](const double* a) {
      double acc = a[0];
      for (size_t k = 1; k < n; ++k) acc = f(acc, a[k]);
      return mean ? acc / static_cast<double>(n) : acc;
    });
  }
  // Copies the elements of `in` at the multi-index start + i * step for every index i of
  // the result `dims` (Slice and, with steps of 1, anything that takes a box).
  ConstTensor strided(const ConstTensor& in, const Dims& dims, const Dims& start, const Dims& step) const {
    ConstTensor out = make(in.dtype, dims);
    Dims in_strides = stridesOf(in.dims);
    int64_t base = 0;
    for (size_t d = 0; d < dims.size(); ++d) base += start[d] * in_strides[d];
    Dims index(dims.size(), 0);
    int64_t total = product(dims, 0, dims.size());
    int64_t offset = base;
    for (int64_t i = 0; i < total; ++i) {
      out.values.push_back(in.values[static_cast<size_t>(offset)]);
      for (size_t d = dims.size(); d-- > 0;) {
        ++index[d];
        offset += step[d] * in_strides[d];
        if (index[d] < dims[d]) break;
        offset -= step[d] * in_strides[d] * dims[d];
        index[d] = 0;
      }
    }
    return out;
  }

  // ---- Operators ----

  ConstTensor cast(const ConstTensor& in, int32_t to) const;
  ConstTensor constant() const;
  ConstTensor shape() const;
  ConstTensor gather() const;
  ConstTensor gatherElements() const;
  ConstTensor gatherND() const;
  ConstTensor unsqueeze() const;
  ConstTensor squeeze() const;
  ConstTensor concat() const;
  ConstTensor slice() const;
  ConstTensor constantOfShape() const;
  ConstTensor range() const;
  ConstTensor expand() const;
  ConstTensor reshape() const;
  ConstTensor flatten() const;
  ConstTensor transpose() const;
  ConstTensor trilu() const;
  ConstTensor matmul() const;
  ConstTensor einsum() const;
  ConstTensor tile() const;
  ConstTensor reduce(const Reduction& r) const;
  ConstTensor cumsum() const;
  std::vector<ConstTensor> split() const;
  ConstTensor softmax() const;

  const onnx::NodeProto& node_;
  std::span<const ConstTensor* const> inputs_;
  int64_t opset_;
  const std::string& model_file_;
};

// Cast and CastLike. Their `saturate` (opset 19) changes only casts to float8 types,
// which are refused here with the other dtypes pgq does not hold, so it is ignored.
ConstTensor Folder::cast(const ConstTensor& in, int32_t to) const {
  if (!isFoldedDtype(to)) fail(fmt::format("Cast to {} is not supported", dtypeName(to)));
  ConstTensor out = in;
  out.dtype = to;
  // Float to integer truncates toward zero; NaN and infinities have no integer value.
  if (isIntegerDtype(to) && to != TensorProto::BOOL)
    for (double v : out.values)
      if (!std::isfinite(v)) fail(fmt::format("cannot cast {} to {}", v, dtypeName(to)));
  return out;
}

ConstTensor Folder::constant() const {
  if (node_.attribute_size() != 1) fail("needs exactly one value attribute");
  const onnx::AttributeProto& a = node_.attribute(0);
  if (a.name() == "sparse_value" || a.name() == "value_string" || a.name() == "value_strings")
    fail(fmt::format("attribute '{}' is not supported", a.name()));
  return attributeTensor(a, {}, model_file_, node_.name());
}

ConstTensor Folder::shape() const {
  const Dims& dims = input(0).dims;
  int64_t rank = static_cast<int64_t>(dims.size());
  // start and end (opset 15): negative from the end, then clamped to [0, rank].
  auto clampIndex = [rank](int64_t i) { return std::clamp(i < 0 ? i + rank : i, int64_t{0}, rank); };
  int64_t start = clampIndex(intAttribute("start", 0)), end = rank;
  if (const onnx::AttributeProto* a = attribute("end")) end = clampIndex(a->i());
  ConstTensor out = make(TensorProto::INT64, {std::max<int64_t>(end - start, 0)});
  for (int64_t d = start; d < end; ++d) out.values.push_back(static_cast<double>(dims[static_cast<size_t>(d)]));
  return out;
}

ConstTensor Folder::gather() const {
  const ConstTensor& data = input(0);
  const ConstTensor& indices = input(1);
  if (data.dims.empty()) fail("cannot gather from a scalar");
  size_t axis = normalizeAxis(intAttribute("axis", 0), data.dims.size());
  int64_t n = data.dims[axis];
  Dims dims(data.dims.begin(), data.dims.begin() + static_cast<int64_t>(axis));
  dims.insert(dims.end(), indices.dims.begin(), indices.dims.end());
  dims.insert(dims.end(), data.dims.begin() + static_cast<int64_t>(axis) + 1, data.dims.end());
  ConstTensor out = make(data.dtype, dims);
  int64_t outer = product(data.dims, 0, axis);
  int64_t inner = product(data.dims, axis + 1, data.dims.size());
  std::vector<int64_t> idx = ints(indices, "indices");
  for (int64_t& i : idx) {
    if (i < -n || i >= n) fail(fmt::format("index {} is out of range for dimension {} of size {}", i, axis, n));
    if (i < 0) i += n;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i : idx) {
      auto from = data.values.begin() + (o * n + i) * inner;
      out.values.insert(out.values.end(), from, from + inner);
    }
  return out;
}

// out[i][j][k] = data[indices[i][j][k]][j][k] for axis 0, and so on: the result has the
// indices' shape, which may be smaller than the data's off the axis.
ConstTensor Folder::gatherElements() const {
  const ConstTensor& data = input(0);
  const ConstTensor& indices = input(1);
  size_t rank = data.dims.size();
  if (rank == 0) fail("cannot gather from a scalar");
  if (indices.dims.size() != rank)
    fail(fmt::format("indices have rank {}, the data {}", indices.dims.size(), rank));
  size_t axis = normalizeAxis(intAttribute("axis", 0), rank);
  for (size_t d = 0; d < rank; ++d)
    if (d != axis && indices.dims[d] > data.dims[d])
      fail(fmt::format("indices' dimension {} is {}, more than the data's {}", d, indices.dims[d], data.dims[d]));
  int64_t n = data.dims[axis];
  ConstTensor out = make(data.dtype, indices.dims);
  std::vector<int64_t> idx = ints(indices, "indices");
  Dims data_strides = stridesOf(data.dims);
  Dims index(rank, 0);
  for (int64_t i : idx) {
    if (i < -n || i >= n) fail(fmt::format("index {} is out of range for dimension {} of size {}", i, axis, n));
    int64_t offset = (i < 0 ? i + n : i) * data_strides[axis];
    for (size_t d = 0; d < rank; ++d)
      if (d != axis) offset += index[d] * data_strides[d];
    out.values.push_back(data.values[static_cast<size_t>(offset)]);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < indices.dims[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// Each row of the indices' last dimension (k long) picks a slice data[i0, ..., ik-1]
// of the data; with batch_dims b, the first b dimensions of both are a batch, each
// index row picking from its own batch. The result is [indices dims but the last] +
// [data dims from b + k on].
ConstTensor Folder::gatherND() const {
  const ConstTensor& data = input(0);
  const ConstTensor& indices = input(1);
  size_t rank = data.dims.size(), q = indices.dims.size();
  int64_t batch_dims = intAttribute("batch_dims", 0);
  if (q == 0) fail("indices must have rank 1 or more");
  if (batch_dims < 0 || static_cast<size_t>(batch_dims) >= std::min(rank, q))
    fail(fmt::format("batch_dims {} is out of range for data of rank {} and indices of rank {}", batch_dims, rank,
                     q));
  size_t b = static_cast<size_t>(batch_dims);
  for (size_t d = 0; d < b; ++d)
    if (data.dims[d] != indices.dims[d])
      fail(fmt::format("batch dimension {} is {} in the data and {} in the indices", d, data.dims[d],
                       indices.dims[d]));
  int64_t k = indices.dims.back();
  if (k < 1 || static_cast<size_t>(k) > rank - b)
    fail(fmt::format("indices' last dimension {} is out of range [1, {}]", k, rank - b));
  size_t ku = static_cast<size_t>(k);
  Dims dims(indices.dims.begin(), indices.dims.end() - 1);
  dims.insert(dims.end(), data.dims.begin() + static_cast<int64_t>(b + ku), data.dims.end());
  ConstTensor out = make(data.dtype, dims);
  std::vector<int64_t> idx = ints(indices, "indices");
  Dims data_strides = stridesOf(data.dims);
  int64_t batch_size = product(data.dims, b, rank), slice = product(data.dims, b + ku, rank);
  int64_t rows_per_batch = product(indices.dims, b, q - 1);
  for (size_t row = 0; row * ku < idx.size(); ++row) {
    int64_t offset = static_cast<int64_t>(row) / rows_per_batch * batch_size;
    for (size_t j = 0; j < ku; ++j) {
      int64_t i = idx[row * ku + j], n = data.dims[b + j];
      if (i < -n || i >= n) fail(fmt::format("index {} is out of range for dimension {} of size {}", i, b + j, n));
      offset += (i < 0 ? i + n : i) * data_strides[b + j];
    }
    auto from = data.values.begin() + offset;
    out.values.insert(out.values.end(), from, from + slice);
  }
  return out;
}

ConstTensor Folder::unsqueeze() const {
  const ConstTensor& in = input(0);
  std::optional<Dims> axes = attributeOrInput("axes");
  if (!axes) fail("needs axes");
  size_t rank = in.dims.size() + axes->size();
  std::vector<size_t> at = normalizeAxes(*axes, rank);
  Dims dims(rank, 0);
  for (size_t a : at) dims[a] = 1;
  auto next = in.dims.begin();
  for (size_t d = 0; d < rank; ++d)
    if (std::find(at.begin(), at.end(), d) == at.end()) dims[d] = *next++;
  ConstTensor out = in;
  out.dims = dims;
  return out;
}

ConstTensor Folder::squeeze() const {
  const ConstTensor& in = input(0);
  std::optional<Dims> axes = attributeOrInput("axes");
  std::vector<size_t> at;
  if (axes) {
    at = normalizeAxes(*axes, in.dims.size());
    for (size_t a : at)
      if (in.dims[a] != 1) fail(fmt::format("cannot squeeze axis {} of size {}", a, in.dims[a]));
  } else {
    for (size_t d = 0; d < in.dims.size(); ++d)
      if (in.dims[d] == 1) at.push_back(d);
  }
  ConstTensor out = in;
  out.dims.clear();
  for (size_t d = 0; d < in.dims.size(); ++d)
    if (std::find(at.begin(), at.end(), d) == at.end()) out.dims.push_back(in.dims[d]);
  return out;
}

ConstTensor Folder::concat() const {
  const onnx::AttributeProto* axis_attribute = attribute("axis");
  if (!axis_attribute) fail("needs attribute 'axis'");
  const ConstTensor& first = input(0);
  if (first.dims.empty()) fail("cannot concatenate scalars");
  size_t axis = normalizeAxis(axis_attribute->i(), first.dims.size());
  Dims dims = first.dims;
  dims[axis] = 0;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const ConstTensor& t = input(i);
    for (size_t d = 0; d < dims.size(); ++d)
      if (t.dims.size() != dims.size() || (d != axis && t.dims[d] != dims[d]))
        fail(fmt::format("input {} has shape [{}], which does not match input 0's [{}] off axis {}", i,
                         fmt::join(t.dims, ", "), fmt::join(first.dims, ", "), axis));
    dims[axis] += t.dims[axis];
  }
  ConstTensor out = make(first.dtype, dims);
  int64_t outer = product(dims, 0, axis);
  for (int64_t o = 0; o < outer; ++o)
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const ConstTensor& t = input(i);
      int64_t block = product(t.dims, axis, t.dims.size());
      auto from = t.values.begin() + o * block;
      out.values.insert(out.values.end(), from, from + block);
    }
  return out;
}

ConstTensor Folder::slice() const {
  const ConstTensor& in = input(0);
  size_t rank = in.dims.size();
  std::optional<Dims> starts = attributeOrInput("starts"), ends = attributeOrInput("ends"),
                      axes = attributeOrInput("axes"), steps;
  if (const ConstTensor* t = optionalInput(4)) steps = ints(*t, "steps");
  if (!starts || !ends || starts->size() != ends->size())
    fail("needs as many starts as ends");
  if (!axes) {
    axes.emplace(starts->size());
    std::iota(axes->begin(), axes->end(), 0);
  }
  if (!steps) steps = Dims(starts->size(), 1);
  if (axes->size() != starts->size() || steps->size() != starts->size())
    fail("needs as many axes and steps as starts");
  std::vector<size_t> at = normalizeAxes(*axes, rank);
  Dims dims = in.dims, start(rank, 0), step(rank, 1);
  for (size_t k = 0; k < at.size(); ++k) {
    size_t d = at[k];
    int64_t n = in.dims[d], s = (*starts)[k], e = (*ends)[k], st = (*steps)[k];
    if (st == 0) fail(fmt::format("step for axis {} is 0", d));
    step[d] = st;
    if (n == 0) {
      dims[d] = 0;
      continue;
    }
    // Negative indices count from the end; then both are clamped to the dimension (to
    // [0, n-1] and [-1, n-1] when stepping backwards, where -1 is "before the start").
    if (s < 0) s += n;
    if (e < 0) e += n;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, n);
      e = std::clamp<int64_t>(e, 0, n);
    } else {
      s = std::clamp<int64_t>(s, 0, n - 1);
      e = std::clamp<int64_t>(e, -1, n - 1);
    }
    int64_t span = st > 0 ? e - s : s - e;
    int64_t stride = st > 0 ? st : -st;
    dims[d] = span <= 0 ? 0 : (span + stride - 1) / stride;
    start[d] = dims[d] == 0 ? 0 : s;
  }
  return strided(in, dims, start, step);
}

ConstTensor Folder::constantOfShape() const {
  Dims dims = ints(input(0), "shape");
  ConstTensor value;
  value.dtype = TensorProto::FLOAT;
  value.values = {0.0};
  if (const onnx::AttributeProto* a = attribute("value")) {
    value = attributeTensor(*a, {}, model_file_, node_.name());
    if (value.numElements() != 1) fail("attribute 'value' must have one element");
  }
  ConstTensor out = make(value.dtype, dims);
  out.values.assign(static_cast<size_t>(product(out.dims, 0, out.dims.size())), value.values[0]);
  return out;
}

ConstTensor Folder::range() const {
  const ConstTensor &start = input(0), &limit = input(1), &delta = input(2);
  for (const ConstTensor* t : {&start, &limit, &delta})
    if (t->numElements() != 1) fail("start, limit and delta must be scalars");
  double s = start.values[0], l = limit.values[0], d = delta.values[0];
  if (d == 0) fail("delta is 0");
  double count = std::max(std::ceil((l - s) / d), 0.0);
  if (!(count <= static_cast<double>(kMaxFoldedElements)))
    fail(fmt::format("folding would give a huge constant of {} elements (more than 2^{})", count,
                     kMaxFoldedElementsLog2));
  ConstTensor out = make(start.dtype, {static_cast<int64_t>(count)});
  for (int64_t i = 0; i < out.dims[0]; ++i) out.values.push_back(s + static_cast<double>(i) * d);
  return out;
}

ConstTensor Folder::expand() const {
  const ConstTensor& in = input(0);
  Dims shape = ints(input(1), "shape");
  for (int64_t d : shape)
    if (d < 0) fail(fmt::format("shape [{}] has a negative dimension", fmt::join(shape, ", ")));
  ConstTensor out = make(in.dtype, broadcastDims({&in.dims, &shape}));
  forEachBroadcast(out.dims, {&in.dims}, [&](const std::vector<int64_t>& offsets) {
    out.values.push_back(in.values[static_cast<size_t>(offsets[0])]);
  });
  return out;
}

ConstTensor Folder::reshape() const {
  const ConstTensor& in = input(0);
  std::optional<Dims> shape = attributeOrInput("shape");
  if (!shape) fail("needs a shape");
  // allowzero (opset 14): a 0 is a dimension of size 0 rather than "copy the input's".
  bool allow_zero = intAttribute("allowzero", 0) != 0;
  Dims dims = *shape;
  int64_t known = 1;
  std::optional<size_t> infer;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0 && !allow_zero) {
      if (d >= in.dims.size())
        fail(fmt::format("shape [{}] copies dimension {}, but the input has rank {}", fmt::join(*shape, ", "), d,
                         in.dims.size()));
      dims[d] = in.dims[d];
    }
    if (dims[d] == -1) {
      if (infer) fail(fmt::format("shape [{}] has more than one -1", fmt::join(*shape, ", ")));
      infer = d;
    } else if (dims[d] < 0) {
      fail(fmt::format("shape [{}] has a negative dimension", fmt::join(*shape, ", ")));
    } else {
      known *= dims[d];
    }
  }
  if (infer) {
    if (known == 0 || in.numElements() % known != 0)
      fail(fmt::format("cannot reshape {} elements to [{}]", in.numElements(), fmt::join(*shape, ", ")));
    dims[*infer] = in.numElements() / known;
  } else if (known != in.numElements()) {
    fail(fmt::format("cannot reshape {} elements to [{}]", in.numElements(), fmt::join(*shape, ", ")));
  }
  ConstTensor out = in;
  out.dims = dims;
  return out;
}

ConstTensor Folder::flatten() const {
  const ConstTensor& in = input(0);
  int64_t rank = static_cast<int64_t>(in.dims.size());
  int64_t axis = intAttribute("axis", 1);
  if (axis < -rank || axis > rank) fail(fmt::format("axis {} is out of range for rank {}", axis, rank));
  size_t at = static_cast<size_t>(axis < 0 ? axis + rank : axis);
  ConstTensor out = in;
  out.dims = {product(in.dims, 0, at), product(in.dims, at, in.dims.size())};
  return out;
}

ConstTensor Folder::transpose() const {
  const ConstTensor& in = input(0);
  size_t rank = in.dims.size();
  Dims perm(rank);
  std::iota(perm.rbegin(), perm.rend(), 0);
  if (std::optional<Dims> given = intsAttribute("perm")) perm = *given;
  Dims sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  Dims identity(rank);
  std::iota(identity.begin(), identity.end(), 0);
  if (sorted != identity) fail(fmt::format("perm [{}] is not a permutation of the {} axes", fmt::join(perm, ", "), rank));
  Dims in_strides = stridesOf(in.dims);
  // Result dimension d walks input dimension perm[d].
  Dims dims(rank), step(rank);
  for (size_t d = 0; d < rank; ++d) {
    dims[d] = in.dims[static_cast<size_t>(perm[d])];
    step[d] = in_strides[static_cast<size_t>(perm[d])];
  }
  ConstTensor out = make(in.dtype, dims);
  Dims index(rank, 0);
  int64_t offset = 0, total = in.numElements();
  for (int64_t i = 0; i < total; ++i) {
    out.values.push_back(in.values[static_cast<size_t>(offset)]);
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      offset += step[d];
      if (index[d] < dims[d]) break;
      offset -= step[d] * dims[d];
      index[d] = 0;
    }
  }
  return out;
}

ConstTensor Folder::trilu() const {
  const ConstTensor& in = input(0);
  if (in.dims.size() < 2) fail("needs an input of rank 2 or more");
  int64_t k = 0;
  if (const ConstTensor* t = optionalInput(1)) k = scalarInt(*t, "k");
  bool upper = intAttribute("upper", 1) != 0;
  int64_t rows = in.dims[in.dims.size() - 2], cols = in.dims.back();
  ConstTensor out = in;
  for (size_t i = 0; i < out.values.size(); ++i) {
    int64_t c = static_cast<int64_t>(i) % cols, r = static_cast<int64_t>(i) / cols % rows;
    // Saturated k (beyond 2^53 sentinels) keeps or clears everything, as it should.
    bool keep = upper ? c - r >= k : c - r <= k;
    if (!keep) out.values[i] = 0;
  }
  return out;
}

ConstTensor Folder::matmul() const {
  const ConstTensor &a = input(0), &b = input(1);
  if (a.dims.empty() || b.dims.empty()) fail("cannot multiply a scalar");
  // numpy: a vector is a row (first input) or a column (second) that the result drops.
  Dims ad = a.dims, bd = b.dims;
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  if (bd[bd.size() - 2] != k)
    fail(fmt::format("shapes [{}] and [{}] do not multiply", fmt::join(a.dims, ", "), fmt::join(b.dims, ", ")));
  Dims a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  Dims batch = broadcastDims({&a_batch, &b_batch});
  Dims dims = batch;
  if (a.dims.size() > 1) dims.push_back(m);
  if (b.dims.size() > 1) dims.push_back(n);
  ConstTensor out = make(a.dtype, dims);
  int64_t batches = product(batch, 0, batch.size());
  if (batches * m * n > 0 && k > kMaxMatMulWork / (batches * m * n))
    fail(fmt::format("folding [{}] x [{}] would take too long", fmt::join(a.dims, ", "), fmt::join(b.dims, ", ")));
  forEachBroadcast(batch, {&a_batch, &b_batch}, [&](const std::vector<int64_t>& offsets) {
    const double* pa = a.values.data() + offsets[0] * m * k;
    const double* pb = b.values.data() + offsets[1] * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += pa[i * k + p] * pb[p * n + j];
        out.values.push_back(sum);
      }
  });
  return out;
}

// Einsum without ellipsis ("i,j->ij": torch.outer of positions and inverse frequencies in
// rotary embeddings) over any number of operands, by visiting every index combination.
ConstTensor Folder::einsum() const {
  const onnx::AttributeProto* eq = attribute("equation");
  if (!eq) fail("has no equation");
  std::string text;
  for (char c : eq->s())
    if (c != ' ') text += c;
  if (text.find("...") != std::string::npos) fail(fmt::format("equation \"{}\" uses an ellipsis", eq->s()));
  // Without "->" the output is every index that appears once, in alphabetical order.
  if (text.find("->") == std::string::npos) {
    std::map<char, int> count;
    for (char c : text)
      if (c != ',') ++count[c];
    text += "->";
    for (const auto& [c, n] : count)
      if (n == 1) text += c;
  }
  size_t arrow = text.find("->");
  std::vector<std::string> terms;
  for (size_t at = 0;;) {
    size_t comma = text.find(',', at);
    terms.push_back(text.substr(at, std::min(comma, arrow) - at));
    if (comma == std::string::npos || comma > arrow) break;
    at = comma + 1;
  }
  const std::string output = text.substr(arrow + 2);
  if (terms.size() != inputs_.size()) fail(fmt::format("equation \"{}\" names {} operands, got {}", eq->s(), terms.size(), inputs_.size()));
  std::map<char, int64_t> size;
  for (size_t t = 0; t < terms.size(); ++t) {
    const ConstTensor& in = input(t);
    if (terms[t].size() != in.dims.size()) fail(fmt::format("operand {} has rank {}, the equation says {}", t, in.dims.size(), terms[t].size()));
    for (size_t d = 0; d < terms[t].size(); ++d) {
      auto [it, fresh] = size.emplace(terms[t][d], in.dims[d]);
      if (!fresh && it->second != in.dims[d]) fail(fmt::format("index {} has sizes {} and {}", terms[t][d], it->second, in.dims[d]));
    }
  }
  std::vector<char> letters;
  for (const auto& [c, n] : size) letters.push_back(c);
  Dims dims;
  for (char c : output) {
    if (!size.count(c)) fail(fmt::format("output index {} is not in any operand", c));
    dims.push_back(size[c]);
  }
  ConstTensor out = make(input(0).dtype, dims);
  out.values.assign(static_cast<size_t>(product(dims, 0, dims.size())), 0.0);
  int64_t work = 1;
  for (const auto& [c, n] : size) work = n == 0 || work > kMaxMatMulWork / n ? (n == 0 ? 0 : kMaxMatMulWork + 1) : work * n;
  if (work > kMaxMatMulWork) fail("folding it would take too long");
  std::map<char, int64_t> at;
  for (char c : letters) at[c] = 0;
  auto offset = [&](const std::string& term, const Dims& shape) {
    int64_t o = 0;
    for (size_t d = 0; d < term.size(); ++d) o = o * shape[d] + at[term[d]];
    return o;
  };
  for (int64_t i = 0; i < work; ++i) {
    double v = 1;
    for (size_t t = 0; t < terms.size(); ++t) v *= input(t).values[static_cast<size_t>(offset(terms[t], input(t).dims))];
    out.values[static_cast<size_t>(offset(output, dims))] += v;
    for (size_t l = letters.size(); l-- > 0;) {  // next combination, last letter fastest
      if (++at[letters[l]] < size[letters[l]]) break;
      at[letters[l]] = 0;
    }
  }
  return out;
}

ConstTensor Folder::tile() const {
  const ConstTensor& in = input(0);
  Dims repeats = ints(input(1), "repeats");
  if (repeats.size() != in.dims.size())
    fail(fmt::format("has {} repeats for an input of rank {}", repeats.size(), in.dims.size()));
  Dims dims = in.dims;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (repeats[d] < 0) fail(fmt::format("repeat {} is negative", repeats[d]));
    if (repeats[d] != 0 && dims[d] > kMaxFoldedElements / repeats[d]) dims[d] = kMaxFoldedElements + 1;
    else dims[d] *= repeats[d];
  }
  ConstTensor out = make(in.dtype, dims);
  Dims in_strides = stridesOf(in.dims);
  Dims index(dims.size(), 0);
  int64_t total = product(dims, 0, dims.size());
  for (int64_t i = 0; i < total; ++i) {
    int64_t offset = 0;
    for (size_t d = 0; d < dims.size(); ++d) offset += index[d] % in.dims[d] * in_strides[d];
    out.values.push_back(in.values[static_cast<size_t>(offset)]);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++index[d] < dims[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

ConstTensor Folder::reduce(const Reduction& r) const {
  const ConstTensor& in = input(0);
  std::optional<Dims> axes = attributeOrInput("axes");
  bool keep_dims = intAttribute("keepdims", 1) != 0;
  size_t rank = in.dims.size();
  std::vector<bool> reduced(rank, false);
  if (!axes || axes->empty()) {
    if (intAttribute("noop_with_empty_axes", 0) != 0) return in;
    reduced.assign(rank, true);
  } else {
    for (size_t a : normalizeAxes(*axes, rank)) reduced[a] = true;
  }
  Dims dims, kept_dims(rank);  // kept_dims: the result with keepdims, for strides
  for (size_t d = 0; d < rank; ++d) {
    kept_dims[d] = reduced[d] ? 1 : in.dims[d];
    if (!reduced[d] || keep_dims) dims.push_back(kept_dims[d]);
  }
  ConstTensor out = make(in.dtype, dims);
  int64_t count = product(kept_dims, 0, rank);
  int64_t group = count == 0 ? 0 : in.numElements() / count;
  // The max or min of no integers would be an infinity, which no integer holds.
  if (group == 0 && in.isInteger() && std::isinf(r.init)) fail("cannot reduce an empty set of integers");
  std::vector<double> acc(static_cast<size_t>(count), r.init);
  // Every input element accumulates into the result element it reduces to: the input
  // walks the result with stride 0 along the reduced axes.
  Dims in_strides_of_result = stridesOf(kept_dims);
  for (size_t d = 0; d < rank; ++d)
    if (reduced[d]) in_strides_of_result[d] = 0;
  Dims index(rank, 0);
  int64_t offset = 0;
  for (double v : in.values) {
    double& a = acc[static_cast<size_t>(offset)];
    a = r.combine(a, r.map ? r.map(v) : v);
    for (size_t d = rank; d-- > 0;) {
      ++index[d];
      offset += in_strides_of_result[d];
      if (index[d] < in.dims[d]) break;
      offset -= in_strides_of_result[d] * in.dims[d];
      index[d] = 0;
    }
  }
  if (r.finish)
    for (double& v : acc) v = r.finish(v, group);
  out.values = std::move(acc);
  return out;
}

ConstTensor Folder::cumsum() const {
  const ConstTensor& in = input(0);
  if (in.dims.empty()) fail("needs an input of rank 1 or more");
  size_t axis = normalizeAxis(scalarInt(input(1), "axis"), in.dims.size());
  bool exclusive = intAttribute("exclusive", 0) != 0, reverse = intAttribute("reverse", 0) != 0;
  int64_t outer = product(in.dims, 0, axis), n = in.dims[axis], inner = product(in.dims, axis + 1, in.dims.size());
  ConstTensor out = in;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        int64_t at = (o * n + (reverse ? n - 1 - j : j)) * inner + i;
        double v = in.values[static_cast<size_t>(at)];
        if (!exclusive) sum += v;
        out.values[static_cast<size_t>(at)] = sum;
        if (exclusive) sum += v;
      }
    }
  return out;
}

std::vector<ConstTensor> Folder::split() const {
  const ConstTensor& in = input(0);
  if (in.dims.empty()) fail("cannot split a scalar");
  size_t axis = normalizeAxis(intAttribute("axis", 0), in.dims.size());
  int64_t n = in.dims[axis];
  int64_t outputs = node_.output_size();
  std::optional<Dims> sizes = attributeOrInput("split");
  if (sizes && sizes->empty()) sizes.reset();
  const onnx::AttributeProto* num_outputs = attribute("num_outputs");
  if (sizes && num_outputs) fail("has both input 'split' and attribute 'num_outputs'");
  if (!sizes) {
    sizes.emplace();
    if (num_outputs) {
      // Opset 18: parts of ceil(n / num_outputs), the last one what remains (smaller,
      // possibly empty), as ONNX's reference computes them.
      int64_t parts = num_outputs->i();
      if (parts < 1) fail(fmt::format("num_outputs {} is not positive", parts));
      if (parts != outputs) fail(fmt::format("num_outputs {} differs from its {} outputs", parts, outputs));
      int64_t chunk = (n + parts - 1) / parts;
      if (n - chunk * (parts - 1) < 0)
        fail(fmt::format("cannot split dimension {} of size {} into {} parts of {} and a smaller last one", axis,
                         n, parts, chunk));
      sizes->assign(static_cast<size_t>(parts - 1), chunk);
      sizes->push_back(n - chunk * (parts - 1));
    } else {
      // Neither split nor num_outputs, although opset 18 asks for one of them: equal
      // parts, one per output, as before opset 18 and as ONNX Runtime does.
      if (outputs == 0 || n % outputs != 0)
        fail(fmt::format("cannot split dimension {} of size {} into {} equal parts", axis, n, outputs));
      sizes->assign(static_cast<size_t>(outputs), n / outputs);
    }
  }
  if (static_cast<int64_t>(sizes->size()) != outputs)
    fail(fmt::format("has {} split sizes for {} outputs", sizes->size(), outputs));
  int64_t total = 0;
  for (int64_t s : *sizes) {
    if (s < 0) fail(fmt::format("split size {} is negative", s));
    total += s;
  }
  if (total != n) fail(fmt::format("split sizes [{}] do not add up to dimension {} of size {}", fmt::join(*sizes, ", "), axis, n));
  std::vector<ConstTensor> out;
  Dims start(in.dims.size(), 0), step(in.dims.size(), 1);
  for (int64_t s : *sizes) {
    Dims dims = in.dims;
    dims[axis] = s;
    out.push_back(finish(strided(in, dims, start, step)));
    start[axis] += s;
  }
  return out;
}

ConstTensor Folder::softmax() const {
  const ConstTensor& in = input(0);
  size_t rank = in.dims.size();
  if (rank == 0) fail("needs an input of rank 1 or more");
  // Before opset 13 the input is seen as 2-D, [dims before axis, dims from axis on].
  size_t axis = normalizeAxis(intAttribute("axis", opset_ >= 13 ? -1 : 1), rank);
  int64_t outer = product(in.dims, 0, axis), n = in.dims[axis], inner = product(in.dims, axis + 1, rank);
  if (opset_ < 13) {
    n = product(in.dims, axis, rank);
    inner = 1;
  }
  ConstTensor out = in;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) -> double& { return out.values[static_cast<size_t>((o * n + j) * inner + i)]; };
      double max = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t j = 0; j < n; ++j) max = std::max(max, at(j));
      for (int64_t j = 0; j < n; ++j) sum += (at(j) = std::exp(at(j) - max));
      for (int64_t j = 0; j < n; ++j) at(j) /= sum;
    }
  return out;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// NaN-propagating max and min, as numpy's maximum and minimum (and ONNX's Max, Min).
double nanMax(double a, double b) { return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b); }
double nanMin(double a, double b) { return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b); }

// log(e^a + e^b) without overflow, for ReduceLogSumExp.
double logAddExp(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  if (a == b) return a + std::log(2.0);  // also for equal infinities, where hi - lo is NaN
  double hi = std::max(a, b), lo = std::min(a, b);
  return hi + std::log1p(std::exp(lo - hi));
}

const std::map<std::string, Folder::Rule>& Folder::rules() {
  static const std::map<std::string, Rule> kRules = [] {
    std::map<std::string, Rule> rules;
    static constexpr int32_t kBool = TensorProto::BOOL;
    auto in0 = [](const Folder& f) { return f.input(0).dtype; };

    using Method = ConstTensor (Folder::*)() const;
    const std::pair<const char*, Method> kMethods[] = {
        {"Concat", &Folder::concat},       {"ConstantOfShape", &Folder::constantOfShape},
        {"CumSum", &Folder::cumsum},       {"Einsum", &Folder::einsum},
        {"Expand", &Folder::expand},       {"Flatten", &Folder::flatten},
        {"Gather", &Folder::gather},       {"GatherElements", &Folder::gatherElements},
        {"GatherND", &Folder::gatherND},   {"MatMul", &Folder::matmul},
        {"Range", &Folder::range},         {"Reshape", &Folder::reshape},
        {"Shape", &Folder::shape},         {"Slice", &Folder::slice},
        {"Softmax", &Folder::softmax},     {"Squeeze", &Folder::squeeze},
        {"Tile", &Folder::tile},           {"Transpose", &Folder::transpose},
        {"Trilu", &Folder::trilu},         {"Unsqueeze", &Folder::unsqueeze},
    };
    for (const auto& [op, method] : kMethods)
      rules[op] = [method = method](const Folder& f) -> Result { return f.one((f.*method)()); };
    rules["Split"] = [](const Folder& f) -> Result { return f.split(); };
    rules["Identity"] = [](const Folder& f) -> Result { return f.one(f.input(0)); };
    rules["Constant"] = [](const Folder& f) -> Result {
      // Its external data lies beside the model, which only the importer knows.
      const onnx::AttributeProto* value = f.attribute("value");
      if (value && value->t().data_location() == TensorProto::EXTERNAL) return std::nullopt;
      return f.one(f.constant());
    };
    rules["Size"] = [](const Folder& f) -> Result {
      ConstTensor out = f.make(TensorProto::INT64, {});
      out.values = {static_cast<double>(f.input(0).numElements())};
      return f.one(out);
    };
    rules["Cast"] = [](const Folder& f) -> Result {
      const onnx::AttributeProto* to = f.attribute("to");
      if (!to) f.fail("needs attribute 'to'");
      return f.one(f.cast(f.input(0), static_cast<int32_t>(to->i())));
    };
    rules["CastLike"] = [](const Folder& f) -> Result { return f.one(f.cast(f.input(0), f.input(1).dtype)); };

    const double kInf = std::numeric_limits<double>::infinity();
    auto mean = [](double sum, int64_t n) { return sum / static_cast<double>(n); };
    auto square = [](double v) { return v * v; };
    const std::pair<const char*, Reduction> kReductionRules[] = {
        {"ReduceL1", {0, [](double v) { return std::abs(v); }, std::plus<double>(), nullptr}},
        {"ReduceL2", {0, square, std::plus<double>(), [](double v, int64_t) { return std::sqrt(v); }}},
        {"ReduceLogSum", {0, nullptr, std::plus<double>(), [](double v, int64_t) { return std::log(v); }}},
        {"ReduceLogSumExp", {-kInf, nullptr, logAddExp, nullptr}},
        {"ReduceMax", {-kInf, nullptr, nanMax, nullptr}},
        {"ReduceMean", {0, nullptr, std::plus<double>(), mean}},
        {"ReduceMin", {kInf, nullptr, nanMin, nullptr}},
        {"ReduceProd", {1, nullptr, std::multiplies<double>(), nullptr}},
        {"ReduceSum", {0, nullptr, std::plus<double>(), nullptr}},
        {"ReduceSumSquare", {0, square, std::plus<double>(), nullptr}},
    };
    for (const auto& [op, reduction] : kReductionRules)
      rules[op] = [reduction = reduction](const Folder& f) -> Result { return f.one(f.reduce(reduction)); };

    const std::pair<const char*, Binary> kLogic[] = {
        {"Equal", std::equal_to<double>()},
        {"Less", std::less<double>()},
        {"LessOrEqual", std::less_equal<double>()},
        {"Greater", std::greater<double>()},
        {"GreaterOrEqual", std::greater_equal<double>()},
        {"And", [](double a, double b) { return a != 0 && b != 0; }},
        {"Or", [](double a, double b) { return a != 0 || b != 0; }},
        {"Xor", [](double a, double b) { return (a != 0) != (b != 0); }},
    };
    for (const auto& [op, compare] : kLogic)
      rules[op] = [compare = compare](const Folder& f) -> Result { return f.one(f.binary(kBool, compare)); };
    rules["Not"] = [](const Folder& f) -> Result { return f.one(f.unary([](double a) { return a == 0; })); };
    rules["IsNaN"] = [](const Folder& f) -> Result {
      return f.one(f.unary([](double a) { return std::isnan(a); }, kBool));
    };
    rules["IsInf"] = [](const Folder& f) -> Result {
      bool negative = f.intAttribute("detect_negative", 1) != 0, positive = f.intAttribute("detect_positive", 1) != 0;
      return f.one(f.unary([=](double a) { return std::isinf(a) && (a > 0 ? positive : negative); }, kBool));
    };
    rules["Where"] = [](const Folder& f) -> Result {
      if (f.inputs_.size() != 3) f.fail(fmt::format("takes 3 inputs, not {}", f.inputs_.size()));
      return f.one(f.nary(f.input(1).dtype, [](const double* a) { return a[0] != 0 ? a[1] : a[2]; }));
    };

    const std::pair<const char*, Binary> kArithmetic[] = {
        {"Add", std::plus<double>()},
        {"Sub", std::minus<double>()},
        {"Mul", std::multiplies<double>()},
        {"Pow", [](double a, double b) { return std::pow(a, b); }},
    };
    for (const auto& [op, g] : kArithmetic)
      rules[op] = [in0, g = g](const Folder& f) -> Result { return f.one(f.binary(in0(f), g)); };
    rules["Div"] = [in0](const Folder& f) -> Result {
      if (!f.input(0).isInteger()) return f.one(f.binary(in0(f), std::divides<double>()));
      // Integer division truncates toward zero (C's, as ONNX Runtime computes it).
      return f.one(f.binary(in0(f), [&f](double a, double b) {
        if (b == 0) f.fail("integer division by zero");
        return static_cast<double>(toInt64(a) / toInt64(b));
      }));
    };
    rules["Mod"] = [in0](const Folder& f) -> Result {
      // fmod=1: the remainder takes the dividend's sign (C's fmod); fmod=0, integers only:
      // the divisor's (Python's %).
      bool c_fmod = f.intAttribute("fmod", 0) != 0;
      if (!c_fmod && !f.input(0).isInteger()) f.fail("fmod=0 needs integer inputs");
      return f.one(f.binary(in0(f), [&f, c_fmod](double a, double b) {
        if (b == 0 && !c_fmod) f.fail("integer modulo by zero");
        double r = std::fmod(a, b);
        if (!c_fmod && r != 0 && (r < 0) != (b < 0)) r += b;
        return r;
      }));
    };
    const std::pair<const char*, Binary> kVariadic[] = {
        {"Min", nanMin}, {"Max", nanMax}, {"Sum", std::plus<double>()}};
    for (const auto& [op, g] : kVariadic) rules[op] = [g = g](const Folder& f) -> Result { return f.one(f.variadic(g)); };
    rules["Mean"] = [](const Folder& f) -> Result { return f.one(f.variadic(std::plus<double>(), true)); };

    const std::pair<const char*, double (*)(double)> kUnary[] = {
        {"Sqrt", [](double a) { return std::sqrt(a); }},
        {"Neg", [](double a) { return -a; }},
        {"Abs", [](double a) { return std::abs(a); }},
        {"Reciprocal", [](double a) { return 1 / a; }},
        {"Exp", [](double a) { return std::exp(a); }},
        {"Log", [](double a) { return std::log(a); }},
        {"Sin", [](double a) { return std::sin(a); }},
        {"Cos", [](double a) { return std::cos(a); }},
        {"Tanh", [](double a) { return std::tanh(a); }},
        {"Sigmoid", sigmoid},
        {"Floor", [](double a) { return std::floor(a); }},
        {"Ceil", [](double a) { return std::ceil(a); }},
        {"Round", [](double a) { return std::nearbyint(a); }},  // half to even
        {"Relu", [](double a) { return std::isnan(a) ? a : std::max(a, 0.0); }},
        {"Sign", [](double a) { return std::isnan(a) ? a : double((a > 0) - (a < 0)); }},
        {"Erf", [](double a) { return std::erf(a); }},
    };
    for (const auto& [op, g] : kUnary) rules[op] = [g = g](const Folder& f) -> Result { return f.one(f.unary(g)); };
    return rules;
  }();
  return kRules;
}

Folder::Result Folder::fold() const {
  if (!node_.domain().empty() && node_.domain() != "ai.onnx") return std::nullopt;
  auto rule = rules().find(node_.op_type());
  if (rule == rules().end()) return std::nullopt;
  checkOpset();
  return rule->second(*this);
}

const std::vector<VersionedAttribute>& versionedAttributes() {
  static const std::vector<VersionedAttribute> kTable = [] {
    std::vector<VersionedAttribute> table = {
        {"Cast", "saturate", 19},
        {"CastLike", "saturate", 19},
        {"Reshape", "shape", 1, 5, 1},
        {"Reshape", "allowzero", 14},
        {"Shape", "start", 15},
        {"Shape", "end", 15},
        {"Slice", "starts", 1, 10, 1},
        {"Slice", "ends", 1, 10, 2},
        {"Slice", "axes", 1, 10, 3},
        {"Split", "split", 1, 13, 1},
        {"Split", "num_outputs", 18},
        {"Squeeze", "axes", 1, 13, 1},
        {"Unsqueeze", "axes", 1, 13, 1},
    };
    // ReduceSum's axes became an input at opset 13, the other reductions' at 18; each
    // gained noop_with_empty_axes then.
    for (const auto& [op, rule] : Folder::rules()) {
      if (!op.starts_with("Reduce")) continue;
      int64_t at = op == "ReduceSum" ? 13 : 18;
      table.push_back({op, "axes", 1, at, 1});
      table.push_back({op, "noop_with_empty_axes", at});
    }
    return table;
  }();
  return kTable;
}

const VersionedAttribute& versionedAttribute(const std::string& op, const std::string& name) {
  for (const VersionedAttribute& v : versionedAttributes())
    if (v.op == op && v.name == name) return v;
  throw InternalError(fmt::format("{} has no versioned attribute '{}'", op, name));
}

}  // namespace

std::optional<std::vector<ConstTensor>> foldNode(const onnx::NodeProto& node,
                                                 std::span<const ConstTensor* const> inputs, int64_t opset,
                                                 const std::string& model_file) {
  return Folder(node, inputs, opset, model_file).fold();
}

const std::vector<std::string>& foldableOps() {
  static const std::vector<std::string> kOps = [] {
    std::vector<std::string> ops;
    for (const auto& [op, rule] : Folder::rules()) ops.push_back(op);
    return ops;
  }();
  return kOps;
}

}  // namespace pgq

#pragma once
// What the executor needs from a backend: whether it supports a node, and a kernel
// for it. The executor owns memory (buffer slots); a backend's kernel reads and
// writes slots through the RunContext it is given at run time.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <string_view>
#include <unordered_set>

#include "ir/node.h"
#include "kernels/optim.h"

namespace pgq {

// Pointers of every buffer slot for one run.
class RunContext {
 public:
  RunContext(void* const* slots, int64_t step, double weight_step = 0)
      : slots_(slots), step_(step), weight_step_(weight_step) {}
  void* ptr(int slot) const { return slots_[slot]; }
  template <typename T>
  T* as(int slot) const { return static_cast<T*>(slots_[slot]); }
  // The training step being run (stochastic rounding draws fresh noise per step).
  int64_t step() const { return step_; }
  // How far the optimizer update applied since the previous run moved any weight
  // element at most (0 on the first run): predicted weight scales add it to their amax.
  double weightStep() const { return weight_step_; }

 private:
  void* const* slots_;
  int64_t step_;
  double weight_step_;
};

using Kernel = std::function<void(const RunContext&)>;

// What a kernel carries from one run to the next (delayed scaling's amax history, a
// predicted weight scale), as bytes: a checkpoint keeps it, so that a resumed run goes on
// as the uninterrupted one would (Transformer Engine keeps its FP8 amax history in the
// module's state dict for the same reason).
class KernelState {
 public:
  virtual ~KernelState() = default;
  virtual std::string save() const = 0;
  // False, changing nothing, when `bytes` is not what save() of such a kernel gives.
  virtual bool load(std::string_view bytes) = 0;
};

// One operand as the kernel should read it.
struct OperandRef {
  int slot = -1;
  const Node* node = nullptr;
  // Set when the operand is a broadcast the kernel reads in place from its source
  // (the broadcast is never materialized); `slot` then holds the source.
  const Node* broadcast = nullptr;
};

class LoweringContext {
 public:
  virtual ~LoweringContext() = default;
  virtual OperandRef operand(int index) = 0;
  virtual int result() = 0;
  // A temporary buffer that lives while this node's kernel runs.
  virtual int scratch(size_t bytes) = 0;
  // Operand `index` of `value`, an operand of this node whose computation this node's
  // kernel takes over (the backend lowers `value` to nothing); it stays alive until this
  // node's kernel has run.
  virtual OperandRef operandOf(const Node& value, int index) = 0;
  // The buffer of `value`, a node whose result this node's kernel also writes
  // (Backend::madeBy); it is live from this node's kernel on.
  virtual int resultOf(const Node& value) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // False (with the reason in `why`) when the backend has no kernel for `node`.
  virtual bool supports(const Node& node, std::string* why) const = 0;
  // Whether `user` can read its operand `index`, a broadcast node, in place.
  virtual bool readsBroadcastInPlace(const Node& user, int index) const = 0;
  virtual Kernel lower(const Node& node, LoweringContext& ctx) const = 0;
  // Called once before lowering with the nodes that will run, in order, and the graph's
  // outputs, so a backend can plan kernels that work together (the CPU backend buckets
  // gradient all_reduces).
  virtual void prepare(std::span<const Node* const> schedule, const std::unordered_set<const Node*>& outputs) {
    (void)schedule;
    (void)outputs;
  }
  // Whether `node`'s computation runs inside another node's kernel (planned in
  // prepare()): the executor gives it no buffer and no kernel of its own, and only that
  // kernel reads its operands (LoweringContext::operandOf).
  virtual bool absorbed(const Node& node) const {
    (void)node;
    return false;
  }
  // The node whose kernel also makes `node`'s result (planned in prepare()), or null. The
  // executor then gives `node` no kernel of its own; its buffer is live from that
  // kernel's step (LoweringContext::resultOf) to its last reader.
  virtual const Node* madeBy(const Node& node) const {
    (void)node;
    return nullptr;
  }
  // The sum of squares of `node`'s result in kernels::sumSquares' order, bit for bit, as
  // its kernel computed it while writing the result in the last run, for an output whose
  // kernel does (planned in prepare()); nullopt otherwise.
  virtual std::optional<double> sumOfSquares(const Node& node) const {
    (void)node;
    return std::nullopt;
  }
  // The operand whose buffer `node`'s kernel writes its result over (planned in
  // prepare(), for an operand nothing else reads and that is not an output), or -1. The
  // executor then gives the result that operand's storage, where the operand's own kernel
  // (which runs earlier) writes.
  virtual int inPlaceOperand(const Node& node) const {
    (void)node;
    return -1;
  }
  // For a quantize node of a parameter whose scales (its quant_params operand) come from
  // the parameter's values alone, how kernels::adamwUpdateQuantized makes both (its
  // buffers left empty); nullopt otherwise. The executor then lets the optimizer make
  // them (ExecutorOptions::parameter_quantizations).
  virtual std::optional<kernels::ParamQuantization> parameterQuantization(const Node& quantize) const {
    (void)quantize;
    return std::nullopt;
  }
  // The state of `node`'s kernel, once lower() has made it; null for a kernel that keeps
  // none.
  virtual std::shared_ptr<KernelState> kernelState(const Node& node) const {
    (void)node;
    return nullptr;
  }
};

class Collectives;

// The CPU backend: oneDNN GEMMs and pgq's vectorized kernels. Collective ops run on
// `collectives` (not owned; it must outlive the backend's kernels), or as a group of one
// process when it is null.
std::unique_ptr<Backend> makeCpuBackend(Collectives* collectives = nullptr);

}  // namespace pgq

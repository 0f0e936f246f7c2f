#pragma once
// Runs a graph on a backend. Compilation happens once, in the constructor:
//   1. schedule: the graph's post order, restricted to what the outputs need;
//   2. storage: parameters and inputs are bound to caller tensors; constants and
//      outputs get their own buffers; a reshape aliases its operand; a broadcast read
//      in place by all its users is never materialized; every other value and every
//      kernel scratch buffer lives in one arena, reused once dead (memory_plan.h);
//   3. lowering: the backend turns each node into a kernel closure.
// A run then only calls the kernels in order.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "runtime/backend.h"
#include "runtime/tensor.h"

namespace pgq {

struct MemoryStats {
  size_t arena_bytes = 0;       // temporaries, with reuse
  size_t persistent_bytes = 0;  // outputs and constants
  size_t bound_bytes = 0;       // parameters and inputs (owned by the caller)
  size_t peak() const { return arena_bytes + persistent_bytes + bound_bytes; }
};

struct ExecutorOptions {
  // Time every kernel (one clock read per node per run).
  bool profile = false;
  // Called with the planned sizes once the memory plan is known, before the arena and
  // the other buffers are allocated; it refuses by throwing (the trainer compares the
  // plan with the memory this machine has).
  std::function<void(const MemoryStats& planned)> before_allocation;
  // Keep each quantization of a bound parameter whose scales come from the parameter's
  // values alone (Backend::parameterQuantization: round to nearest, scales just in time)
  // in buffers live from the start of a run, so that a caller can make it while it writes
  // the parameter between runs (the optimizer's fused update, parameterQuantizations())
  // and run() can skip it.
  bool parameter_quantizations = false;
};

struct NodeProfile {
  const Node* node = nullptr;
  double total_ms = 0;
  int64_t calls = 0;
  // The operand the node's kernel writes its result over (Backend::inPlaceOperand), or -1.
  int in_place_operand = -1;
  // The other nodes whose results the node's kernel also makes (Backend::madeBy), which
  // have no kernel and no time of their own.
  std::vector<const Node*> makes;
};

class Executor {
 public:
  // `graph` must outlive the executor and not change while it exists. Throws
  // pgq::Error when the backend cannot run a node.
  explicit Executor(const Graph& graph, ExecutorOptions options = {},
                    std::unique_ptr<Backend> backend = makeCpuBackend());
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Binds a parameter or input to a caller-owned tensor of exactly its type.
  void bind(const Node* node, Tensor& tensor);
  void bind(std::string_view name, Tensor& tensor);
  // Runs every kernel once. `step` feeds step-dependent kernels (stochastic rounding);
  // `weight_step` is the largest move of any weight element by the optimizer update
  // since the previous run (predicted weight scales; 0 when unknown or first).
  // `parameters_quantized`: the caller has made every parameterQuantizations() result
  // from the parameters' current values; run() then skips those kernels.
  void run(int64_t step = 0, double weight_step = 0, bool parameters_quantized = false);

  // The quantizations of parameter `name` that run() makes and may skip
  // (ExecutorOptions::parameter_quantizations), with the buffers the rest of the graph
  // reads them from; empty when there are none.
  std::vector<kernels::ParamQuantization> parameterQuantizations(std::string_view name) const;

  // The state each stateful kernel carries from run to run (Backend::kernelState), by
  // node name, in schedule order; empty when no kernel keeps one.
  std::vector<std::pair<std::string, std::string>> kernelStates() const;
  // Gives each stateful kernel the state `states` has under its node's name, as
  // kernelStates() of an executor of the same graph gave it. Throws pgq::Error naming
  // `source` and the node when a state is missing, unknown or does not fit its kernel;
  // no kernel's state changes then.
  void loadKernelStates(const std::vector<std::pair<std::string, std::string>>& states, const std::string& source);

  const Node* outputNode(size_t i) const { return graph_.outputs()[i]; }
  // The sum of squares of output i in kernels::sumSquares' order, bit for bit, where its
  // kernel summed them while writing it in the last run (Backend::sumOfSquares: an int8
  // weight gradient); nullopt otherwise.
  std::optional<double> outputSumOfSquares(size_t i) const;
  const void* outputData(size_t i) const;
  template <typename T>
  std::span<const T> output(size_t i) const {
    const Node* node = outputNode(i);
    PGQ_ASSERT(sizeof(T) == dtypeSize(node->dtype()), "output %{} read with the wrong type", node->name());
    return {static_cast<const T*>(outputData(i)), static_cast<size_t>(node->shape().numElements())};
  }
  float outputScalar(size_t i) const { return output<float>(i)[0]; }

  MemoryStats memory() const;
  // Per-node kernel times since construction or the last resetProfile().
  std::vector<NodeProfile> profile() const;
  void resetProfile();

 private:
  enum class SlotKind { kExternal, kPersistent, kArena };
  struct Slot {
    SlotKind kind;
    size_t bytes = 0;
    int first = 0;
    int last = -1;
    const Node* node = nullptr;  // the value, or the node a scratch buffer serves
  };
  struct Step {
    const Node* node;
    Kernel kernel;
    bool parameter_quantization = false;  // skipped when the caller made it
  };
  // A quantize node the caller may make instead (ExecutorOptions::parameter_quantizations).
  struct ParameterQuantization {
    const Node* quantize;
    kernels::ParamQuantization spec;  // buffers left empty
  };
  class Lowering;

  void compile();
  int rootSlot(const Node* node) const;
  int newSlot(SlotKind kind, size_t bytes, const Node* node);

  const Graph& graph_;
  ExecutorOptions options_;
  std::unique_ptr<Backend> backend_;
  std::vector<Slot> slots_;
  std::unordered_map<const Node*, int> slot_of_;          // values with storage
  std::unordered_map<const Node*, const Node*> virtual_;  // broadcast read in place -> itself
  std::vector<Step> steps_;
  std::vector<std::pair<const Node*, std::shared_ptr<KernelState>>> states_;  // in schedule order
  std::unordered_map<const Node*, std::vector<ParameterQuantization>> parameter_quantizations_;  // by parameter
  std::vector<void*> ptrs_;
  std::byte* arena_ = nullptr;
  std::vector<std::unique_ptr<std::byte, void (*)(std::byte*)>> owned_;
  size_t arena_bytes_ = 0;
  std::vector<double> step_ms_;
  std::vector<int64_t> step_calls_;
};

}  // namespace pgq

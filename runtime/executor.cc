#include "runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ir/analysis.h"
#include "runtime/memory_plan.h"
#include "support/errors.h"

namespace pgq {

// Hands the backend the slots of one node's operands and result, and records which
// steps touch which slots (for lifetimes).
class Executor::Lowering : public LoweringContext {
 public:
  Lowering(Executor& ex, const Node& node, int step) : ex_(ex), node_(node), step_(step) {}

  OperandRef operand(int index) override {
    const Node* value = node_.operand(index);
    OperandRef ref;
    ref.node = value;
    auto virt = ex_.virtual_.find(value);
    if (virt != ex_.virtual_.end()) {
      ref.broadcast = value;
      value = value->operand(0);
    }
    ref.slot = ex_.rootSlot(value);
    return ref;
  }

  int result() override { return ex_.rootSlot(&node_); }

  OperandRef operandOf(const Node& value, int index) override {
    Lowering inner(ex_, value, step_);
    OperandRef ref = inner.operand(index);
    Slot& slot = ex_.slots_[static_cast<size_t>(ref.slot)];
    slot.last = std::max(slot.last, step_);
    return ref;
  }

  int resultOf(const Node& value) override {
    PGQ_ASSERT(ex_.backend_->madeBy(value) == &node_, "%{} does not make %{}", node_.name(), value.name());
    Slot& slot = ex_.slots_[static_cast<size_t>(ex_.rootSlot(&value))];
    slot.first = step_;
    slot.last = std::max(slot.last, step_);
    return ex_.rootSlot(&value);
  }

  int scratch(size_t bytes) override {
    int slot = ex_.newSlot(SlotKind::kArena, bytes, &node_);
    ex_.slots_[static_cast<size_t>(slot)].first = step_;
    ex_.slots_[static_cast<size_t>(slot)].last = step_;
    return slot;
  }

 private:
  Executor& ex_;
  const Node& node_;
  int step_;
};

Executor::Executor(const Graph& graph, ExecutorOptions options, std::unique_ptr<Backend> backend)
    : graph_(graph), options_(options), backend_(std::move(backend)) {
  compile();
}

Executor::~Executor() { freeBuffer(arena_); }

int Executor::newSlot(SlotKind kind, size_t bytes, const Node* node) {
  slots_.push_back({kind, bytes, 0, -1, node});
  return static_cast<int>(slots_.size()) - 1;
}

int Executor::rootSlot(const Node* node) const {
  auto it = slot_of_.find(node);
  PGQ_ASSERT(it != slot_of_.end(), "value %{} has no storage", node->name());
  return it->second;
}

namespace {

// Moves kernels that only consume a value to right after it, where creation order put
// them later and so kept the value alive longer; the rest of the order is unchanged.
//  - Stage (i)'s statistics kernels read a GEMM operand and feed nothing. instrument_stats
//    adds them last, after the whole backward pass, which kept every measured operand
//    alive to the end of the step (a larger arena) and read it long after it left the
//    cache. Each runs right after the last of its operands.
//  - An f32 value that is read only to be quantized (quant_params and quantize, e.g. a
//    gradient read by its data- and weight-gradient GEMMs in int8, or an activation
//    saved for an int8 weight-gradient GEMM) is quantized right after it is made: the
//    f32 value dies there, and only its int8 copies (a quarter of its bytes each) wait
//    for their GEMMs.
//  - Stage (i)'s output errors (error_stats, `--profile-metrics`) compare a GEMM's result
//    with a quantized copy of the GEMM computed beside it for nothing else. Created
//    last, the copies ran after the backward pass and kept every GEMM's result and
//    operands alive to the end of the step. The nodes computed only for an error_stats
//    (its copy and the copy's quantization) and the error_stats itself run, in their
//    order, right after the last value they read from the rest of the graph (the GEMM's
//    result): the copy's values and the result die there.
std::vector<const Node*> consumersAfterTheirValues(const std::vector<const Node*>& order,
                                                   const std::unordered_set<const Node*>& live,
                                                   const std::unordered_set<const Node*>& outputs) {
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::unordered_map<const Node*, std::vector<const Node*>> after;  // anchor -> moved, in order
  std::unordered_set<const Node*> moved;
  for (const Node* node : order) {
    if (node->op() != Op::kQuantStats || node->numOperands() == 0) continue;
    const Node* last = node->operand(0);
    for (int i = 1; i < node->numOperands(); ++i)
      if (position.at(node->operand(i)) > position.at(last)) last = node->operand(i);
    after[last].push_back(node);
    moved.insert(node);
  }
  std::unordered_set<const Node*> anchors;  // of moved error_stats groups: they stay where they are
  for (const Node* node : order) {
    if (node->op() != Op::kErrorStats) continue;
    // Walk up from the error_stats, latest value first: a value joins the group when
    // every live user of it is in the group (all of them come later, so were decided).
    auto later = [&](const Node* a, const Node* b) { return position.at(a) < position.at(b); };
    std::vector<const Node*> pending(node->operands().begin(), node->operands().end());
    std::unordered_set<const Node*> group{node};
    const Node* anchor = nullptr;
    while (!pending.empty()) {
      std::pop_heap(pending.begin(), pending.end(), later);
      const Node* value = pending.back();
      pending.pop_back();
      if (group.count(value)) continue;
      bool own = value->numOperands() > 0 && !outputs.count(value) && !moved.count(value);
      for (const Node* user : value->users()) own = own && (!live.count(user) || group.count(user));
      if (!own) {
        if (!anchor || position.at(value) > position.at(anchor)) anchor = value;
        continue;
      }
      group.insert(value);
      for (const Node* operand : value->operands()) {
        pending.push_back(operand);
        std::push_heap(pending.begin(), pending.end(), later);
      }
    }
    // The group only moves up, after its anchor, which does not move: every value it
    // reads from outside is made before the anchor, and stays there.
    if (!anchor || moved.count(anchor)) continue;
    std::vector<const Node*> members(group.begin(), group.end());
    std::sort(members.begin(), members.end(), later);
    std::vector<const Node*>& placed = after[anchor];
    placed.insert(placed.end(), members.begin(), members.end());
    moved.insert(members.begin(), members.end());
    anchors.insert(anchor);
  }
  auto isQuantization = [](const Node* n) { return n->op() == Op::kQuantize || n->op() == Op::kQuantParams; };
  for (const Node* value : order) {
    // (A quant_params result is f32 and read only by its quantize: moving that quantize
    // up would only make its int8 copy live longer.)
    if (outputs.count(value) || value->dtype() != DType::kF32 || isQuantization(value)) continue;
    std::vector<const Node*> users;
    bool only_quantized = true;
    for (const Node* user : value->users()) {
      if (!live.count(user) || std::find(users.begin(), users.end(), user) != users.end()) continue;
      only_quantized = only_quantized && isQuantization(user) && !moved.count(user) && !anchors.count(user);
      users.push_back(user);
    }
    if (users.empty() || !only_quantized) continue;
    // Every other operand of a moved kernel must be ready at `value`: made before it, or
    // one of these users (a quantize's params), which keep their relative order.
    std::sort(users.begin(), users.end(), [&](const Node* a, const Node* b) { return position.at(a) < position.at(b); });
    bool ready = true;
    for (const Node* user : users)
      for (int i = 0; i < user->numOperands(); ++i) {
        const Node* operand = user->operand(i);
        bool earlier_user = std::find(users.begin(), users.end(), operand) != users.end() &&
                            position.at(operand) < position.at(user);
        ready = ready && (operand == value || earlier_user || position.at(operand) < position.at(value));
      }
    if (!ready) continue;
    for (const Node* user : users) moved.insert(user);
    std::vector<const Node*>& placed = after[value];
    placed.insert(placed.end(), users.begin(), users.end());
  }
  std::vector<const Node*> result;
  result.reserve(order.size());
  auto place = [&](auto& self, const Node* node) -> void {
    result.push_back(node);
    if (auto it = after.find(node); it != after.end())
      for (const Node* next : it->second) self(self, next);
  };
  for (const Node* node : order)
    if (!moved.count(node)) place(place, node);
  PGQ_ASSERT(result.size() == order.size(), "rescheduling lost kernels ({} of {})", result.size(), order.size());
  return result;
}

}  // namespace

void Executor::compile() {
  // 1. Schedule: what the outputs need, operands first.
  std::unordered_set<const Node*> live = liveNodes(graph_);
  std::vector<Node*> all = graph_.postOrder();
  std::vector<const Node*> order;
  for (const Node* node : all)
    if (live.count(node)) order.push_back(node);
  std::unordered_set<const Node*> outputs(graph_.outputs().begin(), graph_.outputs().end());
  order = consumersAfterTheirValues(order, live, outputs);

  for (const Node* node : order) {
    std::string why;
    if (node->op() != Op::kParameter && node->op() != Op::kInput && !backend_->supports(*node, &why))
      throw Error(fmt::format("backend {} cannot run %{} ({}): {}", backend_->name(), node->name(),
                              opName(node->op()), why));
  }

  // Quantizations of parameters the caller may make (a quantize and its quant_params,
  // when no other quantize reads those scales). Their arena buffers are live from the
  // start of a run to their last reader: the caller writes them between runs, when no
  // kernel uses the arena, and nothing else writes there before they are read.
  std::unordered_set<const Node*> by_caller;
  if (options_.parameter_quantizations) {
    for (const Node* node : order) {
      std::optional<kernels::ParamQuantization> spec = backend_->parameterQuantization(*node);
      if (!spec) continue;
      const Node* params = node->operand(1);
      bool alone = true;
      for (const Node* user : params->users())
        alone = alone && (user == node || !live.count(user) ||
                          (user->op() != Op::kQuantize && user->op() != Op::kFakeQuant));
      if (!alone) continue;
      parameter_quantizations_[node->operand(0)].push_back({node, *spec});
      by_caller.insert(node);
      by_caller.insert(params);
    }
  }

  // The backend plans kernels that work together (and absorbs nodes into others).
  backend_->prepare(order, outputs);
  auto absorbed = [&](const Node* node) { return backend_->absorbed(*node); };

  // 2. Storage. Broadcasts that every user reads in place need none, nor do the nodes
  // the backend absorbed.
  for (const Node* node : order) {
    if (node->op() != Op::kBroadcast || outputs.count(node)) continue;
    bool in_place = !node->users().empty();
    for (const Node* user : node->users()) {
      if (!live.count(user)) continue;
      for (int i = 0; i < user->numOperands(); ++i)
        if (user->operand(i) == node) in_place = in_place && backend_->readsBroadcastInPlace(*user, i);
    }
    if (in_place) virtual_[node] = node;
  }
  // A result written over an operand (Backend::inPlaceOperand) shares the operand's
  // arena slot, kept to its first writer's step below; an output keeps it alive. The
  // operand must be the value the slot holds last (a chain of such results shares one
  // slot), not a view of another value (a reshape).
  std::unordered_set<const Node*> in_place;
  std::unordered_map<int, const Node*> holds;  // arena slot -> the value written there last
  for (const Node* node : order) {
    size_t bytes = static_cast<size_t>(node->shape().numElements()) * dtypeSize(node->dtype());
    if (virtual_.count(node) || absorbed(node)) continue;
    const int over = backend_->inPlaceOperand(*node);
    if (over >= 0) {
      const Node* operand = node->operand(over);
      auto it = slot_of_.find(operand);
      if (it != slot_of_.end() && slots_[static_cast<size_t>(it->second)].kind == SlotKind::kArena &&
          holds[it->second] == operand && !outputs.count(operand) && operand->dtype() == node->dtype() &&
          operand->shape() == node->shape()) {
        slot_of_[node] = it->second;
        holds[it->second] = node;
        if (outputs.count(node)) slots_[static_cast<size_t>(it->second)].kind = SlotKind::kPersistent;
        in_place.insert(node);
        continue;
      }
    }
    if (node->op() == Op::kReshape) {
      slot_of_[node] = rootSlot(node->operand(0));
    } else if (node->op() == Op::kParameter || node->op() == Op::kInput) {
      slot_of_[node] = newSlot(SlotKind::kExternal, bytes, node);
    } else if (node->op() == Op::kConstant || outputs.count(node)) {
      slot_of_[node] = newSlot(SlotKind::kPersistent, bytes, node);
    } else {
      slot_of_[node] = newSlot(SlotKind::kArena, bytes, node);
      holds[slot_of_[node]] = node;
    }
  }
  // An output that aliases an arena value (a reshape) keeps that value alive.
  for (const Node* out : graph_.outputs()) {
    Slot& slot = slots_[static_cast<size_t>(rootSlot(out))];
    if (slot.kind == SlotKind::kArena) slot.kind = SlotKind::kPersistent;
  }

  // 3. Lowering, recording the first and last step of every arena slot.
  std::vector<Kernel> init;  // constants are filled once, here
  for (const Node* node : order) {
    // A node another kernel makes (Backend::madeBy) has none of its own: that kernel,
    // earlier in the schedule, reads its operands and starts its buffer's life.
    if (node->op() == Op::kParameter || node->op() == Op::kInput || node->op() == Op::kReshape ||
        virtual_.count(node) || absorbed(node) || backend_->madeBy(*node))
      continue;
    int step = static_cast<int>(steps_.size());
    Lowering lowering(*this, *node, step);
    Kernel kernel = backend_->lower(*node, lowering);
    if (node->op() == Op::kConstant) {
      init.push_back(std::move(kernel));
      continue;
    }
    Slot& out = slots_[static_cast<size_t>(rootSlot(node))];
    if (!in_place.count(node)) out.first = by_caller.count(node) ? 0 : step;
    out.last = std::max(out.last, step);
    for (int i = 0; i < node->numOperands(); ++i) {
      if (absorbed(node->operand(i))) continue;  // its operands were read through operandOf
      Slot& in = slots_[static_cast<size_t>(lowering.operand(i).slot)];
      in.last = std::max(in.last, step);
    }
    steps_.push_back({node, std::move(kernel), by_caller.count(node) > 0});
    if (std::shared_ptr<KernelState> state = backend_->kernelState(*node)) states_.emplace_back(node, std::move(state));
  }

  std::vector<BufferRequest> requests;
  std::vector<size_t> arena_slots;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].kind != SlotKind::kArena) continue;
    if (slots_[s].last < slots_[s].first) slots_[s].last = slots_[s].first;  // written, never read
    requests.push_back({slots_[s].bytes, slots_[s].first, slots_[s].last});
    arena_slots.push_back(s);
  }
  MemoryPlan plan = planMemory(requests);
  arena_bytes_ = plan.arena_bytes;
  if (options_.before_allocation) options_.before_allocation(memory());
  arena_ = allocateBuffer(arena_bytes_);
  ptrs_.assign(slots_.size(), nullptr);
  for (size_t i = 0; i < arena_slots.size(); ++i) ptrs_[arena_slots[i]] = arena_ + plan.offsets[i];
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].kind == SlotKind::kPersistent) {
      owned_.emplace_back(allocateBuffer(slots_[s].bytes), freeBuffer);
      ptrs_[s] = owned_.back().get();
    }
  RunContext rc(ptrs_.data(), 0);
  for (const Kernel& kernel : init) kernel(rc);
  step_ms_.assign(steps_.size(), 0.0);
  step_calls_.assign(steps_.size(), 0);
  spdlog::debug("executor: {} kernels, arena {:.1f} MiB, {} values", steps_.size(),
                static_cast<double>(arena_bytes_) / (1 << 20), slots_.size());
}

void Executor::bind(const Node* node, Tensor& tensor) {
  auto it = slot_of_.find(node);
  if (it == slot_of_.end() || slots_[static_cast<size_t>(it->second)].kind != SlotKind::kExternal) {
    // A parameter or input the outputs do not need has no slot; binding it is harmless.
    if (node->op() == Op::kParameter || node->op() == Op::kInput) return;
    throw InternalError(fmt::format("executor: %{} is not a parameter or input", node->name()));
  }
  if (!(tensor.type() == node->type()))
    throw Error(fmt::format("executor: %{} expects {}, got a tensor of {}", node->name(),
                            node->type().toString(), tensor.type().toString()));
  ptrs_[static_cast<size_t>(it->second)] = tensor.raw();
}

void Executor::bind(std::string_view name, Tensor& tensor) {
  const Node* node = graph_.find(name);
  if (!node) throw Error(fmt::format("executor: graph @{} has no value %{}", graph_.name(), name));
  bind(node, tensor);
}

void Executor::run(int64_t step, double weight_step, bool parameters_quantized) {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].kind == SlotKind::kExternal && ptrs_[s] == nullptr)
      throw Error(fmt::format("executor: {} %{} is not bound", opName(slots_[s].node->op()),
                              slots_[s].node->name()));
  RunContext rc(ptrs_.data(), step, weight_step);
  if (!options_.profile) {
    for (const Step& s : steps_)
      if (!(parameters_quantized && s.parameter_quantization)) s.kernel(rc);
    return;
  }
  using Clock = std::chrono::steady_clock;
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (parameters_quantized && steps_[i].parameter_quantization) continue;
    auto start = Clock::now();
    steps_[i].kernel(rc);
    step_ms_[i] += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    ++step_calls_[i];
  }
}

std::vector<kernels::ParamQuantization> Executor::parameterQuantizations(std::string_view name) const {
  std::vector<kernels::ParamQuantization> out;
  const Node* parameter = graph_.find(name);
  auto it = parameter ? parameter_quantizations_.find(parameter) : parameter_quantizations_.end();
  if (it == parameter_quantizations_.end()) return out;
  for (const ParameterQuantization& q : it->second) {
    kernels::ParamQuantization spec = q.spec;
    const Node* params = q.quantize->operand(1);
    spec.params = {static_cast<float*>(ptrs_[static_cast<size_t>(rootSlot(params))]),
                   static_cast<size_t>(params->shape().numElements())};
    spec.out = ptrs_[static_cast<size_t>(rootSlot(q.quantize))];
    out.push_back(spec);
  }
  return out;
}

std::optional<double> Executor::outputSumOfSquares(size_t i) const {
  return backend_->sumOfSquares(*graph_.outputs()[i]);
}

const void* Executor::outputData(size_t i) const {
  return ptrs_[static_cast<size_t>(rootSlot(graph_.outputs()[i]))];
}

MemoryStats Executor::memory() const {
  MemoryStats stats;
  stats.arena_bytes = arena_bytes_;
  for (const Slot& s : slots_) {
    if (s.kind == SlotKind::kPersistent) stats.persistent_bytes += s.bytes;
    if (s.kind == SlotKind::kExternal) stats.bound_bytes += s.bytes;
  }
  return stats;
}

std::vector<NodeProfile> Executor::profile() const {
  std::unordered_map<const Node*, std::vector<const Node*>> makes;
  for (const Node* node : graph_.nodes())
    if (const Node* maker = backend_->madeBy(*node)) makes[maker].push_back(node);
  std::vector<NodeProfile> out;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Node* node = steps_[i].node;
    auto it = makes.find(node);
    out.push_back({node, step_ms_[i], step_calls_[i], backend_->inPlaceOperand(*node),
                   it == makes.end() ? std::vector<const Node*>{} : it->second});
  }
  return out;
}

void Executor::resetProfile() {
  std::fill(step_ms_.begin(), step_ms_.end(), 0.0);
  std::fill(step_calls_.begin(), step_calls_.end(), 0);
}

std::vector<std::pair<std::string, std::string>> Executor::kernelStates() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [node, state] : states_) out.emplace_back(node->name(), state->save());
  return out;
}

void Executor::loadKernelStates(const std::vector<std::pair<std::string, std::string>>& states,
                                const std::string& source) {
  std::unordered_map<std::string_view, const std::string*> by_name;
  for (const auto& [name, bytes] : states)
    if (!by_name.emplace(name, &bytes).second)
      throw Error(fmt::format("{}: the state of kernel %{} is there twice", source, name));
  for (const auto& [node, state] : states_)
    if (!by_name.count(node->name()))
      throw Error(fmt::format("{}: no state for kernel %{}, which keeps one", source, node->name()));
  if (by_name.size() != states_.size()) {
    std::unordered_set<std::string_view> known;
    for (const auto& entry : states_) known.insert(entry.first->name());
    for (const auto& entry : states)
      if (!known.count(entry.first))
        throw Error(fmt::format("{}: a state for %{}, which is not a stateful kernel of this graph", source,
                                entry.first));
  }
  // Every state is tried on its kernel (which then gets its own back) before any is kept,
  // so that a bad one leaves every kernel as it was.
  for (const auto& [node, state] : states_) {
    const std::string saved = state->save();
    if (!state->load(*by_name.at(node->name())))
      throw Error(fmt::format("{}: the state of kernel %{} ({} bytes) does not fit it", source, node->name(),
                              by_name.at(node->name())->size()));
    state->load(saved);
  }
  for (const auto& [node, state] : states_) state->load(*by_name.at(node->name()));
}

}  // namespace pgq

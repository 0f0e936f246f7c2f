#include "passes/data_parallel.h"

#include <vector>

#include "ir/builder.h"

namespace pgq {

bool DataParallel::run(Graph& graph, PassContext&) {
  Builder b(graph);
  std::vector<Node*> outputs;
  bool changed = false;
  for (Node* o : graph.outputs()) {
    const bool done = o->op() == Op::kAllReduce && o->attrs().getGroup(AttrKey::kGroup) == DeviceGroup::kData;
    // Statistics are per replica; the profile combines them.
    if (o->op() == Op::kQuantStats || o->op() == Op::kErrorStats || !isFloat(o->dtype()) || done) {
      outputs.push_back(o);
      continue;
    }
    Node* mean = b.allReduce(o, DeviceGroup::kData, Reduction::kMean, graph.uniqueName(o->name() + ".dp_mean"));
    if (o->attrs().has(AttrKey::kSplit)) mean->attrs().set(AttrKey::kSplit, o->attrs().getInts(AttrKey::kSplit));
    outputs.push_back(mean);
    changed = true;
  }
  graph.setOutputs(std::move(outputs));
  return changed;
}

}  // namespace pgq

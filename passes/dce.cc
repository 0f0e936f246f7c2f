#include "passes/dce.h"

namespace pgq {

bool DeadCodeElimination::run(Graph& graph, PassContext&) { return graph.removeDead() > 0; }

}  // namespace pgq

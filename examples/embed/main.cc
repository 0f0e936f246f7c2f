// Embeds pgq as a library: builds a graph with the IR builder, optimizes it with a
// named pass pipeline and prints the result in the IR text form.
#include <cstdio>

#include "ir/builder.h"
#include "ir/printer.h"
#include "passes/pipeline.h"

int main() {
  pgq::Graph graph("embedded");
  pgq::Builder b(graph);
  pgq::Node* x = b.input("x", {pgq::DType::kF32, pgq::Shape{4, 8}});
  pgq::Node* w = b.parameter("w", {pgq::DType::kF32, pgq::Shape{8, 8}}, "normal(0.02)");
  pgq::Node* h1 = b.matmul(x, w, pgq::DotDims::matrix(), "proj", "h1");
  pgq::Node* h2 = b.matmul(x, w, pgq::DotDims::matrix(), "proj", "h2");  // a duplicate
  graph.addOutput(b.add(h1, h2, "sum"));

  pgq::PassContext ctx;
  bool changed = pgq::parsePipeline("cse,dce")->run(graph, ctx);
  std::printf("%s", pgq::printGraph(graph).c_str());
  // The duplicate matmul must be gone: x, w, h1, sum.
  return changed && graph.size() == 4 ? 0 : 1;
}

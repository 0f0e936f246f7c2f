// Fuzzes the IR text parser together with the verifier, the printer and the first
// passes. A crash, a sanitizer report or a failed round trip is a bug.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"
#include "support/errors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<pgq::Graph> graph;
  try {
    graph = pgq::parseGraph(text, "fuzz");
  } catch (const pgq::Error&) {
    return 0;  // rejected with a message: fine
  }
  pgq::verify(*graph);  // an accepted graph must be valid
  std::string printed = pgq::printGraph(*graph);
  if (pgq::printGraph(*pgq::parseGraph(printed, "reprint")) != printed) std::abort();
  pgq::PassContext ctx;
  pgq::parsePipeline("cse,dce")->run(*graph, ctx);
  return 0;
}

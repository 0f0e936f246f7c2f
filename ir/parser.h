#pragma once
// Reads the IR text form (see printer.h). Every error is a pgq::Error whose message
// starts with "FILE:LINE:COL: " and says what was expected; the parser never crashes,
// hangs or reads out of bounds on any input (it is fuzzed: tests/fuzz/).
#include <memory>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace pgq {

std::unique_ptr<Graph> parseGraph(std::string_view text, std::string_view filename = "<input>");
// Reads FILE ("-" reads standard input) and parses it.
std::unique_ptr<Graph> parseGraphFile(const std::string& path);

}  // namespace pgq

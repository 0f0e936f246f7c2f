// Fixture of the layering test (tests/CMakeLists.txt): frontend/onnx/ includes its own
// headers and the graph type (allowed), and a model builder above it (refused).
#include "frontend/model_graph.h"
#include "frontend/onnx/importer.h"
#include "ir/graph.h"
#include "frontend/transformer.h"

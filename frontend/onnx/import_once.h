#pragma once
// One import of a model file per process. `pgq train --model X.onnx` reads the model's
// sizes for its config, then builds the training graph, the evaluation graph and (when
// profiling) the instrumented one: each used to parse the file and decode every weight
// again (three parses and three copies of a 124M model's weights alive at once). Here
// the first call imports and keeps the imported graph; every call gets its own copy of
// it (passes rewrite graphs in place), which is cheap next to the weights.
//
// The weights (initial parameter values) are held once and shared. The cache holds them
// only until the first graph that asks for them takes them; from then on the graphs
// holding them keep them alive (the trainer drops its reference once its parameters are
// initialized, so training holds one copy). A graph asking for them after they were
// dropped imports the file again, which is what a second training session in one
// process (pgq experiment) does.
//
// Calls are matched on the options and on the file as it is on disk (device, inode,
// size and modification time): a file rewritten meanwhile imports again. A file keeps one
// entry: importing it with other options replaces it.
#include <cstdint>

#include "frontend/onnx/importer.h"

namespace pgq {

struct ImportedSizes {
  int64_t batch = 0;
  int64_t seq_len = 0;
  int64_t vocab = 0;
  uint64_t fingerprint = 0;  // ImportedModel::fingerprint
  int64_t parameters = 0;    // elements of the trainable parameters
};

// The sizes of the imported model (importOnnx's checks and errors).
ImportedSizes importedSizes(const OnnxImportOptions& options);

// A copy of the imported model's graph, with its parameters, constants, inputs and loss;
// `values` also gives the parameters' and constants' initial values (otherwise
// TransformerGraph::values is null and nothing is read again for them).
TransformerGraph importedGraph(const OnnxImportOptions& options, bool values);

// How many times this process has imported a model file (parsed it and decoded its
// weights): for tests of the above.
int64_t onnxImportCount();

}  // namespace pgq

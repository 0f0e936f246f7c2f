#pragma once
// Training checkpoints: the state a run needs to resume (step, seed, model config,
// recipe, parameters and optimizer moments, and what stateful kernels carry from step to
// step: TrainingSession::kernelStates), in one binary file that is written atomically
// and checked fully when read.
//
// Format, version 1. Every integer is little-endian; a string is a u64 byte count
// followed by the bytes (no terminator).
//
//   offset 0   char[8] magic "PGQ-CKPT"
//          8   u32     version (1)
//         12   u64     file size in bytes, header and trailer included
//         20   u32     CRC-32 of bytes [0, 20): a corrupt size field is reported as
//                      corruption, not as truncation
//         24   i64 step, u64 seed, i32 threads
//              string model_config (YAML text), string recipe (may be empty)
//              u32 count, then count x (string key, string value): the info map
//              u32 count, then count x tensor:
//                string name, string dtype ("f32", "bf16", "s8", "u8", "s32"),
//                u32 rank, rank x i64 dims, u64 data bytes, the raw row-major data
//   size - 4   u32     CRC-32 of bytes [0, size - 4)
//
// Reading checks, in order: magic ("not a pgq checkpoint"), version, header checksum,
// the recorded size against the file size (a shorter file is reported as truncated,
// naming the tensor or field where the data ends and its byte offset), the checksum of
// the whole content, then every field: lengths, dtypes and shapes, and the run fields
// (step >= 0, threads in [1, 2^20]), since a forged file can carry a valid checksum.
// Each length is checked against the bytes that remain before anything is allocated,
// so a corrupt length can never cause a huge allocation. The trainer checks the rest
// against the run it continues (seed, planned_steps, model config, tensors).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ir/node.h"
#include "runtime/tensor.h"

namespace pgq {

struct Checkpoint {
  int64_t step = 0;
  uint64_t seed = 0;
  int threads = 1;  // OpenMP threads of the run that wrote it
  std::string model_config;  // YAML text of the model config
  std::string recipe;        // recipe text, empty for an unquantized run
  std::map<std::string, std::string> info;
  // Parameters, optimizer moments and any other state; names are unique.
  std::vector<std::pair<std::string, Tensor>> tensors;
};

// Writes `checkpoint` to `path` by OutputFile's rule (support/file_io.h): atomically for a
// regular file (to `.NAME.tmp-<pid>` in the same directory, fsync, rename over `path`,
// fsync the directory), through a symlink to its target. On any failure (unwritable
// directory, disk full, ...) throws pgq::Error, removes the temporary file and leaves a
// previous file at `path` untouched.
void saveCheckpoint(const std::string& path, const Checkpoint& checkpoint);

// Reads and verifies a checkpoint (see the format above). Throws pgq::Error naming the
// path and what is wrong.
Checkpoint loadCheckpoint(const std::string& path);

// Throws pgq::Error listing, by name, every expected tensor that is missing, every
// tensor that is not expected, and every dtype or shape mismatch.
void checkCheckpointMatches(const Checkpoint& checkpoint,
                            const std::vector<std::pair<std::string, TensorType>>& expected,
                            const std::string& path);

// What tells one checkpoint file from another without reading it whole: its size and the
// CRC-32 of its content stored at its end ("<bytes>:<crc hex>"), for the runs that start
// from it to notice that it was replaced. Throws pgq::Error if the file cannot be read;
// loadCheckpoint() verifies it.
std::string checkpointIdentity(const std::string& path);

// CRC-32 (the zlib/PNG polynomial, reflected, 0xEDB88320), continuing from `crc`:
// crc32(b, n2, crc32(a, n1)) is the CRC of a followed by b.
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);

}  // namespace pgq

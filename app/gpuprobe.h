#pragma once
// `pgq gpuprobe`, the GPU's hwprobe: runs scripts/gpuprobe.py (embedded in pgq, with
// scripts/gpu_model.py) under a Python with PyTorch. It times bf16 and FP8 GEMMs over a
// grid of shapes, casts, copies and flash attention on CUDA device 0, fits the GPU model
// (plan/hardware.h GemmShapeModel) and writes a hardware YAML with its measured GEMMs.
// Given recorded measurements (`from`), it fits those instead and needs no GPU.
#include <string>

namespace pgq {

struct GpuProbeOptions {
  std::string python = "python3";
  std::string from;  // a folder of recorded gemm.csv, cast2.csv, attn.csv, env.json
  std::string keep;  // where to keep the measurements (default: dropped)
  std::string name = "probed-gpu";
};

// The hardware YAML the probe wrote, checked by parseHardwareModel. Throws pgq::Error
// with the script's one-line reason when it cannot measure (no PyTorch, no CUDA device,
// no FP8 GEMM), when the interpreter is missing, or naming what is wrong in the YAML.
std::string probeGpu(const GpuProbeOptions& options);

}  // namespace pgq

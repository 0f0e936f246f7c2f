#pragma once
// Measures the hardware model of this machine (plan/hardware.h): FMA and int8 peaks
// from tight register-only loops, memory bandwidth from a STREAM-like triad, and what
// oneDNN's GEMMs and pgq's quantizers achieve, all at the current OpenMP thread count.
#include "plan/hardware.h"

namespace pgq {

struct ProbeOptions {
  double seconds_per_test = 0.3;  // wall time each measurement runs for
};

// Throws pgq::Error when seconds_per_test is outside ranges::kProbeSeconds.
HardwareModel probeHardware(const ProbeOptions& options = {});

}  // namespace pgq

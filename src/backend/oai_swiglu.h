// The OAI SwiGLU of gpt-oss's experts: the one definition every backend (CPU reference,
// CPU SIMD, CUDA kernels) computes, host and device alike.
//   g = min(gate, limit); u = clamp(up, -limit, limit); out = g * sigmoid(alpha * g) * (u + 1)
// (gate is clamped from above only; alpha 1.702 and limit 7 in gpt-oss.)
#pragma once

#include <algorithm>
#include <cmath>

#include "core/half.h"  // BRASS_HD

namespace brass::backend {

BRASS_HD float oai_swiglu(float gate, float up, float alpha, float limit) {
  const float g = limit < gate ? limit : gate;                     // std::min(gate, limit)
  const float u = up < -limit ? -limit : (limit < up ? limit : up);  // std::clamp(up, -limit, limit)
  return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

// The same in double (host only): the CPU twins' exact activations, where a float
// rounding would decide an int8 code.
inline double oai_swiglu_exact(double gate, double up, double alpha, double limit) {
  const double g = std::min(gate, limit), u = std::clamp(up, -limit, limit);
  return g / (1.0 + std::exp(-alpha * g)) * (u + 1.0);
}

}  // namespace brass::backend

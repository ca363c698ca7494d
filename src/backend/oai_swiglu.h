// The OAI SwiGLU of gpt-oss's experts: the one definition every backend (CPU reference,
// CPU SIMD, CUDA kernels) computes, host and device alike.
//   g = min(gate, limit); u = clamp(up, -limit, limit); out = g * sigmoid(alpha * g) * (u + 1)
// (gate is clamped from above only; alpha 1.702 and limit 7 in gpt-oss.)
#pragma once

#include <cmath>

#include "core/half.h"  // BRASS_HD

namespace brass::backend {

BRASS_HD float oai_swiglu(float gate, float up, float alpha, float limit) {
  const float g = limit < gate ? limit : gate;                     // std::min(gate, limit)
  const float u = up < -limit ? -limit : (limit < up ? limit : up);  // std::clamp(up, -limit, limit)
  return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

}  // namespace brass::backend

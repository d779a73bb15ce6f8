// F32 helpers of a transformer. Reductions follow ggml's CPU ops where that matters for
// matching llama.cpp's exact path: RMSNorm and softmax sum in double; RoPE advances
// theta by repeated multiplication in float.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/compute.h"
#include "quant/fp16.h"

namespace hypura::compute {

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float s = 1.0f / std::sqrt(mean + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * s) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s;
  }
}

void top_k(const float* x, int64_t n, int64_t k, int32_t* out) {
  for (int64_t slot = 0; slot < k; ++slot) {
    int32_t best = -1;
    for (int32_t i = 0; i < n; ++i) {
      if (std::find(out, out + slot, i) != out + slot) continue;
      if (best < 0 || x[i] > x[best]) best = i;
    }
    out[slot] = best;
  }
}

void softmax(float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  if (max == -INFINITY) {  // every entry masked: define the result as uniform zeros
    for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    return;
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += static_cast<double>(x[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void rope(float* x, int64_t head_dim, int64_t n_rot, int64_t pos, float freq_base, float freq_scale,
          const float* freq_factors, bool neox) {
  (void)head_dim;  // dims n_rot..head_dim pass through unchanged
  rope_yarn(x, n_rot, pos, freq_base, freq_scale, freq_factors, Yarn{}, neox);
}

Yarn yarn(int64_t n_rot, int64_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
          float ext_factor, float attn_factor) {
  const auto dim = [&](float turns) {
    return static_cast<float>(n_rot) *
           std::log(static_cast<float>(n_ctx_orig) / (turns * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(freq_base));
  };
  Yarn y;
  y.ext_factor = ext_factor;
  y.attn_factor = attn_factor;
  y.corr_lo = std::max(0.0f, std::floor(dim(beta_fast)));
  y.corr_hi = std::min(static_cast<float>(n_rot - 1), std::ceil(dim(beta_slow)));
  return y;
}

namespace {

// rope_yarn's angles pair by pair: next() gives the scaled cos and sin of pair i0 / 2, in
// order (theta advances by repeated multiplication, as ggml's does).
class RopeAngles {
 public:
  RopeAngles(int64_t n_rot, int64_t pos, float freq_base, float freq_scale,
             const float* freq_factors, const Yarn& y)
      : theta_scale_(std::pow(freq_base, -2.0f / static_cast<float>(n_rot))),
        mscale_(y.attn_factor),
        theta_base_(static_cast<float>(pos)),
        freq_scale_(freq_scale),
        freq_factors_(freq_factors),
        y_(y) {
    if (y.ext_factor != 0.0f) mscale_ *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  }

  void next(int64_t i0, float* c, float* s) {
    const float ff = freq_factors_ ? freq_factors_[i0 / 2] : 1.0f;
    const float theta_extrap = theta_base_ / ff;
    float theta = freq_scale_ * theta_extrap;
    if (y_.ext_factor != 0.0f) {
      const float r =
          (static_cast<float>(i0 / 2) - y_.corr_lo) / std::max(0.001f, y_.corr_hi - y_.corr_lo);
      const float mix = (1.0f - std::min(1.0f, std::max(0.0f, r))) * y_.ext_factor;
      theta = theta * (1.0f - mix) + theta_extrap * mix;
    }
    *c = std::cos(theta) * mscale_;
    *s = std::sin(theta) * mscale_;
    theta_base_ *= theta_scale_;
  }

 private:
  float theta_scale_, mscale_, theta_base_, freq_scale_;
  const float* freq_factors_;
  const Yarn& y_;
};

// Rotates pair i0 / 2 of x (adjacent, or n_rot / 2 apart for NeoX) by (c, s).
inline void rotate_pair(float* x, int64_t i0, int64_t n_rot, float c, float s, bool neox) {
  const int64_t a = neox ? i0 / 2 : i0;
  const int64_t b = neox ? i0 / 2 + n_rot / 2 : i0 + 1;
  const float x0 = x[a], x1 = x[b];
  x[a] = x0 * c - x1 * s;
  x[b] = x0 * s + x1 * c;
}

}  // namespace

void rope_yarn(float* x, int64_t n_rot, int64_t pos, float freq_base, float freq_scale,
               const float* freq_factors, const Yarn& y, bool neox) {
  RopeAngles angles(n_rot, pos, freq_base, freq_scale, freq_factors, y);
  for (int64_t i0 = 0; i0 < n_rot; i0 += 2) {
    float c, s;
    angles.next(i0, &c, &s);
    rotate_pair(x, i0, n_rot, c, s, neox);
  }
}

void rope_yarn_angles(int64_t n_rot, int64_t pos, float freq_base, float freq_scale,
                      const float* freq_factors, const Yarn& y, float* cs) {
  RopeAngles angles(n_rot, pos, freq_base, freq_scale, freq_factors, y);
  for (int64_t i0 = 0; i0 < n_rot; i0 += 2) angles.next(i0, &cs[i0], &cs[i0 + 1]);
}

void rope_rotate(float* x, int64_t n_rot, const float* cs, bool neox) {
  for (int64_t i0 = 0; i0 < n_rot; i0 += 2) rotate_pair(x, i0, n_rot, cs[i0], cs[i0 + 1], neox);
}

void silu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void swiglu_oai(float* gate, const float* up, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    gate[i] = g / (1.0f + std::exp(alpha * -g)) * (u + 1.0f);
  }
}

static float gelu_tanh_one(float v) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  return 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * v * (1.0f + kCoefA * v * v)));
}

void gelu_tanh(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = gelu_tanh_one(x[i]);
}

// fp16(gelu(h)) for every fp16 value h, by its bits: the function's inputs and results are
// fp16 anyway, so one lookup replaces a tanh and two conversions (13 ns -> ~2 ns a value).
const float* gelu_fp16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      const float h = quant::fp16_to_f32(static_cast<uint16_t>(bits));
      t[bits] = quant::fp16_to_f32(quant::f32_to_fp16(gelu_tanh_one(h)));
    }
    return t;
  }();
  return table.data();
}

void gelu_tanh_fp16(float* x, int64_t n) {
  const float* table = gelu_fp16_table();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (v <= -10.0f) {
      x[i] = 0.0f;
    } else if (v < 10.0f) {
      x[i] = table[quant::f32_to_fp16(v)];
    }
  }
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}
void mul(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= x[i];
}
void scale(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}
float dot_f32(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace hypura::compute

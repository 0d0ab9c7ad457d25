// Exhaustive accuracy of the f32 exp2/log2 expansions of
// loss-expand-host-libcalls (compiler/Conversion/ExpandHostLibcalls.cpp),
// written op for op as the pass emits them (same constants, same fma and
// rounding sequence), against the double-precision libm result, over every
// finite f32 input (log2: all positive; exp2: |x| <= 160).
//
//   g++ -O2 -std=c++20 scripts/numerics/host-math-exhaustive.cpp -o /tmp/hm && /tmp/hm
//
// Result on 2026-12-01 (about 80 s on one core):
//   log2 max ulp 1.0024 at 0x1.64e726p+0
//   exp2 max ulp 0.8980 at -0x1.f9fafp+6
// tests/unit/compiler/CpuTargetTest.cpp samples the JIT-compiled code itself.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
static float fb(uint32_t b) { return std::bit_cast<float>(b); }
static uint32_t bf(float f) { return std::bit_cast<uint32_t>(f); }
float exp2x(float x) {
  float xc = x < -151.f ? -151.f : (x > 129.f ? 129.f : x);
  float n = (xc + 12582912.0f) - 12582912.0f;
  float f = xc - n;
  const float q[] = {1.54035122e-4f, 1.33907353e-3f, 9.61823761e-3f,
                     5.55035733e-2f, 2.40226492e-1f, 6.93147182e-1f};
  float p = q[0];
  for (int i = 1; i < 6; i++)
    p = std::fma(p, f, q[i]);
  p = std::fma(p, f, 1.0f);
  int ni = (int)n;
  int n1 = ni >> 1, n2 = ni - n1;
  return (p * fb((n1 + 127) << 23)) * fb((n2 + 127) << 23);
}
float log2x(float x) {
  bool tiny = x < 0x1p-126f;
  float xs = tiny ? x * 0x1p23f : x;
  uint32_t b = bf(xs);
  int e = (int)(b >> 23) - (tiny ? 150 : 127);
  uint32_t m = (b & 0x7FFFFF) | 0x3F800000;
  if (m > 0x3FB504F3u) {
    m -= 1u << 23;
    e++;
  }
  float r = fb(m) - 1.0f;
  const float h[] = {-1.09949477e-1f, 1.86174989e-1f,  -1.91062793e-1f,
                     2.04600617e-1f,  -2.39617392e-1f, 2.88567394e-1f,
                     -3.60696644e-1f, 4.80898231e-1f,  -7.21347332e-1f};
  float p = h[0];
  for (int i = 1; i < 9; i++)
    p = std::fma(p, r, h[i]);
  float s = r * p;
  float t = std::fma(s, r, r * 1.92596303e-8f);
  float l = std::fma(r, 1.44269502e+0f, t);
  return l + (float)e;
}
double ulpErr(float got, double want) {
  float rw = (float)want;
  if (std::isinf(rw) || std::isinf(got))
    return got == rw ? 0 : 1e9;
  int e = std::ilogb(want == 0 ? 0x1p-149 : want);
  double u = std::ldexp(1.0, std::max(e, -126) - 23);
  return std::fabs((double)got - want) / u;
}
int main() {
  double we = 0, wl = 0;
  uint32_t xe = 0, xl = 0;
  for (uint64_t b = 1; b < 0x7F800000u; ++b) {
    float x = fb((uint32_t)b);
    double u = ulpErr(log2x(x), std::log2((double)x));
    if (u > wl) {
      wl = u;
      xl = b;
    }
  }
  printf("log2 max ulp %.4f at %a\n", wl, fb(xl));
  for (uint64_t b = 0; b < 0x100000000ull; ++b) {
    float x = fb((uint32_t)b);
    if (std::isnan(x) || std::fabs(x) > 160)
      continue;
    double u = ulpErr(exp2x(x), std::exp2((double)x));
    if (u > we) {
      we = u;
      xe = b;
    }
  }
  printf("exp2 max ulp %.4f at %a\n", we, fb(xe));
}

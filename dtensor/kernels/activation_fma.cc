// x·σ(t) on 16 AVX-512 lanes or 8 AVX2 + FMA lanes: tanh gelu (t = 2·√(2/π)·(x + 0.044715·x³))
// and silu (t = x).
//
// With a = -|t| and e = exp(a) <= 1, σ(t) = 1/(1 + e) for t >= 0 and e/(1 + e) for t < 0, so
//   y = (t < 0 ? x·e : x) / (1 + e)
// keeps full relative precision down to the subnormal results (1/(1 + e^-t) would overflow e^-t),
// with one division. exp(a) = p·2^n is exp_avx512_lanes.h's (Cephes' expf scheme on FMAs), e by
// vscalefps, which rounds once into the subnormal range and gives 0 below it; x·e is (x·p)·2^n, rounded into the
// subnormal range once (x·e from a subnormal e measured 52 ulp at silu(-100)). a is clamped at
// -150 (e = 0 there) so that t = ±inf reduces to no inf - inf; for t < -150 the result is x·0.
//
// Worked example, silu(-100): a = -100, n = -144, r = -100 + 144·ln2 = -0.1868, p = 0.8296,
// x·p = -82.96, x·e = -82.96·2^-144 = -3.72e-42 (a subnormal, rounded once), 1 + e = 1:
// y = -3.72e-42, as x·σ(x) rounds it.
//
// AVX2 has no vscalefps: v·2^n is there two multiplies by powers of two built from exponent bits,
// 2^max(n, -125) (exact: v·2^max(n, -125) stays normal for the values scaled here, p and x·p
// with |x| >= 1 whenever n < -125) and then 2^(n - max(n, -125)) >= 2^-91 (the one rounding, into
// the subnormal range). Both widths run the same IEEE operations per lane, so they give the same
// bits (activation_fma_test.cc compares them on AVX-512 CPUs).
//
// Accuracy against x·σ(t) in long double with t from the f32 x (activation_fma_test.cc):
// silu 3 ulp over the whole float range (2.8 measured); tanh gelu 4 ulp (3.7) for x >= -1, and below, as the scalar
// kernel, dominated by the f32 rounding of t: at most 4·|t| + 4 ulp. Against the scalar kernels:
// within those bounds of each other. Specials as the scalar kernels and torch: NaN stays NaN,
// f(+inf) = +inf, f(-inf) = NaN (-inf · 0), f(-0) = -0.
#include "dtensor/kernels/activation_fma.h"

#include <immintrin.h>

#include "dtensor/core/blas_kernels.h"
#include "dtensor/core/error.h"
#include "dtensor/kernels/exp_avx2_lanes.h"
#include "dtensor/kernels/exp_avx512_lanes.h"

namespace dt {

namespace {

#define DT_ACTIVATION_TARGET __attribute__((target("avx512f")))

// GCC 12's masked intrinsics start from an undefined vector, which -Wmaybe-uninitialized flags
// once they are inlined here; no value is read uninitialized (as in gemm_bf16_dot.cc). GCC only:
// clang has no such warning.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Returns x·σ(t) from exp(-|t|) = p·2^n and d = 1 + exp(-|t|): (t < 0 ? x·e : x) / d.
DT_ACTIVATION_TARGET inline __m512 x_sigmoid_from(__m512 x, __m512 t, __m512 p, __m512 n, __m512 d) {
  // x·e as (x·p)·2^n: scaled last, so that a subnormal e does not lose bits that x·e would keep.
  const __mmask16 negative = _mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_LT_OQ);
  __m512 num = _mm512_mask_scalef_ps(x, negative, _mm512_mul_ps(x, p), n);
  // Below the clamp e^-|t| is 0 and the result x·0 (-0, or NaN for x = -inf, as torch): the clamped
  // n would scale a large x·p to a wrong nonzero value.
  const __mmask16 gone = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-150.0f), _CMP_LT_OQ);
  num = _mm512_mask_mul_ps(num, gone, x, _mm512_setzero_ps());
  return _mm512_div_ps(num, d);
}

// Returns x·σ(t) per lane (see the file comment).
DT_ACTIVATION_TARGET inline __m512 x_sigmoid(__m512 x, __m512 t) {
  const __m512 minus_abs_t =
      _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), _mm512_set1_epi32(int32_t(0x80000000u))));
  const __m512 a = _mm512_max_ps(_mm512_set1_ps(-150.0f), minus_abs_t);  // NaN: max_ps returns its second operand
  const auto [p, n] = avx512_lanes::exp_parts(a);
  return x_sigmoid_from(x, t, p, n, _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_scalef_ps(p, n)));
}

// Returns t = 2·√(2/π)·(x + 0.044715·x³), as (2·√(2/π)·x)·(1 + 0.044715·x²).
DT_ACTIVATION_TARGET inline __m512 gelu_tanh_arg(__m512 x) {
  const __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), _mm512_mul_ps(x, x), _mm512_set1_ps(1.0f));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(1.59576912160573071f), x), q);
}

// out = f(x) over n values, 16 at a time, the last partial vector under a mask (same instructions).
template <typename F>
DT_ACTIVATION_TARGET inline void rows(const float* x, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// The two lane functions for rows (structs: a lambda's operator() would lack the target).
struct GeluTanhLanes {
  DT_ACTIVATION_TARGET __m512 operator()(__m512 v) const { return x_sigmoid(v, gelu_tanh_arg(v)); }
};
struct SiluLanes {
  DT_ACTIVATION_TARGET __m512 operator()(__m512 v) const { return x_sigmoid(v, v); }
};

// The derivative of y = x·σ(t): y' = σ(t) + x·t'·σ(t)·σ(-t) (silu: t = x, t' = 1; tanh gelu: t' =
// 2·√(2/π)·(1 + 3·0.044715·x²)). With e = exp(-|t|) and r = 1/(1 + e): t >= 0 gives
// r + x·t'·(e·r)·r, one FMA; t < 0 gives e·r·(1 + x·t'·r), taken as (p·r)·(1 + x·t'·r) scaled by 2^n
// last (the result underflows gradually, as the value's x·e does). x is capped where y' rounds to
// 1 (cap, with min_ps(cap, x) keeping NaN), which also keeps x·t' finite for x = +inf. Below the
// exp clamp (t < -150) the result is x·0, as the value's.
struct GradLanes {
  __m512 grad, value;
};
template <bool Gelu, bool WithValue>
DT_ACTIVATION_TARGET inline GradLanes x_sigmoid_grad(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(Gelu ? 9.0f : 30.0f), x);
  const __m512 t = Gelu ? gelu_tanh_arg(xc) : xc;
  const __m512 xtp =
      Gelu ? _mm512_mul_ps(xc, _mm512_mul_ps(_mm512_set1_ps(1.59576912160573071f),
                                             _mm512_fmadd_ps(_mm512_set1_ps(0.134145f), _mm512_mul_ps(xc, xc),
                                                             _mm512_set1_ps(1.0f))))
           : xc;
  const __m512 minus_abs_t =
      _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), _mm512_set1_epi32(int32_t(0x80000000u))));
  const __m512 a = _mm512_max_ps(_mm512_set1_ps(-150.0f), minus_abs_t);
  const auto [p, n] = avx512_lanes::exp_parts(a);
  const __m512 e = _mm512_scalef_ps(p, n);
  const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), e);
  const __m512 r = _mm512_div_ps(_mm512_set1_ps(1.0f), d);
  const __mmask16 negative = _mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 pos = _mm512_fmadd_ps(xtp, _mm512_mul_ps(_mm512_mul_ps(e, r), r), r);
  const __m512 neg =
      _mm512_scalef_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), _mm512_fmadd_ps(xtp, r, _mm512_set1_ps(1.0f))), n);
  __m512 g = _mm512_mask_blend_ps(negative, pos, neg);
  const __mmask16 gone = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-150.0f), _CMP_LT_OQ);
  g = _mm512_mask_mul_ps(g, gone, x, _mm512_setzero_ps());
  if constexpr (!WithValue) return {g, g};
  // The value as x_sigmoid computes it, from the same t, e and 1 + e: for x <= cap they are
  // x_sigmoid's own (xc = x), and above it t >= 0 both ways and 1 + e rounds to 1 both ways (e <=
  // exp(-30)), so the value is x / 1 either way. Same bits, one exp instead of two.
  return {g, x_sigmoid_from(x, t, p, n, d)};
}

// grad = f'(x) and, when value is not null, value = f(x) over n values, 16 at a time (the last
// partial vector under a mask: the same instructions).
template <bool Gelu>
DT_ACTIVATION_TARGET void grad_rows(const float* x, float* grad, float* value, int64_t n) {
  int64_t i = 0;
  if (value) {
    for (; i + 16 <= n; i += 16) {
      const GradLanes l = x_sigmoid_grad<Gelu, true>(_mm512_loadu_ps(x + i));
      _mm512_storeu_ps(value + i, l.value);
      _mm512_storeu_ps(grad + i, l.grad);
    }
  } else {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(grad + i, x_sigmoid_grad<Gelu, false>(_mm512_loadu_ps(x + i)).grad);
  }
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    const GradLanes l = x_sigmoid_grad<Gelu, true>(_mm512_maskz_loadu_ps(m, x + i));
    if (value) _mm512_mask_storeu_ps(value + i, m, l.value);
    _mm512_mask_storeu_ps(grad + i, m, l.grad);
  }
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#define DT_ACTIVATION_AVX2_TARGET __attribute__((target("avx2,fma")))

// x_sigmoid_from and x_sigmoid on 8 AVX2 + FMA lanes: the same operations, with scalef and the
// masks written out (ni: n as integers).
DT_ACTIVATION_AVX2_TARGET inline __m256 x_sigmoid_from_avx2(__m256 x, __m256 t, __m256 p, __m256i ni, __m256 d) {
  const __m256 negative = _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_LT_OQ);
  __m256 num = _mm256_blendv_ps(x, avx2_lanes::scale_pow2(_mm256_mul_ps(x, p), ni), negative);
  const __m256 gone = _mm256_cmp_ps(t, _mm256_set1_ps(-150.0f), _CMP_LT_OQ);
  num = _mm256_blendv_ps(num, _mm256_mul_ps(x, _mm256_setzero_ps()), gone);
  return _mm256_div_ps(num, d);
}

DT_ACTIVATION_AVX2_TARGET inline __m256 x_sigmoid_avx2(__m256 x, __m256 t) {
  const __m256 minus_abs_t = _mm256_or_ps(t, _mm256_set1_ps(-0.0f));
  const __m256 a = _mm256_max_ps(_mm256_set1_ps(-150.0f), minus_abs_t);  // NaN: max_ps returns its second operand
  const auto [p, n] = avx2_lanes::exp_parts(a);
  const __m256i ni = _mm256_cvtps_epi32(n);  // n is integral: exact (a NaN lane gives INT_MIN; p is NaN there)
  return x_sigmoid_from_avx2(x, t, p, ni, _mm256_add_ps(_mm256_set1_ps(1.0f), avx2_lanes::scale_pow2(p, ni)));
}

DT_ACTIVATION_AVX2_TARGET inline __m256 gelu_tanh_arg_avx2(__m256 x) {
  const __m256 q = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), _mm256_mul_ps(x, x), _mm256_set1_ps(1.0f));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(1.59576912160573071f), x), q);
}

// out = f(x) over n values, 8 at a time; the last partial vector goes through a zero-padded copy
// (the same instructions as a whole vector).
template <typename F>
DT_ACTIVATION_AVX2_TARGET inline void rows_avx2(const float* x, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float tail[8] = {};
    for (int64_t j = i; j < n; ++j) tail[j - i] = x[j];
    _mm256_store_ps(tail, f(_mm256_load_ps(tail)));
    for (int64_t j = i; j < n; ++j) out[j] = tail[j - i];
  }
}

struct GeluTanhLanesAvx2 {
  DT_ACTIVATION_AVX2_TARGET __m256 operator()(__m256 v) const { return x_sigmoid_avx2(v, gelu_tanh_arg_avx2(v)); }
};
struct SiluLanesAvx2 {
  DT_ACTIVATION_AVX2_TARGET __m256 operator()(__m256 v) const { return x_sigmoid_avx2(v, v); }
};

// x_sigmoid_grad on 8 AVX2 + FMA lanes: the same operations, with scalef and the masks written out.
struct GradLanesAvx2 {
  __m256 grad, value;
};
template <bool Gelu, bool WithValue>
DT_ACTIVATION_AVX2_TARGET inline GradLanesAvx2 x_sigmoid_grad_avx2(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_set1_ps(Gelu ? 9.0f : 30.0f), x);
  const __m256 t = Gelu ? gelu_tanh_arg_avx2(xc) : xc;
  const __m256 xtp =
      Gelu ? _mm256_mul_ps(xc, _mm256_mul_ps(_mm256_set1_ps(1.59576912160573071f),
                                             _mm256_fmadd_ps(_mm256_set1_ps(0.134145f), _mm256_mul_ps(xc, xc),
                                                             _mm256_set1_ps(1.0f))))
           : xc;
  const __m256 a = _mm256_max_ps(_mm256_set1_ps(-150.0f), _mm256_or_ps(t, _mm256_set1_ps(-0.0f)));
  const auto [p, n] = avx2_lanes::exp_parts(a);
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256 e = avx2_lanes::scale_pow2(p, ni);
  const __m256 d = _mm256_add_ps(_mm256_set1_ps(1.0f), e);
  const __m256 r = _mm256_div_ps(_mm256_set1_ps(1.0f), d);
  const __m256 negative = _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 pos = _mm256_fmadd_ps(xtp, _mm256_mul_ps(_mm256_mul_ps(e, r), r), r);
  const __m256 neg = avx2_lanes::scale_pow2(
      _mm256_mul_ps(_mm256_mul_ps(p, r), _mm256_fmadd_ps(xtp, r, _mm256_set1_ps(1.0f))), ni);
  __m256 g = _mm256_blendv_ps(pos, neg, negative);
  const __m256 gone = _mm256_cmp_ps(t, _mm256_set1_ps(-150.0f), _CMP_LT_OQ);
  g = _mm256_blendv_ps(g, _mm256_mul_ps(x, _mm256_setzero_ps()), gone);
  if constexpr (!WithValue) return {g, g};
  return {g, x_sigmoid_from_avx2(x, t, p, ni, d)};  // from the shared parts, as x_sigmoid_grad's
}

// grad_rows on AVX2: the last partial vector through a zero-padded copy (the same instructions).
template <bool Gelu>
DT_ACTIVATION_AVX2_TARGET void grad_rows_avx2(const float* x, float* grad, float* value, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (value) {
      const auto [g, v] = x_sigmoid_grad_avx2<Gelu, true>(_mm256_loadu_ps(x + i));
      _mm256_storeu_ps(value + i, v);
      _mm256_storeu_ps(grad + i, g);
    } else {
      _mm256_storeu_ps(grad + i, x_sigmoid_grad_avx2<Gelu, false>(_mm256_loadu_ps(x + i)).grad);
    }
  }
  if (i < n) {
    alignas(32) float tail[8] = {}, gt[8], vt[8];
    for (int64_t j = i; j < n; ++j) tail[j - i] = x[j];
    const auto [g, v] = x_sigmoid_grad_avx2<Gelu, true>(_mm256_load_ps(tail));
    _mm256_store_ps(gt, g);
    _mm256_store_ps(vt, v);
    for (int64_t j = i; j < n; ++j) {
      if (value) value[j] = vt[j - i];
      grad[j] = gt[j - i];
    }
  }
}

bool avx512() { return cpu_isa() == BlasIsa::avx512; }
bool avx2() { return cpu_isa() >= BlasIsa::avx2; }  // cpu_isa's avx2 includes FMA
bool always() { return true; }

constinit KernelPathSwitch g_path({"DTENSOR_ACTIVATIONS", "portable", "fma", "AVX2 and FMA", &avx2, &always});

// The lanes' width: AVX-512 wherever the CPU has it, unless set (tests).
constinit KernelPathSwitch g_isa({nullptr, "avx2", "avx512", "AVX-512", &avx512, &always});

}  // namespace

ActivationPath activation_path() { return g_path.fast() ? ActivationPath::fma : ActivationPath::portable; }

void set_activation_path(ActivationPath path) { g_path.set(path == ActivationPath::fma); }

ActivationIsa activation_isa() { return g_isa.fast() ? ActivationIsa::avx512 : ActivationIsa::avx2; }

void set_activation_isa(ActivationIsa isa) { g_isa.set(isa == ActivationIsa::avx512); }

bool uses_activation_fma(Activation act) {
  return (act == Activation::gelu_tanh || act == Activation::silu) && g_path.fast();
}

void activation_fma(Activation act, const float* x, float* out, int64_t n) {
  DT_CHECK(avx2() && (act == Activation::gelu_tanh || act == Activation::silu))
      << "activation_fma for activation " << int(act) << " or on a CPU without AVX2 and FMA";
  const bool gelu = act == Activation::gelu_tanh;
  if (activation_isa() == ActivationIsa::avx512) {
    if (gelu) rows(x, out, n, GeluTanhLanes{});
    else rows(x, out, n, SiluLanes{});
  } else {
    if (gelu) rows_avx2(x, out, n, GeluTanhLanesAvx2{});
    else rows_avx2(x, out, n, SiluLanesAvx2{});
  }
}

void activation_and_grad_fma(Activation act, const float* x, float* value, float* grad, int64_t n) {
  DT_CHECK(avx2() && (act == Activation::gelu_tanh || act == Activation::silu))
      << "activation_and_grad_fma for activation " << int(act) << " or on a CPU without AVX2 and FMA";
  const bool gelu = act == Activation::gelu_tanh;
  if (activation_isa() == ActivationIsa::avx512) {
    if (gelu) grad_rows<true>(x, grad, value, n);
    else grad_rows<false>(x, grad, value, n);
  } else {
    if (gelu) grad_rows_avx2<true>(x, grad, value, n);
    else grad_rows_avx2<false>(x, grad, value, n);
  }
}

void activation_grad_fma(Activation act, const float* x, float* grad, int64_t n) {
  activation_and_grad_fma(act, x, nullptr, grad, n);
}

}  // namespace dt

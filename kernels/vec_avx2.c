/* AVX2/FMA/F16C versions of kernels/vec.h; only called when
 * dsq_cpu_use_avx2() holds. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx2 -mfma -mf16c (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/vec.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <math.h>

#include "core/dtype.h"

static inline float hsum(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

static inline __m256 load_bf16(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* Two accumulators hide the FMA latency on the short rows of attention. */
#define DOT_BODY(LOAD_A, TAIL_A)                                                                                       \
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();                                                         \
    int64_t i = 0;                                                                                                     \
    for (; i + 16 <= n; i += 16) {                                                                                     \
        s0 = _mm256_fmadd_ps(LOAD_A(a + i), _mm256_loadu_ps(b + i), s0);                                               \
        s1 = _mm256_fmadd_ps(LOAD_A(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);                                       \
    }                                                                                                                  \
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(LOAD_A(a + i), _mm256_loadu_ps(b + i), s0);                        \
    float s = hsum(_mm256_add_ps(s0, s1));                                                                             \
    for (; i < n; i++) s += TAIL_A(a[i]) * b[i];                                                                       \
    return s;

#define ID(x) (x)

float dsq_vec_dot_f32_avx2(int64_t n, const float *a, const float *b) { DOT_BODY(_mm256_loadu_ps, ID) }

float dsq_vec_dot_f16_f32_avx2(int64_t n, const uint16_t *a, const float *b) { DOT_BODY(load_f16, dsq_f16_to_f32) }

float dsq_vec_dot_bf16_f32_avx2(int64_t n, const uint16_t *a, const float *b) { DOT_BODY(load_bf16, dsq_bf16_to_f32) }

void dsq_vec_axpy_avx2(int64_t n, float a, const float *x, float *y)
{
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

/* exp(x) = 2^n exp(r), n = round(x log2 e), r = x - n ln 2 (ln 2 split in two
 * so r is exact enough), exp(r) by Cephes expf's degree-7 minimax polynomial. */
static inline __m256 exp_ps(__m256 x)
{
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

float dsq_vec_exp_sum_avx2(int64_t n, float *x, float shift)
{
    __m256 vs = _mm256_set1_ps(shift), acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
        _mm256_storeu_ps(x + i, v);
        acc = _mm256_add_ps(acc, v);
    }
    float sum = hsum(acc);
    if (i < n) { /* the tail through the same polynomial, via a padded vector */
        float t[8] = {0};
        for (int64_t j = i; j < n; j++) t[j - i] = x[j] - shift;
        __m256 v = exp_ps(_mm256_loadu_ps(t));
        _mm256_storeu_ps(t, v);
        for (int64_t j = i; j < n; j++) {
            x[j] = t[j - i];
            sum += t[j - i];
        }
    }
    return sum;
}

double dsq_vec_sq_diff_avx2(int64_t n, const float *a, const float *b)
{
    /* lanes 0-3 in lo, 4-7 in hi: the scalar reference's acc[i % 8] */
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 va = _mm256_loadu_ps(a + i), vb = _mm256_loadu_ps(b + i);
        __m256d d0 =
            _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(va)), _mm256_cvtps_pd(_mm256_castps256_ps128(vb)));
        __m256d d1 =
            _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(va, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(vb, 1)));
        lo = _mm256_add_pd(lo, _mm256_mul_pd(d0, d0));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(d1, d1));
    }
    double acc[8];
    _mm256_storeu_pd(acc, lo);
    _mm256_storeu_pd(acc + 4, hi);
    for (; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        acc[i % 8] += d * d;
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

double dsq_vec_dot_f64_avx2(int64_t n, const float *a, const float *b)
{
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd(); /* lanes 0-3, 4-7 */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 va = _mm256_loadu_ps(a + i), vb = _mm256_loadu_ps(b + i);
        lo = _mm256_add_pd(lo, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(va)),
                                             _mm256_cvtps_pd(_mm256_castps256_ps128(vb))));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(va, 1)),
                                             _mm256_cvtps_pd(_mm256_extractf128_ps(vb, 1))));
    }
    double acc[8];
    _mm256_storeu_pd(acc, lo);
    _mm256_storeu_pd(acc + 4, hi);
    for (; i < n; i++) acc[i % 8] += (double)a[i] * (double)b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

float dsq_vec_max_avx2(int64_t n, const float *x)
{
    /* max_ps(v, acc) keeps acc where v is NaN, as the scalar comparison does */
    __m256 acc = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_max_ps(_mm256_loadu_ps(x + i), acc);
    float t[8], mx = -INFINITY;
    _mm256_storeu_ps(t, acc);
    for (int l = 0; l < 8; l++) mx = t[l] > mx ? t[l] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}

void dsq_vec_swiglu_avx2(int64_t n, const float *gate, const float *up, float *out)
{
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 e = exp_ps(_mm256_sub_ps(zero, g));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    if (i < n) { /* the tail through the same arithmetic, via padded vectors */
        float g[8] = {0}, u[8] = {0}, o[8];
        for (int64_t j = i; j < n; j++) g[j - i] = gate[j], u[j - i] = up[j];
        dsq_vec_swiglu_avx2(8, g, u, o);
        for (int64_t j = i; j < n; j++) out[j] = o[j - i];
    }
}

#else

/* Never called without AVX2 (dsq_cpu_use_avx2() is false there). */
float dsq_vec_dot_f32_avx2(int64_t n, const float *a, const float *b) { return 0.0f; }
float dsq_vec_dot_f16_f32_avx2(int64_t n, const uint16_t *a, const float *b) { return 0.0f; }
float dsq_vec_dot_bf16_f32_avx2(int64_t n, const uint16_t *a, const float *b) { return 0.0f; }
void dsq_vec_axpy_avx2(int64_t n, float a, const float *x, float *y) {}
float dsq_vec_exp_sum_avx2(int64_t n, float *x, float shift) { return 0.0f; }
float dsq_vec_max_avx2(int64_t n, const float *x) { return 0.0f; }
double dsq_vec_sq_diff_avx2(int64_t n, const float *a, const float *b) { return 0.0; }
double dsq_vec_dot_f64_avx2(int64_t n, const float *a, const float *b) { return 0.0; }
void dsq_vec_swiglu_avx2(int64_t n, const float *gate, const float *up, float *out) {}

#endif

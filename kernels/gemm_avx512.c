/* The AVX-512 12x32 micro-kernel of dsq_gemm_f32: 24 accumulators over two
 * adjacent 16-wide panels, twelve broadcasts and two panel loads per step of
 * k. Each element of C gets the same sequence of fused multiply-adds in the
 * same order of k as in the AVX2 6x16 kernel (and the same final add of C
 * when accumulating), so the two give identical bits; only the register
 * width and the tile differ. Built with -mavx512f (its row of
 * DSQ_SIMD_SOURCES in CMakeLists.txt) and called only when
 * dsq_cpu_use_avx512_gemm() holds. */
#include "kernels/gemm_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#include "kernels/transpose_avx512.h"

#define ROW(i)                                                                                                         \
    do {                                                                                                               \
        __m512 a = _mm512_set1_ps(A[(i)*lda + p]);                                                                     \
        c##i##a = _mm512_fmadd_ps(a, b0, c##i##a);                                                                     \
        c##i##b = _mm512_fmadd_ps(a, b1, c##i##b);                                                                     \
    } while (0)

#define STORE(i)                                                                                                       \
    do {                                                                                                               \
        float *c = C + (i)*ldc;                                                                                        \
        if (accumulate) {                                                                                              \
            c##i##a = _mm512_add_ps(c##i##a, _mm512_loadu_ps(c));                                                      \
            c##i##b = _mm512_add_ps(c##i##b, _mm512_loadu_ps(c + 16));                                                 \
        }                                                                                                              \
        _mm512_storeu_ps(c, c##i##a);                                                                                  \
        _mm512_storeu_ps(c + 16, c##i##b);                                                                             \
    } while (0)

void dsq_gemm_kernel_avx512(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                            bool accumulate)
{
    const float *Bq = Bp + 16 * kc; /* the next panel */
    __m512 c0a = _mm512_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a;
    __m512 c3a = c0a, c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a;
    __m512 c6a = c0a, c6b = c0a, c7a = c0a, c7b = c0a, c8a = c0a, c8b = c0a;
    __m512 c9a = c0a, c9b = c0a, c10a = c0a, c10b = c0a, c11a = c0a, c11b = c0a;
    for (int64_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_loadu_ps(Bp + p * 16), b1 = _mm512_loadu_ps(Bq + p * 16);
        ROW(0);
        ROW(1);
        ROW(2);
        ROW(3);
        ROW(4);
        ROW(5);
        ROW(6);
        ROW(7);
        ROW(8);
        ROW(9);
        ROW(10);
        ROW(11);
    }
    STORE(0);
    STORE(1);
    STORE(2);
    STORE(3);
    STORE(4);
    STORE(5);
    STORE(6);
    STORE(7);
    STORE(8);
    STORE(9);
    STORE(10);
    STORE(11);
}

/* The edge tile: R rows (a constant in each instantiation) against NV
 * panels, masked at column nr. The accumulators start at zero and take the
 * fused multiply-adds in k order, then C is added when accumulating: per
 * element, the sequence of the full kernel. */
static inline __attribute__((always_inline)) void edge_rows(const int R, const int NV, int64_t nr, int64_t kc,
                                                            const float *A, int64_t lda, const float *Bp, float *C,
                                                            int64_t ldc, bool accumulate)
{
    const float *Bq = Bp + 16 * kc;
    const __mmask16 m0 = nr >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nr) - 1u);
    const __mmask16 m1 = nr >= 32 ? (__mmask16)0xffff : nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1u);
    __m512 c[12][2];
    for (int i = 0; i < R; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kc; p++) {
        const __m512 b0 = _mm512_loadu_ps(Bp + p * 16);
        const __m512 b1 = NV > 1 ? _mm512_loadu_ps(Bq + p * 16) : b0;
        for (int i = 0; i < R; i++) {
            const __m512 a = _mm512_set1_ps(A[i * lda + p]);
            c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
            if (NV > 1) c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
        }
    }
    for (int i = 0; i < R; i++) {
        float *ci = C + i * ldc;
        if (accumulate) c[i][0] = _mm512_add_ps(c[i][0], _mm512_maskz_loadu_ps(m0, ci));
        _mm512_mask_storeu_ps(ci, m0, c[i][0]);
        if (NV > 1) {
            if (accumulate) c[i][1] = _mm512_add_ps(c[i][1], _mm512_maskz_loadu_ps(m1, ci + 16));
            _mm512_mask_storeu_ps(ci + 16, m1, c[i][1]);
        }
    }
}

void dsq_gemm_pack_bt_avx512(const float *B, int64_t ldb, int64_t nc, int64_t kc, float *dst)
{
    for (int64_t p0 = 0; p0 < kc; p0 += 16) {
        const int64_t kn = kc - p0 < 16 ? kc - p0 : 16;
        const __mmask16 m = kn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << kn) - 1u);
        __m512i r[16];
        for (int64_t i = 0; i < 16; i++)
            r[i] = i < nc ? _mm512_castps_si512(_mm512_maskz_loadu_ps(m, B + i * ldb + p0)) : _mm512_setzero_si512();
        dsq_transpose16_epi32(r);
        for (int64_t j = 0; j < kn; j++) _mm512_storeu_si512(dst + (p0 + j) * 16, r[j]);
    }
}

#define EDGE_CASE(R)                                                                                                   \
    case R:                                                                                                            \
        if (nr > 16)                                                                                                   \
            edge_rows(R, 2, nr, kc, A, lda, Bp, C, ldc, accumulate);                                                   \
        else                                                                                                           \
            edge_rows(R, 1, nr, kc, A, lda, Bp, C, ldc, accumulate);                                                   \
        break;

void dsq_gemm_kernel_avx512_edge(int64_t mr, int64_t nr, int64_t kc, const float *A, int64_t lda, const float *Bp,
                                 float *C, int64_t ldc, bool accumulate)
{
    switch (mr) {
        EDGE_CASE(1)
        EDGE_CASE(2)
        EDGE_CASE(3)
        EDGE_CASE(4)
        EDGE_CASE(5)
        EDGE_CASE(6)
        EDGE_CASE(7)
        EDGE_CASE(8)
        EDGE_CASE(9)
        EDGE_CASE(10)
        EDGE_CASE(11)
    default: edge_rows(12, nr > 16 ? 2 : 1, nr, kc, A, lda, Bp, C, ldc, accumulate); break;
    }
}

#undef EDGE_CASE

#else

/* Never dispatched off x86-64 (dsq_cpu_use_avx512_gemm() is false there). */
void dsq_gemm_kernel_avx512(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                            bool accumulate)
{
    (void)kc, (void)A, (void)lda, (void)Bp, (void)C, (void)ldc, (void)accumulate;
}

void dsq_gemm_pack_bt_avx512(const float *B, int64_t ldb, int64_t nc, int64_t kc, float *dst)
{
    (void)B, (void)ldb, (void)nc, (void)kc, (void)dst;
}

void dsq_gemm_kernel_avx512_edge(int64_t mr, int64_t nr, int64_t kc, const float *A, int64_t lda, const float *Bp,
                                 float *C, int64_t ldc, bool accumulate)
{
    (void)mr, (void)nr, (void)kc, (void)A, (void)lda, (void)Bp, (void)C, (void)ldc, (void)accumulate;
}

#endif

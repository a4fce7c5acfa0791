/* The block-scaled int8 GEMM (kernels/gemm_q8.h): packing, the reference, the
 * scalar path over the packed panels and the dispatch. The AVX512-VNNI kernel
 * is gemm_q8_avx512.c. */
#include "kernels/gemm_q8.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu.h"

/* One block of one panel: 8 groups of 4 columns x 32 rows x 4 bytes, then the
 * 32 rows' scales. */
#define PANEL_BLOCK_BYTES (8 * DSQ_GEMM_Q8_NR * 4 + DSQ_GEMM_Q8_NR * 4)

size_t dsq_gemm_q8_packed_bytes(int64_t nr, int64_t k)
{
    int64_t panels = (nr + DSQ_GEMM_Q8_NR - 1) / DSQ_GEMM_Q8_NR;
    return (size_t)panels * (size_t)(k / DSQ_GEMM_Q8_BLOCK) * PANEL_BLOCK_BYTES;
}

void dsq_gemm_q8_pack(int64_t nr, int64_t k, const int8_t *q, int64_t ldq, const float *d, int64_t ldd, void *P)
{
    int64_t nb = k / DSQ_GEMM_Q8_BLOCK;
    uint8_t *out = P;
    for (int64_t p0 = 0; p0 < nr; p0 += DSQ_GEMM_Q8_NR)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *codes = out;
            float *scales = (float *)(out + 8 * DSQ_GEMM_Q8_NR * 4);
            for (int i = 0; i < DSQ_GEMM_Q8_NR; i++) {
                int64_t r = p0 + i;
                const int8_t *src = r < nr ? q + r * ldq + b * DSQ_GEMM_Q8_BLOCK : NULL;
                for (int j = 0; j < 8; j++)
                    for (int c = 0; c < 4; c++)
                        codes[(j * DSQ_GEMM_Q8_NR + i) * 4 + c] = (uint8_t)((src ? src[j * 4 + c] : 0) + 128);
                scales[i] = r < nr ? d[r * ldd + b] : 0.0f;
            }
            out += PANEL_BLOCK_BYTES;
        }
}

void dsq_gemm_q8_block_sums(const int8_t *q, int64_t k, int32_t *s)
{
    for (int64_t b = 0; b < k / DSQ_GEMM_Q8_BLOCK; b++) {
        int32_t sum = 0;
        for (int i = 0; i < DSQ_GEMM_Q8_BLOCK; i++) sum += q[b * DSQ_GEMM_Q8_BLOCK + i];
        s[b] = sum;
    }
}

void dsq_gemm_q8_ref(int64_t m, int64_t nr, int64_t k, const int8_t *A, int64_t lda, const float *da, int64_t ldd,
                     const int8_t *W, int64_t ldw, const float *dw, int64_t lddw, float *y, int64_t ldy)
{
    for (int64_t t = 0; t < m; t++)
        for (int64_t r = 0; r < nr; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < k / DSQ_GEMM_Q8_BLOCK; b++) {
                const int8_t *a = A + t * lda + b * DSQ_GEMM_Q8_BLOCK, *w = W + r * ldw + b * DSQ_GEMM_Q8_BLOCK;
                int32_t isum = 0;
                for (int i = 0; i < DSQ_GEMM_Q8_BLOCK; i++) isum += (int32_t)a[i] * w[i];
                float s = dw[r * lddw + b] * da[t * ldd + b];
                acc = fmaf((float)isum, s, acc);
            }
            y[t * ldy + r] = acc;
        }
}

/* The reference's arithmetic on the packed panels, in the kernel's integer
 * form (unsigned weights, the offset taken back from the start value). */
static void gemm_q8_scalar(int64_t m, int64_t nr, int64_t k, const int8_t *A, int64_t lda, const float *da,
                           const int32_t *sa, int64_t ldd, const void *P, float *y, int64_t ldy)
{
    int64_t nb = k / DSQ_GEMM_Q8_BLOCK;
    for (int64_t p0 = 0; p0 < nr; p0 += DSQ_GEMM_Q8_NR) {
        const uint8_t *panel = (const uint8_t *)P + (size_t)(p0 / DSQ_GEMM_Q8_NR) * (size_t)nb * PANEL_BLOCK_BYTES;
        int rows = nr - p0 < DSQ_GEMM_Q8_NR ? (int)(nr - p0) : DSQ_GEMM_Q8_NR;
        for (int64_t t = 0; t < m; t++)
            for (int i = 0; i < rows; i++) {
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *codes = panel + b * PANEL_BLOCK_BYTES;
                    const float *scales = (const float *)(codes + 8 * DSQ_GEMM_Q8_NR * 4);
                    const int8_t *a = A + t * lda + b * DSQ_GEMM_Q8_BLOCK;
                    int32_t isum = -128 * sa[t * ldd + b];
                    for (int j = 0; j < 8; j++)
                        for (int c = 0; c < 4; c++)
                            isum += (int32_t)codes[(j * DSQ_GEMM_Q8_NR + i) * 4 + c] * a[j * 4 + c];
                    acc = fmaf((float)isum, scales[i] * da[t * ldd + b], acc);
                }
                y[t * ldy + p0 + i] = acc;
            }
    }
}

bool dsq_gemm_q8_simd(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return dsq_cpu_use_avx2() && dsq_cpu_has(DSQ_CPU_AVX512F) && dsq_cpu_has(DSQ_CPU_AVX512BW) &&
           dsq_cpu_has(DSQ_CPU_AVX512_VNNI);
#else
    return false;
#endif
}

void dsq_gemm_q8(int64_t m, int64_t nr, int64_t k, const int8_t *A, int64_t lda, const float *da, const int32_t *sa,
                 int64_t ldd, const void *P, float *y, int64_t ldy)
{
    if (m <= 0 || nr <= 0) return;
#if defined(__x86_64__) && defined(__GNUC__)
    if (dsq_gemm_q8_simd()) {
        dsq_gemm_q8_avx512(m, nr, k, A, lda, da, sa, ldd, P, y, ldy);
        return;
    }
#endif
    gemm_q8_scalar(m, nr, k, A, lda, da, sa, ldd, P, y, ldy);
}

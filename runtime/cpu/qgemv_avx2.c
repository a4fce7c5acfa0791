/* AVX2/FMA/F16C decode kernels of runtime/cpu/qgemv.h; only reached through
 * dsq_qgemv_kernel(), which checks the CPU.
 *
 * Per block: integer products with maddubs/madd (exact), sub-block scales
 * applied as 16-bit multipliers, one float FMA per block with d_w * d_act.
 * Offsets that the formats subtract from every level (q3_K's 4, q6_K's 32,
 * the k-quant mins) are folded in through the activation's per-16 sums
 * (Q8_K bsums), as ggml's kernels do (ggml-cpu-quants.c); the code here is
 * our own. The block layouts are ggml-common.h's (quantizers/quant_common.h). */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx2 -mfma -mf16c (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "runtime/cpu/qgemv.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <string.h>

#include "quantizers/quant_common.h"

#define QK 32

/* ---------------------------------------------------------------- helpers */

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

static inline float hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* 16 packed nibbles to 32 bytes: low nibbles (elements 0-15), then high (16-31). */
static inline __m256i nib32(const uint8_t *qs)
{
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

/* Bit k of the little-endian uint32 at qh to byte k: 0x10 when set, else 0. */
static inline __m256i bit5_32(const uint8_t *qh)
{
    uint32_t v;
    memcpy(&v, qh, sizeof v);
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), spread);
    __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
}

/* Signed bytes x times signed bytes y, summed in quads: 8 int32. |x| <= 127. */
static inline __m256i dot_ss(__m256i x, __m256i y)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* Unsigned bytes x (< 128) times signed bytes y, as dot_ss. */
static inline __m256i dot_us(__m256i x, __m256i y)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

static inline __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* Shuffle control: the low 128-bit lane picks 16-bit word a of its lane, the
 * high lane word b of its lane, each repeated eight times. */
static inline __m256i word_pick(int a, int b)
{
    return _mm256_set_m128i(_mm_set1_epi16((short)(((2 * b + 1) << 8) | (2 * b))),
                            _mm_set1_epi16((short)(((2 * a + 1) << 8) | (2 * a))));
}

/* Unsigned levels q (< 128) times y, each half-lane's 16-bit pair sums scaled
 * by the 16-bit words sc picks (word_pick): 8 int32. */
static inline __m256i dot_scaled(__m256i q, const int8_t *y, __m256i scales, __m256i pick)
{
    __m256i p = _mm256_maddubs_epi16(q, load32(y));
    return _mm256_madd_epi16(p, _mm256_shuffle_epi8(scales, pick));
}

/* 16-bit lane h (0 or 1) of v in both lanes. */
static inline __m256i lane(__m256i v, int h)
{
    return h ? _mm256_permute2x128_si256(v, v, 0x11) : _mm256_permute2x128_si256(v, v, 0x00);
}

/* The weights stream from memory once per token. A software prefetch
 * PREFETCH_BYTES ahead of the weights being read keeps enough lines in
 * flight, which the hardware prefetcher alone did not on an Intel Xeon (Q8_0
 * GEMV at 57% of memcpy, Q5_0 at 21%, the loads' first consumers the hottest
 * instructions). The 32-element types prefetch inside their block loop (into
 * L1); the k-quants, whose blocks span several lines, prefetch a row's worth
 * before each row (into L2: a burst into L1 measured slower). Past a row's end
 * this reaches the next rows, which are contiguous; prefetches never fault, so
 * reaching past the matrix is harmless. */
#define PREFETCH_BYTES 2048

static inline void prefetch_ahead(const uint8_t *row, size_t row_bytes)
{
    for (size_t o = 0; o < row_bytes; o += 64) _mm_prefetch((const char *)row + PREFETCH_BYTES + o, _MM_HINT_T1);
}

/* One function per type: the loop over rows around an inline row dot. */
#define GEMV_ROWS(name, row_dot, burst)                                                                                \
    void name(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y)                       \
    {                                                                                                                  \
        for (int64_t r = 0; r < nr; r++) {                                                                             \
            const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;                                           \
            if (burst) prefetch_ahead(row, row_bytes);                                                                 \
            y[r] = row_dot(n, row, act);                                                                               \
        }                                                                                                              \
    }

/* ---------------------------------------------------------------- 32-element blocks */

/* Two accumulators over alternating blocks, so the FMA latency is not the
 * loop's critical path. */
#define BLOCK32_LOOP(BT, AT, BLOCK_TERM)                                                                               \
    const BT *x = vx;                                                                                                  \
    const AT *a = va;                                                                                                  \
    int64_t nb = n / QK, i = 0;                                                                                        \
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                                                     \
    for (; i + 2 <= nb; i += 2) {                                                                                      \
        _mm_prefetch((const char *)(x + i) + PREFETCH_BYTES, _MM_HINT_T0);                                             \
        acc0 = BLOCK_TERM(x + i, a + i, acc0);                                                                         \
        acc1 = BLOCK_TERM(x + i + 1, a + i + 1, acc1);                                                                 \
    }                                                                                                                  \
    if (i < nb) acc0 = BLOCK_TERM(x + i, a + i, acc0);                                                                 \
    acc0 = _mm256_add_ps(acc0, acc1);

static inline __m256 term_q4_0(const dsq_block_q4_0 *x, const dsq_block_q8_0 *a, __m256 acc)
{
    __m256i q = _mm256_sub_epi8(nib32(x->qs), _mm256_set1_epi8(8));
    __m256 d = _mm256_set1_ps(f16(x->d) * f16(a->d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_ss(q, load32(a->qs))), acc);
}

static inline float row_q4_0(int64_t n, const void *vx, const void *va)
{
    BLOCK32_LOOP(dsq_block_q4_0, dsq_block_q8_0, term_q4_0)
    return hsum8(acc0);
}

static inline __m256 term_q5_0(const dsq_block_q5_0 *x, const dsq_block_q8_0 *a, __m256 acc)
{
    __m256i q = _mm256_sub_epi8(_mm256_or_si256(nib32(x->qs), bit5_32(x->qh)), _mm256_set1_epi8(16));
    __m256 d = _mm256_set1_ps(f16(x->d) * f16(a->d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_ss(q, load32(a->qs))), acc);
}

static inline float row_q5_0(int64_t n, const void *vx, const void *va)
{
    BLOCK32_LOOP(dsq_block_q5_0, dsq_block_q8_0, term_q5_0)
    return hsum8(acc0);
}

static inline __m256 term_q8_0(const dsq_block_q8_0 *x, const dsq_block_q8_0 *a, __m256 acc)
{
    __m256 d = _mm256_set1_ps(f16(x->d) * f16(a->d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_ss(load32(x->qs), load32(a->qs))), acc);
}

static inline float row_q8_0(int64_t n, const void *vx, const void *va)
{
    BLOCK32_LOOP(dsq_block_q8_0, dsq_block_q8_0, term_q8_0)
    return hsum8(acc0);
}

static inline __m256 term_iq4_nl(const dsq_block_iq4_nl *x, const dsq_block_q8_0 *a, __m256 acc)
{
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)dsq_kvalues_iq4nl));
    __m256i q = _mm256_shuffle_epi8(table, nib32(x->qs));
    __m256 d = _mm256_set1_ps(f16(x->d) * f16(a->d));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_ss(q, load32(a->qs))), acc);
}

static inline float row_iq4_nl(int64_t n, const void *vx, const void *va)
{
    BLOCK32_LOOP(dsq_block_iq4_nl, dsq_block_q8_0, term_iq4_nl)
    return hsum8(acc0);
}

/* Q4_1 / Q5_1 with Q8_1: d_w d_a sum(q_w q_a) + m_w s_a, where s_a = d_a sum(q_a);
 * the second term goes to lane 0 of its own FMA. */
static inline __m256 term_q4_1(const dsq_block_q4_1 *x, const dsq_block_q8_1 *a, __m256 acc)
{
    __m256 d = _mm256_set1_ps(f16(x->d) * f16(a->d));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_us(nib32(x->qs), load32(a->qs))), acc);
    return _mm256_add_ps(acc, _mm256_setr_ps(f16(x->m) * f16(a->s), 0, 0, 0, 0, 0, 0, 0));
}

static inline float row_q4_1(int64_t n, const void *vx, const void *va)
{
    BLOCK32_LOOP(dsq_block_q4_1, dsq_block_q8_1, term_q4_1)
    return hsum8(acc0);
}

static inline __m256 term_q5_1(const dsq_block_q5_1 *x, const dsq_block_q8_1 *a, __m256 acc)
{
    __m256 d = _mm256_set1_ps(f16(x->d) * f16(a->d));
    __m256i q = _mm256_or_si256(nib32(x->qs), bit5_32(x->qh));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_us(q, load32(a->qs))), acc);
    return _mm256_add_ps(acc, _mm256_setr_ps(f16(x->m) * f16(a->s), 0, 0, 0, 0, 0, 0, 0));
}

static inline float row_q5_1(int64_t n, const void *vx, const void *va)
{
    BLOCK32_LOOP(dsq_block_q5_1, dsq_block_q8_1, term_q5_1)
    return hsum8(acc0);
}

GEMV_ROWS(dsq_qgemv_q4_0_avx2, row_q4_0, false)
GEMV_ROWS(dsq_qgemv_q4_1_avx2, row_q4_1, false)
GEMV_ROWS(dsq_qgemv_q5_0_avx2, row_q5_0, false)
GEMV_ROWS(dsq_qgemv_q5_1_avx2, row_q5_1, false)
GEMV_ROWS(dsq_qgemv_q8_0_avx2, row_q8_0, false)
GEMV_ROWS(dsq_qgemv_iq4_nl_avx2, row_iq4_nl, false)

/* ---------------------------------------------------------------- k-quants with Q8_K */

/* The activation's 16 per-16 sums as 16-bit words. */
static inline __m256i bsums16(const dsq_block_q8_K *a) { return load32(a->bsums); }

/* The 12 packed bytes' eight 6-bit scales and eight mins as 16-bit words. */
static inline void q45_scales(const uint8_t *s12, __m128i *sc, __m128i *mn)
{
    uint32_t w[3];
    memcpy(w, s12, sizeof w);
    uint32_t sc_lo = w[0] & 0x3f3f3f3fu, mn_lo = w[1] & 0x3f3f3f3fu;
    uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);
    uint32_t mn_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4);
    *sc = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo));
    *mn = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)mn_hi, (int)mn_lo));
}

/* q4_K / q5_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12
 * bytes (dsq_kq_scale_min): bytes 0-3 hold scales 0-3 (low 6 bits), 4-7 mins
 * 0-3, 8-11 the low nibbles of scales/mins 4-7, whose top 2 bits sit in the
 * top bits of bytes 0-3 (scales) and 4-7 (mins). qh (q5_K) adds the fifth bit. */
static inline __m256 q45_block(uint16_t d16, uint16_t dmin16, const uint8_t *s12, const uint8_t *qs, const uint8_t *qh,
                               const dsq_block_q8_K *a, __m256 acc)
{
    __m128i sc, mn;
    q45_scales(s12, &sc, &mn);
    /* sums of the activation over each 32-element sub-block, from the per-16 sums */
    __m128i bs =
        _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a->bsums), _mm_loadu_si128((const __m128i *)(a->bsums + 8)));
    __m128i msum = _mm_madd_epi16(mn, bs);
    __m256i scales = _mm256_broadcastsi128_si256(sc);
    const __m256i m15 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256i hb = qh ? load32(qh) : _mm256_setzero_si256();
    __m256i sum = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i qb = load32(qs + 32 * c);
        __m256i lo = _mm256_and_si256(qb, m15), hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m15);
        if (qh) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), one), 4));
        }
        sum = _mm256_add_epi32(sum, dot_scaled(lo, a->qs + 64 * c, scales, word_pick(2 * c, 2 * c)));
        sum = _mm256_add_epi32(sum, dot_scaled(hi, a->qs + 64 * c + 32, scales, word_pick(2 * c + 1, 2 * c + 1)));
    }
    float d = a->d * f16(d16), dmin = a->d * f16(dmin16);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
    __m256 m = _mm256_castps128_ps256(_mm_cvtepi32_ps(msum));
    m = _mm256_insertf128_ps(m, _mm_setzero_ps(), 1);
    return _mm256_fnmadd_ps(_mm256_set1_ps(dmin), m, acc);
}

static inline float row_q4_K(int64_t n, const void *vx, const void *va)
{
    const dsq_block_q4_K *x = vx;
    const dsq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / DSQ_QK_K; i++)
        acc = q45_block(x[i].d, x[i].dmin, x[i].scales, x[i].qs, NULL, &a[i], acc);
    return hsum8(acc);
}

static inline float row_q5_K(int64_t n, const void *vx, const void *va)
{
    const dsq_block_q5_K *x = vx;
    const dsq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / DSQ_QK_K; i++)
        acc = q45_block(x[i].d, x[i].dmin, x[i].scales, x[i].qs, x[i].qh, &a[i], acc);
    return hsum8(acc);
}

/* q6_K: level = 4 low bits (ql) | 2 high bits (qh) << 4, value = level - 32,
 * sixteen int8 scales. Half h covers elements 128h..128h+127: ql[64h..+64),
 * qh[32h..+32); chunk k of 32 elements takes the low (k = 0, 1) or high
 * (k = 2, 3) nibbles of ql[64h + 32 (k & 1) ..] and bits 2k, 2k+1 of qh, with
 * scales 8h + 2k (first 16) and 8h + 2k + 1. */
static inline __m256 q6_block(const dsq_block_q6_K *x, const dsq_block_q8_K *a, __m256 acc)
{
    const __m256i m15 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    /* -32 * sum over sub-blocks of scale * (sum of the activation) */
    __m256i sum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc, bsums16(a)), 5));
    for (int h = 0; h < 2; h++) {
        __m256i scv = lane(sc, h);
        __m256i l0 = load32(x->ql + 64 * h), l1 = load32(x->ql + 64 * h + 32), hb = load32(x->qh + 32 * h);
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(l0, m15), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(l1, m15),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m15),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4));
        for (int k = 0; k < 4; k++)
            sum = _mm256_add_epi32(sum, dot_scaled(q[k], a->qs + 128 * h + 32 * k, scv, word_pick(2 * k, 2 * k + 1)));
    }
    return _mm256_fmadd_ps(_mm256_set1_ps(a->d * f16(x->d)), _mm256_cvtepi32_ps(sum), acc);
}

static inline float row_q6_K(int64_t n, const void *vx, const void *va)
{
    const dsq_block_q6_K *x = vx;
    const dsq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / DSQ_QK_K; i++) acc = q6_block(&x[i], &a[i], acc);
    return hsum8(acc);
}

/* q2_K: 2-bit levels, sixteen sub-blocks of 16 with a 4-bit scale (low
 * nibble) and a 4-bit min (high nibble). Half h: qs[32h..+32); chunk k takes
 * bits 2k, 2k+1 of those bytes, scales 8h + 2k and 8h + 2k + 1. */
static inline __m256 q2_block(const dsq_block_q2_K *x, const dsq_block_q8_K *a, __m256 acc)
{
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m15 = _mm_set1_epi8(15);
    __m128i s8 = _mm_loadu_si128((const __m128i *)x->scales);
    __m256i sc = _mm256_cvtepu8_epi16(_mm_and_si128(s8, m15));
    __m256i mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), m15));
    __m256i msum = _mm256_madd_epi16(mn, bsums16(a));
    __m256i sum = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        __m256i scv = lane(sc, h), qb = load32(x->qs + 32 * h);
        for (int k = 0; k < 4; k++) {
            __m256i q = _mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3);
            sum = _mm256_add_epi32(sum, dot_scaled(q, a->qs + 128 * h + 32 * k, scv, word_pick(2 * k, 2 * k + 1)));
        }
    }
    float d = a->d * f16(x->d), dmin = a->d * f16(x->dmin);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
    return _mm256_fnmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(msum), acc);
}

static inline float row_q2_K(int64_t n, const void *vx, const void *va)
{
    const dsq_block_q2_K *x = vx;
    const dsq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / DSQ_QK_K; i++) acc = q2_block(&x[i], &a[i], acc);
    return hsum8(acc);
}

/* q3_K: value = 2 low bits + 4 * (hmask bit) - 4, sixteen 6-bit scales
 * (dsq_kq_q3_scale: low nibbles in bytes 0-7, two top bits per scale in bytes
 * 8-11) minus 32. Half h, chunk k: bits 2k, 2k+1 of qs[32h..+32), hmask bit
 * 4h + k, scales 8h + 2k and 8h + 2k + 1. The -4 goes through the bsums. */
static inline __m256 q3_block(const dsq_block_q3_K *x, const dsq_block_q8_K *a, __m256 acc)
{
    uint32_t w[3];
    memcpy(w, x->scales, sizeof w);
    uint32_t s0 = (w[0] & 0x0f0f0f0fu) | ((w[2] & 0x03030303u) << 4);
    uint32_t s1 = (w[1] & 0x0f0f0f0fu) | (((w[2] >> 2) & 0x03030303u) << 4);
    uint32_t s2 = ((w[0] >> 4) & 0x0f0f0f0fu) | (((w[2] >> 4) & 0x03030303u) << 4);
    uint32_t s3 = ((w[1] >> 4) & 0x0f0f0f0fu) | (((w[2] >> 6) & 0x03030303u) << 4);
    __m128i s8 = _mm_sub_epi8(_mm_set_epi32((int)s3, (int)s2, (int)s1, (int)s0), _mm_set1_epi8(32));
    __m256i sc = _mm256_cvtepi8_epi16(s8);
    __m256i sum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc, bsums16(a)), 2));
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256i hm = load32(x->hmask);
    for (int h = 0; h < 2; h++) {
        __m256i scv = lane(sc, h), qb = load32(x->qs + 32 * h);
        for (int k = 0; k < 4; k++) {
            __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), one), 2);
            __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 2 * k), m3), hi);
            sum = _mm256_add_epi32(sum, dot_scaled(q, a->qs + 128 * h + 32 * k, scv, word_pick(2 * k, 2 * k + 1)));
        }
    }
    return _mm256_fmadd_ps(_mm256_set1_ps(a->d * f16(x->d)), _mm256_cvtepi32_ps(sum), acc);
}

static inline float row_q3_K(int64_t n, const void *vx, const void *va)
{
    const dsq_block_q3_K *x = vx;
    const dsq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / DSQ_QK_K; i++) acc = q3_block(&x[i], &a[i], acc);
    return hsum8(acc);
}

/* iq4_xs: eight sub-blocks of 32 with non-linear 4-bit levels (the IQ4 table)
 * and 6-bit scales (low nibble in scales_l, two top bits in scales_h) minus 32. */
static inline __m256 iq4_xs_block(const dsq_block_iq4_xs *x, const dsq_block_q8_K *a, __m256 acc)
{
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)dsq_kvalues_iq4nl));
    __m256i sum = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        int ls = ((x->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((x->scales_h >> (2 * ib)) & 3) << 4);
        __m256i q = _mm256_shuffle_epi8(table, nib32(x->qs + 16 * ib));
        __m256i y = load32(a->qs + 32 * ib);
        __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, _mm256_set1_epi16((short)(ls - 32))));
    }
    return _mm256_fmadd_ps(_mm256_set1_ps(f16(x->d) * a->d), _mm256_cvtepi32_ps(sum), acc);
}

static inline float row_iq4_xs(int64_t n, const void *vx, const void *va)
{
    const dsq_block_iq4_xs *x = vx;
    const dsq_block_q8_K *a = va;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / DSQ_QK_K; i++) acc = iq4_xs_block(&x[i], &a[i], acc);
    return hsum8(acc);
}

GEMV_ROWS(dsq_qgemv_q2_K_avx2, row_q2_K, true)
GEMV_ROWS(dsq_qgemv_q3_K_avx2, row_q3_K, true)
GEMV_ROWS(dsq_qgemv_q4_K_avx2, row_q4_K, true)
GEMV_ROWS(dsq_qgemv_q5_K_avx2, row_q5_K, true)
GEMV_ROWS(dsq_qgemv_q6_K_avx2, row_q6_K, true)
GEMV_ROWS(dsq_qgemv_iq4_xs_avx2, row_iq4_xs, true)

/* ---------------------------------------------------------------- several tokens per row pass */

/* Up to DSQ_QGEMM_TOKENS activation rows against the same weight rows: the
 * weight side of each block (its loads, nibble and scale unpacking) is done
 * once for all of them. Each (row, token) gets exactly the float operations,
 * in the same order, of the one-token kernel above, so the results are
 * bit-identical to calling it token by token (tests/test_qgemv.c). */

/* The activation row of token t, `stride` bytes apart. */
#define ACT_ROW(T, base, stride, t) ((const T *)((const uint8_t *)(base) + (size_t)(t) * (stride)))

/* The signed levels of one 32-element block, as each one-token term above
 * computes them before its dot_ss. */
static inline __m256i levels_q4_0(const dsq_block_q4_0 *x)
{
    return _mm256_sub_epi8(nib32(x->qs), _mm256_set1_epi8(8));
}
static inline __m256i levels_q5_0(const dsq_block_q5_0 *x)
{
    return _mm256_sub_epi8(_mm256_or_si256(nib32(x->qs), bit5_32(x->qh)), _mm256_set1_epi8(16));
}
static inline __m256i levels_q8_0(const dsq_block_q8_0 *x) { return load32(x->qs); }
static inline __m256i levels_iq4_nl(const dsq_block_iq4_nl *x)
{
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)dsq_kvalues_iq4nl));
    return _mm256_shuffle_epi8(table, nib32(x->qs));
}

/* BLOCK32_LOOP's arithmetic for up to DSQ_QGEMM_TOKENS Q8_0 activation rows:
 * a block's levels, their absolute values and its scale are taken once. */
#define BLOCK32_MULTI(name, BT, LEVELS)                                                                                \
    static inline void name(int64_t n, const void *vx, const void *va, size_t stride, int nt, float *out, int64_t ldo) \
    {                                                                                                                  \
        const BT *x = vx;                                                                                              \
        const int64_t nb = n / QK;                                                                                     \
        __m256 acc[2][DSQ_QGEMM_TOKENS];                                                                               \
        for (int t = 0; t < nt; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();                                      \
        for (int64_t i = 0; i < nb; i++) {                                                                             \
            const int h = (int)(i & 1); /* BLOCK32_LOOP's pairs; an odd last block goes to the first */                \
            if (!(i & 1)) _mm_prefetch((const char *)(x + i) + PREFETCH_BYTES, _MM_HINT_T0);                           \
            const __m256i q = LEVELS(x + i), aq = _mm256_sign_epi8(q, q);                                              \
            const float dx = f16(x[i].d);                                                                              \
            for (int t = 0; t < nt; t++) {                                                                             \
                const dsq_block_q8_0 *a = ACT_ROW(dsq_block_q8_0, va, stride, t) + i;                                  \
                const __m256 d = _mm256_set1_ps(dx * f16(a->d));                                                       \
                const __m256i p = _mm256_maddubs_epi16(aq, _mm256_sign_epi8(load32(a->qs), q));                        \
                acc[h][t] =                                                                                            \
                    _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1))), acc[h][t]);     \
            }                                                                                                          \
        }                                                                                                              \
        for (int t = 0; t < nt; t++) out[t * ldo] = hsum8(_mm256_add_ps(acc[0][t], acc[1][t]));                        \
    }

BLOCK32_MULTI(rows_q4_0_multi, dsq_block_q4_0, levels_q4_0)
BLOCK32_MULTI(rows_q5_0_multi, dsq_block_q5_0, levels_q5_0)
BLOCK32_MULTI(rows_q8_0_multi, dsq_block_q8_0, levels_q8_0)
BLOCK32_MULTI(rows_iq4_nl_multi, dsq_block_iq4_nl, levels_iq4_nl)

/* q45_block's arithmetic for several tokens (q4_K: qh NULL). */
static inline void q45_block_multi(uint16_t d16, uint16_t dmin16, const uint8_t *s12, const uint8_t *qs,
                                   const dsq_block_q8_K *const *a, int nt, __m256 *acc)
{
    __m128i sc, mn;
    q45_scales(s12, &sc, &mn);
    __m256i scales = _mm256_broadcastsi128_si256(sc);
    const __m256i m15 = _mm256_set1_epi8(15);
    __m256i sum[DSQ_QGEMM_TOKENS];
    for (int t = 0; t < nt; t++) sum[t] = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i qb = load32(qs + 32 * c);
        __m256i lo = _mm256_and_si256(qb, m15), hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), m15);
        __m256i sl = _mm256_shuffle_epi8(scales, word_pick(2 * c, 2 * c));
        __m256i sh = _mm256_shuffle_epi8(scales, word_pick(2 * c + 1, 2 * c + 1));
        for (int t = 0; t < nt; t++) {
            sum[t] =
                _mm256_add_epi32(sum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(a[t]->qs + 64 * c)), sl));
            sum[t] = _mm256_add_epi32(sum[t],
                                      _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(a[t]->qs + 64 * c + 32)), sh));
        }
    }
    for (int t = 0; t < nt; t++) {
        __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)a[t]->bsums),
                                    _mm_loadu_si128((const __m128i *)(a[t]->bsums + 8)));
        __m128i msum = _mm_madd_epi16(mn, bs);
        float d = a[t]->d * f16(d16), dmin = a[t]->d * f16(dmin16);
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum[t]), acc[t]);
        __m256 m = _mm256_castps128_ps256(_mm_cvtepi32_ps(msum));
        m = _mm256_insertf128_ps(m, _mm_setzero_ps(), 1);
        acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin), m, acc[t]);
    }
}

static inline void rows_q4_K_multi(int64_t n, const void *vx, const void *va, size_t stride, int nt, float *out,
                                   int64_t ldo)
{
    const dsq_block_q4_K *x = vx;
    __m256 acc[DSQ_QGEMM_TOKENS];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / DSQ_QK_K; i++) {
        const dsq_block_q8_K *a[DSQ_QGEMM_TOKENS];
        for (int t = 0; t < nt; t++) a[t] = ACT_ROW(dsq_block_q8_K, va, stride, t) + i;
        q45_block_multi(x[i].d, x[i].dmin, x[i].scales, x[i].qs, a, nt, acc);
    }
    for (int t = 0; t < nt; t++) out[t * ldo] = hsum8(acc[t]);
}

/* One function per type: rows around the multi-token row dot. */
#define GEMM_ROWS(name, rows_dot, burst)                                                                               \
    void name(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, size_t act_stride, int nt,      \
              float *y, int64_t ldy)                                                                                   \
    {                                                                                                                  \
        for (int64_t r = 0; r < nr; r++) {                                                                             \
            const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;                                           \
            if (burst) prefetch_ahead(row, row_bytes);                                                                 \
            rows_dot(n, row, act, act_stride, nt, y + r, ldy);                                                         \
        }                                                                                                              \
    }

GEMM_ROWS(dsq_qgemm_q4_0_avx2, rows_q4_0_multi, false)
GEMM_ROWS(dsq_qgemm_q5_0_avx2, rows_q5_0_multi, false)
GEMM_ROWS(dsq_qgemm_q8_0_avx2, rows_q8_0_multi, false)
GEMM_ROWS(dsq_qgemm_iq4_nl_avx2, rows_iq4_nl_multi, false)
GEMM_ROWS(dsq_qgemm_q4_K_avx2, rows_q4_K_multi, true)

#else
typedef int dsq_qgemv_avx2_unused; /* not an x86-64 GCC build: dsq_qgemv_kernel returns NULL */
#endif

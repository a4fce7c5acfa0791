/* The BF16 GEMM driver (kernels/gemm_bf16.h): the blocking of gemm.c
 * (pack a KC block of op(B) into panels, stream MR rows of A past each), with
 * BF16 pairs instead of floats. The AVX512-BF16 kernel is used when
 * dsq_cpu_use_bf16_gemm() holds; the scalar kernel is its reference. The
 * AMX path takes each packed block whole (kernels/gemm_bf16_amx.c), its
 * panels padded to whole 16-pair tile steps. */
#include "kernels/gemm_bf16.h"

#include <string.h>

#include "core/dtype.h"
#include "kernels/amx.h"
#include "kernels/cpu.h"

#define MR DSQ_GEMM_BF16_MR
#define NR DSQ_GEMM_BF16_NR
#define KC DSQ_GEMM_BF16_KC

typedef void (*kernel_fn)(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C, int64_t ldc,
                          bool accumulate);

int64_t dsq_gemm_bf16_lda(int64_t k) { return (k + 1) & ~(int64_t)1; }

/* Round to nearest even, NaN kept quiet: dsq_f32_to_bf16, inlined because
 * the packing calls it for every weight of every tile. */
static inline uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void dsq_gemm_bf16_round_rows(const float *src, int64_t lds, int64_t rows, int64_t cols, uint16_t *dst, int64_t ld)
{
    if (dsq_cpu_use_bf16_gemm()) {
        dsq_gemm_bf16_round_rows_avx512(src, lds, rows, cols, dst, ld);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *s = src + r * lds;
        uint16_t *d = dst + r * ld;
        for (int64_t c = 0; c < cols; c++) d[c] = to_bf16(s[c]);
        for (int64_t c = cols; c < ld; c++) d[c] = 0;
    }
}

static int64_t panels_of(int64_t n) { return (n + NR - 1) / NR; }
static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }
static int64_t pad16(int64_t np) { return (np + 15) & ~(int64_t)15; }

#define AMX_ROWS 32      /* tokens per AMX block */
#define CTMP_FLOATS 1024 /* the AMX edge's four 16 x 16 tiles (>= MR * NR) */
#define AMX_KBLOCKS 16   /* K blocks (4096 values) a C block stays in the tiles across */

static int64_t kblocks_of(int64_t k) { return (k + KC - 1) / KC; }

/* The padded copies of A: one K block's for a per-call packing, up to
 * AMX_KBLOCKS of them for the whole-depth packed path. */
static size_t apad_bytes(int64_t k)
{
    int64_t nkb = kblocks_of(k) < AMX_KBLOCKS ? kblocks_of(k) : AMX_KBLOCKS;
    return align64((size_t)(AMX_ROWS * KC * (nkb > 1 ? nkb : 1)) * sizeof(uint16_t));
}

const char *dsq_gemm_bf16_path_name(dsq_gemm_bf16_path p)
{
    static const char *const names[DSQ_GEMM_BF16_N_PATHS] = {"scalar", "avx512_bf16", "amx_bf16", "avx2"};
    return p >= 0 && p < DSQ_GEMM_BF16_N_PATHS ? names[p] : "?";
}

bool dsq_gemm_bf16_path_available(dsq_gemm_bf16_path p)
{
    switch (p) {
    case DSQ_GEMM_BF16_SCALAR: return true;
    case DSQ_GEMM_BF16_AVX512: return dsq_cpu_has_avx512bf16();
    case DSQ_GEMM_BF16_AMX: return dsq_cpu_has(DSQ_CPU_AMX_BF16) && dsq_amx_ready();
    case DSQ_GEMM_BF16_AVX2: return dsq_cpu_has_avx2();
    default: return false;
    }
}

bool dsq_gemm_bf16_preferred(void)
{
    return dsq_cpu_use_bf16_gemm() && dsq_gemm_bf16_path_available(DSQ_GEMM_BF16_AMX);
}

dsq_gemm_bf16_path dsq_gemm_bf16_path_for(int64_t m)
{
    if (!dsq_cpu_use_bf16_gemm()) return dsq_cpu_use_avx2() ? DSQ_GEMM_BF16_AVX2 : DSQ_GEMM_BF16_SCALAR;
    /* below one tile of tokens the AMX block would multiply mostly padding */
    if (m >= 16 && dsq_gemm_bf16_path_available(DSQ_GEMM_BF16_AMX)) return DSQ_GEMM_BF16_AMX;
    return DSQ_GEMM_BF16_AVX512;
}

/* Panels of every path hold a multiple of 16 pairs, which the AMX path needs
 * and the others ignore: one size serves all. */
size_t dsq_gemm_bf16_scratch_bytes(int64_t n, int64_t k)
{
    int64_t np = dsq_gemm_bf16_lda(k < KC ? k : KC) / 2;
    return align64((size_t)(panels_of(n) * NR * 2 * pad16(np)) * sizeof(uint16_t)) + apad_bytes(k) +
           align64(CTMP_FLOATS * sizeof(float));
}

void dsq_gemm_bf16_kernel_scalar(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C, int64_t ldc,
                                 bool accumulate)
{
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    for (int64_t p = 0; p < np; p++)
        for (int i = 0; i < MR; i++) {
            float a0 = dsq_bf16_to_f32(A[i * lda + 2 * p]), a1 = dsq_bf16_to_f32(A[i * lda + 2 * p + 1]);
            const uint16_t *b = Bp + p * NR * 2;
            /* vdpbf16ps order: the odd product first; both products are exact in F32 */
            for (int j = 0; j < NR; j++) {
                acc[i][j] += a1 * dsq_bf16_to_f32(b[2 * j + 1]);
                acc[i][j] += a0 * dsq_bf16_to_f32(b[2 * j]);
            }
        }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) C[i * ldc + j] = accumulate ? C[i * ldc + j] + acc[i][j] : acc[i][j];
}

/* Packs op(B) rows k0 .. k0+kc-1 (kc rounded up to even with a zero row) of all
 * n columns into panels [pair][column][2] of npa pairs (zeros past the
 * data). A BT column is a contiguous run of kc floats: it is rounded as one
 * row, then its pairs are spread one 32-bit word per pair. */
static void pack_b(dsq_gemm_b bl, int64_t n, int64_t k0, int64_t kc, const float *B, int64_t ldb, uint16_t *Bp,
                   int64_t npa, bool simd)
{
    int64_t np = (kc + 1) / 2;
    uint16_t col[KC];
    for (int64_t q = 0; q < panels_of(n); q++) {
        uint16_t *dst = Bp + q * NR * 2 * npa;
        int64_t c0 = q * NR, nc = n - c0 < NR ? n - c0 : NR;
        if (nc < NR) memset(dst, 0, (size_t)(NR * 2 * np) * sizeof *dst);
        if (npa > np) memset(dst + NR * 2 * np, 0, (size_t)(NR * 2 * (npa - np)) * sizeof *dst);
        if (simd && bl == DSQ_GEMM_BT) {
            dsq_gemm_bf16_pack_bt_avx512(B + c0 * ldb + k0, ldb, nc, kc, dst, NR);
            continue;
        }
        for (int64_t c = 0; c < nc; c++) {
            if (bl == DSQ_GEMM_BT) {
                dsq_gemm_bf16_round_rows(B + (c0 + c) * ldb + k0, kc, 1, kc, col, 2 * np);
            } else {
                for (int64_t kk = 0; kk < kc; kk++) col[kk] = to_bf16(B[(k0 + kk) * ldb + c0 + c]);
                if (kc & 1) col[kc] = 0;
            }
            for (int64_t p = 0; p < np; p++) memcpy(dst + (p * NR + c) * 2, col + 2 * p, 2 * sizeof *col);
        }
    }
}

static void edge_tile(kernel_fn kern, int64_t np, const uint16_t *A, int64_t lda, int64_t mr, const uint16_t *Bp,
                      float *C, int64_t ldc, int64_t nr, bool acc, uint16_t *apad, float *ctmp)
{
    if (mr < MR) {
        memset(apad, 0, (size_t)(MR * 2 * np) * sizeof *apad);
        for (int64_t i = 0; i < mr; i++) memcpy(apad + i * 2 * np, A + i * lda, (size_t)(2 * np) * sizeof *apad);
        A = apad;
        lda = 2 * np;
    }
    memset(ctmp, 0, MR * NR * sizeof *ctmp);
    if (acc)
        for (int64_t i = 0; i < mr; i++) memcpy(ctmp + i * NR, C + i * ldc, (size_t)nr * sizeof *ctmp);
    kern(np, A, lda, Bp, ctmp, NR, acc);
    for (int64_t i = 0; i < mr; i++) memcpy(C + i * ldc, ctmp + i * NR, (size_t)nr * sizeof *ctmp);
}

void dsq_gemm_bf16(dsq_gemm_b bl, int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const float *B,
                   int64_t ldb, float *C, int64_t ldc, bool accumulate, void *scratch)
{
    dsq_gemm_bf16_on(dsq_gemm_bf16_path_for(m), bl, m, n, k, A, lda, B, ldb, C, ldc, accumulate, scratch);
}

/* C (+)= A[:, k0 ..] * one packed K block (np pairs, panels npa pairs apart). */
static void block_product(dsq_gemm_bf16_path p, int64_t m, int64_t n, int64_t np, int64_t npa, const uint16_t *A,
                          int64_t lda, const uint16_t *Bp, float *C, int64_t ldc, bool acc, uint16_t *apad, float *ctmp)
{
    if (p == DSQ_GEMM_BF16_AMX) {
        dsq_gemm_bf16_block_amx(m, n, np, npa, A, lda, Bp, C, ldc, acc, apad, ctmp);
        return;
    }
    kernel_fn kern = p == DSQ_GEMM_BF16_SCALAR ? dsq_gemm_bf16_kernel_scalar
                     : p == DSQ_GEMM_BF16_AVX2 ? dsq_gemm_bf16_kernel_avx2
                                               : dsq_gemm_bf16_kernel_avx512;
    for (int64_t i0 = 0; i0 < m; i0 += MR) {
        int64_t mr = m - i0 < MR ? m - i0 : MR;
        const uint16_t *Ab = A + i0 * lda;
        for (int64_t q = 0; q < panels_of(n); q++) {
            int64_t nr = n - q * NR < NR ? n - q * NR : NR;
            float *Cb = C + i0 * ldc + q * NR;
            const uint16_t *Bq = Bp + q * NR * 2 * npa;
            if (mr == MR && nr == NR)
                kern(np, Ab, lda, Bq, Cb, ldc, acc);
            else
                edge_tile(kern, np, Ab, lda, mr, Bq, Cb, ldc, nr, acc, apad, ctmp);
        }
    }
}

static void zero_or_keep(int64_t m, int64_t n, float *C, int64_t ldc, bool accumulate)
{
    if (!accumulate)
        for (int64_t i = 0; i < m; i++) memset(C + i * ldc, 0, (size_t)n * sizeof *C);
}

void dsq_gemm_bf16_on(dsq_gemm_bf16_path p, dsq_gemm_b bl, int64_t m, int64_t n, int64_t k, const uint16_t *A,
                      int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, bool accumulate, void *scratch)
{
    int64_t npmax = dsq_gemm_bf16_lda(k < KC ? k : KC) / 2;
    uint16_t *Bp = scratch;
    uint16_t *apad =
        (uint16_t *)((char *)scratch + align64((size_t)(panels_of(n) * NR * 2 * pad16(npmax)) * sizeof *Bp));
    float *ctmp = (float *)((char *)apad + apad_bytes(k));
    if (k == 0) {
        zero_or_keep(m, n, C, ldc, accumulate);
        return;
    }
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
        int64_t kc = k - k0 < KC ? k - k0 : KC, np = (kc + 1) / 2;
        /* the AVX-512 packer where the path runs AVX-512 */
        pack_b(bl, n, k0, kc, B, ldb, Bp, pad16(np), p == DSQ_GEMM_BF16_AVX512 || p == DSQ_GEMM_BF16_AMX);
        block_product(p, m, n, np, pad16(np), A + k0, lda, Bp, C, ldc, accumulate || k0 > 0, apad, ctmp);
    }
}

/* ---- B packed once ---- */

/* Elements of one K block of the whole packed B (every block sized as a full one). */
static size_t block_elems(int64_t n) { return (size_t)(panels_of(n) * NR * 2 * pad16(KC / 2)); }

size_t dsq_gemm_bf16_packed_bytes(int64_t n, int64_t k)
{
    return (size_t)kblocks_of(k) * block_elems(n) * sizeof(uint16_t);
}

void dsq_gemm_bf16_pack_all(int64_t n, int64_t k, const float *B, int64_t ldb, int64_t r0, int64_t nr, uint16_t *P)
{
    for (int64_t k0 = 0, kb = 0; k0 < k; k0 += KC, kb++) {
        int64_t kc = k - k0 < KC ? k - k0 : KC, np = (kc + 1) / 2;
        uint16_t *dst = P + (size_t)kb * block_elems(n) + (size_t)(r0 / NR * NR * 2 * pad16(np));
        pack_b(DSQ_GEMM_BT, nr, k0, kc, B, ldb, dst, pad16(np), dsq_cpu_use_bf16_gemm());
    }
}

void dsq_gemm_bf16_pad_rows(const uint16_t *A, int64_t lda, int64_t mr, int64_t np, int64_t npa, uint16_t *pad)
{
    memset(pad, 0, (size_t)(AMX_ROWS * 2 * npa) * sizeof *pad);
    for (int64_t i = 0; i < mr; i++) memcpy(pad + i * 2 * npa, A + i * lda, (size_t)(2 * np) * sizeof *pad);
}

/* The AMX path on a B packed once: each 32 x 32 block of C is multiplied
 * over up to AMX_KBLOCKS K blocks while it stays in the tiles, instead of
 * going to memory and back after every block (at 8192 tokens C is far past
 * the caches). Same products, same F32 accumulation, same bits. */
/* Row blocks that take each B panel in turn while it is in L1 (a panel of a
 * 576-deep B is 36 KiB), halving B's trips from L2 against one row block at a
 * time; more blocks per group spread C's stores over more rows at once, which
 * cost more than they saved at wide outputs (bench_gemm_bf16, 1 thread:
 * groups of 2 gained 7-14% at 512-8192 tokens, of 4 and 8 lost up to 10% at
 * 8192 x 1536 x 576). */
#define AMX_GROUP 2

/* The K blocks of rows [i0, i0 + mr) for blocks b0.. (nkb of them), padded
 * into apad when the rows or the pair count need it. */
static void amx_kblocks(int64_t i0, int64_t mr, int64_t b0, int64_t nkb, int64_t n_all, int64_t c0, int64_t k,
                        const uint16_t *A, int64_t lda, const uint16_t *P, uint16_t *apad, dsq_gemm_bf16_amx_kblock *kb)
{
    for (int64_t b = 0; b < nkb; b++) {
        int64_t k0 = (b0 + b) * KC, kc = k - k0 < KC ? k - k0 : KC, np = (kc + 1) / 2, npa = pad16(np);
        const uint16_t *Ab = A + i0 * lda + k0;
        int64_t la = lda;
        if (mr < AMX_ROWS || np != npa) {
            dsq_gemm_bf16_pad_rows(Ab, lda, mr, np, npa, apad + b * AMX_ROWS * KC);
            Ab = apad + b * AMX_ROWS * KC;
            la = 2 * npa;
        }
        const uint16_t *Bb = P + (size_t)(b0 + b) * block_elems(n_all) + (size_t)(c0 / NR * NR * 2 * npa);
        kb[b] = (dsq_gemm_bf16_amx_kblock){Ab, la, Bb, npa};
    }
}

/* Whether no whole row block needs padding (every K block's pair count a
 * multiple of 16): then several share apad-free K block lists. */
static bool amx_unpadded(int64_t k)
{
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
        int64_t kc = k - k0 < KC ? k - k0 : KC, np = (kc + 1) / 2;
        if (np != pad16(np)) return false;
    }
    return true;
}

static void packed_amx(int64_t m, int64_t n_all, int64_t c0, int64_t n, int64_t k, const uint16_t *A, int64_t lda,
                       const uint16_t *P, float *C, int64_t ldc, bool accumulate, uint16_t *apad, float *ctmp)
{
    dsq_gemm_bf16_amx_kblock kb[AMX_GROUP][AMX_KBLOCKS], kq[AMX_KBLOCKS];
    int64_t nkb_all = kblocks_of(k), whole = m / AMX_ROWS;
    int64_t group = amx_unpadded(k) ? AMX_GROUP : 1;
    dsq_gemm_bf16_amx_begin();
    for (int64_t i0 = 0; i0 < m;) {
        /* whole row blocks in groups; the last, partial one on its own (it pads into apad) */
        int64_t left = whole - i0 / AMX_ROWS, ng = left >= group ? group : left > 0 ? left : 1;
        for (int64_t b0 = 0; b0 < nkb_all; b0 += AMX_KBLOCKS) {
            int64_t nkb = nkb_all - b0 < AMX_KBLOCKS ? nkb_all - b0 : AMX_KBLOCKS;
            for (int64_t r = 0; r < ng; r++) {
                int64_t ir = i0 + r * AMX_ROWS, mr = m - ir < AMX_ROWS ? m - ir : AMX_ROWS;
                amx_kblocks(ir, mr, b0, nkb, n_all, c0, k, A, lda, P, apad, kb[r]);
            }
            for (int64_t q = 0; q < panels_of(n); q++) {
                int64_t nr = n - q * NR < NR ? n - q * NR : NR;
                for (int64_t r = 0; r < ng; r++) {
                    int64_t ir = i0 + r * AMX_ROWS, mr = m - ir < AMX_ROWS ? m - ir : AMX_ROWS;
                    for (int64_t b = 0; b < nkb; b++) {
                        kq[b] = kb[r][b];
                        kq[b].B += q * NR * 2 * kb[r][b].npa;
                    }
                    dsq_gemm_bf16_tile_amx(nkb, kq, mr, nr, C + ir * ldc + q * NR, ldc, accumulate || b0 > 0, ctmp);
                }
            }
        }
        i0 += ng * AMX_ROWS;
    }
    dsq_gemm_bf16_amx_end();
}

void dsq_gemm_bf16_packed(int64_t m, int64_t n_all, int64_t c0, int64_t n, int64_t k, const uint16_t *A, int64_t lda,
                          const uint16_t *P, float *C, int64_t ldc, bool accumulate, void *scratch)
{
    dsq_gemm_bf16_path p = dsq_gemm_bf16_path_for(m);
    uint16_t *apad = scratch;
    float *ctmp = (float *)((char *)scratch + apad_bytes(k));
    if (k == 0) {
        zero_or_keep(m, n, C, ldc, accumulate);
        return;
    }
    if (p == DSQ_GEMM_BF16_AMX) {
        packed_amx(m, n_all, c0, n, k, A, lda, P, C, ldc, accumulate, apad, ctmp);
        return;
    }
    for (int64_t k0 = 0, kb = 0; k0 < k; k0 += KC, kb++) {
        int64_t kc = k - k0 < KC ? k - k0 : KC, np = (kc + 1) / 2;
        const uint16_t *Bp = P + (size_t)kb * block_elems(n_all) + (size_t)(c0 / NR * NR * 2 * pad16(np));
        block_product(p, m, n, np, pad16(np), A + k0, lda, Bp, C, ldc, accumulate || k0 > 0, apad, ctmp);
    }
}

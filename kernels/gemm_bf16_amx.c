/* The AMX-BF16 block kernel of dsq_gemm_bf16 (kernels/gemm_bf16.h).
 * tdpbf16ps multiplies a 16 x 32 BF16 tile of A by a 16-pair x 16-column tile
 * of B in [pair][column][2] order, which is the driver's panel layout with
 * NR = 32 read as two 16-column halves at a 128-byte row stride: the AVX512
 * kernel's packing feeds the tiles unchanged, only padded to whole 16-pair
 * steps. Each step is two A tiles (32 tokens) times two B tiles (one panel)
 * into four 16 x 16 F32 C tiles: the 8 tiles the unit has.
 * A is read in place when the block is whole (32 tokens, a 16-pair multiple
 * deep); otherwise its rows are copied into a zero-padded buffer once per
 * token block, so the tile loads never leave A and pad lanes multiply zeros.
 * Arithmetic: F32 accumulation of exact BF16 products, denormals flushed,
 * in the unit's own summation order (kernels/gemm_bf16.h says how it is
 * tested).
 * Tile state: kernels/amx.h. Only called when dsq_gemm_bf16_path_available(
 * DSQ_GEMM_BF16_AMX). */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mamx-tile -mamx-bf16 (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include <string.h>

#include "core/dtype.h"
#include "kernels/amx.h"
#include "kernels/gemm_bf16.h"

#define NR DSQ_GEMM_BF16_NR
#define TM 16 /* tile rows (tokens, or pairs of B) */

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)

#include <immintrin.h>

/* Tiles (kernels/amx.h's 16 x 64-byte shape): tmm0-3 C, tmm4-5 A, tmm6-7 B. */

/* C tile (ti, tj) of the 32 x 32 block at C: rows [16 ti, +16) of mr, columns
 * [16 tj, +16) of nr, through ctmp when clipped. */
#define CT(ti, tj) ((ti) * 2 + (tj))

static void load_c(float *C, int64_t ldc, int64_t mr, int64_t nr, bool acc, bool whole, float *ctmp)
{
    if (!acc) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        return;
    }
    if (whole) {
        _tile_loadd(0, C, ldc * 4);
        _tile_loadd(1, C + 16, ldc * 4);
        _tile_loadd(2, C + 16 * ldc, ldc * 4);
        _tile_loadd(3, C + 16 * ldc + 16, ldc * 4);
        return;
    }
    /* clipped: four 16 x 16 copies, zero outside; tile numbers are immediates */
    for (int t = 0; t < 4; t++) {
        int64_t r0 = (t >> 1) * 16, c0 = (t & 1) * 16;
        float *d = ctmp + t * 256;
        memset(d, 0, 256 * sizeof *d);
        for (int64_t i = r0; i < mr && i < r0 + 16; i++)
            for (int64_t j = c0; j < nr && j < c0 + 16; j++) d[(i - r0) * 16 + (j - c0)] = C[i * ldc + j];
    }
    _tile_loadd(0, ctmp, 64);
    _tile_loadd(1, ctmp + 256, 64);
    _tile_loadd(2, ctmp + 512, 64);
    _tile_loadd(3, ctmp + 768, 64);
}

static void store_c(float *C, int64_t ldc, int64_t mr, int64_t nr, bool whole, float *ctmp)
{
    if (whole) {
        _tile_stored(0, C, ldc * 4);
        _tile_stored(1, C + 16, ldc * 4);
        _tile_stored(2, C + 16 * ldc, ldc * 4);
        _tile_stored(3, C + 16 * ldc + 16, ldc * 4);
        return;
    }
    _tile_stored(0, ctmp, 64);
    _tile_stored(1, ctmp + 256, 64);
    _tile_stored(2, ctmp + 512, 64);
    _tile_stored(3, ctmp + 768, 64);
    for (int t = 0; t < 4; t++) {
        int64_t r0 = (t >> 1) * 16, c0 = (t & 1) * 16;
        const float *s = ctmp + t * 256;
        for (int64_t i = r0; i < mr && i < r0 + 16; i++)
            for (int64_t j = c0; j < nr && j < c0 + 16; j++) C[i * ldc + j] = s[(i - r0) * 16 + (j - c0)];
    }
}

void dsq_gemm_bf16_block_amx(int64_t m, int64_t n, int64_t np, int64_t npa, const uint16_t *A, int64_t lda,
                             const uint16_t *Bp, float *C, int64_t ldc, bool accumulate, uint16_t *apad, float *ctmp)
{
    int64_t panels = (n + NR - 1) / NR, bstride = NR * 2 * 2; /* bytes from one pair row of a panel to the next */
    dsq_amx_configure();
    for (int64_t i0 = 0; i0 < m; i0 += 2 * TM) {
        int64_t mr = m - i0 < 2 * TM ? m - i0 : 2 * TM;
        const uint16_t *Ab = A + i0 * lda;
        int64_t ldab = lda;
        if (mr < 2 * TM || np != npa) {
            dsq_gemm_bf16_pad_rows(Ab, lda, mr, np, npa, apad);
            Ab = apad;
            ldab = 2 * npa;
        }
        for (int64_t q = 0; q < panels; q++) {
            int64_t nr = n - q * NR < NR ? n - q * NR : NR;
            bool whole = mr == 2 * TM && nr == NR;
            float *Cb = C + i0 * ldc + q * NR;
            const uint16_t *Bq = Bp + q * NR * 2 * npa;
            load_c(Cb, ldc, mr, nr, accumulate, whole, ctmp);
            for (int64_t p0 = 0; p0 < npa; p0 += TM) {
                _tile_loadd(4, Ab + 2 * p0, ldab * 2);
                _tile_loadd(6, Bq + p0 * NR * 2, bstride);
                _tile_loadd(7, Bq + p0 * NR * 2 + 32, bstride);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                if (mr > TM) {
                    _tile_loadd(5, Ab + TM * ldab + 2 * p0, ldab * 2);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
            store_c(Cb, ldc, mr, nr, whole, ctmp);
        }
    }
    _tile_release();
}


/* One 32 x 32 block of C over a list of K blocks, C kept in the tiles from
 * the first block to the last (a tile load or store of F32 is exact, so this
 * gives dsq_gemm_bf16_block_amx's bits over the same blocks with fewer trips
 * of C through memory). The caller configured the tiles. */
void dsq_gemm_bf16_tile_amx(int64_t nkb, const dsq_gemm_bf16_amx_kblock *kb, int64_t mr, int64_t nr, float *C,
                            int64_t ldc, bool accumulate, float *ctmp)
{
    bool whole = mr == 2 * TM && nr == NR;
    int64_t bstride = NR * 2 * 2;
    load_c(C, ldc, mr, nr, accumulate, whole, ctmp);
    for (int64_t b = 0; b < nkb; b++) {
        const uint16_t *Ab = kb[b].A, *Bq = kb[b].B;
        int64_t ldab = kb[b].lda * 2;
        for (int64_t p0 = 0; p0 < kb[b].npa; p0 += TM) {
            _tile_loadd(4, Ab + 2 * p0, ldab);
            _tile_loadd(6, Bq + p0 * NR * 2, bstride);
            _tile_loadd(7, Bq + p0 * NR * 2 + 32, bstride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            if (mr > TM) {
                _tile_loadd(5, Ab + kb[b].lda * TM + 2 * p0, ldab);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    store_c(C, ldc, mr, nr, whole, ctmp);
}

void dsq_gemm_bf16_amx_begin(void) { dsq_amx_configure(); }
void dsq_gemm_bf16_amx_end(void) { _tile_release(); }
#else

/* Never called (the path is unavailable here); correct all the same. */
void dsq_gemm_bf16_block_amx(int64_t m, int64_t n, int64_t np, int64_t npa, const uint16_t *A, int64_t lda,
                             const uint16_t *Bp, float *C, int64_t ldc, bool accumulate, uint16_t *apad, float *ctmp)
{
    (void)apad;
    (void)ctmp;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const uint16_t *b = Bp + j / NR * NR * 2 * npa + j % NR * 2;
            float c = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t p = 0; p < 2 * np; p++) c += dsq_bf16_to_f32(A[i * lda + p]) * dsq_bf16_to_f32(b[p / 2 * NR * 2 + p % 2]);
            C[i * ldc + j] = c;
        }
}

void dsq_gemm_bf16_tile_amx(int64_t nkb, const dsq_gemm_bf16_amx_kblock *kb, int64_t mr, int64_t nr, float *C,
                            int64_t ldc, bool accumulate, float *ctmp)
{
    (void)ctmp;
    for (int64_t i = 0; i < mr; i++)
        for (int64_t j = 0; j < nr; j++) {
            float c = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t b = 0; b < nkb; b++)
                for (int64_t p = 0; p < 2 * kb[b].npa; p++)
                    c += dsq_bf16_to_f32(kb[b].A[i * kb[b].lda + p]) *
                         dsq_bf16_to_f32(kb[b].B[p / 2 * NR * 2 + j * 2 + p % 2]);
            C[i * ldc + j] = c;
        }
}

void dsq_gemm_bf16_amx_begin(void) {}
void dsq_gemm_bf16_amx_end(void) {}

#endif

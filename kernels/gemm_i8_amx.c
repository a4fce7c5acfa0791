/* The AMX-INT8 row kernel of dsq_gemm_i8 (kernels/gemm_i8.h): tdpbssd
 * multiplies signed by signed bytes into int32 tiles, so neither the u8
 * offset nor the sign trick is needed and the sums are the reference's.
 * Tiles of 16 tokens x 64 bytes of k (A, read in place, or from a zero-padded
 * copy at the token and k edges) times two 16-row panels of the weights packed
 * at preparation into tdpbssd's layout (per panel, per 4 columns of k, 16
 * rows x 4 bytes: dsq_gemm_i8_prepare), into two 16 x 16 int32 tiles.
 * Tile state: kernels/amx.h. Only called when
 * dsq_gemm_i8_path_available(DSQ_GEMM_I8_AMX). */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mamx-tile -mamx-int8 (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/gemm_i8.h"

#include <string.h>

#include "kernels/amx.h"

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)

#include <immintrin.h>

/* Tiles (kernels/amx.h's 16 x 64-byte shape): tmm0-1 C, tmm2 A, tmm3-4 B. */

/* C[t][col - r0] for the 16 tokens from t0 (nt valid) and the 32 weight rows
 * from p0 (two panels), keeping only rows in [r0, r1). */
static void store(const int32_t *tile, int64_t t0, int nt, int64_t p0, int64_t r0, int64_t r1, int32_t *C, int64_t ldc)
{
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < 16; j++) {
            int64_t r = p0 + j;
            if (r >= r0 && r < r1) C[(t0 + t) * ldc + (r - r0)] = tile[t * 16 + j];
        }
}

void dsq_gemm_i8_rows_amx(const dsq_gemm_i8_w *w, int64_t r0, int64_t r1, int64_t m, const int8_t *A, int64_t lda,
                          int32_t *C, int64_t ldc)
{
    int8_t apad[16 * 64];
    int32_t out[2][16 * 16];
    int64_t panel_bytes = 16 * w->kp;
    dsq_amx_configure();
    for (int64_t t0 = 0; t0 < m; t0 += 16) {
        int nt = m - t0 < 16 ? (int)(m - t0) : 16;
        for (int64_t p0 = r0 / 16 * 16; p0 < r1; p0 += 32) {
            const uint8_t *P0 = w->amx_b + p0 / 16 * panel_bytes;
            bool two = p0 + 16 < r1 && p0 + 16 < w->n;
            _tile_zero(0);
            _tile_zero(1);
            for (int64_t k0 = 0; k0 < w->k; k0 += 64) {
                if (nt == 16 && k0 + 64 <= w->k) {
                    _tile_loadd(2, A + t0 * lda + k0, lda);
                } else { /* the token or k edge: zero rows and zero columns */
                    int kc = w->k - k0 < 64 ? (int)(w->k - k0) : 64;
                    memset(apad, 0, sizeof apad);
                    for (int t = 0; t < nt; t++) memcpy(apad + t * 64, A + (t0 + t) * lda + k0, (size_t)kc);
                    _tile_loadd(2, apad, 64);
                }
                _tile_loadd(3, P0 + k0 * 16, 64);
                _tile_dpbssd(0, 2, 3);
                if (two) {
                    _tile_loadd(4, P0 + panel_bytes + k0 * 16, 64);
                    _tile_dpbssd(1, 2, 4);
                }
            }
            _tile_stored(0, out[0], 64);
            store(out[0], t0, nt, p0, r0, r1, C, ldc);
            if (two) {
                _tile_stored(1, out[1], 64);
                store(out[1], t0, nt, p0 + 16, r0, r1, C, ldc);
            }
        }
    }
    _tile_release();
}

#endif

/* The CUDA backend, seen from C.
 *
 * Built only with -DDSQ_CUDA=ON/AUTO when nvcc exists (then DSQ_HAVE_CUDA is
 * defined for everything linking the library). Without it, the same calls
 * exist as inline stubs that report "no CUDA", so callers need no #ifdef.
 *
 * Two kinds of calls: dsq_cuda_convert_f32 takes host memory and copies
 * itself; every other product takes device memory (dsq_cuda_malloc) and
 * runs on the default stream without waiting (dsq_cuda_sync waits and
 * reports a kernel's failure). Products are row-major y[m x n] = x[m x k]
 * w[n x k]^T: one row per token, weights as stored in checkpoints. */
#ifndef DSQ_RUNTIME_CUDA_BACKEND_H
#define DSQ_RUNTIME_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The core headers have no C++ guards: give them C linkage here, so a .cu file
 * that includes this header first links against the C library. */
#ifdef __cplusplus
extern "C" {
#endif

#include "core/dtype.h"
#include "core/status.h"
#include "runtime/cuda/w4a16_pack.h"

typedef struct dsq_cuda_info {
    char name[128];
    int cc_major, cc_minor, n_sm;
    size_t mem_total, mem_free;
    int driver_version, runtime_version; /* e.g. 13000 */
} dsq_cuda_info;

/* How the FP8 product scales: one scale per operand; one per activation row
 * (token) and one per weight row (output channel); or DeepSeek-V3's blocks, one
 * per token and 128 input columns and one per 128 x 128 weight block (the
 * scale arrays' layout cuBLASLt wants is in docs/cuda.md, checked by
 * tests/test_cuda_gemm.c). */
typedef enum dsq_cuda_scale {
    DSQ_CUDA_SCALE_TENSOR = 0,
    DSQ_CUDA_SCALE_ROWCOL,
    DSQ_CUDA_SCALE_BLOCK128,
} dsq_cuda_scale;

typedef struct dsq_cuda_w4 dsq_cuda_w4; /* repacked W4A16 weights on the device */
typedef struct dsq_cuda_timer dsq_cuda_timer;

/* Row length of the block-scaled product's weight scales: ceil(k/128) rounded
 * up to a multiple of 4 (cuBLASLt's layout; the padding is never read). */
static inline int dsq_cuda_fp8_block_ld(int k) { return ((k + 127) / 128 + 3) / 4 * 4; }

#ifdef DSQ_HAVE_CUDA

/* True when a CUDA device is visible and can run this build's kernels.
 * Never fails hard: no driver, no device or an unsupported architecture all
 * give false (the reason goes to the debug log). Probed once, then cached. */
bool dsq_cuda_available(void);
dsq_status dsq_cuda_get_info(dsq_cuda_info *out);

/* Converts n f32 values (host) to dst_t (F16 or BF16, host), rounding to
 * nearest even exactly like dsq_f32_to_f16 / dsq_f32_to_bf16 (NaN included). */
dsq_status dsq_cuda_convert_f32(const float *src, dsq_type dst_t, void *dst, size_t n);
/* The same between device buffers. */
dsq_status dsq_cuda_convert_f32_dev(const float *d_src, dsq_type dst_t, void *d_dst, size_t n);

/* Device memory. An allocation that fails names `what` and the bytes asked. */
dsq_status dsq_cuda_malloc(void **p, size_t bytes, const char *what);
void dsq_cuda_free(void *p);
dsq_status dsq_cuda_upload(void *d_dst, const void *src, size_t bytes);
dsq_status dsq_cuda_download(void *dst, const void *d_src, size_t bytes);
/* Waits for the device; a failed kernel is reported naming `what`. */
dsq_status dsq_cuda_sync(const char *what);

/* GPU time between start and stop (events on the default stream). */
dsq_status dsq_cuda_timer_start(dsq_cuda_timer **t);
dsq_status dsq_cuda_timer_stop(dsq_cuda_timer *t, double *ms); /* frees t */

/* W4A16: weights repacked by dsq_w4_pack, uploaded once; x is F16 [m x k]
 * on the device, y F32 [m x n]. */
dsq_status dsq_cuda_w4_upload(const dsq_w4_packed *p, dsq_cuda_w4 **out);
void dsq_cuda_w4_free(dsq_cuda_w4 *w);
dsq_status dsq_cuda_w4a16(const dsq_cuda_w4 *w, const uint16_t *d_x, float *d_y, int m);

/* Dense product through cuBLAS: ab F16 or BF16, out F32 or ab's type, F32
 * accumulation. */
dsq_status dsq_cuda_gemm_dense(dsq_type ab, dsq_type out, int m, int n, int k, const void *d_x, const void *d_w,
                               void *d_y);
/* FP8 E4M3 x E4M3 through cuBLASLt (sm_89+), out F32 or BF16:
 * y = (x w^T) * sx * sw with the scales per tensor (sx[0], sw[0]), per row
 * (sx[m], sw[n]) or per block: sx [ceil(k/128)][m] (m fastest, one per token
 * and 128 columns), sw [ceil(n/128)][dsq_cuda_fp8_block_ld(k)] (one per
 * 128 x 128 block, rows padded to a multiple of 4); device memory. */
dsq_status dsq_cuda_gemm_fp8(dsq_cuda_scale sc, dsq_type out, int m, int n, int k, const uint8_t *d_x,
                             const float *d_sx, const uint8_t *d_w, const float *d_sw, void *d_y);
/* INT8 x INT8 in int32 through cuBLASLt (IMMA), then y = acc * sx[i] * sw[j]
 * in F32 (out F32 or BF16). d_acc: device scratch of m * n int32. k must be a
 * multiple of 4. */
dsq_status dsq_cuda_gemm_i8(dsq_type out, int m, int n, int k, const int8_t *d_x, const float *d_sx, const int8_t *d_w,
                            const float *d_sw, int32_t *d_acc, void *d_y);

#else

#define DSQ_CUDA_NONE_                                                                                                 \
    dsq_fail(DSQ_ERR_UNSUPPORTED, "this dsquant was built without CUDA (configure with -DDSQ_CUDA=ON)")

static inline bool dsq_cuda_available(void) { return false; }
static inline dsq_status dsq_cuda_get_info(dsq_cuda_info *out)
{
    *out = (dsq_cuda_info){{0}, 0, 0, 0, 0, 0, 0, 0};
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_convert_f32(const float *src, dsq_type dst_t, void *dst, size_t n)
{
    (void)src, (void)dst_t, (void)dst, (void)n;
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_convert_f32_dev(const float *d_src, dsq_type dst_t, void *d_dst, size_t n)
{
    (void)d_src, (void)dst_t, (void)d_dst, (void)n;
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_malloc(void **p, size_t bytes, const char *what)
{
    (void)bytes, (void)what;
    *p = NULL;
    return DSQ_CUDA_NONE_;
}
static inline void dsq_cuda_free(void *p) { (void)p; }
static inline dsq_status dsq_cuda_upload(void *d_dst, const void *src, size_t bytes)
{
    (void)d_dst, (void)src, (void)bytes;
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_download(void *dst, const void *d_src, size_t bytes)
{
    (void)dst, (void)d_src, (void)bytes;
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_sync(const char *what)
{
    (void)what;
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_timer_start(dsq_cuda_timer **t)
{
    *t = NULL;
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_timer_stop(dsq_cuda_timer *t, double *ms)
{
    (void)t;
    *ms = 0;
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_w4_upload(const dsq_w4_packed *p, dsq_cuda_w4 **out)
{
    (void)p;
    *out = NULL;
    return DSQ_CUDA_NONE_;
}
static inline void dsq_cuda_w4_free(dsq_cuda_w4 *w) { (void)w; }
static inline dsq_status dsq_cuda_w4a16(const dsq_cuda_w4 *w, const uint16_t *d_x, float *d_y, int m)
{
    (void)w, (void)d_x, (void)d_y, (void)m;
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_gemm_dense(dsq_type ab, dsq_type out, int m, int n, int k, const void *d_x,
                                             const void *d_w, void *d_y)
{
    (void)ab, (void)out, (void)m, (void)n, (void)k, (void)d_x, (void)d_w, (void)d_y;
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_gemm_fp8(dsq_cuda_scale sc, dsq_type out, int m, int n, int k, const uint8_t *d_x,
                                           const float *d_sx, const uint8_t *d_w, const float *d_sw, void *d_y)
{
    (void)sc, (void)out, (void)m, (void)n, (void)k, (void)d_x, (void)d_sx, (void)d_w, (void)d_sw, (void)d_y;
    return DSQ_CUDA_NONE_;
}
static inline dsq_status dsq_cuda_gemm_i8(dsq_type out, int m, int n, int k, const int8_t *d_x, const float *d_sx,
                                          const int8_t *d_w, const float *d_sw, int32_t *d_acc, void *d_y)
{
    (void)out, (void)m, (void)n, (void)k, (void)d_x, (void)d_sx, (void)d_w, (void)d_sw, (void)d_acc, (void)d_y;
    return DSQ_CUDA_NONE_;
}

#endif

#ifdef __cplusplus
}
#endif

#endif

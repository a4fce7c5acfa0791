/* The CUDA backend, seen from C.
 *
 * Built only with -DDSQ_CUDA=ON/AUTO when nvcc exists (then DSQ_HAVE_CUDA is
 * defined for everything linking the library). Without it, the same calls
 * exist as inline stubs that report "no CUDA", so callers need no #ifdef.
 * Pointers passed here are host memory; the wrappers copy to and from the
 * device themselves. */
#ifndef DSQ_RUNTIME_CUDA_BACKEND_H
#define DSQ_RUNTIME_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

/* The core headers have no C++ guards: give them C linkage here, so a .cu file
 * that includes this header first links against the C library. */
#ifdef __cplusplus
extern "C" {
#endif

#include "core/dtype.h"
#include "core/status.h"

#ifdef DSQ_HAVE_CUDA

/* True when a CUDA device is visible and can run this build's kernels.
 * Never fails hard: no driver, no device or an unsupported architecture all
 * give false (the reason goes to the debug log). Probed once, then cached. */
bool dsq_cuda_available(void);

/* Converts n f32 values to dst_t (F16 or BF16) on the device, rounding to
 * nearest even exactly like dsq_f32_to_f16 / dsq_f32_to_bf16 (NaN included).
 * dst holds n elements of dst_t. */
dsq_status dsq_cuda_convert_f32(const float *src, dsq_type dst_t, void *dst, size_t n);

#else

static inline bool dsq_cuda_available(void) { return false; }

static inline dsq_status dsq_cuda_convert_f32(const float *src, dsq_type dst_t, void *dst, size_t n)
{
    return dsq_fail(DSQ_ERR_UNSUPPORTED, "this dsquant was built without CUDA (configure with -DDSQ_CUDA=ON)");
}

#endif

#ifdef __cplusplus
}
#endif

#endif

/* Private to runtime/cuda/: error reporting shared by the CUDA sources. */
#ifndef DSQ_RUNTIME_CUDA_INTERNAL_CUH
#define DSQ_RUNTIME_CUDA_INTERNAL_CUH

#include <cuda_runtime.h>

#include "runtime/cuda/cuda_backend.h"

/* A failed CUDA call as a dsq status naming `what` (out of memory kept apart). */
static inline dsq_status dsq_cuda_fail_(cudaError_t e, const char *what)
{
    dsq_status code = e == cudaErrorMemoryAllocation ? DSQ_ERR_NOMEM : DSQ_ERR_INTERNAL;
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls start clean */
    return dsq_fail(code, "CUDA %s: %s", what, cudaGetErrorString(e));
}

/* The launch just made, checked (errors of the launch itself: shape, resources). */
static inline dsq_status dsq_cuda_launched_(const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DSQ_OK : dsq_cuda_fail_(e, what);
}

#endif

/* Device memory, copies, waiting, GPU timers and the device's description. */
#include "runtime/cuda/cuda_internal.cuh"

#include <new>
#include <stdio.h>
#include <string.h>

struct dsq_cuda_timer {
    cudaEvent_t a, b;
};

extern "C" dsq_status dsq_cuda_get_info(dsq_cuda_info *out)
{
    memset(out, 0, sizeof *out);
    if (!dsq_cuda_available()) return dsq_fail(DSQ_ERR_UNSUPPORTED, "no usable CUDA device");
    int dev = 0;
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, dev);
    if (e == cudaSuccess) e = cudaMemGetInfo(&out->mem_free, &out->mem_total);
    if (e == cudaSuccess) e = cudaDriverGetVersion(&out->driver_version);
    if (e == cudaSuccess) e = cudaRuntimeGetVersion(&out->runtime_version);
    if (e != cudaSuccess) return dsq_cuda_fail_(e, "device query");
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->n_sm = prop.multiProcessorCount;
    return DSQ_OK;
}

extern "C" dsq_status dsq_cuda_malloc(void **p, size_t bytes, const char *what)
{
    *p = nullptr;
    if (!dsq_cuda_available()) return dsq_fail(DSQ_ERR_UNSUPPORTED, "no usable CUDA device (for %s)", what);
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaSuccess) return DSQ_OK;
    *p = nullptr;
    size_t free_b = 0, total_b = 0;
    (void)cudaGetLastError();
    (void)cudaMemGetInfo(&free_b, &total_b);
    return dsq_fail(e == cudaErrorMemoryAllocation ? DSQ_ERR_NOMEM : DSQ_ERR_INTERNAL,
                    "CUDA: %zu bytes for %s: %s (%zu of %zu bytes free)", bytes, what, cudaGetErrorString(e), free_b,
                    total_b);
}

extern "C" void dsq_cuda_free(void *p)
{
    if (p) (void)cudaFree(p);
}

extern "C" dsq_status dsq_cuda_upload(void *d_dst, const void *src, size_t bytes)
{
    cudaError_t e = cudaMemcpy(d_dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? DSQ_OK : dsq_cuda_fail_(e, "copy to the device");
}

extern "C" dsq_status dsq_cuda_download(void *dst, const void *d_src, size_t bytes)
{
    cudaError_t e = cudaMemcpy(dst, d_src, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? DSQ_OK : dsq_cuda_fail_(e, "copy from the device");
}

extern "C" dsq_status dsq_cuda_sync(const char *what)
{
    cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? DSQ_OK : dsq_cuda_fail_(e, what);
}

extern "C" dsq_status dsq_cuda_timer_start(dsq_cuda_timer **t)
{
    *t = nullptr;
    dsq_cuda_timer *tm = new (std::nothrow) dsq_cuda_timer;
    if (!tm) return dsq_fail(DSQ_ERR_NOMEM, "CUDA timer");
    cudaError_t e = cudaEventCreate(&tm->a);
    if (e == cudaSuccess) {
        e = cudaEventCreate(&tm->b);
        if (e != cudaSuccess) (void)cudaEventDestroy(tm->a);
    }
    if (e == cudaSuccess) e = cudaEventRecord(tm->a);
    if (e != cudaSuccess) {
        delete tm;
        return dsq_cuda_fail_(e, "timer events");
    }
    *t = tm;
    return DSQ_OK;
}

extern "C" dsq_status dsq_cuda_timer_stop(dsq_cuda_timer *t, double *ms)
{
    float f = 0;
    cudaError_t e = cudaEventRecord(t->b);
    if (e == cudaSuccess) e = cudaEventSynchronize(t->b);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&f, t->a, t->b);
    (void)cudaEventDestroy(t->a);
    (void)cudaEventDestroy(t->b);
    delete t;
    *ms = f;
    return e == cudaSuccess ? DSQ_OK : dsq_cuda_fail_(e, "timed work");
}

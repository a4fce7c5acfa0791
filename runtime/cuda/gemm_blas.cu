/* Products through NVIDIA's libraries: dense F16/BF16 (cuBLAS), FP8 E4M3 with
 * per-tensor or per-row scales and INT8 (cuBLASLt).
 *
 * Row-major y[m x n] = x[m x k] w[n x k]^T is column-major y^T = w x^T: the
 * libraries see A = w (k x n, transposed), B = x^T (k x m), C = y^T (n x m),
 * the "TN" form that FP8 and IMMA kernels require. So the weights' scale is
 * cuBLASLt's A scale (one per C row = output channel), the activations' its
 * B scale (one per C column = token). Plans (descriptors and the heuristic's
 * algorithm) are cached per shape: a decode step must not pay the search. */
#include "runtime/cuda/cuda_internal.cuh"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <mutex>
#include <stdint.h>

namespace
{

constexpr size_t k_workspace = size_t(32) << 20;

struct libs {
    cublasHandle_t blas = nullptr;
    cublasLtHandle_t lt = nullptr;
    void *workspace = nullptr;
    dsq_cuda_info info; /* asked once: cudaGetDeviceProperties is too slow per product */
    bool ok = false;
};

std::mutex g_lock;

libs &handles()
{
    static libs L;
    static std::once_flag once;
    std::call_once(once, [] {
        if (cublasCreate(&L.blas) != CUBLAS_STATUS_SUCCESS) return;
        if (cublasLtCreate(&L.lt) != CUBLAS_STATUS_SUCCESS) return;
        if (cudaMalloc(&L.workspace, k_workspace) != cudaSuccess) return;
        if (dsq_cuda_get_info(&L.info) != DSQ_OK) return;
        L.ok = true;
    });
    return L;
}

dsq_status blas_fail(cublasStatus_t s, const char *what)
{
    return dsq_fail(s == CUBLAS_STATUS_ALLOC_FAILED ? DSQ_ERR_NOMEM : DSQ_ERR_INTERNAL, "cuBLAS %s: %s", what,
                    cublasGetStatusString(s));
}

cudaDataType_t cuda_type(dsq_type t)
{
    switch (t) {
    case DSQ_TYPE_F16: return CUDA_R_16F;
    case DSQ_TYPE_BF16: return CUDA_R_16BF;
    case DSQ_TYPE_F32: return CUDA_R_32F;
    default: return CUDA_R_32F;
    }
}

/* One cached cuBLASLt plan. */
struct plan {
    int kind; /* 1 fp8, 2 int8 */
    int m, n, k, sc;
    dsq_type out;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
};

constexpr int k_plans = 32;
plan g_plans[k_plans];
int g_n_plans = 0, g_next = 0;

void plan_release(plan &p)
{
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    p.op = nullptr;
    p.a = p.b = p.c = nullptr;
}

/* Builds the plan of p's key (kind, shape, scales, output). */
dsq_status plan_build(libs &L, plan &p)
{
    bool fp8 = p.kind == 1;
    cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_8I;
    cudaDataType_t out = fp8 ? cuda_type(p.out) : CUDA_R_32I;
    cublasComputeType_t ct = fp8 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32I;
    cudaDataType_t st = fp8 ? CUDA_R_32F : CUDA_R_32I;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasStatus_t s = cublasLtMatmulDescCreate(&p.op, ct, st);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (s == CUBLAS_STATUS_SUCCESS && fp8 && p.sc != DSQ_CUDA_SCALE_TENSOR) {
        /* A is the weights, B the activations */
        int32_t am = p.sc == DSQ_CUDA_SCALE_ROWCOL ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                                   : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        int32_t bm = p.sc == DSQ_CUDA_SCALE_ROWCOL ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                                   : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof am);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof bm);
    }
    if (s == CUBLAS_STATUS_SUCCESS && fp8) { /* placeholders, replaced per call: the heuristic wants them set */
        const void *dummy = L.workspace;
        s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dummy, sizeof dummy);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dummy, sizeof dummy);
    }
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&p.a, in, p.k, p.n, p.k);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&p.b, in, p.k, p.m, p.k);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatrixLayoutCreate(&p.c, out, p.n, p.m, p.n);
    if (s != CUBLAS_STATUS_SUCCESS) {
        plan_release(p);
        return blas_fail(s, "matmul description");
    }
    cublasLtMatmulPreference_t pref = nullptr;
    s = cublasLtMatmulPreferenceCreate(&pref);
    size_t ws = k_workspace;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(L.lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
        plan_release(p);
        if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) return blas_fail(s, "algorithm search");
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "cuBLASLt has no %s kernel for %d x %d x %d%s on this GPU",
                        fp8 ? "FP8 E4M3" : "INT8", p.m, p.n, p.k,
                        !fp8 || p.sc == DSQ_CUDA_SCALE_TENSOR ? ""
                        : p.sc == DSQ_CUDA_SCALE_ROWCOL       ? " with per-row scales"
                                                              : " with 128-column / 128x128 block scales");
    }
    p.algo = res.algo;
    return DSQ_OK;
}

/* The cached plan for the key, built on first use (caller holds g_lock). */
dsq_status plan_get(libs &L, int kind, int m, int n, int k, int sc, dsq_type out, plan **got)
{
    for (int i = 0; i < g_n_plans; i++) {
        plan &p = g_plans[i];
        if (p.kind == kind && p.m == m && p.n == n && p.k == k && p.sc == sc && p.out == out) {
            *got = &p;
            return DSQ_OK;
        }
    }
    int slot = g_n_plans < k_plans ? g_n_plans++ : (g_next++ % k_plans);
    plan &p = g_plans[slot];
    plan_release(p);
    p.kind = kind, p.m = m, p.n = n, p.k = k, p.sc = sc, p.out = out;
    dsq_status st = plan_build(L, p);
    if (st != DSQ_OK) {
        p.kind = 0; /* never matches */
        return st;
    }
    *got = &p;
    return DSQ_OK;
}

dsq_status check_dims(const char *what, int m, int n, int k)
{
    if (m < 0 || n <= 0 || k <= 0) return dsq_fail(DSQ_ERR_ARG, "CUDA %s: shape %d x %d x %d", what, m, n, k);
    return DSQ_OK;
}

libs *ready(const char *what, dsq_status *st)
{
    if (!dsq_cuda_available()) {
        *st = dsq_fail(DSQ_ERR_UNSUPPORTED, "no usable CUDA device (for %s)", what);
        return nullptr;
    }
    libs &L = handles();
    if (!L.ok) {
        *st = dsq_fail(DSQ_ERR_INTERNAL, "cuBLAS could not be initialised (for %s)", what);
        return nullptr;
    }
    *st = DSQ_OK;
    return &L;
}

__global__ void k_scale_i32(const int32_t *__restrict__ acc, const float *__restrict__ sx, const float *__restrict__ sw,
                            float *__restrict__ yf, uint16_t *__restrict__ yb, int m, int n)
{
    size_t total = (size_t)m * n, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int r = (int)(i / n), c = (int)(i % n);
        float v = (float)acc[i] * sx[r] * sw[c];
        if (yf)
            yf[i] = v;
        else
            yb[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
}

} // namespace

extern "C" dsq_status dsq_cuda_gemm_dense(dsq_type ab, dsq_type out, int m, int n, int k, const void *d_x,
                                          const void *d_w, void *d_y)
{
    dsq_status st = check_dims("dense product", m, n, k);
    if (st != DSQ_OK) return st;
    if ((ab != DSQ_TYPE_F16 && ab != DSQ_TYPE_BF16) || (out != DSQ_TYPE_F32 && out != ab))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA dense product: %s inputs to %s", dsq_type_name(ab),
                        dsq_type_name(out));
    libs *L = ready("dense product", &st);
    if (!L) return st;
    if (m == 0) return DSQ_OK;
    const float one = 1.0f, zero = 0.0f;
    std::lock_guard<std::mutex> hold(g_lock);
    cublasStatus_t s =
        cublasGemmEx(L->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, d_w, cuda_type(ab), k, d_x, cuda_type(ab), k,
                     &zero, d_y, cuda_type(out), n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? DSQ_OK : blas_fail(s, "dense product");
}

extern "C" dsq_status dsq_cuda_gemm_fp8(dsq_cuda_scale sc, dsq_type out, int m, int n, int k, const uint8_t *d_x,
                                        const float *d_sx, const uint8_t *d_w, const float *d_sw, void *d_y)
{
    dsq_status st = check_dims("FP8 product", m, n, k);
    if (st != DSQ_OK) return st;
    if (out != DSQ_TYPE_F32 && out != DSQ_TYPE_BF16)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA FP8 product: %s output", dsq_type_name(out));
    if (k % 16 || n % 16) /* cuBLASLt's FP8 alignment rule: 16-byte rows */
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA FP8 product: k %d and n %d must be multiples of 16", k, n);
    libs *L = ready("FP8 product", &st);
    if (!L) return st;
    const dsq_cuda_info &info = L->info;
    if (info.cc_major * 10 + info.cc_minor < 89)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA FP8 product: %s is sm_%d%d, FP8 tensor cores need sm_89 or later",
                        info.name, info.cc_major, info.cc_minor);
    if (m == 0) return DSQ_OK;
    std::lock_guard<std::mutex> hold(g_lock);
    plan *p = nullptr;
    st = plan_get(*L, 1, m, n, k, (int)sc, out, &p);
    if (st != DSQ_OK) return st;
    cublasStatus_t s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &d_sw, sizeof d_sw);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &d_sx, sizeof d_sx);
    const float one = 1.0f, zero = 0.0f;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmul(L->lt, p->op, &one, d_w, p->a, d_x, p->b, &zero, d_y, p->c, d_y, p->c, &p->algo,
                           L->workspace, k_workspace, 0);
    return s == CUBLAS_STATUS_SUCCESS ? DSQ_OK : blas_fail(s, "FP8 product");
}

extern "C" dsq_status dsq_cuda_gemm_i8(dsq_type out, int m, int n, int k, const int8_t *d_x, const float *d_sx,
                                       const int8_t *d_w, const float *d_sw, int32_t *d_acc, void *d_y)
{
    dsq_status st = check_dims("INT8 product", m, n, k);
    if (st != DSQ_OK) return st;
    if (out != DSQ_TYPE_F32 && out != DSQ_TYPE_BF16)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA INT8 product: %s output", dsq_type_name(out));
    if (k % 4 || n % 4)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA INT8 product: k %d and n %d must be multiples of 4", k, n);
    libs *L = ready("INT8 product", &st);
    if (!L) return st;
    if (m == 0) return DSQ_OK;
    {
        std::lock_guard<std::mutex> hold(g_lock);
        plan *p = nullptr;
        st = plan_get(*L, 2, m, n, k, 0, DSQ_TYPE_F32, &p);
        if (st != DSQ_OK) return st;
        const int32_t one = 1, zero = 0;
        cublasStatus_t s = cublasLtMatmul(L->lt, p->op, &one, d_w, p->a, d_x, p->b, &zero, d_acc, p->c, d_acc, p->c,
                                          &p->algo, L->workspace, k_workspace, 0);
        if (s != CUBLAS_STATUS_SUCCESS) return blas_fail(s, "INT8 product");
    }
    size_t total = (size_t)m * n, want = (total + 255) / 256;
    unsigned blocks = want > 65535 ? 65535u : (unsigned)want;
    k_scale_i32<<<blocks, 256>>>(d_acc, d_sx, d_sw, out == DSQ_TYPE_F32 ? static_cast<float *>(d_y) : nullptr,
                                 out == DSQ_TYPE_BF16 ? static_cast<uint16_t *>(d_y) : nullptr, m, n);
    return dsq_cuda_launched_("INT8 scale epilogue");
}

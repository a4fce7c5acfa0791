/* W4A16 product on tensor cores: 4-bit weights dequantized in registers.
 *
 * Memory-bound at small batches, so the weights stream through registers
 * only: the repacked tiles (w4a16_pack.h) give each lane, with one 16-byte
 * load, exactly its share of the B operands of eight mma.m16n8k16 operations.
 * A lane turns its 32 codes into F16 pairs with the exponent trick (0x6400 | q
 * is 1024 + q; subtracting 1024 is exact) and one fma with the group's scale
 * and -zero * scale; the A operands (activations, F16) come straight from
 * global memory through the read-only cache, zeros past the last row. Each
 * warp streams its tiles (codes and scale words) through a private ring of
 * k_stages tiles in shared memory filled by asynchronous copies (cp.async),
 * so k_stages - 1 tiles per warp are in flight without costing registers; a
 * lane reads back only what it copied itself, so no barrier is needed.
 * Split-k slices add their partial sums atomically. Marlin (IST-DASLab) and
 * vLLM's AWQ/GPTQ kernels showed the approach; this is our own, simpler
 * kernel. */
#include "runtime/cuda/cuda_internal.cuh"

#include <cuda_fp16.h>
#include <new>

struct dsq_cuda_w4 {
    int64_t n, k;
    int group;
    uint4 *qw;    /* the tiles */
    uint32_t *sz; /* scale words */
};

namespace
{

/* Codes pair r % 4 of word w (nibbles i and i + 4) as F16 weights. */
__device__ __forceinline__ uint32_t dequant_pair(uint32_t w, int i, __half2 s, __half2 mz)
{
    const __half2 k1024 = __half2half2(__ushort_as_half(0x6400));
    uint32_t bits = ((w >> (4 * i)) & 0x000F000Fu) | 0x64006400u;
    __half2 q = __hsub2(*reinterpret_cast<__half2 *>(&bits), k1024);
    __half2 r = __hfma2(q, s, mz);
    return *reinterpret_cast<uint32_t *>(&r);
}

__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* A tile as a lane holds it: its 32 codes and the scale words of its two rows
 * for each 32-column half. */
struct lane_tile {
    uint4 codes;
    uint32_t sw[2][2]; /* [nh][half] */
};

constexpr int k_stages = 4;
constexpr int k_wt = DSQ_W4_ROW_TILES_PER_WARP;
/* per stage and warp, for each of its row tiles: 32 lanes' codes, then 32 lanes' scale words */
constexpr int k_stage_uint4 = 64 * k_wt;

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async4(void *smem, const void *gmem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Where a warp's tiles are: its first row tile, how many it has (1..k_wt),
 * the distance between row tiles in uint4, its slice's first k tile. */
struct warp_tiles {
    const uint4 *base; /* this lane's uint4 of the first tile */
    int row0, n_rt, k_tiles, kcol0;
    size_t rt_stride;
};

/* Starts copying k tile t of every row tile of the warp into its stage; the
 * group is committed even when t is past the slice, so counts stay aligned. */
__device__ __forceinline__ void issue(uint4 *ring, const warp_tiles &wt, const uint32_t *__restrict__ sz, int t, int n,
                                      int group, int group_shift, bool one_group, int g, int lane)
{
    if (t < wt.k_tiles) {
        uint4 *st = ring + (t % k_stages) * k_stage_uint4;
        int gi[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int col = wt.kcol0 + t * DSQ_W4_TILE_K + 32 * h;
            gi[h] = group_shift >= 0 ? col >> group_shift : col / group;
        }
#pragma unroll
        for (int r = 0; r < k_wt; r++) {
            if (r >= wt.n_rt) break;
            cp_async16(st + r * 64 + lane, wt.base + (size_t)r * wt.rt_stride + (size_t)t * 32);
            uint32_t *sw = reinterpret_cast<uint32_t *>(st + r * 64 + 32 + lane);
            const uint32_t *src = sz + wt.row0 + r * 16 + g;
            /* groups of 64+ columns: both halves of the tile share the words */
#pragma unroll
            for (int h = 0; h < 2; h++)
                if (h == 0 || !one_group)
#pragma unroll
                    for (int nh = 0; nh < 2; nh++) cp_async4(sw + nh * 2 + h, src + (size_t)gi[h] * n + nh * 8);
        }
    }
    cp_async_commit();
}

/* This lane's activation pairs for one k step of 16: rows g and g + 8 of each
 * 16-row tile, columns 2t, 2t+1 and 2t+8, 2t+9 (the A operand of
 * mma.m16n8k16); zeros for rows past m. */
template <int MT> struct lane_x {
    const unsigned int *row[MT][2];
    bool ok[MT][2];
};

template <int MT> __device__ __forceinline__ void load_a(const lane_x<MT> &lx, int col, uint32_t (*a)[4])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        a[mt][0] = lx.ok[mt][0] ? __ldg(lx.row[mt][0] + col / 2) : 0u;
        a[mt][1] = lx.ok[mt][1] ? __ldg(lx.row[mt][1] + col / 2) : 0u;
        a[mt][2] = lx.ok[mt][0] ? __ldg(lx.row[mt][0] + col / 2 + 4) : 0u;
        a[mt][3] = lx.ok[mt][1] ? __ldg(lx.row[mt][1] + col / 2 + 4) : 0u;
    }
}

/* The B operands of one k step (ks) of one tile, dequantized. */
__device__ __forceinline__ void dequant_step(const lane_tile &v, int ks, uint32_t (*b)[2])
{
    const uint32_t w[4] = {v.codes.x, v.codes.y, v.codes.z, v.codes.w};
#pragma unroll
    for (int nh = 0; nh < 2; nh++) {
        uint32_t sw = v.sw[nh][ks / 2];
        __half2 s = __half2half2(__ushort_as_half((unsigned short)(sw & 0xffffu)));
        __half2 mz = __half2half2(__ushort_as_half((unsigned short)(sw >> 16)));
        const int r = (nh * 4 + ks) * 2;
        b[nh][0] = dequant_pair(w[r / 4], r % 4, s, mz);
        b[nh][1] = dequant_pair(w[(r + 1) / 4], (r + 1) % 4, s, mz);
    }
}

/* At least 6 blocks (24 warps) per multiprocessor for 16-row tiles: more
 * warps hide more of the memory latency (ncu at 5 blocks: 1.3 eligible warps
 * of 4 per scheduler). */
template <int MT>
__global__ void __launch_bounds__(32 * DSQ_W4_WARPS, MT == 1 ? 6 : 4)
    k_w4a16(const uint4 *__restrict__ qw, const uint32_t *__restrict__ sz, const __half *__restrict__ x,
            float *__restrict__ y, int m, int n, int k, int group, int group_shift, int slice, bool atomic)
{
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int rt0 = (blockIdx.x * DSQ_W4_WARPS + warp) * k_wt;
    if (rt0 >= n / 16) return;
    const int k0 = blockIdx.y * slice, m0 = blockIdx.z * 16 * MT;
    warp_tiles wt;
    wt.row0 = rt0 * 16;
    wt.n_rt = min(k_wt, n / 16 - rt0);
    wt.k_tiles = min(slice, k - k0) / DSQ_W4_TILE_K;
    wt.kcol0 = k0;
    wt.rt_stride = (size_t)(k / DSQ_W4_TILE_K) * 32;
    wt.base = qw + (size_t)rt0 * wt.rt_stride + (size_t)(k0 / DSQ_W4_TILE_K) * 32 + lane;

    lane_x<MT> lx;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int r = m0 + mt * 16 + g + 8 * h;
            lx.ok[mt][h] = r < m;
            lx.row[mt][h] = reinterpret_cast<const unsigned int *>(x + (size_t)(r < m ? r : 0) * k + 2 * t);
        }

    float acc[MT][k_wt][2][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < k_wt; r++)
#pragma unroll
            for (int nh = 0; nh < 2; nh++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mt][r][nh][e] = 0.0f;

    extern __shared__ uint4 smem[];
    uint4 *ring = smem + warp * k_stages * k_stage_uint4;
    const bool one_group = group % 64 == 0; /* a tile's two halves share their scale words */
#pragma unroll
    for (int u = 0; u < k_stages - 1; u++) issue(ring, wt, sz, u, n, group, group_shift, one_group, g, lane);
    for (int kt = 0; kt < wt.k_tiles; kt++) {
        issue(ring, wt, sz, kt + k_stages - 1, n, group, group_shift, one_group, g, lane);
        cp_async_wait<k_stages - 1>(); /* k tile kt's copies are done (this lane's own) */
        const uint4 *st = ring + (kt % k_stages) * k_stage_uint4;
        lane_tile v[k_wt];
#pragma unroll
        for (int r = 0; r < k_wt; r++) {
            v[r].codes = st[r * 64 + lane];
            uint4 w = st[r * 64 + 32 + lane];
            v[r].sw[0][0] = w.x, v[r].sw[1][0] = w.z;
            v[r].sw[0][1] = one_group ? w.x : w.y, v[r].sw[1][1] = one_group ? w.z : w.w;
        }
        const int kcol = k0 + kt * DSQ_W4_TILE_K;
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            uint32_t a[MT][4];
            load_a<MT>(lx, kcol + ks * 16, a);
#pragma unroll
            for (int r = 0; r < k_wt; r++) {
                uint32_t b[2][2];
                dequant_step(v[r], ks, b); /* a missing row tile (n_rt < k_wt) is stale data, never stored */
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816(acc[mt][r][0], a[mt], b[0][0], b[0][1]);
                    mma16816(acc[mt][r][1], a[mt], b[1][0], b[1][1]);
                }
            }
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < k_wt; r++) {
            if (r >= wt.n_rt) break;
#pragma unroll
            for (int nh = 0; nh < 2; nh++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int row = m0 + mt * 16 + g + (e >= 2 ? 8 : 0), c = wt.row0 + r * 16 + nh * 8 + 2 * t + (e & 1);
                    if (row >= m) continue;
                    float *dst = y + (size_t)row * n + c;
                    if (atomic)
                        atomicAdd(dst, acc[mt][r][nh][e]);
                    else
                        *dst = acc[mt][r][nh][e];
                }
        }
}

/* Blocks of the kernel the GPU holds at once (resident per multiprocessor
 * times multiprocessors), asked once per instantiation. */
template <int MT> int wave_blocks(size_t smem)
{
    static int n = -1;
    if (n < 0) {
        dsq_cuda_info info;
        int per_sm = 0;
        if (dsq_cuda_get_info(&info) != DSQ_OK ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_w4a16<MT>, 32 * DSQ_W4_WARPS, smem) !=
                cudaSuccess ||
            per_sm < 1) {
            (void)cudaGetLastError();
            per_sm = 4, info.n_sm = 1;
        }
        n = per_sm * info.n_sm;
    }
    return n;
}

} // namespace

extern "C" dsq_status dsq_cuda_w4_upload(const dsq_w4_packed *p, dsq_cuda_w4 **out)
{
    *out = nullptr;
    dsq_cuda_w4 *w = new (std::nothrow) dsq_cuda_w4{p->n, p->k, p->group, nullptr, nullptr};
    if (!w) return dsq_fail(DSQ_ERR_NOMEM, "CUDA W4A16 weights");
    size_t qw_bytes = (size_t)(p->n / DSQ_W4_TILE_N) * (size_t)(p->k / DSQ_W4_TILE_K) * DSQ_W4_TILE_WORDS * 4;
    size_t sz_bytes = (size_t)(p->k / p->group) * (size_t)p->n * 4;
    dsq_status st = dsq_cuda_malloc(reinterpret_cast<void **>(&w->qw), qw_bytes, "W4A16 weight tiles");
    if (st == DSQ_OK) st = dsq_cuda_malloc(reinterpret_cast<void **>(&w->sz), sz_bytes, "W4A16 scales");
    if (st == DSQ_OK) st = dsq_cuda_upload(w->qw, p->qw, qw_bytes);
    if (st == DSQ_OK) st = dsq_cuda_upload(w->sz, p->sz, sz_bytes);
    if (st != DSQ_OK) {
        dsq_cuda_w4_free(w);
        return st;
    }
    *out = w;
    return DSQ_OK;
}

extern "C" void dsq_cuda_w4_free(dsq_cuda_w4 *w)
{
    if (!w) return;
    dsq_cuda_free(w->qw);
    dsq_cuda_free(w->sz);
    delete w;
}

extern "C" dsq_status dsq_cuda_w4a16(const dsq_cuda_w4 *w, const uint16_t *d_x, float *d_y, int m)
{
    if (m <= 0) return m == 0 ? DSQ_OK : dsq_fail(DSQ_ERR_ARG, "CUDA W4A16: %d rows", m);
    if (w->n > INT32_MAX || w->k > INT32_MAX)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA W4A16: %lld x %lld weights", (long long)w->n, (long long)w->k);
    size_t smem = (size_t)DSQ_W4_WARPS * k_stages * k_stage_uint4 * sizeof(uint4);
    int mb = dsq_w4_m_block(m);
    int wave = mb == 16 ? wave_blocks<1>(smem) : mb == 32 ? wave_blocks<2>(smem) : wave_blocks<4>(smem);
    dsq_w4_shape s = dsq_w4_launch_shape(w->n, w->k, m, wave);
    if (s.m_blocks > 65535) return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA W4A16: %d rows (at most %d)", m, 65535 * 64);
    bool atomic = s.splits > 1;
    if (atomic) {
        cudaError_t e = cudaMemsetAsync(d_y, 0, (size_t)m * (size_t)w->n * sizeof(float));
        if (e != cudaSuccess) return dsq_cuda_fail_(e, "W4A16 output clear");
    }
    dim3 grid((unsigned)s.blocks_n, (unsigned)s.splits, (unsigned)s.m_blocks);
    const __half *x = reinterpret_cast<const __half *>(d_x);
    int n = (int)w->n, k = (int)w->k, shift = -1;
    for (int b = 5; b < 31; b++)
        if (w->group == 1 << b) shift = b;
    if (s.m_block == 16)
        k_w4a16<1><<<grid, 32 * DSQ_W4_WARPS, smem>>>(w->qw, w->sz, x, d_y, m, n, k, w->group, shift, s.slice, atomic);
    else if (s.m_block == 32)
        k_w4a16<2><<<grid, 32 * DSQ_W4_WARPS, smem>>>(w->qw, w->sz, x, d_y, m, n, k, w->group, shift, s.slice, atomic);
    else
        k_w4a16<4><<<grid, 32 * DSQ_W4_WARPS, smem>>>(w->qw, w->sz, x, d_y, m, n, k, w->group, shift, s.slice, atomic);
    return dsq_cuda_launched_("W4A16 kernel");
}

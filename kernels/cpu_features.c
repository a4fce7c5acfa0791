/* CPU feature detection from CPUID and XCR0 (Intel SDM vol. 1 ch. 13-15 and
 * vol. 2 "CPUID"; AMD APM vol. 3 appendix E use the same bits). Read directly
 * rather than through __builtin_cpu_supports so that every answer, AMX and
 * AVX-VNNI included, applies the same OS-state rule, whatever the compiler's
 * runtime knows about. */
#include "kernels/cpu.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

/* XCR0 state components the OS must enable (XSETBV) for each family. */
#define XCR0_YMM 0x6ull       /* SSE + AVX upper halves */
#define XCR0_ZMM 0xe0ull      /* opmask, ZMM0-15 upper halves, ZMM16-31 */
#define XCR0_TILE 0x60000ull  /* XTILECFG + XTILEDATA */

static uint64_t xcr0(void)
{
    uint32_t lo, hi;
    /* The raw opcode, so that no -mxsave is needed for this file. */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static bool bit(uint32_t r, int b) { return (r >> b) & 1u; }

static uint32_t probe(void)
{
    uint32_t a, b, c, d, m = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !bit(c, 27) /* OSXSAVE */) return 0;
    uint64_t x = xcr0();
    bool ymm = (x & XCR0_YMM) == XCR0_YMM, zmm = ymm && (x & XCR0_ZMM) == XCR0_ZMM;
    bool tile = (x & XCR0_TILE) == XCR0_TILE;
    if (!ymm || !bit(c, 28) /* AVX */) return 0;
    if (bit(c, 12)) m |= 1u << DSQ_CPU_FMA;
    if (bit(c, 29)) m |= 1u << DSQ_CPU_F16C;
    if (__get_cpuid_max(0, NULL) < 7) return m;
    uint32_t max7;
    __cpuid_count(7, 0, max7, b, c, d);
    if (bit(b, 5)) m |= 1u << DSQ_CPU_AVX2;
    if (zmm && bit(b, 16)) m |= 1u << DSQ_CPU_AVX512F;
    if (zmm && bit(b, 30)) m |= 1u << DSQ_CPU_AVX512BW;
    if (zmm && bit(b, 31)) m |= 1u << DSQ_CPU_AVX512VL;
    if (zmm && bit(c, 11)) m |= 1u << DSQ_CPU_AVX512_VNNI;
    bool amx_tile = tile && bit(d, 24);
    if (amx_tile && bit(d, 22)) m |= 1u << DSQ_CPU_AMX_BF16;
    if (amx_tile && bit(d, 25)) m |= 1u << DSQ_CPU_AMX_INT8;
    if (max7 >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        if (bit(a, 4)) m |= 1u << DSQ_CPU_AVX_VNNI;
        if (zmm && bit(a, 5)) m |= 1u << DSQ_CPU_AVX512_BF16;
    }
    return m;
}
#else
static uint32_t probe(void) { return 0; }
#endif

/* Bit N: feature N; bit 31: probed. A benign race: every thread stores the same. */
static uint32_t g_mask;

bool dsq_cpu_has(dsq_cpu_feature f)
{
    if ((unsigned)f >= DSQ_CPU_N_FEATURES) return false;
    uint32_t m = __atomic_load_n(&g_mask, __ATOMIC_RELAXED);
    if (!(m >> 31)) {
        m = probe() | 1u << 31;
        __atomic_store_n(&g_mask, m, __ATOMIC_RELAXED);
    }
    return (m >> f) & 1u;
}

const char *dsq_cpu_feature_name(dsq_cpu_feature f)
{
    static const char *const names[DSQ_CPU_N_FEATURES] = {
        [DSQ_CPU_AVX2] = "avx2",
        [DSQ_CPU_FMA] = "fma",
        [DSQ_CPU_F16C] = "f16c",
        [DSQ_CPU_AVX512F] = "avx512f",
        [DSQ_CPU_AVX512BW] = "avx512bw",
        [DSQ_CPU_AVX512VL] = "avx512vl",
        [DSQ_CPU_AVX512_BF16] = "avx512_bf16",
        [DSQ_CPU_AVX512_VNNI] = "avx512_vnni",
        [DSQ_CPU_AVX_VNNI] = "avx_vnni",
        [DSQ_CPU_AMX_BF16] = "amx_bf16",
        [DSQ_CPU_AMX_INT8] = "amx_int8",
    };
    return (unsigned)f < DSQ_CPU_N_FEATURES ? names[f] : "?";
}

bool dsq_cpu_has_avx2(void)
{
    return dsq_cpu_has(DSQ_CPU_AVX2) && dsq_cpu_has(DSQ_CPU_FMA) && dsq_cpu_has(DSQ_CPU_F16C);
}

bool dsq_cpu_has_avx2_fma(void) { return dsq_cpu_has(DSQ_CPU_AVX2) && dsq_cpu_has(DSQ_CPU_FMA); }

bool dsq_cpu_has_avx512bf16(void)
{
    return dsq_cpu_has(DSQ_CPU_AVX512F) && dsq_cpu_has(DSQ_CPU_AVX512BW) && dsq_cpu_has(DSQ_CPU_AVX512VL) &&
           dsq_cpu_has(DSQ_CPU_AVX512_BF16);
}

void dsq_cpu_model(char *buf, size_t cap)
{
    if (!buf || cap == 0) return;
    snprintf(buf, cap, "unknown");
#if defined(__x86_64__) && defined(__GNUC__)
    /* the brand string: CPUID 0x80000002-4, 48 bytes, NUL-padded, often space-led */
    uint32_t r[12];
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000004u) return; /* int in clang, unsigned in gcc */
    for (uint32_t i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char s[49];
    memcpy(s, r, 48);
    s[48] = 0;
    const char *p = s;
    while (*p == ' ') p++;
    if (*p) snprintf(buf, cap, "%s", p);
#endif
}

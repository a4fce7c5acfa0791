#include "runtime/cpu/qgemv.h"

#include "kernels/cpu.h"

dsq_qgemv_fn dsq_qgemv_kernel(dsq_type t)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (!dsq_cpu_use_avx2()) return NULL; /* also checks FMA and F16C */
    switch (t) {
    case DSQ_TYPE_Q4_0: return dsq_qgemv_q4_0_avx2;
    case DSQ_TYPE_Q4_1: return dsq_qgemv_q4_1_avx2;
    case DSQ_TYPE_Q5_0: return dsq_qgemv_q5_0_avx2;
    case DSQ_TYPE_Q5_1: return dsq_qgemv_q5_1_avx2;
    case DSQ_TYPE_Q8_0: return dsq_qgemv_q8_0_avx2;
    case DSQ_TYPE_IQ4_NL: return dsq_qgemv_iq4_nl_avx2;
    case DSQ_TYPE_Q2_K: return dsq_qgemv_q2_K_avx2;
    case DSQ_TYPE_Q3_K: return dsq_qgemv_q3_K_avx2;
    case DSQ_TYPE_Q4_K: return dsq_qgemv_q4_K_avx2;
    case DSQ_TYPE_Q5_K: return dsq_qgemv_q5_K_avx2;
    case DSQ_TYPE_Q6_K: return dsq_qgemv_q6_K_avx2;
    case DSQ_TYPE_IQ4_XS: return dsq_qgemv_iq4_xs_avx2;
    default: return NULL;
    }
#else
    (void)t;
    return NULL;
#endif
}

dsq_qgemm_fn dsq_qgemm_kernel(dsq_type t)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (!dsq_cpu_use_avx2()) return NULL;
    switch (t) {
    case DSQ_TYPE_Q4_0: return dsq_qgemm_q4_0_avx2;
    case DSQ_TYPE_Q5_0: return dsq_qgemm_q5_0_avx2;
    case DSQ_TYPE_Q8_0: return dsq_qgemm_q8_0_avx2;
    case DSQ_TYPE_IQ4_NL: return dsq_qgemm_iq4_nl_avx2;
    case DSQ_TYPE_Q4_K: return dsq_qgemm_q4_K_avx2;
    default: return NULL;
    }
#else
    (void)t;
    return NULL;
#endif
}

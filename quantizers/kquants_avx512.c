/* AVX-512F versions of the k-quant row quantizers q2_K..q6_K: the lane source
 * of quantizers/kquants_lanes.h with 16 lanes (a whole q6_K super-block, or
 * two of q4_K, per pass), built with its row of DSQ_SIMD_SOURCES in
 * CMakeLists.txt and called only behind dsq_cpu_has in quantizers/kquants.c.
 * The bytes are the scalar reference's, as with 8 lanes. */
#include "quantizers/kquants_internal.h"

#if DSQ_KQ_HAVE_AVX2

#define KQ_W 16
#define KQ_TARGET
#define KQ_ROW(t) dsq_kq_avx512_quantize_row_##t
#include "quantizers/kquants_lanes.h"

#endif

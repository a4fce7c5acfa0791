/* What the INTn weight packers (pack_awq, pack_gptq, pack_ct) share: dense bit
 * streams in int32 words, the list of tensors a packer makes, scale element
 * conversion, and shape/type checks of tensors read back from a file.
 *
 * Dense bit stream: value i of a line occupies bits [b*i, b*i + b) of the
 * stream, and word k holds stream bits [32k, 32k + 32) (bit 0 = least
 * significant). For 2, 4 and 8 bits that is the plain sequential layout (value
 * i in word i / (32/b) at shift b * (i % (32/b))). For 3 bits it is AutoGPTQ's
 * 32-values-in-3-words layout (qlinear pack: values 0-9 at bits 0..29 of word
 * 0, value 10 split over word 0 bits 30-31 and word 1 bit 0, values 11-20 at
 * word 1 bits 1..30, value 21 split, values 22-31 at word 2 bits 2..31) and
 * compressed-tensors' pack_to_int32 (which packs every width this way). */
#ifndef DSQ_FORMATS_PACK_COMMON_H
#define DSQ_FORMATS_PACK_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "quantizers/intq.h"

/* Words for n values of `bits` bits: ceil(n * bits / 32). */
static inline int64_t dsq_bits_words(int64_t n, int bits) { return (n * bits + 31) / 32; }

/* Packs n values (each < 2^bits) read at v[i * vstride] into the words at
 * w[k * wstride]; every word of the line is overwritten (the tail is zero). */
void dsq_bits_pack_line(const uint8_t *v, int64_t n, int64_t vstride, int bits, uint32_t *w, int64_t wstride);
/* The inverse: n values from the words at w[k * wstride] into v[i * vstride]. */
void dsq_bits_unpack_line(const uint32_t *w, int64_t wstride, int bits, int64_t n, uint8_t *v, int64_t vstride);

/* One tensor a packer made; its name in a checkpoint is "<module>.<suffix>". */
typedef struct dsq_pack_tensor {
    char suffix[32];
    dsq_type type; /* I32, I64, F16, BF16, F32, I8 or F8_E4M3; data is little-endian */
    int n_dims;    /* 0 (a scalar, as ModelOpt and AutoFP8 store scales), 1 or 2 */
    int64_t shape[2];
    void *data;
    uint64_t nbytes;
} dsq_pack_tensor;

#define DSQ_PACK_MAX_TENSORS 6

typedef struct dsq_packed {
    int n;
    dsq_pack_tensor t[DSQ_PACK_MAX_TENSORS];
} dsq_packed;

/* Appends a zero-filled tensor; *data points at its bytes. data NULL: the
 * tensor is only planned (name, type, shape, nbytes; no bytes), which is
 * what the pack-shape functions return. */
dsq_status dsq_packed_add(dsq_packed *p, const char *suffix, dsq_type type, int n_dims, const int64_t *shape,
                          void **data);

/* The shape of an INTn weight as the packers see it, without its codes: what
 * a writer needs to plan a file's tensors before any layer is quantized. */
typedef struct dsq_intq_shape {
    int64_t rows, cols;
    int bits, group_size; /* the group as stored: -1 resolved to cols */
    bool sym;
    bool g_idx; /* act-order group indices are stored */
} dsq_intq_shape;

/* The shape of q. */
dsq_intq_shape dsq_intq_shape_of(const dsq_intq *q);
const dsq_pack_tensor *dsq_packed_find(const dsq_packed *p, const char *suffix);
/* A view of a packed tensor (name = suffix), as the safetensors reader would give it. */
dsq_tensor dsq_packed_view(const dsq_pack_tensor *t);
void dsq_packed_free(dsq_packed *p);

/* Scale storage types the formats use. */
bool dsq_pack_scale_type_ok(dsq_type t);
void dsq_pack_put_scale(void *base, int64_t i, dsq_type t, float v);
float dsq_pack_get_scale(const void *base, int64_t i, dsq_type t);

/* Little-endian loads/stores that do not assume alignment (mmap'd files). */
static inline uint32_t dsq_pack_rd32(const void *base, int64_t i)
{
    const uint8_t *p = (const uint8_t *)base + 4 * i;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void dsq_pack_wr32(void *base, int64_t i, uint32_t v)
{
    uint8_t *p = (uint8_t *)base + 4 * i;
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Checks that t (read from a file: hostile) is `what` of the given type and
 * 2-D shape [d0 x d1] (n_dims 1: d0 only) with exactly the matching bytes. */
dsq_status dsq_pack_expect(const dsq_tensor *t, const char *what, dsq_type type, int n_dims, int64_t d0, int64_t d1);
/* Same for a scale tensor of any scale type; *type_out receives it. */
dsq_status dsq_pack_expect_scale(const dsq_tensor *t, const char *what, int64_t d0, int64_t d1, dsq_type *type_out);

/* Allocates an intq for unpacking: read group sizes need not be ones we
 * quantize with, so only sizes are checked here (dsq_intq_validate later). */
dsq_status dsq_pack_intq_alloc(int64_t rows, int64_t cols, int bits, int64_t group_size, int64_t n_groups, bool sym,
                               dsq_intq *q);

/* Copies 32-bit words of a file tensor into an aligned native array. */
dsq_status dsq_pack_load_words(const dsq_tensor *t, uint32_t **out);

#endif

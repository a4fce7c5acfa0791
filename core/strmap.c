#include "core/strmap.h"

#include <stdlib.h>
#include <string.h>

#include "core/grow.h"

static uint32_t hash_bytes(const char *s, size_t n)
{
    /* FNV-1a, folded from 64 bits. */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* The slot holding key, or the empty slot where it would go. */
static size_t find_slot(const dsq_strmap *m, const char *key, uint32_t len, uint32_t h)
{
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        uint32_t k = m->slots[i];
        if (!k) return i;
        const dsq_strmap_entry *e = &m->e[k - 1];
        if (e->hash == h && e->len == len && !memcmp(e->key, key, len)) return i;
    }
}

/* A slot table at most half full for cap entries, rebuilt from the entries. */
static dsq_status rebuild_slots(dsq_strmap *m)
{
    size_t size = 16;
    while (size < 2 * m->cap) {
        if (size > SIZE_MAX / 2 / sizeof *m->slots) return dsq_fail(DSQ_ERR_NOMEM, "string map: too many entries");
        size *= 2;
    }
    if (m->slots && size == m->mask + 1) return DSQ_OK;
    uint32_t *slots = calloc(size, sizeof *slots);
    if (!slots) return dsq_fail(DSQ_ERR_NOMEM, "string map: out of memory for %zu entries", m->cap);
    free(m->slots);
    m->slots = slots;
    m->mask = size - 1;
    for (size_t k = 0; k < m->n; k++)
        m->slots[find_slot(m, m->e[k].key, m->e[k].len, m->e[k].hash)] = (uint32_t)(k + 1);
    return DSQ_OK;
}

dsq_status dsq_strmap_reserve(dsq_strmap *m, size_t n)
{
    /* Slots hold entry index + 1 in 32 bits. */
    if (n >= UINT32_MAX) return dsq_fail(DSQ_ERR_NOMEM, "string map: %zu entries is too many", n);
    if (m->slots && n <= m->cap) return DSQ_OK;
    dsq_strmap_entry *e = dsq_grow(m->e, &m->cap, n, sizeof *e);
    if (!e) return dsq_fail(DSQ_ERR_NOMEM, "string map: out of memory for %zu entries", n);
    m->e = e;
    return rebuild_slots(m);
}

dsq_status dsq_strmap_put(dsq_strmap *m, const char *key, size_t len, int64_t val, int64_t *prev)
{
    if (prev) *prev = -1;
    if (len >= UINT32_MAX) return dsq_fail(DSQ_ERR_ARG, "string map: a key of %zu bytes is too long", len);
    uint32_t h = hash_bytes(key, len);
    if (m->slots) {
        size_t i = find_slot(m, key, (uint32_t)len, h);
        if (m->slots[i]) {
            if (prev) *prev = m->e[m->slots[i] - 1].val;
            return DSQ_OK;
        }
    }
    DSQ_TRY(dsq_strmap_reserve(m, m->n + 1));
    m->e[m->n] = (dsq_strmap_entry){key, (uint32_t)len, h, val};
    m->slots[find_slot(m, key, (uint32_t)len, h)] = (uint32_t)(++m->n);
    return DSQ_OK;
}

int64_t dsq_strmap_get(const dsq_strmap *m, const char *key, size_t len)
{
    if (!m->slots || len >= UINT32_MAX) return -1;
    size_t i = find_slot(m, key, (uint32_t)len, hash_bytes(key, len));
    return m->slots[i] ? m->e[m->slots[i] - 1].val : -1;
}

void dsq_strmap_free(dsq_strmap *m)
{
    free(m->slots);
    free(m->e);
    memset(m, 0, sizeof *m);
}

/* tiers.c — three-tier placement (tiers.h). */
#include "tiers.h"

#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "pi_err.h"

uint64_t tier_dense_bytes(const struct pi_model *m)
{
    uint64_t b = 0;
    for (size_t i = 0; i < gguf_n_tensors(m->gguf); i++)
        b += gguf_tensor(m->gguf, i)->nbytes;
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        const struct pi_layer *ly = &m->layers[l];
        const struct pi_tensor *ffn[] = { &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, &ly->ffn_down_t };
        for (size_t k = 0; k < sizeof ffn / sizeof ffn[0]; k++)
            if (ffn[k]->data)
                b -= (uint64_t)ffn[k]->row_bytes * (uint64_t)ffn[k]->ne[1];
    }
    return b;
}

int64_t tier_default_cache_slots(const struct pi_model *m) { return 2 * (int64_t)m->hp.n_ff; }

struct cand {
    float freq;
    int32_t layer, i;
};

/* hottest first; ties by (layer, neuron) ascending */
static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->freq != y->freq)
        return x->freq > y->freq ? -1 : 1;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

int tier_place(const struct pi_model *m, uint64_t budget, uint64_t record_bytes, int64_t cache_slots,
               const uint8_t *on_gpu, uint8_t *tier, struct tier_report *r)
{
    const int64_t L = m->hp.n_layer, F = m->hp.n_ff;
    struct tier_report rep = { .budget = budget, .record_bytes = record_bytes, .by_freq = true };
    rep.dense_bytes = tier_dense_bytes(m);
    rep.cache_bytes = (uint64_t)cache_slots * record_bytes;
    for (int64_t l = 0; l < L; l++)
        rep.by_freq &= m->layers[l].act_freq != NULL;
    if (record_bytes == 0 || cache_slots < F)
        return pi_fail(PI_E_INVAL, "tiers: a cache of %lld records of %llu bytes (at least one layer, %lld, is needed)",
                       (long long)cache_slots, (unsigned long long)record_bytes, (long long)F);
    if (rep.dense_bytes + rep.cache_bytes > budget)
        return pi_fail(PI_E_RANGE,
                       "tiers: --ram-budget %.3f GiB is below what is always resident: %.3f GiB dense weights + %.3f "
                       "GiB neuron cache",
                       (double)budget / (1 << 30), (double)rep.dense_bytes / (1 << 30),
                       (double)rep.cache_bytes / (1 << 30));
    struct cand *c = malloc((size_t)(L * F) * sizeof *c);
    if (!c)
        return pi_fail(PI_E_NOMEM, "tiers: out of memory");
    double total = 0;
    int64_t n = 0;
    uint64_t left = budget - rep.dense_bytes - rep.cache_bytes;
    for (int64_t l = 0; l < L; l++)
        for (int64_t i = 0; i < F; i++) {
            const float f = rep.by_freq ? m->layers[l].act_freq[i] : 0.0f;
            total += f;
            if (on_gpu && on_gpu[l * F + i]) { /* resident for gpud: counted first */
                tier[l * F + i] = PI_TIER_GPU;
                rep.gpu_neurons++;
                rep.gpu_share += f;
                continue;
            }
            tier[l * F + i] = PI_TIER_DISK;
            c[n++] = (struct cand){ .freq = f, .layer = (int32_t)l, .i = (int32_t)i };
        }
    rep.gpu_bytes = (uint64_t)rep.gpu_neurons * record_bytes;
    if (rep.gpu_bytes > left) {
        free(c);
        return pi_fail(PI_E_RANGE, "tiers: the GPU's %lld neurons (%.3f GiB) do not fit the RAM budget's %.3f GiB left",
                       (long long)rep.gpu_neurons, (double)rep.gpu_bytes / (1 << 30), (double)left / (1 << 30));
    }
    left -= rep.gpu_bytes;
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
    const int64_t fit = (int64_t)(left / record_bytes) < n ? (int64_t)(left / record_bytes) : n;
    for (int64_t k = 0; k < n; k++) {
        const bool ram = k < fit;
        tier[(int64_t)c[k].layer * F + c[k].i] = ram ? PI_TIER_RAM : PI_TIER_DISK;
        if (ram) {
            rep.ram_neurons++;
            rep.ram_share += c[k].freq;
        } else {
            rep.disk_neurons++;
            rep.disk_share += c[k].freq;
        }
    }
    free(c);
    rep.ram_bytes = (uint64_t)rep.ram_neurons * record_bytes;
    rep.disk_bytes = (uint64_t)rep.disk_neurons * record_bytes;
    if (total > 0) {
        rep.gpu_share /= total;
        rep.ram_share /= total;
        rep.disk_share /= total;
    }
    if (r)
        *r = rep;
    return 0;
}

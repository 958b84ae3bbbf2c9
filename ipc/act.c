/* act.c — layout of the act segment (see act.h). */
#include "act.h"

#include <sched.h>
#include <string.h>

#include "pi_err.h"
#include "futex.h"
#include "pipeline_layout.h"

#define ACT_ALIGN 64
#define SPLIT_BLOCK 32 /* gpu/cpu split granularity: one q8_0/q4_0 block of neurons, so that a
                          quantized activation block never mixes the two sides */
/* act_wait_dev gives the core away every this many polls (the ring's habit: a host with fewer cores
 * than spinning threads must still let the producer run) */
#define DEV_YIELD_POLLS 64

#include "cpu_relax.h"

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

struct act_offsets {
    uint64_t off[ACT_OFF_RING0 + ACT_RING_COUNT];
    uint64_t total;
};

static int act_compute(const struct act_params *p, struct act_offsets *o)
{
    if (p->n_layer <= 0 || p->n_embd <= 0 || p->n_ff <= 0 || p->n_batch <= 0 || p->n_layer > 1 << 16 ||
        !(p->gpu_ffn_share >= 0.0f && p->gpu_ffn_share <= 1.0f))
        return pi_fail(PI_E_INVAL, "act: invalid parameters (layers %d, embd %d, ff %d, batch %d, share %g)",
                       p->n_layer, p->n_embd, p->n_ff, p->n_batch, (double)p->gpu_ffn_share);
    const uint64_t B = (uint64_t)p->n_batch, E = (uint64_t)p->n_embd, F = (uint64_t)p->n_ff;
    const size_t rb = ring_bytes(ACT_RING_SLOTS, sizeof(struct act_item));
    uint64_t at = align_up(sizeof(struct pi_seg_header), ACT_ALIGN);
    o->off[ACT_OFF_HDR] = at;
    at = align_up(at + sizeof(struct act_hdr), ACT_ALIGN);
    o->off[ACT_OFF_H] = at;
    at = align_up(at + B * E * sizeof(float), ACT_ALIGN);
    o->off[ACT_OFF_MASK] = at; /* the masks, then cold_bits */
    at = align_up(at + align_up(B * F, ACT_ALIGN) + (uint64_t)act_cold_words((int64_t)F) * sizeof(uint64_t), ACT_ALIGN);
    o->off[ACT_OFF_YCOLD] = at;
    at = align_up(at + B * E * sizeof(float), ACT_ALIGN);
    o->off[ACT_OFF_GPU_IDX] = at;
    at = align_up(at + (uint64_t)p->n_layer * F, ACT_ALIGN);
    for (int r = 0; r < ACT_RING_COUNT; r++) {
        o->off[ACT_OFF_RING0 + r] = at;
        at = align_up(at + rb, ACT_ALIGN);
    }
    o->total = at;
    return 0;
}

size_t act_seg_bytes(const struct act_params *p)
{
    struct act_offsets o;
    return act_compute(p, &o) ? 0 : (size_t)o.total;
}

int act_seg_init(struct shm_seg *seg, const struct act_params *p)
{
    struct act_offsets o;
    int rc = act_compute(p, &o);
    if (rc)
        return rc;
    if (seg->size < o.total)
        return pi_fail(PI_E_RANGE, "act: segment of %zu bytes, layout needs %llu", seg->size,
                       (unsigned long long)o.total);
    struct pi_seg_header *sh = seg->hdr;
    sh->n_offsets = ACT_OFF_RING0 + ACT_RING_COUNT;
    for (unsigned i = 0; i < sh->n_offsets; i++)
        sh->offsets[i] = o.off[i];
    struct act_hdr *h = shm_at(seg, o.off[ACT_OFF_HDR], sizeof *h);
    h->n_layer = p->n_layer;
    h->n_embd = p->n_embd;
    h->n_ff = p->n_ff;
    h->n_batch = p->n_batch;
    h->gpu_ffn_share = p->gpu_ffn_share;
    /* The hot set: the first share of each layer's neurons, in whole blocks. Without activation
     * statistics (the sparsity issue brings them) any set is as good as another. */
    uint8_t *idx = shm_at(seg, o.off[ACT_OFF_GPU_IDX], (uint64_t)p->n_layer * p->n_ff);
    int64_t hot = (int64_t)((double)p->gpu_ffn_share * p->n_ff / SPLIT_BLOCK + 0.5) * SPLIT_BLOCK;
    if (hot > p->n_ff)
        hot = p->n_ff;
    for (int l = 0; l < p->n_layer; l++)
        for (int64_t i = 0; i < p->n_ff; i++)
            idx[(int64_t)l * p->n_ff + i] = i < hot;
    const size_t rb = ring_bytes(ACT_RING_SLOTS, sizeof(struct act_item));
    for (int r = 0; r < ACT_RING_COUNT; r++)
        if ((rc = ring_init(shm_at(seg, o.off[ACT_OFF_RING0 + r], rb), rb, ACT_RING_SLOTS, sizeof(struct act_item))))
            return rc;
    return 0;
}

int act_view_attach(struct act_view *v, struct shm_seg *seg)
{
    const struct pi_seg_header *sh = seg->hdr;
    memset(v, 0, sizeof *v);
    if (sh->n_offsets < ACT_OFF_RING0 + ACT_RING_COUNT)
        return pi_fail(PI_E_FORMAT, "act: segment has %u offsets", sh->n_offsets);
    v->hdr = shm_at(seg, sh->offsets[ACT_OFF_HDR], sizeof *v->hdr);
    if (!v->hdr)
        return pi_fail(PI_E_FORMAT, "act: header offset out of the segment");
    struct act_params p = { v->hdr->n_layer, v->hdr->n_embd, v->hdr->n_ff, v->hdr->n_batch, v->hdr->gpu_ffn_share };
    struct act_offsets o;
    int rc = act_compute(&p, &o);
    if (rc)
        return rc;
    for (unsigned i = 0; i < ACT_OFF_RING0 + ACT_RING_COUNT; i++)
        if (sh->offsets[i] != o.off[i])
            return pi_fail(PI_E_FORMAT, "act: offset %u is %llu, layout says %llu", i,
                           (unsigned long long)sh->offsets[i], (unsigned long long)o.off[i]);
    if (o.total > seg->size)
        return pi_fail(PI_E_FORMAT, "act: segment of %zu bytes is smaller than its layout", seg->size);
    const uint64_t B = (uint64_t)p.n_batch, E = (uint64_t)p.n_embd, F = (uint64_t)p.n_ff;
    v->h = shm_at(seg, o.off[ACT_OFF_H], B * E * sizeof(float));
    v->mask = shm_at(seg, o.off[ACT_OFF_MASK], B * F);
    v->cold_bits = (uint64_t *)shm_at(seg, o.off[ACT_OFF_MASK] + align_up(B * F, ACT_ALIGN),
                                      (uint64_t)act_cold_words(F) * sizeof(uint64_t));
    v->ycold = shm_at(seg, o.off[ACT_OFF_YCOLD], B * E * sizeof(float));
    v->gpu_idx = shm_at(seg, o.off[ACT_OFF_GPU_IDX], (uint64_t)p.n_layer * F);
    const size_t rb = ring_bytes(ACT_RING_SLOTS, sizeof(struct act_item));
    for (int r = 0; r < ACT_RING_COUNT; r++)
        if ((rc = ring_attach(&v->rings[r], shm_at(seg, o.off[ACT_OFF_RING0 + r], rb), rb)))
            return rc;
    return 0;
}

void act_ring_cpud_bell(struct act_hdr *h)
{
    /* The bump is ordered after the producer's ring_commit (release) by its own release; the
     * seq_cst exchange-free protocol: cpud sets cpud_sleeping (seq_cst), re-checks both rings,
     * then waits on the bell value it read before the re-check. We bump first, then read
     * cpud_sleeping with seq_cst: either cpud's re-check sees our commit, or we see its flag. */
    atomic_fetch_add_explicit(&h->cpud_bell, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&h->cpud_sleeping, memory_order_seq_cst))
        pi_futex_wake_all(&h->cpud_bell);
}

/* Wait until one of the device's keys says step it's inputs are there: want_h, h alone (dev_h_seq
 * or dev_seq), else h and the masks (dev_seq). */
static bool wait_keys(const struct act_hdr *h, const struct act_item *it, bool want_h, bool (*gone)(void *), void *arg,
                      uint32_t check_every)
{
    for (uint32_t polls = 1;; polls++) {
        /* acquire: pairs with the device's system-scope release of the key after writing what it covers */
        const uint64_t k = atomic_load_explicit(&h->dev_seq, memory_order_acquire);
        const uint64_t kh = want_h ? atomic_load_explicit(&h->dev_h_seq, memory_order_acquire) : 0;
        if (k == it->seq || (want_h && kh == it->seq))
            return true;
        if (k > it->seq || kh > it->seq || atomic_load_explicit(&h->cur_epoch, memory_order_relaxed) != it->epoch)
            return false;
        if (check_every && polls % check_every == 0 && gone && gone(arg))
            return false;
        if (polls % DEV_YIELD_POLLS == 0)
            sched_yield();
        else
            cpu_relax();
    }
}

bool act_wait_dev(const struct act_hdr *h, const struct act_item *it, bool (*gone)(void *), void *arg,
                  uint32_t check_every)
{
    return wait_keys(h, it, false, gone, arg, check_every);
}

bool act_wait_dev_h(const struct act_hdr *h, const struct act_item *it, bool (*gone)(void *), void *arg,
                    uint32_t check_every)
{
    return wait_keys(h, it, true, gone, arg, check_every);
}

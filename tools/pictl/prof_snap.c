/* prof_snap.c — profile counter copies and their per-layer, per-token readouts (prof_snap.h). */
#include "prof_snap.h"

#define NS_PER_US 1e3
#define NS_PER_MS 1e6
#define MB 1e6
#define GB 1e9

static void row_take(const struct pi_layer_prof *lp, struct prof_row *r)
{
    /* relaxed: profiling counters, nothing depends on their order */
    r->items = atomic_load_explicit(&lp->items, memory_order_relaxed);
    r->compute_ns = atomic_load_explicit(&lp->compute_ns, memory_order_relaxed);
    r->wait_ns = atomic_load_explicit(&lp->wait_ns, memory_order_relaxed);
    r->bytes = atomic_load_explicit(&lp->bytes, memory_order_relaxed);
}

void prof_snap_take(const struct pi_ctl *ctl, struct prof_snap *s)
{
    for (int k = 0; k < PI_STAGE_COUNT; k++) {
        const struct pi_stage_info *in = &ctl->stages[k];
        struct prof_stage *o = &s->st[k];
        o->total = (struct prof_row){ atomic_load_explicit(&in->items, memory_order_relaxed),
                                      atomic_load_explicit(&in->compute_ns, memory_order_relaxed),
                                      atomic_load_explicit(&in->wait_ns, memory_order_relaxed),
                                      atomic_load_explicit(&in->bytes, memory_order_relaxed) };
        for (int l = 0; l < PI_MAX_LAYERS; l++)
            row_take(&in->layers[l], &o->layers[l]);
        o->d2h_bytes = atomic_load_explicit(&in->d2h_bytes, memory_order_relaxed);
        o->h2d_bytes = atomic_load_explicit(&in->h2d_bytes, memory_order_relaxed);
    }
}

static struct prof_row diff(const struct prof_row *a, const struct prof_row *b)
{
    if (!a)
        return *b;
    return (struct prof_row){ b->items - a->items, b->compute_ns - a->compute_ns, b->wait_ns - a->wait_ns,
                              b->bytes - a->bytes };
}

json_t *prof_snap_span(const struct prof_snap *before, const struct prof_snap *after, int64_t n_layer,
                       int64_t n_tokens, uint64_t span_ns)
{
    const struct prof_stage *g1 = &after->st[PI_STAGE_GPUD], *c1 = &after->st[PI_STAGE_CPUD];
    const struct prof_stage *g0 = before ? &before->st[PI_STAGE_GPUD] : NULL;
    const struct prof_stage *c0 = before ? &before->st[PI_STAGE_CPUD] : NULL;
    if (n_layer > PI_MAX_LAYERS)
        n_layer = PI_MAX_LAYERS;
    json_t *rows = json_array();
    double gc = 0, gw = 0, cc = 0, cw = 0;
    for (int64_t l = 0; rows && l < n_layer; l++) {
        const struct prof_row g = diff(g0 ? &g0->layers[l] : NULL, &g1->layers[l]);
        const struct prof_row c = diff(c0 ? &c0->layers[l] : NULL, &c1->layers[l]);
        gc += (double)g.compute_ns, gw += (double)g.wait_ns, cc += (double)c.compute_ns, cw += (double)c.wait_ns;
        /* per item (one layer evaluation of one step): during decode one step is one token */
        const double gi = g.items ? (double)g.items : 1.0, ci = c.items ? (double)c.items : 1.0;
        json_array_append_new(rows, json_pack("{s:I, s:I, s:f, s:f, s:f, s:I, s:f, s:f, s:f}", "layer", (json_int_t)l,
                                              "gpud_items", (json_int_t)g.items, "gpud_compute_us",
                                              (double)g.compute_ns / gi / NS_PER_US, "gpud_wait_us",
                                              (double)g.wait_ns / gi / NS_PER_US, "gpud_mb", (double)g.bytes / gi / MB,
                                              "cpud_items", (json_int_t)c.items, "cpud_compute_us",
                                              (double)c.compute_ns / ci / NS_PER_US, "cpud_mb",
                                              (double)c.bytes / ci / MB, "cpud_share_of_gpud_items",
                                              g.items ? (double)c.items / (double)g.items : 0.0));
    }
    const double d2h = (double)(g1->d2h_bytes - (g0 ? g0->d2h_bytes : 0));
    const double h2d = (double)(g1->h2d_bytes - (g0 ? g0->h2d_bytes : 0));
    const double t = n_tokens > 0 ? (double)n_tokens : 1.0;
    /* cpud's waits are counted per stage, not per layer (it waits for whichever layer comes next) */
    cw = (double)diff(c0 ? &c0->total : NULL, &c1->total).wait_ns;
    json_t *j = json_pack("{s:I, s:f, s:o, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f}, s:f}", "tokens", (json_int_t)n_tokens,
                          "span_ms", (double)span_ns / NS_PER_MS, "per_layer", rows, "per_token", "gpud_compute_ms",
                          gc / t / NS_PER_MS, "gpud_wait_ms", gw / t / NS_PER_MS, "cpud_compute_ms", cc / t / NS_PER_MS,
                          "cpud_wait_ms", cw / t / NS_PER_MS, "wall_ms", (double)span_ns / t / NS_PER_MS, "pcie_d2h_mb", d2h / t / MB, "pcie_h2d_mb",
                          h2d / t / MB, "pcie_gb_s", span_ns ? (d2h + h2d) / GB / ((double)span_ns / 1e9) : 0.0);
    return j;
}

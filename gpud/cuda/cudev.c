/* cudev.c — the GPU executor's device context (see cudev.h; its insides: cudev_impl.h): whether a
 * GPU is usable, the placement of the weights and their upload, the scratch and KV arenas, memory by
 * kind, and the HBM read floor. The forward pass's parts: cudev_ops.c; the steps and decode graphs:
 * cudev_graph.c. */
#include "cudev_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuk_hand.h"
#include "cuk_mmv.h"
#include "cuk_topk.h"
#include "cudev_trace.h"
#include "sampling.h"
#include "vram_plan.h"

_Static_assert(CUK_TOPK_MAX == SAMP_BEST_MAX, "the device returns as many candidates as the sampler takes");
#include "pi_err.h"
#include "predictor.h"
#include "quant.h"

#define ALIGN 256
#define STAGE_BYTES ((size_t)64 << 20) /* pinned staging for the weight upload, two of them */

/* ---- the context ---- */

/* The kernels are built for compute capability 9.0 (gpud/cuda/meson.build: sm_90 code and compute_90
 * PTX, which newer GPUs compile at load) and the streamed decode kernel asks for ~223 KiB of shared
 * memory a block; a GPU without either would fail at the first launch, so it is refused here with
 * the reason, and `--backend auto` runs on the CPU instead. */
#define CUDEV_MIN_CC_MAJOR 9

bool cudev_available(char *why, size_t cap)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why)
            snprintf(why, cap, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return false;
    }
    struct cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) {
        if (why)
            snprintf(why, cap, "CUDA device 0: cannot read its properties: %s", cudaGetErrorString(e));
        return false;
    }
    if (prop.major < CUDEV_MIN_CC_MAJOR) {
        if (why)
            snprintf(why, cap, "CUDA device 0 (%s) has compute capability %d.%d; this build's kernels need %d.0 or "
                     "newer (Hopper)", prop.name, prop.major, prop.minor, CUDEV_MIN_CC_MAJOR);
        return false;
    }
    if (prop.sharedMemPerBlockOptin < cuk_mmv_block_smem()) { /* e.g. a GeForce Blackwell, ~100 KiB */
        if (why)
            snprintf(why, cap, "CUDA device 0 (%s) lets a block use %zu KiB of shared memory; the decode kernels "
                     "need %zu KiB", prop.name, prop.sharedMemPerBlockOptin / 1024, cuk_mmv_block_smem() / 1024);
        return false;
    }
    return true;
}

double cudev_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t al(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* Bump allocation inside an arena; with base NULL only counts. */
static void *take(void *base, size_t *used, size_t n)
{
    void *p = base ? (char *)base + *used : NULL;
    *used += al(n);
    return p;
}

static bool is_vec(const struct pi_tensor *t) { return t->data && t->ne[1] <= 1; }

/* Lay out (base NULL: count) one weight tensor in the arena: all its rows, or n_rows (>= 0) of them. */
static int w_place_n(struct cudev *d, const struct pi_tensor *t, struct cuk_w *w, int64_t n_rows)
{
    memset(w, 0, sizeof *w);
    if (!t->data)
        return 0;
    if (!cuk_type_ok(t->type))
        return pi_fail(PI_E_UNSUPPORTED, "cuda: tensor '%s' has type %s, which the GPU kernels do not support", t->name,
                       quant_traits(t->type) ? quant_traits(t->type)->name : "?");
    w->type = t->type;
    w->n_in = t->ne[0];
    w->n_out = n_rows >= 0 ? n_rows : t->ne[1];
    const size_t qb = cuk_w_qbytes(t->type, w->n_in, w->n_out), db = cuk_w_dbytes(t->type, w->n_in, w->n_out);
    if (!qb)
        return pi_fail(PI_E_UNSUPPORTED, "cuda: tensor '%s': row of %lld not a whole number of blocks", t->name,
                       (long long)w->n_in);
    w->q = take(d->w_arena, &d->w_used, qb);
    w->d = db ? take(d->w_arena, &d->w_used, db) : NULL;
    return 0;
}

static int w_place(struct cudev *d, const struct pi_tensor *t, struct cuk_w *w) { return w_place_n(d, t, w, -1); }

/* q, k, v of a layer stacked in the arena (q arrays, then scale arrays), so that one GEMV reads them. */
static int w_place_qkv(struct cudev *d, const struct pi_layer *l, struct cu_layer *c)
{
    const struct pi_tensor *t[3] = { &l->wq, &l->wk, &l->wv };
    struct cuk_w *w[3] = { &c->wq, &c->wk, &c->wv };
    memset(&c->wqkv, 0, sizeof c->wqkv);
    if (t[1]->type != t[0]->type || t[2]->type != t[0]->type || t[1]->ne[0] != t[0]->ne[0] ||
        t[2]->ne[0] != t[0]->ne[0] || !cuk_type_ok(t[0]->type)) {
        for (int i = 0; i < 3; i++)
            TRY(w_place(d, t[i], w[i]));
        return 0;
    }
    size_t qb[3], db[3], qs = 0, ds = 0;
    for (int i = 0; i < 3; i++) {
        qb[i] = cuk_w_qbytes(t[i]->type, t[i]->ne[0], t[i]->ne[1]);
        db[i] = cuk_w_dbytes(t[i]->type, t[i]->ne[0], t[i]->ne[1]);
        if (!qb[i])
            return pi_fail(PI_E_UNSUPPORTED, "cuda: tensor '%s': row not a whole number of blocks", t[i]->name);
        qs += qb[i], ds += db[i];
    }
    char *q = take(d->w_arena, &d->w_used, qs), *dd = ds ? take(d->w_arena, &d->w_used, ds) : NULL;
    for (int i = 0; i < 3; i++) {
        *w[i] = (struct cuk_w){ .type = t[i]->type, .n_in = t[i]->ne[0], .n_out = t[i]->ne[1], .q = q, .d = dd };
        if (q)
            q += qb[i];
        if (dd)
            dd += db[i];
    }
    c->wqkv = (struct cuk_w){ .type = t[0]->type, .n_in = t[0]->ne[0],
                              .n_out = t[0]->ne[1] + t[1]->ne[1] + t[2]->ne[1], .q = c->wq.q, .d = c->wq.d };
    return 0;
}

static int v_place(struct cudev *d, const struct pi_tensor *t, float **out)
{
    *out = NULL;
    if (!t->data)
        return 0;
    if (t->type != PI_TYPE_F32)
        return pi_fail(PI_E_UNSUPPORTED, "cuda: vector '%s' is not f32", t->name);
    *out = take(d->w_arena, &d->w_used, (size_t)t->ne[0] * sizeof(float));
    return 0;
}

/* The placed neurons of each layer (host lists; once, before the counting pass). */
static int place_neurons(struct cudev *d)
{
    const struct pi_model *m = d->m;
    const int64_t F = m->hp.n_ff;
    d->hot_neurons = 0;
    for (int il = 0; il < d->n_dev_layers; il++) {
        struct cu_layer *c = &d->L[il];
        const uint8_t *on = d->p.on_device ? d->p.on_device + (size_t)il * (size_t)F : NULL;
        int64_t n = F;
        if (on) {
            n = 0;
            for (int64_t i = 0; i < F; i++)
                n += on[i] != 0;
        }
        /* down columns of a file without ffn_down_t cannot be compacted: the whole FFN as soon as one
         * neuron is placed, masked by the caller (host_masked); none placed: no FFN on the device */
        c->compact = n < F && (m->layers[il].ffn_down_t.data || n == 0);
        c->host_masked = n < F && !c->compact;
        c->n_hot = c->compact ? n : F;
        d->hot_neurons += n;
        if (c->compact && n > 0) {
            if (!(c->h_hot = malloc((size_t)n * sizeof *c->h_hot)))
                return pi_fail(PI_E_NOMEM, "cuda: out of memory");
            for (int64_t i = 0, k = 0; i < F; i++)
                if (on[i])
                    c->h_hot[k++] = (int32_t)i;
        }
    }
    return 0;
}

static int place_all(struct cudev *d)
{
    const struct pi_model *m = d->m;
    const bool pred = !d->p.no_sparse && pred_available(m);
    const int32_t N = d->n_dev_layers;
    d->w_used = d->hot_used = d->pred_used = 0;
    if (N > 0)
        TRY(w_place(d, &m->token_embd, &d->tok_embd));
    if (N == m->hp.n_layer) {
        TRY(w_place(d, &m->output, &d->output));
        TRY(v_place(d, &m->output_norm, &d->output_norm));
    }
    bool down_t_all = true;
    for (int il = 0; il < N; il++) {
        const struct pi_layer *l = &m->layers[il];
        struct cu_layer *c = &d->L[il];
        TRY(w_place_qkv(d, l, c));
        TRY(w_place(d, &l->wo, &c->wo));
        size_t u0 = d->w_used;
        if (!c->compact) {
            TRY(w_place(d, &l->ffn_gate, &c->gate));
            TRY(w_place(d, &l->ffn_up, &c->up));
            /* with ffn_down_t both the GEMV and the cuBLAS path read down_t: ffn_down stays on the host */
            if (!l->ffn_down_t.data)
                TRY(w_place(d, &l->ffn_down, &c->down));
            TRY(w_place(d, &l->ffn_down_t, &c->down_t));
        } else if (c->n_hot > 0) {
            TRY(w_place_n(d, &l->ffn_gate, &c->gate, c->n_hot));
            TRY(w_place_n(d, &l->ffn_up, &c->up, c->n_hot));
            TRY(w_place_n(d, &l->ffn_down_t, &c->down_t, c->n_hot));
            c->hot_ids = take(d->w_arena, &d->w_used, (size_t)c->n_hot * sizeof(int32_t));
            c->cold_tab = take(d->w_arena, &d->w_used, vram_cold_table_bytes(m));
            d->hot_used += d->w_used - u0;
        } else {
            memset(&c->gate, 0, sizeof c->gate);
            memset(&c->up, 0, sizeof c->up);
            memset(&c->down_t, 0, sizeof c->down_t);
        }
        if (pred) {
            u0 = d->w_used;
            TRY(w_place(d, &l->fc1, &c->fc1));
            TRY(w_place(d, &l->fc2, &c->fc2));
            d->pred_used += d->w_used - u0;
            if (l->fc1.ne[1] > d->max_rank)
                d->max_rank = l->fc1.ne[1];
        }
        TRY(v_place(d, &l->attn_norm, &c->attn_norm));
        TRY(v_place(d, &l->ffn_norm, &c->ffn_norm));
        TRY(v_place(d, &l->bq, &c->bq));
        TRY(v_place(d, &l->bk, &c->bk));
        TRY(v_place(d, &l->bv, &c->bv));
        /* the tensors, not c's pointers: this also runs as the counting pass, before the arena exists */
        if (!l->ffn_down_t.data)
            down_t_all = false;
        if (!l->ffn_down.data && !l->ffn_down_t.data)
            return pi_fail(PI_E_NOTFOUND, "cuda: layer %d has neither ffn_down nor ffn_down_t", il);
    }
    d->sparse_ok = pred && down_t_all;
    return 0;
}

/* Upload one tensor through the pinned staging buffers (and a device buffer for Q repacking). */
struct upl {
    void *stage[2];
    cudaEvent_t ev[2];
    void *raw[2]; /* device: the two halves of the scratch arena (unused before the first step) */
    size_t bytes; /* of each staging buffer */
    int k;
};

/* rows: the tensor rows that make w's rows 0.. (NULL: all of them, in order) */
static int w_upload(struct cudev *d, struct upl *u, const struct pi_tensor *t, const struct cuk_w *w,
                    const int32_t *rows)
{
    if (!t->data || !w->q)
        return 0;
    const size_t row = t->row_bytes;
    const int64_t per = (int64_t)(u->bytes / row);
    if (per < 1)
        return pi_fail(PI_E_UNSUPPORTED, "cuda: row of '%s' exceeds the staging buffer", t->name);
    for (int64_t r0 = 0; r0 < w->n_out; r0 += per) {
        const int64_t nr = w->n_out - r0 < per ? w->n_out - r0 : per;
        const int k = u->k++ & 1;
        TRY(CU(cudaEventSynchronize(u->ev[k])));
        if (rows)
            for (int64_t r = 0; r < nr; r++)
                memcpy((char *)u->stage[k] + (size_t)r * row, (const char *)t->data + (size_t)rows[r0 + r] * row, row);
        else
            memcpy(u->stage[k], (const char *)t->data + (size_t)r0 * row, (size_t)nr * row);
        TRY(CU(cudaMemcpyAsync(u->raw[k], u->stage[k], (size_t)nr * row, cudaMemcpyHostToDevice, d->st)));
        TRY(CK(cuk_repack(w, u->raw[k], r0, nr, d->st)));
        TRY(CU(cudaEventRecord(u->ev[k], d->st)));
    }
    return 0;
}

static int v_upload(struct cudev *d, const struct pi_tensor *t, float *dst)
{
    if (!t->data)
        return 0;
    return CU(cudaMemcpy(dst, t->data, (size_t)t->ne[0] * sizeof(float), cudaMemcpyHostToDevice));
}

/* The layer's cold table from its hot ids, through the host */
static int upload_cold_table(const struct pi_model *m, const struct cu_layer *c)
{
    const size_t nb = vram_cold_table_bytes(m);
    uint64_t *tab = malloc(nb);
    if (!tab)
        return pi_fail(PI_E_NOMEM, "cuda: out of memory");
    cuk_cold_table(c->h_hot, c->n_hot, m->hp.n_ff, tab);
    const int rc = CU(cudaMemcpy(c->cold_tab, tab, nb, cudaMemcpyHostToDevice));
    free(tab);
    return rc;
}

static int upload_all(struct cudev *d)
{
    const struct pi_model *m = d->m;
    struct upl u = { 0 };
    int rc = 0;
    /* the device staging is the scratch arena's two halves: the upload needs no memory of its own */
    u.bytes = d->s_bytes / 2 / ALIGN * ALIGN;
    u.bytes = u.bytes < STAGE_BYTES ? u.bytes : STAGE_BYTES;
    for (int k = 0; k < 2 && !rc; k++) {
        if (!(rc = CU(cudaMallocHost(&u.stage[k], u.bytes))) && !(rc = CU(cudaEventCreate(&u.ev[k]))))
            rc = CU(cudaEventRecord(u.ev[k], d->st));
        u.raw[k] = (char *)d->s_arena + (size_t)k * u.bytes;
    }
    const double t0 = cudev_now_s();
    if (!rc)
        rc = w_upload(d, &u, &m->token_embd, &d->tok_embd, NULL);
    if (!rc)
        rc = w_upload(d, &u, &m->output, &d->output, NULL);
    if (!rc && d->output_norm)
        rc = v_upload(d, &m->output_norm, d->output_norm);
    for (int il = 0; !rc && il < d->n_dev_layers; il++) {
        const struct pi_layer *l = &m->layers[il];
        struct cu_layer *c = &d->L[il];
        const struct pi_tensor *ts[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->ffn_gate, &l->ffn_up, &l->ffn_down,
                                         &l->ffn_down_t, &l->fc1, &l->fc2 };
        const struct cuk_w *ws[] = { &c->wq, &c->wk, &c->wv, &c->wo, &c->gate, &c->up, &c->down, &c->down_t,
                                     &c->fc1, &c->fc2 };
        for (size_t i = 0; !rc && i < sizeof ts / sizeof ts[0]; i++) {
            const bool ffn_row = ts[i] == &l->ffn_gate || ts[i] == &l->ffn_up || ts[i] == &l->ffn_down_t;
            rc = w_upload(d, &u, ts[i], ws[i], c->compact && ffn_row ? c->h_hot : NULL);
        }
        if (!rc && c->hot_ids)
            rc = CU(cudaMemcpy(c->hot_ids, c->h_hot, (size_t)c->n_hot * sizeof(int32_t), cudaMemcpyHostToDevice));
        if (!rc && c->cold_tab)
            rc = upload_cold_table(m, c);
        const struct pi_tensor *vs[] = { &l->attn_norm, &l->ffn_norm, &l->bq, &l->bk, &l->bv };
        float *vd[] = { c->attn_norm, c->ffn_norm, c->bq, c->bk, c->bv };
        for (size_t i = 0; !rc && i < sizeof vs / sizeof vs[0]; i++)
            rc = v_upload(d, vs[i], vd[i]);
    }
    if (!rc)
        rc = CU(cudaStreamSynchronize(d->st));
    d->upload_s = cudev_now_s() - t0;
    for (int k = 0; k < 2; k++) {
        if (u.stage[k])
            cudaFreeHost(u.stage[k]);
        if (u.ev[k])
            cudaEventDestroy(u.ev[k]);
    }
    return rc;
}

static int64_t max_n_in(const struct cudev *d)
{
    const struct pi_hparams *hp = &d->m->hp;
    int64_t n = hp->n_embd > hp->n_ff ? hp->n_embd : hp->n_ff;
    const int64_t q = (int64_t)hp->n_head * hp->head_dim;
    return n > q ? n : q;
}

/* Scratch layout (base NULL: count). */
static void place_scratch(struct cudev *d)
{
    const struct pi_hparams *hp = &d->m->hp;
    const size_t B = (size_t)d->p.n_batch, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff,
                 Q = (size_t)hp->n_head * hp->head_dim, KV = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t Bg = B < CUK_AXPY_MAX_B ? B : CUK_AXPY_MAX_B, R = d->max_rank > 0 ? (size_t)d->max_rank : 1;
    void *s = d->s_arena;
    size_t *u = &d->s_used;
    *u = 0;
    d->batch = take(s, u, 3 * B * sizeof(int32_t));
    d->x = take(s, u, B * E * 4);
    d->xn = take(s, u, B * E * 4);
    d->q = take(s, u, B * Q * 4);
    d->k = take(s, u, B * KV * 4);
    d->v = take(s, u, B * KV * 4);
    d->att = take(s, u, B * Q * 4);
    d->pending = take(s, u, B * E * 4);
    d->ycold = take(s, u, B * E * 4);
    const bool blas = B > CUDEV_GEMV_MAX && d->p.blas_prefill;
    d->g = blas ? take(s, u, B * F * 4) : NULL; /* cuBLAS prefill only */
    d->u = blas ? take(s, u, B * F * 4) : NULL;
    d->act = take(s, u, B * F * 4);
    d->p1 = take(s, u, B * R * 4);
    d->mask = take(s, u, B * F);
    d->idx = take(s, u, B * F * 4);
    d->cnt = take(s, u, B * 4);
    d->part = take(s, u, cuk_axpy_part_floats((int64_t)F, (int64_t)E, (int)Bg) * 4);
    d->logits = take(s, u, B * (size_t)hp->n_vocab * 4);
    d->ids = take(s, u, B * CUK_TOPK_MAX * 4);
    d->tvals = take(s, u, B * CUK_TOPK_MAX * 4);
    d->tpart = take(s, u, cuk_topk_scratch_bytes((int)B, hp->n_vocab));
    d->xq = take(s, u, B * cuk_xq_row_bytes(max_n_in(d)));
    d->apart = take(s, u, cuk_attn_part_floats(&d->geom, (int)B) * sizeof(float));
    d->rope_inv = take(s, u, (size_t)(hp->rope_dim / 2 + 1) * sizeof(float));
    d->mask_c = take(s, u, B * F);
    if (blas) {
        d->xh = take(s, u, B * (size_t)max_n_in(d) * 2);
        /* the largest Q weight any layer could hold, dequantized for cuBLAS (the model's tensors, not
         * the placed ones: the scratch does not depend on the placement; vram_plan.c max_deq) */
        size_t big = 0;
        const bool pred = !d->p.no_sparse && pred_available(d->m);
        const struct pi_tensor *all[] = { &d->m->output, &d->m->token_embd };
        for (size_t i = 0; i < 2; i++)
            if (all[i]->data && cuk_w_dbytes(all[i]->type, 32, 1) && (size_t)(all[i]->ne[0] * all[i]->ne[1]) > big)
                big = (size_t)(all[i]->ne[0] * all[i]->ne[1]);
        for (int il = 0; il < hp->n_layer; il++) {
            const struct pi_layer *l = &d->m->layers[il];
            const struct pi_tensor *ts[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->ffn_gate, &l->ffn_up, &l->ffn_down,
                                             &l->ffn_down_t, &l->fc1, &l->fc2 };
            for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
                if ((ts[i] == &l->fc1 || ts[i] == &l->fc2) && !pred)
                    continue;
                if (ts[i]->data && cuk_w_dbytes(ts[i]->type, 32, 1) && (size_t)(ts[i]->ne[0] * ts[i]->ne[1]) > big)
                    big = (size_t)(ts[i]->ne[0] * ts[i]->ne[1]);
            }
        }
        d->wdeq = big ? take(s, u, big * 2) : NULL;
        d->blas_ws_bytes = (size_t)32 << 20;
        d->blas_ws = take(s, u, d->blas_ws_bytes);
    }
}

static uint64_t dev_used(void)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        return 0;
    return (uint64_t)(tot - fr);
}

/* The arenas against the device's free memory (after the context and cuBLAS took theirs): a start
 * that cannot fit fails with what it needs and what to change, as -PI_E_NOMEM (a restart would fail
 * the same way: the supervisor fails the start at once). 64 MiB of margin for what the runtime
 * allocates beside the arenas (graphs, the pinned staging is host memory). PINFER_CUDA_FREE_MIB=N
 * (tests) takes the free memory as at most N MiB, so a model "does not fit" on any device. */
static int check_fits(const struct cudev *d)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        return 0; /* the allocations will say */
    const char *cap = getenv("PINFER_CUDA_FREE_MIB");
    if (cap && *cap && (size_t)strtoull(cap, NULL, 10) << 20 < fr)
        fr = (size_t)strtoull(cap, NULL, 10) << 20;
    const size_t margin = (size_t)64 << 20, need = d->w_bytes + d->kv_bytes + d->s_bytes;
    if (need + margin <= fr)
        return 0;
    const double gib = (double)(1ull << 30);
    /* short enough for a stage's last_error (PI_MSG_MAX) behind "gpud cannot start: start: ..." */
    return pi_fail(PI_E_NOMEM,
                   "cuda: %.24s: %.2f GiB free of %.2f, needs %.2f (weights %.2f, KV cache %.2f for -c %d x %d, "
                   "scratch %.2f): lower -c or --parallel, or use --vram-budget / -ngl",
                   d->prop.name, (double)fr / gib, (double)tot / gib, (double)(need + margin) / gib,
                   (double)d->w_bytes / gib, (double)d->kv_bytes / gib, d->p.n_ctx, d->p.n_seq,
                   (double)d->s_bytes / gib);
}

void cudev_close(struct cudev *d)
{
    if (!d)
        return;
    cudev_report_calls("at close");
    if (d->n_captured) /* what the graphs cost their first steps (a new k, batch size or bucket) */
        fprintf(stderr, "cuda: %d decode graphs captured in %.1f ms\n", d->n_captured, d->capture_s * 1e3);
    /* a cold_add still waiting (its step abandoned on an error) must end before anything waits on
     * the stream: release every step */
    if (d->rel_blk)
        cudev_cold_release(d, UINT64_MAX);
    if (d->st)
        cudaStreamSynchronize(d->st);
    cudev_trace_close(d);
    for (int i = 0; i < 2; i++) {
        for (int b = 0; b < STEP_BUCKETS; b++)
            if (d->graph[i][b])
                cudaGraphExecDestroy(d->graph[i][b]);
        for (int n = 0; n <= CUDEV_GEMV_MAX; n++)
            for (int b = 0; b < STEP_BUCKETS; b++)
                for (int s = 0; s < 2; s++)
                    if (d->top_graph[n][i][b][s])
                        cudaGraphExecDestroy(d->top_graph[n][i][b][s]);
    }
    if (d->blas)
        cublasDestroy(d->blas);
    for (int i = 0; i < d->n_reg; i++)
        cudaHostUnregister(d->reg[i]);
    cudaFreeHost(d->rel_blk);
    cudaFree(d->w_arena);
    cudaFree(d->kv_arena);
    cudaFree(d->s_arena);
    cudaFreeHost(d->h_batch);
    cudaFreeHost(d->h_ids);
    cudaFreeHost(d->h_tvals);
    cudaFreeHost(d->h_cnt);
    if (d->st)
        cudaStreamDestroy(d->st);
    free(d->k_cache);
    free(d->v_cache);
    free(d->active);
    for (int il = 0; d->L && il < d->m->hp.n_layer; il++)
        free(d->L[il].h_hot);
    free(d->L);
    free(d);
}

int cudev_open(struct cudev **out, const struct pi_model *m, const struct cudev_params *p)
{
    char why[160];
    if (!cudev_available(why, sizeof why))
        return pi_fail(PI_E_UNSUPPORTED, "cuda: %s", why);
    const struct pi_hparams *hp = &m->hp;
    struct cudev *d = calloc(1, sizeof *d);
    if (!d)
        return pi_fail(PI_E_NOMEM, "cuda: out of memory");
    d->m = m;
    d->p = *p;
    d->pn = -1;
    if (d->p.n_seq < 1)
        d->p.n_seq = 1;
    if (d->p.n_batch < 1)
        d->p.n_batch = 64;
    if (d->p.n_ctx < 1)
        d->p.n_ctx = hp->n_ctx_train;
    if (!cuk_attn_ok(hp->head_dim) || hp->n_head % hp->n_head_kv) {
        free(d);
        return pi_fail(PI_E_UNSUPPORTED, "cuda: head size %d (%d heads, %d kv heads) not supported", hp->head_dim,
                       hp->n_head, hp->n_head_kv);
    }
    d->n_dev_layers = p->n_gpu_layers > 0 && p->n_gpu_layers < hp->n_layer ? p->n_gpu_layers : hp->n_layer;
    d->L = calloc((size_t)hp->n_layer, sizeof *d->L);
    d->k_cache = calloc((size_t)hp->n_layer, sizeof(void *));
    d->v_cache = calloc((size_t)hp->n_layer, sizeof(void *));
    int rc = 0;
    if (!d->L || !d->k_cache || !d->v_cache)
        rc = pi_fail(PI_E_NOMEM, "cuda: out of memory");
    if (!rc)
        rc = place_neurons(d);
    if (!rc)
        rc = CU(cudaSetDevice(0));
    if (!rc)
        rc = CU(cudaFree(0)); /* creates the context */
    if (!rc)
        rc = CU(cudaGetDeviceProperties(&d->prop, 0));
    if (!rc)
        rc = CU(cudaStreamCreateWithFlags(&d->st, cudaStreamNonBlocking));
    if (!rc && d->p.blas_prefill)
        rc = CB(cublasCreate(&d->blas));
    if (!rc && d->p.blas_prefill)
        rc = CB(cublasSetStream(d->blas, d->st));
    if (!rc)
        d->ctx_bytes = dev_used();
    /* the three arenas counted first (weights, KV cache, scratch), so that a model that does not fit
     * fails here naming what it needs, before any of them is allocated */
    if (!rc)
        rc = place_all(d);
    d->w_bytes = d->w_used;
    const size_t KV = (size_t)hp->n_head_kv * hp->head_dim, es = p->kv_f32 ? 4 : 2;
    const size_t per = al((size_t)d->p.n_seq * (size_t)d->p.n_ctx * KV * es);
    d->kv_bytes = per * 2 * (size_t)d->n_dev_layers;
    d->geom = (struct cuk_attn_geom){ .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                                      .rope_dim = hp->rope_dim, .rope_mode = (int)hp->rope_mode,
                                      .rope_theta = hp->rope_theta, .n_ctx = d->p.n_ctx, .n_seq = d->p.n_seq,
                                      .f16 = !p->kv_f32 };
    if (!rc) { /* (the scratch does not depend on geom.cluster, set below from the placed weights) */
        place_scratch(d);
        d->s_bytes = d->s_used;
        rc = check_fits(d);
    }
    /* weights */
    if (!rc)
        rc = CU(cudaMalloc(&d->w_arena, d->w_bytes));
    if (!rc)
        rc = place_all(d);
    d->geom.cluster = !rc && d->n_dev_layers > 0;
    for (int il = 0; d->geom.cluster && il < d->n_dev_layers; il++)
        d->geom.cluster &= cuk_attn_cluster_ok(d->L[il].wqkv.q ? &d->L[il].wqkv : NULL);
    /* KV cache */
    if (!rc)
        rc = CU(cudaMalloc(&d->kv_arena, d->kv_bytes));
    if (!rc)
        rc = CU(cudaMemset(d->kv_arena, 0, d->kv_bytes));
    for (int il = 0; !rc && il < d->n_dev_layers; il++) {
        d->k_cache[il] = (char *)d->kv_arena + per * (size_t)(2 * il);
        d->v_cache[il] = (char *)d->kv_arena + per * (size_t)(2 * il + 1);
    }
    /* scratch */
    if (!rc)
        rc = CU(cudaMalloc(&d->s_arena, d->s_bytes));
    if (!rc)
        place_scratch(d);
    /* the upload stages through the scratch arena, which is cleared after it */
    if (!rc)
        rc = upload_all(d);
    if (!rc)
        rc = CU(cudaMemset(d->s_arena, 0, d->s_bytes));
    if (!rc && d->blas_ws)
        rc = CB(cublasSetWorkspace(d->blas, d->blas_ws, d->blas_ws_bytes));
    if (!rc) { /* the CPU's inverse frequencies (ops_rope), so that both rotate by the same angles */
        const int half = hp->rope_dim / 2;
        float *inv = malloc((size_t)(half + 1) * sizeof *inv);
        if (!inv)
            rc = pi_fail(PI_E_NOMEM, "cuda: out of memory");
        for (int i = 0; !rc && i < half; i++)
            inv[i] = 1.0f / powf(hp->rope_theta, (float)(2 * i) / (float)hp->rope_dim);
        if (!rc)
            rc = CU(cudaMemcpy(d->rope_inv, inv, (size_t)half * sizeof *inv, cudaMemcpyHostToDevice));
        free(inv);
    }
    if (!rc)
        rc = CU(cudaMallocHost((void **)&d->h_batch, 3 * (size_t)d->p.n_batch * sizeof(int32_t)));
    if (!rc)
        rc = CU(cudaMallocHost((void **)&d->h_ids, (size_t)d->p.n_batch * CUK_TOPK_MAX * sizeof(int32_t)));
    if (!rc)
        rc = CU(cudaMallocHost((void **)&d->h_tvals, (size_t)d->p.n_batch * CUK_TOPK_MAX * sizeof(float)));
    if (!rc)
        rc = CU(cudaMallocHost((void **)&d->h_cnt, (size_t)d->p.n_batch * sizeof(int32_t)));
    if (!rc)
        cudev_trace_open(d); /* after the arenas: the ring is not in the plan's bytes (trace builds only) */
    if (!rc)
        rc = CU(cudaStreamSynchronize(d->st));
    if (rc) {
        cudev_close(d);
        return rc;
    }
    cudev_report_calls("at the end of open");
    *out = d;
    return 0;
}

void cudev_mem(const struct cudev *d, struct cudev_mem *mem)
{
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    *mem = (struct cudev_mem){ .weights = d->w_bytes - d->hot_used - d->pred_used, .hot = d->hot_used,
                               .pred = d->pred_used, .kv = d->kv_bytes, .scratch = d->s_bytes,
                               .context = d->ctx_bytes, .device_used = tot - fr, .device_total = tot,
                               .hot_neurons = d->hot_neurons, .upload_s = d->upload_s };
}

bool cudev_sparse_ok(const struct cudev *d) { return d->sparse_ok; }
bool cudev_ffn_compact(const struct cudev *d, int layer) { return !d->L[layer].host_masked; }
int32_t cudev_n_layers(const struct cudev *d) { return d->n_dev_layers; }
int64_t cudev_layer_hot(const struct cudev *d, int layer) { return d->L[layer].n_hot; }
const char *cudev_device_name(const struct cudev *d) { return d->prop.name; }


bool cudev_whole(const struct cudev *d)
{
    if (d->n_dev_layers < d->m->hp.n_layer)
        return false;
    for (int il = 0; il < d->n_dev_layers; il++)
        if (d->L[il].compact || d->L[il].host_masked)
            return false;
    return true;
}

int cudev_hbm_read(size_t bytes, int reps, double *gbps)
{
    void *buf = NULL;
    unsigned long long *sink = NULL;
    cudaEvent_t a = NULL, b = NULL;
    int rc = CU(cudaMalloc(&buf, bytes));
    if (!rc)
        rc = CU(cudaMalloc((void **)&sink, sizeof *sink));
    if (!rc)
        rc = CU(cudaMemset(buf, 0x5a, bytes)); /* not zeros */
    if (!rc)
        rc = CU(cudaEventCreate(&a));
    if (!rc)
        rc = CU(cudaEventCreate(&b));
    float best = 0;
    for (int r = -1; !rc && r < reps; r++) { /* r = -1: warm-up */
        rc = CU(cudaEventRecord(a, 0));
        if (!rc)
            rc = CK(cuk_read_bench(buf, bytes, sink, 0));
        if (!rc)
            rc = CU(cudaEventRecord(b, 0));
        if (!rc)
            rc = CU(cudaEventSynchronize(b));
        float ms = 0;
        if (!rc)
            rc = CU(cudaEventElapsedTime(&ms, a, b));
        if (!rc && r >= 0 && (best == 0 || ms < best))
            best = ms;
    }
    *gbps = best > 0 ? (double)bytes / (best * 1e-3) / 1e9 : 0;
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    cudaFree(buf);
    cudaFree(sink);
    return rc;
}

/* vram_plan.c — the CUDA backend's device memory, byte for byte (see vram_plan.h). The formulas
 * mirror gpud/cuda/cudev.c's arenas (place_all, place_scratch, the KV arena) and the kernels' own
 * size functions (cuk_w_qbytes/dbytes in cuk_weights.cu, cuk_xq_row_bytes in cuk_gemv.cu,
 * cuk_attn_part_floats in cuk_attn.cu, cuk_axpy_part_floats in cuk_sparse.cu); tests/test_hybrid.c
 * checks on the device that cudev allocates exactly these numbers. */
#include "vram_plan.h"

#include <string.h>

#include "pi_err.h"
#include "predictor.h"
#include "quant.h"
#include "sampling.h"

#define KV_TENSORS 2       /* K and V */
#define ATTN_CHUNK 32      /* cuk_attn_dev.cuh: cells per attention block */
#define ATTN_GROUP 64      /* cuk_attn_dev.cuh: tokens per attention launch pair */
#define AXPY_CHUNK 16      /* cuk.h CUK_AXPY_CHUNK */
#define QBLOCK 32          /* Q8_0 / Q4_0 block */
#define DEFAULT_BATCH 64   /* cudev's n_batch when none is given */
#define TOPK_SLICE 2048    /* cuk_topk.cu: a row's logits a slice, about */
#define TOPK_SLICES_MAX 64 /* cuk_topk.cu */

static uint64_t al(uint64_t n) { return (n + VRAM_ALIGN - 1) / VRAM_ALIGN * VRAM_ALIGN; }

/* elements per 16-byte lane load and quant bytes per lane group, as cuk_weights.cu's lane_elems/qbytes
 * (cuk_traits.cuh: E, 16 NQ); every quantized type but Q8_0 is one 16-byte word per 32 elements */
static bool lane(uint32_t type, int *elems, int *qbytes)
{
    switch (type) {
    case PI_TYPE_F32: *elems = 4, *qbytes = 16; return true;
    case PI_TYPE_F16: case PI_TYPE_BF16: *elems = 8, *qbytes = 16; return true;
    case PI_TYPE_Q8_0: *elems = 32, *qbytes = 32; return true;
    case PI_TYPE_Q4_0: case PI_TYPE_Q4_1: case PI_TYPE_Q5_0: case PI_TYPE_Q5_1: case PI_TYPE_IQ4_NL:
    case PI_TYPE_Q2_K: case PI_TYPE_Q3_K: case PI_TYPE_Q4_K: case PI_TYPE_Q5_K: case PI_TYPE_Q6_K:
    case PI_TYPE_IQ4_XS: *elems = 32, *qbytes = 16; return true;
    default: return false;
    }
}

static uint64_t r16(uint64_t n) { return (n + 15) / 16 * 16; }

/* side bytes of one row of nb lane blocks (cuk_traits.cuh sbytes: scales, mins, high bits; the
 * K-quants' per-super-block parts take ceil(nb / 8)) */
static uint64_t side_row(uint32_t type, uint64_t nb)
{
    const uint64_t sb = (nb + 7) / 8;
    switch (type) {
    case PI_TYPE_Q8_0: case PI_TYPE_Q4_0: return 2 * nb;
    case PI_TYPE_Q4_1: return r16(4 * nb);
    case PI_TYPE_Q5_0: return r16(6 * nb);
    case PI_TYPE_Q5_1: return r16(8 * nb);
    case PI_TYPE_IQ4_NL: return r16(2 * nb);
    case PI_TYPE_Q2_K: return r16(4 * sb);
    case PI_TYPE_Q3_K: return r16(2 * sb);
    case PI_TYPE_Q4_K: return r16(2 * nb + 4 * sb);
    case PI_TYPE_Q5_K: return r16(6 * nb + 4 * sb);
    case PI_TYPE_Q6_K: return r16(10 * nb + 2 * sb);
    case PI_TYPE_IQ4_XS: return r16(nb + 2 * sb);
    default: return 0;
    }
}

static bool has_scales(uint32_t type) { return side_row(type, 1) > 0; }

static uint64_t q_bytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    int e, qb;
    const struct pi_type_traits *tt = quant_traits(type);
    if (!lane(type, &e, &qb) || n_in % e || (tt && n_in % tt->blck_size))
        return 0;
    return (uint64_t)(n_in / e) * (uint64_t)qb * (uint64_t)n_out;
}

static uint64_t d_bytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    return side_row(type, (uint64_t)(n_in / QBLOCK)) * (uint64_t)n_out;
}

uint64_t vram_tensor_bytes(uint32_t type, int64_t n_in, int64_t n_out)
{
    const uint64_t q = q_bytes(type, n_in, n_out), d = d_bytes(type, n_in, n_out);
    return q ? al(q) + (d ? al(d) : 0) : 0;
}

static uint64_t t_bytes(const struct pi_tensor *t)
{
    return t->data ? vram_tensor_bytes(t->type, t->ne[0], t->ne[1]) : 0;
}

/* an f32 vector (norm, bias) */
static uint64_t v_bytes(const struct pi_tensor *t) { return t->data ? al((uint64_t)t->ne[0] * sizeof(float)) : 0; }

static int t_check(const struct pi_tensor *t)
{
    if (!t->data || (t->ne[1] <= 1 && t->type == PI_TYPE_F32))
        return 0;
    if (!q_bytes(t->type, t->ne[0], t->ne[1] > 0 ? t->ne[1] : 1)) {
        const struct pi_type_traits *tt = quant_traits(t->type);
        return pi_fail(PI_E_UNSUPPORTED, "vram plan: tensor '%s' has type %s, which the GPU kernels do not support",
                       t->name, tt ? tt->name : "?");
    }
    return 0;
}

/* q, k, v stacked into one array pair when they share type and input width (cudev w_place_qkv) */
static uint64_t qkv_bytes(const struct pi_layer *l)
{
    const struct pi_tensor *t[3] = { &l->wq, &l->wk, &l->wv };
    if (t[1]->type == t[0]->type && t[2]->type == t[0]->type && t[1]->ne[0] == t[0]->ne[0] &&
        t[2]->ne[0] == t[0]->ne[0] && q_bytes(t[0]->type, t[0]->ne[0], 1)) {
        uint64_t qs = 0, ds = 0;
        for (int i = 0; i < 3; i++) {
            qs += q_bytes(t[i]->type, t[i]->ne[0], t[i]->ne[1]);
            ds += d_bytes(t[i]->type, t[i]->ne[0], t[i]->ne[1]);
        }
        return al(qs) + (ds ? al(ds) : 0);
    }
    return t_bytes(t[0]) + t_bytes(t[1]) + t_bytes(t[2]);
}

bool vram_layer_compactable(const struct pi_model *m, int layer) { return m->layers[layer].ffn_down_t.data != NULL; }

uint64_t vram_ffn_whole_bytes(const struct pi_model *m, int layer)
{
    const struct pi_layer *l = &m->layers[layer];
    /* with ffn_down_t, ffn_down is never read on the device (both the GEMV and the cuBLAS path use
     * down_t), so it is not uploaded */
    const uint64_t down = l->ffn_down_t.data ? t_bytes(&l->ffn_down_t) : t_bytes(&l->ffn_down);
    return t_bytes(&l->ffn_gate) + t_bytes(&l->ffn_up) + down;
}

uint64_t vram_hot_bytes(const struct pi_model *m, int layer, int64_t n_hot)
{
    const struct pi_layer *l = &m->layers[layer];
    if (n_hot <= 0)
        return 0;
    if (n_hot >= m->hp.n_ff || !vram_layer_compactable(m, layer))
        return vram_ffn_whole_bytes(m, layer);
    return vram_tensor_bytes(l->ffn_gate.type, l->ffn_gate.ne[0], n_hot) +
           vram_tensor_bytes(l->ffn_up.type, l->ffn_up.ne[0], n_hot) +
           vram_tensor_bytes(l->ffn_down_t.type, l->ffn_down_t.ne[0], n_hot) + al((uint64_t)n_hot * sizeof(int32_t)) +
           al(vram_cold_table_bytes(m));
}

uint64_t vram_cold_table_bytes(const struct pi_model *m) { return (uint64_t)(m->hp.n_ff + 63) / 64 * sizeof(uint64_t); }

uint64_t vram_neuron_bytes(const struct pi_model *m, int layer)
{
    const struct pi_layer *l = &m->layers[layer];
    const struct pi_tensor *down = l->ffn_down_t.data ? &l->ffn_down_t : NULL;
    uint64_t b = q_bytes(l->ffn_gate.type, l->ffn_gate.ne[0], 1) + d_bytes(l->ffn_gate.type, l->ffn_gate.ne[0], 1) +
                 q_bytes(l->ffn_up.type, l->ffn_up.ne[0], 1) + d_bytes(l->ffn_up.type, l->ffn_up.ne[0], 1);
    if (down)
        b += q_bytes(down->type, down->ne[0], 1) + d_bytes(down->type, down->ne[0], 1) + sizeof(int32_t);
    return b;
}

uint64_t vram_hot_slack(const struct pi_model *m, int layer)
{
    const struct pi_layer *l = &m->layers[layer];
    /* each array rounds up by less than VRAM_ALIGN: quant and scale arrays of gate, up, down_t, ids;
     * and the cold table, whatever the number of neurons */
    const int arrays = (has_scales(l->ffn_gate.type) ? 2 : 1) + (has_scales(l->ffn_up.type) ? 2 : 1) +
                       (l->ffn_down_t.data && has_scales(l->ffn_down_t.type) ? 2 : 1) + 1;
    return (uint64_t)arrays * (VRAM_ALIGN - 1) + al(vram_cold_table_bytes(m));
}

static void norm_params(const struct pi_model *m, const struct vram_params *p, struct vram_params *o)
{
    *o = *p;
    if (o->n_ctx <= 0)
        o->n_ctx = m->hp.n_ctx_train;
    if (o->n_seq <= 0)
        o->n_seq = 1;
    if (o->n_batch <= 0)
        o->n_batch = DEFAULT_BATCH;
}

uint64_t vram_kv_bytes(const struct pi_model *m, const struct vram_params *p0, int32_t n_layers)
{
    struct vram_params p;
    norm_params(m, p0, &p);
    const uint64_t kv = (uint64_t)m->hp.n_head_kv * (uint64_t)m->hp.head_dim, es = p.kv_f32 ? 4 : 2;
    const uint64_t per = al((uint64_t)p.n_seq * (uint64_t)p.n_ctx * kv * es);
    return per * KV_TENSORS * (uint64_t)n_layers;
}

static int64_t max_n_in(const struct pi_hparams *hp)
{
    int64_t n = hp->n_embd > hp->n_ff ? hp->n_embd : hp->n_ff;
    const int64_t q = (int64_t)hp->n_head * hp->head_dim;
    return n > q ? n : q;
}

static bool pred_on(const struct pi_model *m, const struct vram_params *p)
{
    return !p->no_sparse && pred_available(m);
}

/* the largest Q weight any layer could put on the device, dequantized to f16 for cuBLAS */
static uint64_t max_deq(const struct pi_model *m, const struct vram_params *p)
{
    uint64_t big = 0;
    const struct pi_tensor *top[] = { &m->output, &m->token_embd };
    for (int i = 0; i < 2; i++)
        if (top[i]->data && has_scales(top[i]->type) && (uint64_t)(top[i]->ne[0] * top[i]->ne[1]) > big)
            big = (uint64_t)(top[i]->ne[0] * top[i]->ne[1]);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct pi_layer *l = &m->layers[il];
        const struct pi_tensor *ts[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->ffn_gate, &l->ffn_up, &l->ffn_down,
                                         &l->ffn_down_t, &l->fc1, &l->fc2 };
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            if ((ts[i] == &l->fc1 || ts[i] == &l->fc2) && !pred_on(m, p))
                continue;
            if (ts[i]->data && has_scales(ts[i]->type) && (uint64_t)(ts[i]->ne[0] * ts[i]->ne[1]) > big)
                big = (uint64_t)(ts[i]->ne[0] * ts[i]->ne[1]);
        }
    }
    return big;
}

/* cuk_topk_scratch_bytes: the (key, id) candidates of a row's slices (cuk_topk.cu topk_slices_max) */
static uint64_t topk_scratch(uint64_t B, int64_t n)
{
    int64_t g = (n + TOPK_SLICE - 1) / TOPK_SLICE;
    g = g > TOPK_SLICES_MAX ? TOPK_SLICES_MAX : g;
    g = g > n / SAMP_BEST_MAX ? n / SAMP_BEST_MAX : g;
    return g > 1 ? B * (uint64_t)g * SAMP_BEST_MAX * 8 : 0;
}

uint64_t vram_scratch_bytes(const struct pi_model *m, const struct vram_params *p0)
{
    struct vram_params p;
    norm_params(m, p0, &p);
    const struct pi_hparams *hp = &m->hp;
    const uint64_t B = (uint64_t)p.n_batch, E = (uint64_t)hp->n_embd, F = (uint64_t)hp->n_ff,
                   Q = (uint64_t)hp->n_head * (uint64_t)hp->head_dim, KV = (uint64_t)hp->n_head_kv * hp->head_dim;
    const uint64_t Bg = B < VRAM_GEMV_MAX ? B : VRAM_GEMV_MAX;
    int64_t rank = 0;
    if (pred_on(m, &p))
        for (int il = 0; il < hp->n_layer; il++)
            rank = m->layers[il].fc1.ne[1] > rank ? m->layers[il].fc1.ne[1] : rank;
    const uint64_t R = rank > 0 ? (uint64_t)rank : 1;
    const uint64_t n_in = (uint64_t)max_n_in(hp);
    /* cuk_xq_row_bytes: the Q8 row or the tensor-core kernels' f16 hi/lo split row, the larger */
    const uint64_t xq_q8 = (n_in + n_in / 32 * 8 + 15) / 16 * 16, xq_h = 4 * n_in + 16;
    const uint64_t xq_row = xq_q8 > xq_h ? xq_q8 : xq_h;
    const uint64_t nch = ((uint64_t)p.n_ctx + ATTN_CHUNK - 1) / ATTN_CHUNK, nt = B < ATTN_GROUP ? B : ATTN_GROUP;
    uint64_t s = 0;
    s += al(3 * B * sizeof(int32_t));               /* batch */
    s += al(B * E * 4) * 2;                          /* x, xn */
    s += al(B * Q * 4) + al(B * KV * 4) * 2;         /* q, k, v */
    s += al(B * Q * 4);                              /* att */
    s += al(B * E * 4) * 2;                          /* pending, ycold */
    const bool blas = B > VRAM_GEMV_MAX && p.blas_prefill; /* cudev.c: only then g, u, xh, wdeq, workspace */
    s += al(B * F * 4) * (blas ? 3 : 1);             /* (g, u), act */
    s += al(B * R * 4);                              /* p1 */
    s += al(B * F);                                  /* mask */
    s += al(B * F * 4) + al(B * 4);                  /* idx, cnt */
    s += al((F + AXPY_CHUNK - 1) / AXPY_CHUNK * E * Bg * 4); /* part */
    s += al(B * (uint64_t)hp->n_vocab * 4);          /* logits */
    s += al(B * SAMP_BEST_MAX * 4) * 2;              /* ids, tvals (topk's candidates) */
    s += al(topk_scratch(B, hp->n_vocab));           /* tpart: topk's slices' candidates */
    s += al(B * xq_row);                             /* xq: every token of a batch (the tiled GEMV) */
    /* apart: the split-K attention's arrival counters, then its partials */
    s += al((ATTN_GROUP + nt * nch * ((uint64_t)hp->head_dim + 2)) * (uint64_t)hp->n_head * sizeof(float));
    s += al(((uint64_t)hp->rope_dim / 2 + 1) * sizeof(float)); /* rope_inv */
    s += al(B * F);                                  /* mask_c: masks of the compacted hot rows */
    if (blas) {
        s += al(B * n_in * 2);                       /* xh */
        const uint64_t big = max_deq(m, &p);
        s += big ? al(big * 2) : 0;                  /* wdeq */
        s += al(VRAM_BLAS_WS);                       /* cuBLAS workspace */
    }
    return s;
}

int vram_plan_make(const struct pi_model *m, const struct vram_params *p0, const uint8_t *on_device,
                   struct vram_plan *out)
{
    struct vram_params p;
    norm_params(m, p0, &p);
    const struct pi_hparams *hp = &m->hp;
    const int32_t L = hp->n_layer;
    const int64_t F = hp->n_ff;
    memset(out, 0, sizeof *out);
    int rc;
    if ((rc = t_check(&m->token_embd)) || (rc = t_check(&m->output)))
        return rc;
    const bool whole = p.whole_layers;
    const int32_t N = whole ? (p.n_gpu_layers < 0 ? 0 : p.n_gpu_layers < L ? p.n_gpu_layers : L) : L;
    const bool pred = pred_on(m, &p);
    out->whole_layers = whole;
    out->n_gpu_layers = N;
    out->neurons_all = (int64_t)L * F;
    /* embeddings run on the device when its first layer is there, the output when its last is */
    if (N > 0)
        out->weights += t_bytes(&m->token_embd);
    if (N == L)
        out->weights += t_bytes(&m->output) + v_bytes(&m->output_norm);
    for (int il = 0; il < N; il++) {
        const struct pi_layer *l = &m->layers[il];
        const struct pi_tensor *ts[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->ffn_gate, &l->ffn_up, &l->ffn_down,
                                         &l->ffn_down_t, &l->fc1, &l->fc2 };
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            if ((rc = t_check(ts[i])))
                return rc;
        out->weights += qkv_bytes(l) + t_bytes(&l->wo) + v_bytes(&l->attn_norm) + v_bytes(&l->ffn_norm) +
                        v_bytes(&l->bq) + v_bytes(&l->bk) + v_bytes(&l->bv);
        if (pred)
            out->pred += t_bytes(&l->fc1) + t_bytes(&l->fc2);
        int64_t n_hot = F;
        if (!whole && on_device) {
            n_hot = 0;
            for (int64_t i = 0; i < F; i++)
                n_hot += on_device[(size_t)il * (size_t)F + (size_t)i] != 0;
        }
        /* a layer that cannot be compacted holds its whole FFN as soon as one neuron is placed */
        if (n_hot > 0 && !vram_layer_compactable(m, il))
            n_hot = F;
        if (n_hot == F)
            out->weights += vram_ffn_whole_bytes(m, il);
        else
            out->hot += vram_hot_bytes(m, il, n_hot);
        out->neurons += n_hot;
    }
    out->kv = vram_kv_bytes(m, &p, N);
    out->scratch = vram_scratch_bytes(m, &p);
    out->reserve = p.reserve;
    out->fixed = out->weights + out->pred + out->kv + out->scratch + out->reserve;
    out->total = out->fixed + out->hot;
    return 0;
}

int32_t vram_max_layers(const struct pi_model *m, const struct vram_params *p, uint64_t budget)
{
    struct vram_params q = *p;
    int32_t best = 0;
    q.whole_layers = true;
    /* the plan grows with N (each layer adds weights and KV; the output joins at N = n_layer) */
    for (int32_t n = 1; n <= m->hp.n_layer; n++) {
        struct vram_plan pl;
        q.n_gpu_layers = n;
        if (vram_plan_make(m, &q, NULL, &pl) || pl.total > budget)
            break;
        best = n;
    }
    return best;
}

uint64_t vram_default_budget(uint64_t device_free)
{
    return device_free > VRAM_FREE_MARGIN ? device_free - VRAM_FREE_MARGIN : 0;
}

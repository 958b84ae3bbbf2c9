/* synth.c — the synthetic model writer: tensor plan, row generators, streaming to a GGUF/PWRI file.
 * synth.h explains the construction; every element comes from the counter-based PRNG of
 * synth_internal.h, so rows are generated in parallel and in any layout (ffn_down and ffn_down_t
 * hold the same numbers). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf.h"
#include "pi_err.h"
#include "quant.h"
#include "quantize.h"
#include "synth_internal.h"
#include "threadpool.h"

#define SYN_ALIGNMENT 32u
#define SYN_QUANT_VERSION 2u       /* ggml's GGML_QNT_VERSION, as llama.cpp writes it */
#define SYN_ROPE_THETA 10000.0f
#define SYN_NORM_EPS 1e-6f
#define SYN_EMB_JUNK 0.05f         /* amplitude of the embedding's junk dims (they never reach a gate) */
#define SYN_W_SCALE 1.0f           /* q, k, v, up, output: uniform(-1, 1) * scale / sqrt(n_in) */
#define SYN_RESID_SCALE 0.5f       /* attention output and down projection into the junk dims */
/* Weight of the always-positive dim 0 in the output rows of <unk> <s> </s>: a large negative logit,
 * so generation never stops or emits control tokens by chance. */
#define SYN_CONTROL_OUT_W (-16.0f)
#define SYN_NAME_MAX 64
#define SYN_TWO_PI 6.283185307179586
/* Slices of a tensor's rows per thread, claimed by whichever thread is free (see
 * tools/quantize/quantize.c): rows are generated from their index alone, so the split changes no
 * byte. Each slice has its own scratch. */
#define SYN_SLICES_PER_THREAD 4

/* ggml "ftype" (general.file_type) of the dominant weight type. */
enum syn_ftype { SYN_FTYPE_F32 = 0, SYN_FTYPE_F16 = 1, SYN_FTYPE_Q4_0 = 2, SYN_FTYPE_Q8_0 = 7 };

/* What a tensor holds; also part of its PRNG key, so values stay fixed when this list grows at
 * the end. */
enum syn_kind {
    SK_EMBD = 1, SK_OUTPUT = 2, SK_NORM = 3, SK_Q = 4, SK_K = 5, SK_V = 6, SK_O = 7,
    SK_GATE = 8, SK_UP = 9, SK_DOWN = 10, SK_DOWN_T = 11, SK_FC1 = 12, SK_FC2 = 13, SK_ACT_FREQ = 14,
};

struct syn_tensor {
    char name[SYN_NAME_MAX];
    enum syn_kind kind;
    int layer;
    uint32_t type;
    uint32_t gate_type; /* SK_FC2: the type of its layer's ffn_gate (fc2 is derived from its stored rows) */
    uint32_t n_dims;
    int64_t ne[2]; /* ne[0] = row length; ne[1] = rows (1 for a vector) */
};

/* Per-thread scratch. */
struct syn_scratch {
    float *row, *row2; /* max(E, F, rank) floats */
    void *q;           /* one quantized gate row */
};

struct syn_gen {
    const struct synth_opts *o;
    struct synth_design d;
    int32_t E, F, Q, KV, S_END; /* S_END = SYNTH_SUB_OFF + sub_dim: dims attention and FFN never write */
    struct synth_quantile quant;
    double *rank_p;   /* (F) firing probability by rank, descending */
    int32_t *perm;    /* (F) rank of neuron i in perm_layer */
    int perm_layer;
    struct syn_scratch *scr; /* (n_slices) */
    int n_slices;
    /* the job of one pool_run */
    const struct syn_tensor *t;
    uint8_t *buf;
    size_t row_bytes;
};

/* ---- values ---- */

static uint64_t syn_row_key(const struct syn_gen *g, enum syn_kind k, int layer, int64_t row)
{
    return syn_key(g->o->seed, (uint64_t)k << 32 | (uint32_t)layer, (uint64_t)row);
}

/* A standard normal from stream indices 2j, 2j+1 (Box-Muller). */
static double syn_normal(uint64_t key, int64_t j)
{
    double u1 = syn_open01(key, 2 * (uint64_t)j), u2 = syn_open01(key, 2 * (uint64_t)j + 1);
    return sqrt(-2.0 * log(u1)) * cos(SYN_TWO_PI * u2);
}

/* x[0..n) = a uniform random direction times radius. */
static void syn_direction(uint64_t key, float *x, int32_t n, double radius)
{
    double ss = 0.0;
    for (int32_t j = 0; j < n; j++) {
        double v = syn_normal(key, j);
        x[j] = (float)v;
        ss += v * v;
    }
    float s = (float)(radius / sqrt(ss));
    for (int32_t j = 0; j < n; j++)
        x[j] *= s;
}

/* The down projection of a layer is one stream: element (out e, neuron i) at index i E + e, so
 * ffn_down (rows e) and ffn_down_t (rows i) hold the same numbers. */
static uint64_t syn_down_key(const struct syn_gen *g, int layer)
{
    return syn_key(g->o->seed, (uint64_t)SK_DOWN << 32 | (uint32_t)layer, 0);
}

static float syn_down(const struct syn_gen *g, uint64_t key, int64_t e, int64_t i)
{
    if (e < g->S_END)
        return 0.0f;
    return syn_uniform(key, (uint64_t)i * (uint64_t)g->E + (uint64_t)e) * (SYN_RESID_SCALE / sqrtf((float)g->F));
}

static void syn_store(uint32_t type, const float *row, void *dst, int64_t n)
{
    if (type == PI_TYPE_F32)
        memcpy(dst, row, (size_t)n * sizeof(float));
    else
        quant_traits(type)->from_float(row, dst, n);
}

static void syn_load(uint32_t type, const void *src, float *row, int64_t n)
{
    if (type == PI_TYPE_F32)
        memcpy(row, src, (size_t)n * sizeof(float));
    else
        quant_traits(type)->to_float(src, row, n);
}

static double syn_norm(const float *x, int32_t n)
{
    double ss = 0.0;
    for (int32_t j = 0; j < n; j++)
        ss += (double)x[j] * x[j];
    return sqrt(ss);
}

/* Rank permutation of a layer: Fisher-Yates from the layer's key. */
static void syn_set_layer(struct syn_gen *g, int layer)
{
    if (g->perm_layer == layer)
        return;
    uint64_t key = syn_key(g->o->seed, (uint64_t)SK_GATE << 32 | (uint32_t)layer, UINT32_MAX);
    for (int32_t i = 0; i < g->F; i++)
        g->perm[i] = i;
    for (int32_t i = g->F - 1; i > 0; i--) {
        int32_t j = (int32_t)(syn_u64(key, (uint64_t)i) % (uint64_t)(i + 1));
        int32_t t = g->perm[i];
        g->perm[i] = g->perm[j];
        g->perm[j] = t;
    }
    g->perm_layer = layer;
}

/* Gate row i of a layer, quantized into dst (row_bytes of type) and dequantized into row (E):
 * b_i at dim 0, a unit direction at the subspace dims, so that neuron i fires with p_i. */
static void syn_gate_row(const struct syn_gen *g, uint32_t type, int layer, int64_t i, float *row, void *dst)
{
    const int32_t d = g->d.sub_dim;
    memset(row, 0, (size_t)g->E * sizeof *row);
    syn_direction(syn_row_key(g, SK_GATE, layer, i), row + SYNTH_SUB_OFF, d, 1.0);
    syn_store(type, row, dst, g->E);
    syn_load(type, dst, row, g->E);
    /* cos(â, z) > x fires with p: b = -x |â| (c_t = |z_t| in the embedding). Dim 0 is alone in its
     * block, so storing again changes nothing else. */
    double x = synth_quantile_upper(&g->quant, g->rank_p[g->perm[i]]);
    row[0] = (float)(-x * syn_norm(row + SYNTH_SUB_OFF, d));
    syn_store(type, row, dst, g->E);
    syn_load(type, dst, row, g->E);
}

/* Embedding row: c_t = |z_t| at dim 0, z_t (radius sqrt(d)) in the subspace, junk after. */
static void syn_embd_row(const struct syn_gen *g, uint32_t type, int64_t t, float *row, void *dst)
{
    const int32_t d = g->d.sub_dim;
    uint64_t key = syn_row_key(g, SK_EMBD, 0, t);
    memset(row, 0, (size_t)g->E * sizeof *row);
    syn_direction(key, row + SYNTH_SUB_OFF, d, sqrt((double)d));
    for (int32_t e = g->S_END; e < g->E; e++)
        row[e] = SYN_EMB_JUNK * syn_uniform(key, (uint64_t)(2 * d + e));
    syn_store(type, row, dst, g->E);
    syn_load(type, dst, row, g->E);
    row[0] = (float)syn_norm(row + SYNTH_SUB_OFF, d); /* of the stored z_t, so the bias matches it */
    syn_store(type, row, dst, g->E);
}

/* One row of tensor t (f32 in row, n = ne[0]) stored into dst. */
static void syn_row(const struct syn_gen *g, const struct syn_tensor *t, int64_t r, struct syn_scratch *s, void *dst)
{
    const int64_t n = t->ne[0];
    float *row = s->row;
    const uint64_t key = syn_row_key(g, t->kind, t->layer, r);
    const float w_scale = SYN_W_SCALE / sqrtf((float)n);
    switch (t->kind) {
    case SK_EMBD:
        syn_embd_row(g, t->type, r, row, dst);
        return;
    case SK_GATE:
        syn_gate_row(g, t->type, t->layer, r, row, dst);
        return;
    case SK_NORM:
        for (int64_t e = 0; e < n; e++)
            row[e] = 1.0f;
        break;
    case SK_OUTPUT:
        for (int64_t e = 0; e < n; e++)
            row[e] = w_scale * syn_uniform(key, (uint64_t)e);
        if (r < SYNTH_N_CONTROL)
            row[0] = SYN_CONTROL_OUT_W;
        break;
    case SK_Q:
    case SK_K:
    case SK_V:
    case SK_UP:
        for (int64_t e = 0; e < n; e++)
            row[e] = w_scale * syn_uniform(key, (uint64_t)e);
        break;
    case SK_O:
        for (int64_t e = 0; e < n; e++)
            row[e] = r < g->S_END ? 0.0f : SYN_RESID_SCALE / sqrtf((float)n) * syn_uniform(key, (uint64_t)e);
        break;
    case SK_DOWN: { /* row = output dim r, over neurons */
        const uint64_t dk = syn_down_key(g, t->layer);
        for (int64_t i = 0; i < n; i++)
            row[i] = syn_down(g, dk, r, i);
        break;
    }
    case SK_DOWN_T: { /* row = neuron r, over output dims */
        const uint64_t dk = syn_down_key(g, t->layer);
        for (int64_t e = 0; e < n; e++)
            row[e] = syn_down(g, dk, e, r);
        break;
    }
    case SK_FC1: /* rows e_0, then +e_{S+m}, -e_{S+m}; zero past 2d + 1 */
        memset(row, 0, (size_t)n * sizeof *row);
        if (r == 0)
            row[0] = 1.0f;
        else if (r <= 2 * (int64_t)g->d.sub_dim)
            row[SYNTH_SUB_OFF + (r - 1) / 2] = (r - 1) % 2 ? -1.0f : 1.0f;
        break;
    case SK_ACT_FREQ: /* each neuron's firing probability, the law its gate bias realizes */
        for (int64_t i = 0; i < n; i++)
            row[i] = (float)g->rank_p[g->perm[i]];
        break;
    case SK_FC2: { /* neuron r: (b, +â_m, -â_m) of the stored gate row */
        float *gate = s->row2;
        syn_gate_row(g, t->gate_type, t->layer, r, gate, s->q);
        memset(row, 0, (size_t)n * sizeof *row);
        row[0] = gate[0];
        for (int32_t m = 0; m < g->d.sub_dim; m++) {
            row[1 + 2 * m] = gate[SYNTH_SUB_OFF + m];
            row[2 + 2 * m] = -gate[SYNTH_SUB_OFF + m];
        }
        break;
    }
    }
    syn_store(t->type, row, dst, n);
}

static void syn_rows_worker(void *arg, int ith, int nth)
{
    struct syn_gen *g = arg;
    const struct syn_tensor *t = g->t;
    const int64_t rows = t->ne[1], lo = rows * ith / nth, hi = rows * (ith + 1) / nth;
    for (int64_t r = lo; r < hi; r++)
        syn_row(g, t, r, &g->scr[ith], g->buf + (size_t)r * g->row_bytes);
}

/* ---- the plan ---- */

struct syn_plan {
    struct syn_tensor *t;
    size_t n, cap;
};

static int syn_add(struct syn_plan *p, enum syn_kind kind, int layer, const char *name, uint32_t type, int64_t ne0,
                   int64_t ne1)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        struct syn_tensor *t = realloc(p->t, cap * sizeof *t);
        if (!t)
            return pi_fail(PI_E_NOMEM, "synth: out of memory");
        p->t = t;
        p->cap = cap;
    }
    struct syn_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->layer = layer < 0 ? 0 : layer;
    t->n_dims = ne1 > 1 ? 2 : 1;
    t->type = ne1 > 1 ? type : PI_TYPE_F32; /* vectors (norms) are f32, as the forward pass reads them */
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    return 0;
}

/* The mixture's per-tensor types (tools/quantize/plan.c, as pictl quantize picks them for the same
 * tensors); predictors keep --pred-type. */
static int syn_plan_mix(struct syn_plan *p, const struct synth_opts *o)
{
    const struct qz_mixture *mix = qz_mixture_find(o->mix);
    if (!mix)
        return pi_fail(PI_E_INVAL, "synth: unknown mixture '%s'", o->mix);
    struct qz_tensor *qt = calloc(p->n, sizeof *qt);
    uint32_t *out = calloc(p->n, sizeof *out);
    bool *fb = calloc(p->n, sizeof *fb);
    int rc = qt && out && fb ? 0 : pi_fail(PI_E_NOMEM, "synth: out of memory");
    for (size_t i = 0; !rc && i < p->n; i++) {
        const bool pred = p->t[i].kind == SK_FC1 || p->t[i].kind == SK_FC2;
        qt[i] = (struct qz_tensor){ .name = p->t[i].name, .n_dims = p->t[i].n_dims,
                                    .ne = { p->t[i].ne[0], p->t[i].ne[1], 1, 1 },
                                    .type = pred ? p->t[i].type : PI_TYPE_F32 };
    }
    const struct qz_params qp = { .mix = mix, .output_type = QZ_TYPE_AUTO, .token_embd_type = QZ_TYPE_AUTO,
                                  .keep_predictors = true };
    const struct qz_model qm = { .arch = "llama", .n_layer = o->shape.n_layer, .n_head = o->shape.n_head,
                                 .n_head_kv = o->shape.n_head_kv, .powerinfer = o->pwri };
    if (!rc && !(rc = qz_plan(&qp, &qm, qt, p->n, out, fb)))
        for (size_t i = 0; i < p->n; i++)
            if (p->t[i].ne[1] > 1)
                p->t[i].type = out[i];
    free(qt), free(out), free(fb);
    return rc;
}

static int syn_plan_build(struct syn_plan *p, const struct syn_gen *g)
{
    const struct synth_shape *s = &g->o->shape;
    const uint32_t ty = g->o->type;
    int rc;
    if ((rc = syn_add(p, SK_EMBD, -1, "token_embd.weight", ty, g->E, s->n_vocab)))
        return rc;
    for (int l = 0; l < s->n_layer; l++) {
        if ((rc = syn_add(p, SK_NORM, l, "attn_norm.weight", ty, g->E, 1)) ||
            (rc = syn_add(p, SK_Q, l, "attn_q.weight", ty, g->E, g->Q)) ||
            (rc = syn_add(p, SK_K, l, "attn_k.weight", ty, g->E, g->KV)) ||
            (rc = syn_add(p, SK_V, l, "attn_v.weight", ty, g->E, g->KV)) ||
            (rc = syn_add(p, SK_O, l, "attn_output.weight", ty, g->Q, g->E)) ||
            (rc = syn_add(p, SK_NORM, l, "ffn_norm.weight", ty, g->E, 1)) ||
            (rc = syn_add(p, SK_GATE, l, "ffn_gate.weight", ty, g->E, g->F)) ||
            (rc = syn_add(p, SK_UP, l, "ffn_up.weight", ty, g->E, g->F)))
            return rc;
        if (!g->o->pwri) {
            if ((rc = syn_add(p, SK_DOWN, l, "ffn_down.weight", ty, g->F, g->E)))
                return rc;
        } else if ((rc = syn_add(p, SK_DOWN_T, l, "ffn_down_t.weight", ty, g->E, g->F)) ||
                   (rc = syn_add(p, SK_FC1, l, "fc1.weight", g->o->pred_type, g->E, g->d.rank)) ||
                   (rc = syn_add(p, SK_FC2, l, "fc2.weight", g->o->pred_type, g->d.rank, g->F)) ||
                   /* the true activation frequencies, where pictl calibrate puts measured ones: the
                    * split solver ranks neurons by them (without them it would rank by index over
                    * the random permutation of ranks, and the GPU's neurons would not be the hot ones) */
                   (rc = syn_add(p, SK_ACT_FREQ, l, "act_freq", PI_TYPE_F32, g->F, 1))) {
            return rc;
        }
    }
    if ((rc = syn_add(p, SK_NORM, -1, "output_norm.weight", ty, g->E, 1)) ||
        (rc = syn_add(p, SK_OUTPUT, -1, "output.weight", ty, g->E, s->n_vocab)))
        return rc;
    if (g->o->mix && (rc = syn_plan_mix(p, g->o)))
        return rc;
    for (size_t i = 0; i < p->n; i++) /* fc2 follows its layer's gate, which precedes it */
        if (p->t[i].kind == SK_FC2)
            for (size_t k = 0; k < i; k++)
                if (p->t[k].kind == SK_GATE && p->t[k].layer == p->t[i].layer)
                    p->t[i].gate_type = p->t[k].type;
    return 0;
}

/* ---- metadata ---- */

static int syn_ftype(uint32_t type)
{
    switch (type) {
    case PI_TYPE_F32: return SYN_FTYPE_F32;
    case PI_TYPE_Q4_0: return SYN_FTYPE_Q4_0;
    case PI_TYPE_Q8_0: return SYN_FTYPE_Q8_0;
    default: return SYN_FTYPE_F16;
    }
}

static int syn_write_keys(struct gguf_writer *w, const struct syn_gen *g)
{
    const struct synth_opts *o = g->o;
    const struct synth_shape *s = &o->shape;
    char name[SYN_NAME_MAX];
    const struct qz_mixture *mix = o->mix ? qz_mixture_find(o->mix) : NULL;
    snprintf(name, sizeof name, "synth-%s-%s%s", s->name, mix ? mix->name : quant_traits(o->type)->name,
             o->pwri ? "-pwri" : "");
    const uint32_t head_dim = (uint32_t)(s->n_embd / s->n_head);
    int rc;
    if ((rc = gguf_writer_set_str(w, "general.architecture", "llama")) ||
        (rc = gguf_writer_set_str(w, "general.name", name)) ||
        (rc = gguf_writer_set_u32(w, "general.alignment", SYN_ALIGNMENT)) ||
        (rc = gguf_writer_set_u32(w, "general.file_type", mix ? mix->ftype : (uint32_t)syn_ftype(o->type))) ||
        (rc = gguf_writer_set_u32(w, "general.quantization_version", SYN_QUANT_VERSION)) ||
        (rc = gguf_writer_set_u32(w, "llama.context_length", (uint32_t)s->n_ctx)) ||
        (rc = gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)s->n_embd)) ||
        (rc = gguf_writer_set_u32(w, "llama.block_count", (uint32_t)s->n_layer)) ||
        (rc = gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)s->n_ff)) ||
        (rc = gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)s->n_head)) ||
        (rc = gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)s->n_head_kv)) ||
        (rc = gguf_writer_set_u32(w, "llama.attention.key_length", head_dim)) ||
        (rc = gguf_writer_set_u32(w, "llama.attention.value_length", head_dim)) ||
        (rc = gguf_writer_set_u32(w, "llama.rope.dimension_count", head_dim)) ||
        (rc = gguf_writer_set_f32(w, "llama.rope.freq_base", SYN_ROPE_THETA)) ||
        (rc = gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", SYN_NORM_EPS)) ||
        (rc = gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)s->n_vocab)) ||
        (rc = gguf_writer_set_str(w, "pinfer.ffn_activation", "relu")) ||
        /* How the file was made, so a measurement can pair a dense file with its --pwri twin. */
        (rc = gguf_writer_set_u64(w, "pinfer.synth.seed", o->seed)) ||
        (rc = gguf_writer_set_f32(w, "pinfer.synth.sparsity", (float)o->sparsity)) ||
        (rc = gguf_writer_set_f32(w, "pinfer.synth.zipf", (float)g->d.zipf)) ||
        (rc = gguf_writer_set_f32(w, "pinfer.synth.hot_share", (float)g->d.hot_share)) ||
        (rc = gguf_writer_set_u32(w, "pinfer.synth.subspace_dim", (uint32_t)g->d.sub_dim)) ||
        (rc = gguf_writer_set_u32(w, "pinfer.synth.rank", (uint32_t)g->d.rank)))
        return rc;
    if (o->pwri && (rc = gguf_writer_set_f32(w, "powerinfer.sparse_threshold", 0.0f)))
        return rc;
    return synth_vocab_write(w, s->n_vocab);
}

/* ---- driver ---- */

static void syn_gen_fini(struct syn_gen *g)
{
    synth_quantile_fini(&g->quant);
    free(g->rank_p);
    free(g->perm);
    for (int i = 0; g->scr && i < g->n_slices; i++) {
        free(g->scr[i].row);
        free(g->scr[i].row2);
        free(g->scr[i].q);
    }
    free(g->scr);
}

static int syn_gen_init(struct syn_gen *g, const struct synth_opts *o)
{
    const struct synth_shape *s = &o->shape;
    memset(g, 0, sizeof *g);
    g->o = o;
    g->perm_layer = -1;
    int rc = synth_design_get(o, &g->d);
    if (rc)
        return rc;
    g->E = s->n_embd;
    g->F = s->n_ff;
    g->Q = s->n_embd; /* head_dim = n_embd / n_head */
    g->KV = s->n_embd / s->n_head * s->n_head_kv;
    g->S_END = SYNTH_SUB_OFF + g->d.sub_dim;
    if ((rc = synth_quantile_init(&g->quant, g->d.sub_dim)))
        return rc;
    g->rank_p = malloc((size_t)g->F * sizeof *g->rank_p);
    g->perm = malloc((size_t)g->F * sizeof *g->perm);
    g->n_slices = o->n_threads * SYN_SLICES_PER_THREAD;
    g->scr = calloc((size_t)g->n_slices, sizeof *g->scr);
    if (!g->rank_p || !g->perm || !g->scr)
        return pi_fail(PI_E_NOMEM, "synth: out of memory");
    double zipf;
    if ((rc = synth_rank_probs(o, g->rank_p, &zipf)))
        return rc;
    size_t row_max = (size_t)(g->E > g->F ? g->E : g->F);
    if ((size_t)g->d.rank > row_max)
        row_max = (size_t)g->d.rank;
    for (int i = 0; i < g->n_slices; i++) {
        g->scr[i].row = malloc(row_max * sizeof(float));
        g->scr[i].row2 = malloc(row_max * sizeof(float));
        g->scr[i].q = malloc(quant_row_size(PI_TYPE_F32, g->E));
        if (!g->scr[i].row || !g->scr[i].row2 || !g->scr[i].q)
            return pi_fail(PI_E_NOMEM, "synth: out of memory");
    }
    return 0;
}

/* Progress on stderr (a 7B file takes half a minute): on a terminal one line redrawn at most every
 * SYN_REDRAW_MS, elsewhere (logs, CI) one line per SYN_LOG_STEP percent of the bytes. Layers count
 * "k of n" from 1, the way the total is given. */
#define SYN_REDRAW_MS 200.0
#define SYN_LOG_STEP 10
#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

struct syn_progress {
    bool on, tty;
    double t0_ms, last_ms;
    int last_step;
};

static double syn_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void syn_progress(struct syn_progress *p, uint64_t done, uint64_t total, int layer, int n_layer)
{
    if (!p->on || total == 0)
        return;
    const double now = syn_now_ms();
    const int pct = (int)(done * 100 / total);
    if (p->tty ? done < total && now - p->last_ms < SYN_REDRAW_MS : pct / SYN_LOG_STEP == p->last_step && done < total)
        return;
    p->last_ms = now;
    p->last_step = pct / SYN_LOG_STEP;
    const double unit = total >= GIB ? GIB : MIB;
    char where[48] = "";
    if (layer >= 0 && done < total) /* the embedding and the output head belong to no layer */
        snprintf(where, sizeof where, ", layer %d of %d", layer + 1, n_layer);
    fprintf(stderr, "%ssynth: %.2f of %.2f %s written (%d%%)%s, %.1f s%s", p->tty ? "\r\033[K" : "", done / unit,
            total / unit, unit == GIB ? "GiB" : "MiB", pct, where, (now - p->t0_ms) / 1e3,
            p->tty && done < total ? "" : "\n");
    fflush(stderr);
}

int synth_write(const struct synth_opts *o)
{
    struct syn_gen g;
    struct syn_plan plan = { 0 };
    struct gguf_writer *w = NULL;
    struct pi_pool *pool = NULL;
    uint8_t *buf = NULL;
    const int nt = o->n_threads > 0 ? o->n_threads : 1;
    struct synth_opts opts = *o;
    opts.n_threads = nt;
    int rc;
    if (!o->out_path)
        return pi_fail(PI_E_INVAL, "synth: need -o OUT.gguf");
    quant_init();
    if ((rc = syn_gen_init(&g, &opts)) || (rc = syn_plan_build(&plan, &g)) || (rc = pool_new(&pool, nt)))
        goto out;
    if ((rc = gguf_writer_new(&w, o->pwri ? GGUF_MAGIC_PWRI : GGUF_MAGIC_GGUF)) || (rc = syn_write_keys(w, &g)))
        goto out;
    size_t max_bytes = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < plan.n; i++) {
        const struct syn_tensor *t = &plan.t[i];
        size_t nb = quant_row_size(t->type, t->ne[0]) * (size_t)t->ne[1];
        max_bytes = nb > max_bytes ? nb : max_bytes;
        total += nb;
        if ((rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL)))
            goto out;
    }
    if (!(buf = malloc(max_bytes))) {
        rc = pi_fail(PI_E_NOMEM, "synth: out of memory for a %zu-byte tensor", max_bytes);
        goto out;
    }
    if (!o->quiet)
        fprintf(stderr,
                "synth: %s %s%s: %d layers, %d/%d, vocab %d, %.2f GiB | sparsity %.3f, zipf %.3f (hottest 30%% carry "
                "%.1f%%), subspace %d, rank %d -> %s\n",
                o->shape.name, quant_traits(o->type)->name, o->pwri ? " (PowerInfer)" : "", o->shape.n_layer, g.E, g.F,
                o->shape.n_vocab, total / (1024.0 * 1024 * 1024), o->sparsity, g.d.zipf, 100 * g.d.hot_share,
                g.d.sub_dim, g.d.rank, o->out_path);
    if ((rc = gguf_writer_open(w, o->out_path)))
        goto out;
    struct syn_progress prog = { .on = !o->quiet, .tty = isatty(STDERR_FILENO) == 1, .t0_ms = syn_now_ms(),
                                 .last_step = -1 };
    uint64_t done = 0;
    for (size_t i = 0; i < plan.n; i++) {
        const struct syn_tensor *t = &plan.t[i];
        syn_set_layer(&g, t->layer);
        g.t = t;
        g.buf = buf;
        g.row_bytes = quant_row_size(t->type, t->ne[0]);
        pool_run_n(pool, syn_rows_worker, &g, t->ne[1] < g.n_slices ? (int)t->ne[1] : g.n_slices);
        if ((rc = gguf_writer_write_tensor(w, buf)))
            goto out;
        done += quant_row_size(t->type, t->ne[0]) * (size_t)t->ne[1];
        syn_progress(&prog, done, total, t->layer, o->shape.n_layer);
    }
    rc = gguf_writer_close(w);
out:
    gguf_writer_free(w);
    pool_free(pool);
    free(buf);
    free(plan.t);
    syn_gen_fini(&g);
    return rc;
}

/* model.c — hyperparameters and weight views from a GGUF (llama.cpp key and tensor names). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "pi_err.h"
#include "quant.h"
#include "tokenizer.h"

/* PowerInfer: the predictor's activation threshold on its raw logits (active iff logit >= it). */
#define PWRI_KEY_THRESHOLD "powerinfer.sparse_threshold"
#define PWRI_DEFAULT_THRESHOLD 0.0f
/* An RMS epsilon is a small positive constant (1e-5, 1e-6); one >= this is a wrong value, not a
 * choice: it would swamp the mean square of activations of order 1. */
#define MAX_NORM_EPS 1.0f

const char *model_arch_name(enum pi_arch a)
{
    switch (a) {
    case PI_ARCH_LLAMA: return "llama";
    case PI_ARCH_QWEN2: return "qwen2";
    case PI_ARCH_BAMBOO: return "bamboo";
    }
    return "?";
}

const char *model_act_name(enum pi_act a)
{
    switch (a) {
    case PI_ACT_SWIGLU: return "swiglu";
    case PI_ACT_REGLU: return "reglu";
    case PI_ACT_DRELU: return "drelu";
    }
    return "?";
}

/* Read ARCH.suffix as a positive int32. */
static int get_dim(const struct gguf_file *f, const char *arch, const char *suffix, int32_t *out,
                   bool required, int32_t dflt)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    int rc = gguf_get_u32(f, key, &v);
    if (rc == -PI_E_NOTFOUND) {
        if (required)
            return pi_fail(PI_E_NOTFOUND, "model: required key '%s' is missing", key);
        *out = dflt;
        return 0;
    }
    if (rc)
        return rc;
    if (v == 0 || v > (uint32_t)INT32_MAX)
        return pi_fail(PI_E_RANGE, "model: key '%s' = %u is out of range", key, v);
    *out = (int32_t)v;
    return 0;
}

static int get_float(const struct gguf_file *f, const char *arch, const char *suffix, float *out,
                     float dflt)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = gguf_get_f32(f, key, out);
    if (rc == -PI_E_NOTFOUND) {
        *out = dflt;
        return 0;
    }
    return rc;
}

/* Bind a tensor by name and check its shape is {ne0, ne1} (ne1 = 1 for vectors). */
static int bind(const struct gguf_file *f, struct pi_tensor *t, const char *name, int64_t ne0, int64_t ne1,
                bool required)
{
    memset(t, 0, sizeof *t);
    const struct gguf_tensor *g = gguf_find_tensor(f, name);
    if (!g) {
        if (required)
            return pi_fail(PI_E_NOTFOUND, "model: required tensor '%s' is missing", name);
        return 0;
    }
    if (g->ne[0] != ne0 || g->ne[1] != ne1 || g->ne[2] != 1 || g->ne[3] != 1)
        return pi_fail(PI_E_TYPE, "model: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                       name, (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2],
                       (long long)g->ne[3], (long long)ne0, (long long)ne1);
    const struct pi_type_traits *tt = quant_traits(g->type);
    if (!tt || !tt->vec_dot)
        return pi_fail(PI_E_UNSUPPORTED, "model: tensor '%s' has unsupported type %u", name, g->type);
    t->name = g->name;
    t->type = g->type;
    memcpy(t->ne, g->ne, sizeof t->ne);
    t->row_bytes = quant_row_size(g->type, g->ne[0]);
    t->data = g->data;
    return 0;
}

/* Norm weights and biases are read directly as f32 vectors by the forward pass. */
static int bind_f32(const struct gguf_file *f, struct pi_tensor *t, const char *name, int64_t n, bool required)
{
    int rc = bind(f, t, name, n, 1, required);
    if (rc)
        return rc;
    if (t->data && t->type != PI_TYPE_F32)
        return pi_fail(PI_E_TYPE, "model: tensor '%s' must be f32 (is %s)", name, quant_traits(t->type)->name);
    return 0;
}

static int load_hparams(const struct gguf_file *f, struct pi_hparams *hp, const char **arch_out)
{
    const char *arch;
    int rc = gguf_get_str(f, "general.architecture", &arch);
    if (rc == -PI_E_NOTFOUND)
        return pi_fail(PI_E_NOTFOUND, "model: key 'general.architecture' is missing");
    if (rc)
        return rc;
    *arch_out = arch;
    memset(hp, 0, sizeof *hp);
    if (!strcmp(arch, "llama")) {
        hp->arch = PI_ARCH_LLAMA;
        hp->rope_mode = OPS_ROPE_NORM;
        /* PowerInfer files run llama as ReGLU (ReluLLaMA); plain llama.cpp files are SwiGLU. */
        hp->act = gguf_is_powerinfer(f) ? PI_ACT_REGLU : PI_ACT_SWIGLU;
    } else if (!strcmp(arch, "qwen2")) {
        hp->arch = PI_ARCH_QWEN2;
        hp->rope_mode = OPS_ROPE_NEOX;
        hp->act = PI_ACT_SWIGLU;
    } else if (!strcmp(arch, "bamboo")) {
        hp->arch = PI_ARCH_BAMBOO;
        hp->rope_mode = OPS_ROPE_NORM;
        hp->act = PI_ACT_DRELU;
    } else {
        return pi_fail(PI_E_UNSUPPORTED, "model: unknown architecture '%s' (supported: llama, qwen2, bamboo)", arch);
    }
    const char *act;
    if (gguf_get_str(f, "pinfer.ffn_activation", &act) == 0) {
        if (!strcmp(act, "relu"))
            hp->act = PI_ACT_REGLU;
        else if (!strcmp(act, "silu"))
            hp->act = PI_ACT_SWIGLU;
        else if (!strcmp(act, "drelu"))
            hp->act = PI_ACT_DRELU;
        else
            return pi_fail(PI_E_UNSUPPORTED, "model: unknown pinfer.ffn_activation '%s'", act);
    }
    if ((rc = get_dim(f, arch, "embedding_length", &hp->n_embd, true, 0)) ||
        (rc = get_dim(f, arch, "block_count", &hp->n_layer, true, 0)) ||
        (rc = get_dim(f, arch, "feed_forward_length", &hp->n_ff, true, 0)) ||
        (rc = get_dim(f, arch, "attention.head_count", &hp->n_head, true, 0)) ||
        (rc = get_dim(f, arch, "attention.head_count_kv", &hp->n_head_kv, false, hp->n_head)) ||
        (rc = get_dim(f, arch, "context_length", &hp->n_ctx_train, false, 2048)) ||
        (rc = get_dim(f, arch, "attention.key_length", &hp->head_dim, false, hp->n_embd / hp->n_head)))
        return rc;
    if ((rc = get_dim(f, arch, "rope.dimension_count", &hp->rope_dim, false, hp->head_dim)) ||
        (rc = get_float(f, arch, "rope.freq_base", &hp->rope_theta, 10000.0f)) ||
        (rc = get_float(f, arch, "attention.layer_norm_rms_epsilon", &hp->norm_eps, 1e-6f)))
        return rc;
    hp->powerinfer = gguf_is_powerinfer(f);
    if ((rc = gguf_get_f32(f, PWRI_KEY_THRESHOLD, &hp->sparse_threshold)) == -PI_E_NOTFOUND)
        hp->sparse_threshold = PWRI_DEFAULT_THRESHOLD;
    else if (rc)
        return rc;
    if (hp->n_head % hp->n_head_kv)
        return pi_fail(PI_E_RANGE, "model: head_count %d is not a multiple of head_count_kv %d", hp->n_head,
                       hp->n_head_kv);
    if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2)
        return pi_fail(PI_E_RANGE, "model: rope.dimension_count %d must be even and <= head dim %d",
                       hp->rope_dim, hp->head_dim);
    return 0;
}

/* A PowerInfer predictor matrix: present (PWRI files always carry both), shape {ne0, ne1}, ne1 = 0
 * meaning "any rank" (fc1's rank r is read from the file; fc2 must then match it). */
static int bind_predictor(const struct gguf_file *f, struct pi_tensor *t, const char *name, int64_t ne0,
                          int64_t ne1)
{
    const struct gguf_tensor *g = gguf_find_tensor(f, name);
    if (!g)
        return pi_fail(PI_E_NOTFOUND, "model: PowerInfer file lacks predictor tensor '%s'", name);
    return bind(f, t, name, ne0, ne1 ? ne1 : g->ne[1], true);
}

/* PowerInfer layer tensors: ffn_down_t (needed when ffn_down is absent; both may be present), the
 * predictor fc1 {n_embd, r} and fc2 {r, n_ff}. */
static int bind_powerinfer(const struct gguf_file *f, const struct pi_hparams *hp, int il, struct pi_layer *l)
{
    const int64_t E = hp->n_embd, F = hp->n_ff;
    char n[96];
    int rc;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
    if ((rc = bind(f, &l->ffn_down_t, NAME("ffn_down_t.weight"), E, F, l->ffn_down.data == NULL)))
        return rc;
    if ((rc = bind_predictor(f, &l->fc1, NAME("fc1.weight"), E, 0)) ||
        (rc = bind_predictor(f, &l->fc2, NAME("fc2.weight"), l->fc1.ne[1], F)))
        return rc;
#undef NAME
    return 0;
}

static int bind_layer(const struct gguf_file *f, const struct pi_hparams *hp, int il, struct pi_layer *l)
{
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim,
                  KV = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff;
    const bool bias = hp->arch == PI_ARCH_QWEN2;
    char n[96];
    int rc;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
    if ((rc = bind_f32(f, &l->attn_norm, NAME("attn_norm.weight"), E, true)) ||
        (rc = bind(f, &l->wq, NAME("attn_q.weight"), E, Q, true)) ||
        (rc = bind(f, &l->wk, NAME("attn_k.weight"), E, KV, true)) ||
        (rc = bind(f, &l->wv, NAME("attn_v.weight"), E, KV, true)) ||
        (rc = bind(f, &l->wo, NAME("attn_output.weight"), Q, E, true)) ||
        (rc = bind_f32(f, &l->bq, NAME("attn_q.bias"), Q, bias)) ||
        (rc = bind_f32(f, &l->bk, NAME("attn_k.bias"), KV, bias)) ||
        (rc = bind_f32(f, &l->bv, NAME("attn_v.bias"), KV, bias)) ||
        (rc = bind_f32(f, &l->ffn_norm, NAME("ffn_norm.weight"), E, true)) ||
        (rc = bind(f, &l->ffn_gate, NAME("ffn_gate.weight"), E, F, true)) ||
        (rc = bind(f, &l->ffn_up, NAME("ffn_up.weight"), E, F, true)) ||
        (rc = bind(f, &l->ffn_down, NAME("ffn_down.weight"), F, E, !hp->powerinfer)))
        return rc;
    if (hp->powerinfer && (rc = bind_powerinfer(f, hp, il, l)))
        return rc;
    /* calibration statistic, in any file (pictl calibrate writes it) */
    struct pi_tensor freq;
    if ((rc = bind_f32(f, &freq, NAME("act_freq"), F, false)))
        return rc;
    l->act_freq = freq.data;
#undef NAME
    return 0;
}

/* ---- validation: values that would load and then compute garbage ----
 * Hyperparameters the forward pass divides by, takes roots or powers of; the vocabulary size the
 * file states; tensors for layers beyond block_count (a file whose block_count was cut would
 * otherwise run on part of its layers). Tensor extents and overlaps are the reader's (gguf.c). */
static int validate_hparams(const struct pi_hparams *hp, const char *arch)
{
    /* rsqrt(mean + eps): a NaN or negative eps gives NaN rows, a zero one divides by zero */
    if (!(isfinite(hp->norm_eps) && hp->norm_eps > 0.0f && hp->norm_eps < MAX_NORM_EPS))
        return pi_fail(PI_E_RANGE, "model: %s.attention.layer_norm_rms_epsilon = %g: must be a finite number in (0, %g)",
                       arch, (double)hp->norm_eps, (double)MAX_NORM_EPS);
    /* theta_i = base^(-2i/d): base 0 or NaN gives infinite or NaN angles */
    if (!(isfinite(hp->rope_theta) && hp->rope_theta > 0.0f))
        return pi_fail(PI_E_RANGE, "model: %s.rope.freq_base = %g: must be a finite positive number", arch,
                       (double)hp->rope_theta);
    if (!isfinite(hp->sparse_threshold))
        return pi_fail(PI_E_RANGE, "model: %s = %g: must be finite", PWRI_KEY_THRESHOLD, (double)hp->sparse_threshold);
    return 0;
}

#define MIN_LAYER_TENSORS 7 /* the tensors every layer binds (bind_layer) */

static int validate_tensors(const struct gguf_file *f, const struct pi_hparams *hp, const char *arch)
{
    char key[128];
    uint32_t vocab;
    snprintf(key, sizeof key, "%s.vocab_size", arch);
    int rc = gguf_get_u32(f, key, &vocab);
    if (rc == 0 && vocab != (uint32_t)hp->n_vocab)
        return pi_fail(PI_E_TYPE, "model: %s = %u but token_embd.weight has %d rows", key, vocab, hp->n_vocab);
    if (rc && rc != -PI_E_NOTFOUND)
        return rc;
    /* before the layer table is allocated from block_count: a count the tensors cannot back is a
     * damaged header, not a reason to allocate gigabytes (each layer binds at least wq, wk, wv, wo,
     * attn_norm, ffn_up and a down projection) */
    const size_t max_layers = gguf_n_tensors(f) / MIN_LAYER_TENSORS;
    if ((size_t)hp->n_layer > max_layers)
        return pi_fail(PI_E_RANGE, "model: %s.block_count is %d but the file's %zu tensors hold at most %zu layers", arch,
                       hp->n_layer, gguf_n_tensors(f), max_layers);
    for (size_t i = 0; i < gguf_n_tensors(f); i++) {
        const char *name = gguf_tensor(f, i)->name;
        long il;
        int used = 0;
        if (sscanf(name, "blk.%ld.%n", &il, &used) == 1 && used > 0 && (il < 0 || il >= hp->n_layer))
            return pi_fail(PI_E_RANGE, "model: tensor '%s' is for layer %ld but %s.block_count is %d (layers 0..%d)",
                           name, il, arch, hp->n_layer, hp->n_layer - 1);
    }
    return 0;
}

int model_load(struct pi_model **out, const char *path)
{
    return model_load_as(out, path, MODEL_WEIGHTS_MAP);
}

static uint64_t mem_available(void);

int model_load_as(struct pi_model **out, const char *path, enum model_weights how)
{
    struct gguf_file *f = NULL;
    int rc;
    if (how == MODEL_WEIGHTS_READ) {
        /* refused up front rather than killed half-way through the read (or by the cgroup): the copy,
         * plus an eighth and 64 MiB for what the run allocates beside it (KV cache, scratch) */
        struct stat st;
        const uint64_t avail = mem_available();
        const uint64_t need =
            stat(path, &st) == 0 ? (uint64_t)st.st_size + (uint64_t)st.st_size / 8 + ((uint64_t)64 << 20) : 0;
        if (need && avail > 0 && need > avail)
            return pi_fail(PI_E_NOMEM, "model: cannot read '%s' into memory: it needs %.0f MiB with the run's headroom, "
                           "%.0f MiB are available (MemAvailable, or the memory cgroup's room); use the file's mapping "
                           "instead (no --no-mmap)",
                           path, (double)need / (1 << 20), (double)avail / (1 << 20));
        rc = gguf_open_read(&f, path);
    } else {
        rc = gguf_open(&f, path);
    }
    return rc ? rc : model_from_gguf(out, f);
}

/* The first unsigned number in file path, or 0 ("max" and missing files too) */
static uint64_t read_u64(const char *path)
{
    FILE *fp = fopen(path, "r");
    unsigned long long v = 0;
    if (fp) {
        if (fscanf(fp, "%llu", &v) != 1)
            v = 0;
        fclose(fp);
    }
    return (uint64_t)v;
}

/* What this process's memory cgroup has left (limit − usage; v2 or v1's memory controller), or
 * UINT64_MAX without a limit: a process in a cgroup is killed at its limit whatever MemAvailable says */
static uint64_t cgroup_left(void)
{
    FILE *fp = fopen("/proc/self/cgroup", "r");
    if (!fp)
        return UINT64_MAX;
    char line[512], path[600];
    uint64_t left = UINT64_MAX;
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = 0;
        const char *v2 = !strncmp(line, "0::", 3) ? line + 3 : NULL, *v1 = strstr(line, ":memory:");
        uint64_t lim = 0, use = 0;
        if (v2) {
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", v2);
            lim = read_u64(path);
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", v2);
            use = read_u64(path);
        } else if (v1) {
            snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", v1 + 8);
            lim = read_u64(path);
            snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", v1 + 8);
            use = read_u64(path);
        }
        const uint64_t room = lim > use ? lim - use : 0;
        if (lim > 0 && lim < ((uint64_t)1 << 60) && room < left) /* v1 says "no limit" with a huge number */
            left = room;
    }
    fclose(fp);
    return left;
}

/* MemAvailable from /proc/meminfo, capped by the cgroup's room, in bytes; 0 when unknown */
static uint64_t mem_available(void)
{
    FILE *fp = fopen("/proc/meminfo", "r");
    if (!fp)
        return 0;
    char line[128];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, fp) && sscanf(line, "MemAvailable: %llu kB", &kb) != 1)
        ;
    fclose(fp);
    const uint64_t avail = (uint64_t)kb * 1024, left = cgroup_left();
    return left < avail ? left : avail;
}

size_t model_huge_bytes(const struct pi_model *m)
{
    return gguf_huge_bytes(m->gguf);
}

int model_load_image(struct pi_model **out, const void *image, size_t size)
{
    struct gguf_file *f = NULL;
    int rc = gguf_open_mem(&f, image, size);
    return rc ? rc : model_from_gguf(out, f);
}

int model_from_gguf(struct pi_model **out, struct gguf_file *f)
{
    struct pi_model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        return pi_fail(PI_E_NOMEM, "model: out of memory");
    }
    const char *arch = NULL;
    int rc;
    m->gguf = f;
    if ((rc = load_hparams(f, &m->hp, &arch)) || (rc = validate_hparams(&m->hp, arch)))
        goto fail;
    if ((rc = tok_new_from_gguf(&m->tok, f)))
        goto fail;
    struct pi_hparams *hp = &m->hp;
    const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb) {
        rc = pi_fail(PI_E_NOTFOUND, "model: required tensor 'token_embd.weight' is missing");
        goto fail;
    }
    hp->n_vocab = (int32_t)emb->ne[1];
    if (hp->n_vocab != tok_n_vocab(m->tok)) {
        rc = pi_fail(PI_E_TYPE, "model: token_embd has %d rows but the tokenizer has %d tokens", hp->n_vocab,
                     tok_n_vocab(m->tok));
        goto fail;
    }
    if ((rc = bind(f, &m->token_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, true)) ||
        (rc = bind_f32(f, &m->output_norm, "output_norm.weight", hp->n_embd, true)) ||
        (rc = bind(f, &m->output, "output.weight", hp->n_embd, hp->n_vocab, false)))
        goto fail;
    if ((rc = validate_tensors(f, hp, arch)))
        goto fail;
    if (!m->output.data) {
        hp->tied_output = true;
        m->output = m->token_embd;
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        rc = pi_fail(PI_E_NOMEM, "model: out of memory");
        goto fail;
    }
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = bind_layer(f, hp, il, &m->layers[il])))
            goto fail;
    const char *name = NULL;
    m->name = strdup(gguf_get_str(f, "general.name", &name) == 0 ? name : arch);
    *out = m;
    return 0;
fail:
    model_free(m);
    return rc;
}

void model_free(struct pi_model *m)
{
    if (!m)
        return;
    tok_free(m->tok);
    free(m->layers);
    free(m->name);
    gguf_close(m->gguf);
    free(m);
}

static uint64_t tensor_bytes(const struct pi_tensor *t)
{
    return t->data ? (uint64_t)t->row_bytes * (uint64_t)t->ne[1] : 0;
}

uint64_t model_weight_bytes(const struct pi_model *m)
{
    uint64_t b = tensor_bytes(&m->output) + tensor_bytes(&m->output_norm);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct pi_layer *l = &m->layers[il];
        const struct pi_tensor *ts[] = { &l->attn_norm, &l->wq, &l->wk, &l->wv, &l->wo, &l->bq, &l->bk,
                                         &l->bv, &l->ffn_norm, &l->ffn_gate, &l->ffn_up, &l->ffn_down,
                                         &l->ffn_down_t, &l->fc1, &l->fc2 };
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            b += tensor_bytes(ts[i]);
    }
    return b;
}

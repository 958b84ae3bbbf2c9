/* convert.c — HF checkpoint → GGUF: the tensor plan, metadata keys, streaming conversion, CLI. */
#include "convert.h"

#include "gguf.h"
#include "hf_config.h"
#include "hf_tokenizer.h"
#include "pi_err.h"
#include "quant.h"
#include "quantize.h"
#include "safetensors.h"
#include "tmp_guard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CV_DEFAULT_TYPE PI_TYPE_F16
#define CV_ALIGNMENT 32u
/* ggml's GGML_QNT_VERSION, which llama.cpp writes into every file. */
#define CV_QUANT_VERSION 2u
#define CV_NAME_MAX 96
#define CV_KEY_MAX 128
#define CV_PATH_MAX 4096

/* ggml "ftype" (general.file_type): the dominant weight type of the file. */
enum cv_ftype {
    CV_FTYPE_ALL_F32 = 0,
    CV_FTYPE_MOSTLY_F16 = 1,
    CV_FTYPE_MOSTLY_Q4_0 = 2,
    CV_FTYPE_MOSTLY_Q8_0 = 7,
    CV_FTYPE_MOSTLY_BF16 = 32,
};

/* One output tensor: where it comes from and how it is stored. */
struct cv_tensor {
    char name[CV_NAME_MAX];
    const struct st_tensor *src;
    uint32_t type;         /* enum pi_type of the output */
    uint32_t n_dims;
    int64_t ne[2];         /* GGUF order: ne[0] is the row length (HF's last dimension) */
    int64_t permute_heads; /* > 0: rotary reordering over this many heads */
    int64_t head_dim;
};

struct cv_plan {
    struct cv_tensor *t;
    size_t n, cap;
    bool *used; /* per checkpoint tensor (st_tensor_at order): consumed by the plan */
};

static int cv_ftype(int type, uint32_t *out)
{
    switch (type) {
    case PI_TYPE_F32: *out = CV_FTYPE_ALL_F32; return 0;
    case PI_TYPE_F16: *out = CV_FTYPE_MOSTLY_F16; return 0;
    case PI_TYPE_BF16: *out = CV_FTYPE_MOSTLY_BF16; return 0;
    case PI_TYPE_Q8_0: *out = CV_FTYPE_MOSTLY_Q8_0; return 0;
    case PI_TYPE_Q4_0: *out = CV_FTYPE_MOSTLY_Q4_0; return 0;
    default: return pi_fail(PI_E_INVAL, "convert: output type %d is not one of f32, f16, bf16, q8_0, q4_0", type);
    }
}

static void cv_format_shape(const struct st_tensor *t, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->n_dims && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

/* What a plan entry expects of its source. */
struct cv_want {
    const char *hf_name;
    const char *gguf_name;
    int64_t rows, cols; /* HF shape [rows, cols]; cols = 0 for a 1-D tensor of rows elements */
    bool optional;
    int64_t permute_heads;
};

/* Add one tensor: check the source exists with the expected shape and choose its output type. */
static int cv_plan_add(struct cv_plan *p, const struct st_set *st, const struct hf_config *cfg, int out_type,
                       const struct cv_want *w, bool quiet)
{
    const struct st_tensor *src = st_find(st, w->hf_name);
    if (!src) {
        if (w->optional) return 0;
        return pi_fail(PI_E_NOTFOUND, "convert: tensor %s (needed by %s) is missing from the checkpoint", w->hf_name,
                       cfg->arch_name);
    }
    p->used[src - st_tensor_at(st, 0)] = true;
    bool is_2d = w->cols > 0;
    if (src->n_dims != (is_2d ? 2 : 1) || src->shape[0] != w->rows || (is_2d && src->shape[1] != w->cols)) {
        char have[96];
        cv_format_shape(src, have, sizeof have);
        return is_2d ? pi_fail(PI_E_TYPE, "convert: tensor %s in %s has shape %s, expected [%lld, %lld]", w->hf_name,
                               src->file, have, (long long)w->rows, (long long)w->cols)
                     : pi_fail(PI_E_TYPE, "convert: tensor %s in %s has shape %s, expected [%lld]", w->hf_name,
                               src->file, have, (long long)w->rows);
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        struct cv_tensor *t = realloc(p->t, cap * sizeof *t);
        if (!t) return pi_fail(PI_E_NOMEM, "convert: out of memory");
        p->t = t;
        p->cap = cap;
    }
    struct cv_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", w->gguf_name);
    t->src = src;
    t->n_dims = is_2d ? 2 : 1;
    t->ne[0] = is_2d ? w->cols : w->rows;
    t->ne[1] = is_2d ? w->rows : 1;
    t->permute_heads = w->permute_heads;
    t->head_dim = cfg->head_dim;
    t->type = is_2d ? (uint32_t)out_type : PI_TYPE_F32;
    if (is_2d && quant_traits(t->type)->blck_size > 1 && t->ne[0] % quant_traits(t->type)->blck_size) {
        /* Block quants need whole blocks per row; F16 keeps such a tensor exact enough. */
        if (!quiet)
            fprintf(stderr, "note: %s: row length %lld is not a multiple of %d, stored as f16\n", t->name,
                    (long long)t->ne[0], quant_traits(t->type)->blck_size);
        t->type = PI_TYPE_F16;
    }
    return 0;
}

/* The tensors of one transformer block, in llama.cpp's names. */
static int cv_plan_layer(struct cv_plan *p, const struct st_set *st, const struct hf_config *c, int out_type, int il,
                         bool quiet)
{
    /* HF keeps each head's rotary halves apart ("rotate half"); llama's GGUF rope takes adjacent
     * pairs, so llama's q/k rows are reordered. qwen2's GGUF uses NeoX rope on the HF order. */
    int64_t q_perm = c->arch == HF_ARCH_LLAMA ? c->n_head : 0, k_perm = c->arch == HF_ARCH_LLAMA ? c->n_head_kv : 0;
    bool bias_required = c->arch == HF_ARCH_QWEN2;
    int64_t q_dim = c->n_head * c->head_dim, kv_dim = c->n_head_kv * c->head_dim;
    const struct {
        const char *hf, *gguf;
        int64_t rows, cols;
        bool optional;
        int64_t perm;
    } L[] = {
        { "input_layernorm.weight", "attn_norm.weight", c->n_embd, 0, false, 0 },
        { "self_attn.q_proj.weight", "attn_q.weight", q_dim, c->n_embd, false, q_perm },
        { "self_attn.q_proj.bias", "attn_q.bias", q_dim, 0, !bias_required, q_perm },
        { "self_attn.k_proj.weight", "attn_k.weight", kv_dim, c->n_embd, false, k_perm },
        { "self_attn.k_proj.bias", "attn_k.bias", kv_dim, 0, !bias_required, k_perm },
        { "self_attn.v_proj.weight", "attn_v.weight", kv_dim, c->n_embd, false, 0 },
        { "self_attn.v_proj.bias", "attn_v.bias", kv_dim, 0, !bias_required, 0 },
        { "self_attn.o_proj.weight", "attn_output.weight", c->n_embd, q_dim, false, 0 },
        { "self_attn.o_proj.bias", "attn_output.bias", c->n_embd, 0, true, 0 },
        { "post_attention_layernorm.weight", "ffn_norm.weight", c->n_embd, 0, false, 0 },
        { "mlp.gate_proj.weight", "ffn_gate.weight", c->n_ff, c->n_embd, false, 0 },
        { "mlp.up_proj.weight", "ffn_up.weight", c->n_ff, c->n_embd, false, 0 },
        { "mlp.down_proj.weight", "ffn_down.weight", c->n_embd, c->n_ff, false, 0 },
    };
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
        char hf[CV_NAME_MAX], gg[CV_NAME_MAX];
        snprintf(hf, sizeof hf, "model.layers.%d.%s", il, L[i].hf);
        snprintf(gg, sizeof gg, "blk.%d.%s", il, L[i].gguf);
        struct cv_want w = { hf, gg, L[i].rows, L[i].cols, L[i].optional, L[i].perm };
        int rc = cv_plan_add(p, st, c, out_type, &w, quiet);
        if (rc) return rc;
    }
    return 0;
}

/* Checkpoint tensors with no GGUF counterpart that are safe to drop: derived rope tables. */
static bool cv_droppable(const char *name)
{
    static const char suffix[] = "rotary_emb.inv_freq";
    size_t n = strlen(name), s = sizeof suffix - 1;
    return n >= s && !strcmp(name + n - s, suffix);
}

static int cv_plan_build(struct cv_plan *p, const struct st_set *st, const struct hf_config *c, int out_type, bool quiet)
{
    int rc;
    p->used = calloc(st_n_tensors(st) ? st_n_tensors(st) : 1, sizeof *p->used);
    if (!p->used) return pi_fail(PI_E_NOMEM, "convert: out of memory");
    struct cv_want embd = { "model.embed_tokens.weight", "token_embd.weight", c->n_vocab, c->n_embd, false, 0 };
    if ((rc = cv_plan_add(p, st, c, out_type, &embd, quiet))) return rc;
    for (int il = 0; il < c->n_layer; il++)
        if ((rc = cv_plan_layer(p, st, c, out_type, il, quiet))) return rc;
    struct cv_want norm = { "model.norm.weight", "output_norm.weight", c->n_embd, 0, false, 0 };
    if ((rc = cv_plan_add(p, st, c, out_type, &norm, quiet))) return rc;
    const struct st_tensor *lm = st_find(st, "lm_head.weight");
    if (c->tie_embeddings) {
        /* Tied: the output projection is token_embd; a saved copy of it is redundant. */
        if (lm) p->used[lm - st_tensor_at(st, 0)] = true;
    } else {
        struct cv_want out = { "lm_head.weight", "output.weight", c->n_vocab, c->n_embd, false, 0 };
        if ((rc = cv_plan_add(p, st, c, out_type, &out, quiet))) return rc;
    }
    /* A tensor we would drop silently means a model variant we do not understand. */
    for (size_t i = 0; i < st_n_tensors(st); i++) {
        const struct st_tensor *t = st_tensor_at(st, i);
        if (!p->used[i] && !cv_droppable(t->name))
            return pi_fail(PI_E_UNSUPPORTED, "convert: checkpoint tensor %s (%s) has no GGUF mapping for %s", t->name,
                           t->file, c->arch_name);
    }
    return 0;
}

static void cv_plan_fini(struct cv_plan *p)
{
    free(p->t);
    free(p->used);
    memset(p, 0, sizeof *p);
}

static int cv_set_arch_u32(struct gguf_writer *w, const struct hf_config *c, const char *suffix, int64_t v)
{
    char key[CV_KEY_MAX];
    snprintf(key, sizeof key, "%s.%s", c->arch_name, suffix);
    if (v < 0 || v > UINT32_MAX) return pi_fail(PI_E_RANGE, "convert: %s = %lld does not fit u32", key, (long long)v);
    return gguf_writer_set_u32(w, key, (uint32_t)v);
}

static int cv_set_arch_f32(struct gguf_writer *w, const struct hf_config *c, const char *suffix, float v)
{
    char key[CV_KEY_MAX];
    snprintf(key, sizeof key, "%s.%s", c->arch_name, suffix);
    return gguf_writer_set_f32(w, key, v);
}

/* general.name: the checkpoint directory's name. */
static void cv_model_name(const char *dir, char *buf, size_t cap)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/') start--;
    snprintf(buf, cap, "%.*s", (int)(len - start), dir + start);
}

static int cv_write_keys(struct gguf_writer *w, const struct hf_config *c, const struct convert_opts *o)
{
    int rc;
    uint32_t ftype;
    char name[CV_NAME_MAX];
    cv_model_name(o->hf_dir, name, sizeof name);
    if ((rc = cv_ftype(o->out_type, &ftype)) || (rc = gguf_writer_set_str(w, "general.architecture", c->arch_name)) ||
        (rc = gguf_writer_set_str(w, "general.name", name)) ||
        (rc = gguf_writer_set_u32(w, "general.alignment", CV_ALIGNMENT)) ||
        (rc = gguf_writer_set_u32(w, "general.file_type", ftype)) ||
        (rc = gguf_writer_set_u32(w, "general.quantization_version", CV_QUANT_VERSION)) ||
        (rc = cv_set_arch_u32(w, c, "context_length", c->n_ctx_train)) ||
        (rc = cv_set_arch_u32(w, c, "embedding_length", c->n_embd)) ||
        (rc = cv_set_arch_u32(w, c, "block_count", c->n_layer)) ||
        (rc = cv_set_arch_u32(w, c, "feed_forward_length", c->n_ff)) ||
        (rc = cv_set_arch_u32(w, c, "attention.head_count", c->n_head)) ||
        (rc = cv_set_arch_u32(w, c, "attention.head_count_kv", c->n_head_kv)) ||
        (rc = cv_set_arch_u32(w, c, "attention.key_length", c->head_dim)) ||
        (rc = cv_set_arch_u32(w, c, "attention.value_length", c->head_dim)) ||
        (rc = cv_set_arch_f32(w, c, "rope.freq_base", c->rope_theta)) ||
        (rc = cv_set_arch_u32(w, c, "rope.dimension_count", c->head_dim)) ||
        (rc = cv_set_arch_f32(w, c, "attention.layer_norm_rms_epsilon", c->rms_eps)) ||
        (rc = cv_set_arch_u32(w, c, "vocab_size", c->n_vocab)) ||
        /* llama.cpp leaves the FFN activation implicit in the architecture; ReLU llamas (ReGLU) need it said. */
        (rc = gguf_writer_set_str(w, "pinfer.ffn_activation", c->act_name)))
        return rc;
    return 0;
}

/* Source row of output row r: per head, HF rows [x0..x(d/2-1) | y0..y(d/2-1)] become pairs
 * (x0 y0 x1 y1 ...), i.e. reshape [heads, 2, d/2] → swap the last two axes → [heads, d/2, 2]. */
static int64_t cv_src_row(const struct cv_tensor *t, int64_t r)
{
    if (t->permute_heads <= 0) return r;
    int64_t d = t->head_dim, h = r / d, i = r % d;
    return h * d + (i % 2) * (d / 2) + i / 2;
}

/* Convert one tensor into buf (rows × row_size bytes). */
static void cv_convert(const struct cv_tensor *t, void *buf, float *row)
{
    /* A permuted 1-D bias is a column of single-element rows; other 1-D tensors are one row. */
    bool col = t->n_dims == 1 && t->permute_heads > 0;
    int64_t n_rows = col ? t->ne[0] : t->ne[1], row_len = col ? 1 : t->ne[0];
    size_t row_size = quant_row_size(t->type, row_len);
    size_t esz = st_dtype_size(t->src->dtype);
    /* Same type in and out: copy bits (keeps f16 data bit-identical, NaN payloads included). */
    bool same = (t->type == PI_TYPE_F32 && t->src->dtype == ST_F32) ||
                (t->type == PI_TYPE_F16 && t->src->dtype == ST_F16) ||
                (t->type == PI_TYPE_BF16 && t->src->dtype == ST_BF16);
    const struct pi_type_traits *tr = quant_traits(t->type);
    for (int64_t r = 0; r < n_rows; r++) {
        int64_t sr = cv_src_row(t, r);
        uint8_t *dst = (uint8_t *)buf + (size_t)r * row_size;
        if (same) {
            memcpy(dst, (const uint8_t *)t->src->data + (size_t)(sr * row_len) * esz, row_size);
            continue;
        }
        st_read_f32(t->src, sr * row_len, row_len, row);
        switch (t->type) {
        case PI_TYPE_F32:
            memcpy(dst, row, (size_t)row_len * sizeof(float));
            break;
        case PI_TYPE_F16:
            for (int64_t i = 0; i < row_len; i++) {
                pi_f16 h = pi_f32_to_f16(row[i]);
                memcpy(dst + 2 * i, &h, sizeof h);
            }
            break;
        case PI_TYPE_BF16:
            for (int64_t i = 0; i < row_len; i++) {
                pi_bf16 h = pi_f32_to_bf16(row[i]);
                memcpy(dst + 2 * i, &h, sizeof h);
            }
            break;
        default:
            tr->from_float(row, dst, row_len);
            break;
        }
    }
}

static int cv_write_tensors(struct gguf_writer *w, const struct cv_plan *p, bool quiet)
{
    int rc = 0;
    void *buf = NULL;
    float *row = NULL;
    for (size_t i = 0; i < p->n; i++) {
        const struct cv_tensor *t = &p->t[i];
        size_t nbytes = quant_row_size(t->type, t->ne[0]) * (size_t)t->ne[1];
        buf = malloc(nbytes ? nbytes : 1);
        row = malloc((size_t)t->ne[0] * sizeof *row + 1);
        if (!buf || !row) {
            rc = pi_fail(PI_E_NOMEM, "convert: out of memory for %s (%zu bytes)", t->name, nbytes);
            goto fail;
        }
        if (!quiet) {
            if (t->n_dims == 2)
                fprintf(stderr, "[%3zu/%3zu] %s %s [%lld x %lld]\n", i + 1, p->n, t->name, quant_traits(t->type)->name,
                        (long long)t->ne[0], (long long)t->ne[1]);
            else
                fprintf(stderr, "[%3zu/%3zu] %s %s [%lld]\n", i + 1, p->n, t->name, quant_traits(t->type)->name,
                        (long long)t->ne[0]);
        }
        cv_convert(t, buf, row);
        if ((rc = gguf_writer_write_tensor(w, buf))) goto fail;
        free(buf);
        free(row);
        buf = NULL;
        row = NULL;
    }
    return 0;
fail:
    free(buf);
    free(row);
    return rc;
}

/* The output must not be a file the converter reads (`-o HF_DIR/model.safetensors` would replace it). */
static int cv_check_output(const struct convert_opts *o, const struct st_set *st)
{
    static const char *const names[] = { "config.json", "tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                                         "model.safetensors.index.json" };
    char in[CV_PATH_MAX];
    int rc;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(in, sizeof in, "%s/%s", o->hf_dir, names[i]);
        if ((rc = gguf_check_not_input(o->out_path, in, "the checkpoint's")))
            return rc;
    }
    for (size_t i = 0; i < st_n_tensors(st); i++)
        if ((rc = gguf_check_not_input(o->out_path, st_tensor_at(st, i)->file, "the checkpoint's")))
            return rc;
    return 0;
}

int convert_hf(const struct convert_opts *o)
{
    int rc;
    struct hf_config cfg;
    struct st_set *st = NULL;
    struct hf_vocab voc = { 0 };
    struct cv_plan plan = { 0 };
    struct gguf_writer *w = NULL;
    uint32_t ftype;

    if (!o->hf_dir || !o->out_path) return pi_fail(PI_E_INVAL, "convert: need a checkpoint directory and -o OUT.gguf");
    if ((rc = cv_ftype(o->out_type, &ftype))) return rc;
    quant_init();
    if ((rc = hf_config_load(&cfg, o->hf_dir)) || (rc = st_open_dir(&st, o->hf_dir)) ||
        (rc = hf_vocab_load(&voc, o->hf_dir, &cfg)) || (rc = cv_plan_build(&plan, st, &cfg, o->out_type, o->quiet)))
        goto fail;
    if ((rc = cv_check_output(o, st)))
        goto fail;
    if ((rc = gguf_writer_new(&w, GGUF_MAGIC_GGUF)) || (rc = cv_write_keys(w, &cfg, o)) || (rc = hf_vocab_write(&voc, w)))
        goto fail;
    for (size_t i = 0; i < plan.n; i++) {
        const struct cv_tensor *t = &plan.t[i];
        if ((rc = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL))) goto fail;
    }
    if (strcmp(cfg.act_name, "relu") == 0)
        fprintf(stderr, "convert: warning: a dense ReLU llama (pinfer.ffn_activation=relu): pinfer runs it as "
                "ReGLU, but llama.cpp and PowerInfer's dense path ignore that key and run it as SwiGLU (wrong "
                "output); for PowerInfer make a PWRI file (pictl calibrate)\n");
    if (!o->quiet)
        fprintf(stderr, "convert: %s (%s, %lld layers, %zu tokens, tokenizer %s%s%s) -> %s\n", o->hf_dir, cfg.arch_name,
                (long long)cfg.n_layer, voc.n, voc.model, voc.pre ? "/" : "", voc.pre ? voc.pre : "", o->out_path);
    if ((rc = gguf_writer_open(w, o->out_path)) || (rc = cv_write_tensors(w, &plan, o->quiet)) ||
        (rc = gguf_writer_close(w)))
        goto fail;
    gguf_writer_free(w);
    cv_plan_fini(&plan);
    hf_vocab_fini(&voc);
    st_close(st);
    return 0;
fail:
    gguf_writer_free(w);
    cv_plan_fini(&plan);
    hf_vocab_fini(&voc);
    st_close(st);
    return rc;
}

static void cv_usage(FILE *f)
{
    fprintf(f, "usage: pictl convert HF_DIR -o OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|MIXTURE] [-q]\n"
               "  MIXTURE: a pictl quantize / llama-quantize name (q4_k_m, q6_k, q5_1, iq4_xs...): converted to\n"
               "  f16 first, then quantized with that mixture's per-tensor types\n");
}

/* --type q4_k_m etc.: convert to F16 next to OUT, then quantize it into OUT with the mixture */
static int cv_convert_mixture(struct convert_opts *o, const struct qz_mixture *mix)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.f16.tmp", o->out_path) >= (int)sizeof tmp)
        return pi_fail(PI_E_INVAL, "convert: output path too long");
    const int guard = tmp_guard_add(tmp); /* ^C while converting or quantizing removes it */
    const char *out = o->out_path;
    o->out_path = tmp;
    o->out_type = PI_TYPE_F16;
    int rc = convert_hf(o);
    o->out_path = out;
    if (rc == 0) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        struct qz_opts q = { .in = tmp, .out = out, .n_threads = ncpu > 0 ? (int)ncpu : 1,
                             .log = o->quiet ? NULL : stderr,
                             .params = { .mix = mix, .output_type = QZ_TYPE_AUTO, .token_embd_type = QZ_TYPE_AUTO } };
        rc = qz_run(&q);
    }
    unlink(tmp);
    tmp_guard_drop(guard);
    return rc;
}

int convert_main(int argc, char **argv)
{
    struct convert_opts o = { .out_type = CV_DEFAULT_TYPE };
    const struct qz_mixture *mix = NULL; /* --type names a mixture rather than one type */
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cv_usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--outfile")) {
            if (i + 1 >= argc) rc = pi_fail(PI_E_INVAL, "%s needs a file name", a);
            else o.out_path = argv[++i];
        } else if (!strcmp(a, "--type") || !strcmp(a, "--outtype")) {
            int t = i + 1 < argc ? quant_type_from_name(argv[i + 1]) : -1;
            uint32_t ftype;
            if (t >= 0 && cv_ftype(t, &ftype) == 0) {
                o.out_type = t;
                mix = NULL;
                i++;
            } else if (i + 1 < argc && (mix = qz_mixture_find(argv[i + 1])) != NULL) {
                i++;
            } else {
                rc = pi_fail(PI_E_INVAL, "--type %s: expected f32, f16, bf16, q8_0, q4_0 or a quantize mixture "
                             "(q4_k_m, q6_k, ...)", i + 1 < argc ? argv[i + 1] : "(missing)");
            }
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o.quiet = true;
        } else if (a[0] == '-' && a[1]) {
            rc = pi_fail(PI_E_INVAL, "unknown option %s", a);
        } else if (!o.hf_dir) {
            o.hf_dir = a;
        } else {
            rc = pi_fail(PI_E_INVAL, "unexpected argument %s (one HF_DIR only)", a);
        }
    }
    if (!rc && (!o.hf_dir || !o.out_path)) rc = pi_fail(PI_E_INVAL, "need HF_DIR and -o OUT.gguf");
    if (!rc) rc = mix ? cv_convert_mixture(&o, mix) : convert_hf(&o);
    if (rc) {
        fprintf(stderr, "pictl convert: %s\n", *pi_errmsg() ? pi_errmsg() : pi_strerror(rc));
        if (rc == -PI_E_INVAL) cv_usage(stderr);
        return 1;
    }
    return 0;
}

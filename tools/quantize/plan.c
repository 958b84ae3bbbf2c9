/* plan.c — which type each tensor gets: the rules of llama.cpp's llama-quantize (src/llama-quant.cpp,
 * llama_tensor_get_type), re-stated for the mixtures whose types pinfer has (the IQ1/IQ2/IQ3,
 * ternary and MXFP4 mixtures are not offered, so their branches are absent).
 *
 * In short: only tensors of 2+ dims whose name ends in "weight" (not a norm) are quantized; the
 * output matrix (and the token embedding when the model ties them) gets Q6_K unless the mixture is
 * Q8_0 (Q8_0 also when its rows are not a multiple of the block); per mixture, some attn_v and
 * ffn_down layers get a higher type (use_more_bits picks the first and last eighth and every third
 * layer between); a row length that is not a multiple of the chosen type's block falls back
 * (Q4_K -> Q5_0, Q6_K -> Q8_0, ... then F16). The counters of attn_v / ffn_down tensors advance in
 * file order, as in llama.cpp. PowerInfer files: the predictors fc1/fc2 get Q5_0 unless the mixture
 * is Q4_0 (what PowerInfer's quantize writes), or keep their type with keep_predictors. */
#include "quantize.h"

#include <string.h>
#include <strings.h>

#include "pi_err.h"
#include "quant.h"

/* llama_ftype numbers (llama.h), written as general.file_type */
enum {
    FT_ALL_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_Q2_K_S = 21, FT_IQ4_NL = 25, FT_IQ4_XS = 30,
    FT_BF16 = 32,
};

static const struct qz_mixture mixtures[] = {
    { "q4_0", FT_Q4_0, PI_TYPE_Q4_0 },       { "q4_1", FT_Q4_1, PI_TYPE_Q4_1 },
    { "q5_0", FT_Q5_0, PI_TYPE_Q5_0 },       { "q5_1", FT_Q5_1, PI_TYPE_Q5_1 },
    { "iq4_nl", FT_IQ4_NL, PI_TYPE_IQ4_NL }, { "iq4_xs", FT_IQ4_XS, PI_TYPE_IQ4_XS },
    { "q2_k", FT_Q2_K, PI_TYPE_Q2_K },       { "q2_k_s", FT_Q2_K_S, PI_TYPE_Q2_K },
    { "q3_k_s", FT_Q3_K_S, PI_TYPE_Q3_K },   { "q3_k_m", FT_Q3_K_M, PI_TYPE_Q3_K },
    { "q3_k_l", FT_Q3_K_L, PI_TYPE_Q3_K },   { "q4_k_s", FT_Q4_K_S, PI_TYPE_Q4_K },
    { "q4_k_m", FT_Q4_K_M, PI_TYPE_Q4_K },   { "q5_k_s", FT_Q5_K_S, PI_TYPE_Q5_K },
    { "q5_k_m", FT_Q5_K_M, PI_TYPE_Q5_K },   { "q6_k", FT_Q6_K, PI_TYPE_Q6_K },
    { "q8_0", FT_Q8_0, PI_TYPE_Q8_0 },       { "f16", FT_F16, PI_TYPE_F16 },
    { "bf16", FT_BF16, PI_TYPE_BF16 },       { "f32", FT_ALL_F32, PI_TYPE_F32 },
};

/* llama-quantize's short names for the medium mixtures */
static const struct { const char *alias, *name; } aliases[] = {
    { "q3_k", "q3_k_m" }, { "q4_k", "q4_k_m" }, { "q5_k", "q5_k_m" },
};

const struct qz_mixture *qz_mixtures(size_t *n)
{
    *n = sizeof mixtures / sizeof mixtures[0];
    return mixtures;
}

const struct qz_mixture *qz_mixture_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].alias) == 0)
            name = aliases[i].name;
    for (size_t i = 0; i < sizeof mixtures / sizeof mixtures[0]; i++)
        if (strcasecmp(name, mixtures[i].name) == 0)
            return &mixtures[i];
    return NULL;
}

enum category {
    CAT_OTHER, CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_QKV, CAT_ATTN_KV_B, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_Q,
    CAT_ATTN_OUTPUT, CAT_FFN_UP, CAT_FFN_GATE, CAT_FFN_DOWN,
};

static bool has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* broad categories by name, first match wins (llama.cpp's tensor_get_category) */
static enum category category_of(const char *name)
{
    if (strcmp(name, "output.weight") == 0)
        return CAT_OUTPUT;
    if (strcmp(name, "token_embd.weight") == 0 || strcmp(name, "per_layer_token_embd.weight") == 0)
        return CAT_TOKEN_EMBD;
    static const struct { const char *sub; enum category cat; } by_sub[] = {
        { "attn_qkv.weight", CAT_ATTN_QKV }, { "attn_kv_b.weight", CAT_ATTN_KV_B },
        { "attn_v.weight", CAT_ATTN_V },     { "attn_k.weight", CAT_ATTN_K },
        { "attn_q.weight", CAT_ATTN_Q },     { "attn_output.weight", CAT_ATTN_OUTPUT },
        { "ffn_up", CAT_FFN_UP },            { "ffn_gate", CAT_FFN_GATE },
        { "ffn_down", CAT_FFN_DOWN },
    };
    for (size_t i = 0; i < sizeof by_sub / sizeof by_sub[0]; i++)
        if (has(name, by_sub[i].sub))
            return by_sub[i].cat;
    return CAT_OTHER;
}

static bool is_attn_v(enum category c)
{
    return c == CAT_ATTN_V || c == CAT_ATTN_QKV || c == CAT_ATTN_KV_B;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* llama.cpp's tensor_allows_quantization: 2+ dims, "...weight", not a norm, not the output with
 * leave_output, and not the small special tensors of other architectures */
static bool allows_quantization(const struct qz_params *p, const struct qz_tensor *t)
{
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_", "attn_rel_b.weight", ".position_embd", "sam.pos_embd",
        "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
        "mm.a.code_embd",
    };
    if (t->n_dims < 2 || !ends_with(t->name, "weight"))
        return false;
    if (p->leave_output && strcmp(t->name, "output.weight") == 0)
        return false;
    if (strcmp(t->name, "position_embd.weight") == 0 || strcmp(t->name, "token_types.weight") == 0)
        return false;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
        /* llama.cpp excludes the RWKV time_mix_* weights by their full names; all of them match */
        if (has(t->name, never[i]))
            return false;
    }
    return true;
}

static bool is_quantized(uint32_t type)
{
    return quant_traits(type) && quant_traits(type)->blck_size > 1;
}

/* the first and last eighth of the layers, and every third layer between */
static bool use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

struct plan_state {
    const struct qz_params *p;
    const struct qz_model *m;
    bool tied;               /* no output.weight: token_embd doubles as the output */
    int n_attn_v, i_attn_v;
    int n_ffn_down, i_ffn_down;
    bool is_70b;
};

static int n_gqa(const struct qz_model *m)
{
    return m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 0;
}

/* llama_tensor_get_type_impl for the offered mixtures */
static uint32_t rules(struct plan_state *s, uint32_t type, const struct qz_tensor *t, enum category cat)
{
    const uint32_t ft = s->p->mix->ftype;
    const bool falcon = s->m->arch && strcmp(s->m->arch, "falcon") == 0;
    if (cat == CAT_OUTPUT || (s->tied && cat == CAT_TOKEN_EMBD)) {
        if (s->p->output_type != QZ_TYPE_AUTO)
            return s->p->output_type;
        if (falcon || t->ne[0] % quant_traits(type)->blck_size != 0)
            return PI_TYPE_Q8_0;
        return type != PI_TYPE_Q8_0 ? PI_TYPE_Q6_K : type;
    }
    if (cat == CAT_TOKEN_EMBD)
        return s->p->token_embd_type != QZ_TYPE_AUTO ? s->p->token_embd_type : type;
    if (is_attn_v(cat)) {
        const int gqa = n_gqa(s->m);
        if (ft == FT_Q2_K)
            type = gqa >= 4 ? PI_TYPE_Q4_K : PI_TYPE_Q3_K;
        else if (ft == FT_Q2_K_S && gqa >= 4)
            type = PI_TYPE_Q4_K;
        else if (ft == FT_Q3_K_M)
            type = s->i_attn_v < 2 ? PI_TYPE_Q5_K : PI_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            type = PI_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && gqa >= 4)
            type = PI_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(s->i_attn_v, s->n_attn_v))
            type = PI_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && s->i_attn_v < 4)
            type = PI_TYPE_Q5_K;
        /* 70B: 8 heads share attn_v, so it is 8x smaller than attn_q: more bits cost little */
        if (s->is_70b && (type == PI_TYPE_Q3_K || type == PI_TYPE_Q4_K))
            type = PI_TYPE_Q5_K;
        s->i_attn_v++;
        return type;
    }
    if (cat == CAT_FFN_DOWN) {
        const int i = s->i_ffn_down, n = s->n_ffn_down;
        if (ft == FT_Q2_K)
            type = PI_TYPE_Q3_K;
        else if (ft == FT_Q2_K_S) {
            if (i < n / 8)
                type = PI_TYPE_Q4_K;
        } else if (ft == FT_Q3_K_M)
            type = i < n / 16 ? PI_TYPE_Q5_K : !falcon || use_more_bits(i, n) ? PI_TYPE_Q4_K : PI_TYPE_Q3_K;
        else if (ft == FT_Q3_K_L)
            type = falcon ? PI_TYPE_Q4_K : PI_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (falcon)
                type = i < n / 16 ? PI_TYPE_Q6_K : use_more_bits(i, n) ? PI_TYPE_Q5_K : PI_TYPE_Q4_K;
            else if (use_more_bits(i, n))
                type = PI_TYPE_Q6_K;
        } else if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS))
            type = PI_TYPE_Q5_K; /* llama.cpp: only without an importance matrix (we never have one) */
        else if (ft == FT_Q5_K_M && use_more_bits(i, n))
            type = PI_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && !falcon && i < n / 8)
            type = PI_TYPE_Q5_K;
        s->i_ffn_down++;
        return type;
    }
    if (cat == CAT_ATTN_OUTPUT) {
        if (!falcon) {
            if (ft == FT_Q2_K)
                type = PI_TYPE_Q3_K;
            else if (ft == FT_Q3_K_M)
                type = PI_TYPE_Q4_K;
            else if (ft == FT_Q3_K_L)
                type = PI_TYPE_Q5_K;
        } else if (ft == FT_Q3_K_L) {
            type = PI_TYPE_Q4_K;
        }
    }
    return type;
}

/* A row length the type cannot hold (ne[0] not a multiple of its block): the next type with
 * 32-element blocks, as llama.cpp's tensor_type_fallback, else F16. 0 or -PI_E_UNSUPPORTED. */
static int fallback(const struct qz_tensor *t, uint32_t *type, bool *fell)
{
    const struct pi_type_traits *tr = quant_traits(*type);
    if (t->ne[0] % tr->blck_size == 0)
        return 0;
    uint32_t f;
    switch (*type) {
    case PI_TYPE_IQ4_XS: f = PI_TYPE_IQ4_NL; break;
    case PI_TYPE_Q2_K:
    case PI_TYPE_Q3_K: f = PI_TYPE_Q4_0; break;
    case PI_TYPE_Q4_K: f = PI_TYPE_Q5_0; break;
    case PI_TYPE_Q5_K: f = PI_TYPE_Q5_1; break;
    case PI_TYPE_Q6_K: f = PI_TYPE_Q8_0; break;
    default:
        return pi_fail(PI_E_UNSUPPORTED, "tensor '%s': %lld columns are not a multiple of the %s block (%d) and "
                       "%s has no fallback type", t->name, (long long)t->ne[0], tr->name, tr->blck_size, tr->name);
    }
    if (t->ne[0] % quant_traits(f)->blck_size != 0)
        f = PI_TYPE_F16;
    *type = f;
    *fell = true;
    return 0;
}

static bool is_predictor(const char *name)
{
    return has(name, ".fc1.weight") || has(name, ".fc2.weight");
}

int qz_plan(const struct qz_params *p, const struct qz_model *m, const struct qz_tensor *t, size_t n,
            uint32_t *out_type, bool *out_fallback)
{
    struct plan_state s = { .p = p, .m = m, .tied = true, .n_ffn_down = m->n_layer };
    for (size_t i = 0; i < n; i++) {
        enum category c = category_of(t[i].name);
        if (c == CAT_OUTPUT)
            s.tied = false;
        if (is_attn_v(c))
            s.n_attn_v++;
    }
    s.is_70b = m->arch && strcmp(m->arch, "llama") == 0 && m->n_layer == 80 && m->n_head != m->n_head_kv;
    const uint32_t dflt = p->mix->type;

    for (size_t i = 0; i < n; i++) {
        const struct qz_tensor *ti = &t[i];
        const enum category c = category_of(ti->name);
        uint32_t type = ti->type;
        bool fell = false;
        int rc;
        if (allows_quantization(p, ti)) {
            if (p->token_embd_type != QZ_TYPE_AUTO && c == CAT_TOKEN_EMBD) {
                type = p->token_embd_type;
            } else if (p->output_type != QZ_TYPE_AUTO && c == CAT_OUTPUT) {
                type = p->output_type;
            } else if (m->powerinfer && is_predictor(ti->name) && is_quantized(dflt)) {
                /* PowerInfer's quantize: predictors Q5_0, or Q4_0 in a Q4_0 file */
                type = p->keep_predictors ? ti->type : dflt == PI_TYPE_Q4_0 ? PI_TYPE_Q4_0 : PI_TYPE_Q5_0;
                if (!p->keep_predictors && (rc = fallback(ti, &type, &fell)))
                    return rc;
            } else {
                type = dflt;
                if (is_quantized(dflt)) {
                    if (!p->pure)
                        type = rules(&s, type, ti, c);
                    if ((rc = fallback(ti, &type, &fell)))
                        return rc;
                }
            }
        }
        if (type != ti->type && is_quantized(ti->type) && !p->allow_requantize)
            return pi_fail(PI_E_UNSUPPORTED, "tensor '%s' is %s already: re-quantizing it to %s needs --allow-requantize",
                           ti->name, quant_traits(ti->type)->name, quant_traits(type)->name);
        out_type[i] = type;
        out_fallback[i] = fell;
    }
    return 0;
}

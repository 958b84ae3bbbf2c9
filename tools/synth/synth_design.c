/* synth_design.c — shapes, option defaults, and the activation law: Zipf probabilities per neuron
 * rank and the gate bias that realizes each probability (see synth.h for the construction). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pi_err.h"
#include "quant.h"
#include "synth_internal.h"

/* Named shapes: llama.cpp's LLaMA-7B/13B (ReluLLaMA has the same), and a CI-sized one. */
static const struct synth_shape syn_shapes[] = {
    { "llama-7b", 4096, 11008, 32, 32, 32, 32000, 2048, 1024 },
    { "llama-13b", 5120, 13824, 40, 40, 40, 32000, 2048, 1024 },
    { "tiny", 256, 1024, 4, 4, 2, 1024, 512, 128 },
};
#define SYN_CUSTOM_VOCAB 32000
#define SYN_CUSTOM_CTX 2048
#define SYN_RANK_MAX 1024       /* PowerInfer's predictor rank for 7B-sized models */
#define SYN_SUB_MIN 8           /* fewer token dims make firing patterns too coarse */
#define SYN_BISECT_STEPS 100    /* halvings: far below double precision for the ranges used */
#define SYN_ZIPF_MAX 20.0       /* beyond this the hottest neurons saturate at p = 1 anyway */
#define SYN_QUANTILE_POINTS 65536

void synth_opts_default(struct synth_opts *o)
{
    memset(o, 0, sizeof *o);
    o->shape = syn_shapes[0];
    o->type = PI_TYPE_F16;
    o->pred_type = PI_TYPE_F16;
    o->sparsity = 0.9;
    o->zipf = SYNTH_DEFAULT_ZIPF;
    o->seed = 1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    o->n_threads = n > 0 ? (int)n : 1;
}

int synth_shape_parse(struct synth_shape *s, const char *spec)
{
    for (size_t i = 0; i < sizeof syn_shapes / sizeof syn_shapes[0]; i++)
        if (!strcmp(spec, syn_shapes[i].name)) {
            *s = syn_shapes[i];
            return 0;
        }
    long v[5];
    const char *p = spec;
    for (int i = 0; i < 5; i++) {
        char *end;
        v[i] = strtol(p, &end, 10);
        if (end == p || v[i] <= 0 || v[i] > (1 << 20) || (i < 4 ? *end != ',' : *end != 0))
            return pi_fail(PI_E_INVAL, "synth: shape '%s': expected llama-7b, llama-13b, tiny or E,F,L,H,HKV", spec);
        p = end + 1;
    }
    int32_t e = (int32_t)v[0];
    *s = (struct synth_shape){ "custom", e, (int32_t)v[1], (int32_t)v[2], (int32_t)v[3], (int32_t)v[4],
                               SYN_CUSTOM_VOCAB, SYN_CUSTOM_CTX, e / 2 < SYN_RANK_MAX ? e / 2 : SYN_RANK_MAX };
    return 0;
}

/* Token subspace dimension: the predictor needs 2d + 1 rows, and at least half of the dims past the
 * first block stay "junk" (where attention and the FFN write). */
static int32_t syn_sub_dim(const struct synth_shape *s)
{
    int32_t by_rank = (s->rank - 1) / 2, by_embd = (s->n_embd - SYNTH_SUB_OFF) / 2;
    return by_rank < by_embd ? by_rank : by_embd;
}

/* mean of min(1, c w[k]) */
static double syn_clipped_mean(const double *w, int32_t n, double c)
{
    double sum = 0.0;
    for (int32_t k = 0; k < n; k++)
        sum += fmin(1.0, c * w[k]);
    return sum / n;
}

/* p(k) = min(1, C k^-s) for ranks k = 1..n, C solved so that the mean is p_mean. */
static void syn_zipf_probs(double *p, int32_t n, double s, double p_mean)
{
    for (int32_t k = 0; k < n; k++)
        p[k] = pow(k + 1.0, -s); /* the weights first; p is overwritten at the end */
    double lo = 0.0, hi = 1.0;
    while (syn_clipped_mean(p, n, hi) < p_mean) /* ends: once hi p[n-1] >= 1 the mean is 1 */
        lo = hi, hi *= 2.0;
    for (int it = 0; it < SYN_BISECT_STEPS; it++) {
        double c = 0.5 * (lo + hi);
        if (syn_clipped_mean(p, n, c) > p_mean)
            hi = c;
        else
            lo = c;
    }
    for (int32_t k = 0; k < n; k++)
        p[k] = fmin(1.0, hi * p[k]);
}

/* Share of activations of the hottest SYNTH_HOT_FRAC of ranks (p sorted descending). */
static double syn_hot_share(const double *p, int32_t n)
{
    int32_t n_hot = (int32_t)(SYNTH_HOT_FRAC * n);
    double hot = 0.0, all = 0.0;
    for (int32_t k = 0; k < n; k++) {
        all += p[k];
        if (k < n_hot)
            hot += p[k];
    }
    return all > 0 ? hot / all : 0.0;
}

int synth_rank_probs(const struct synth_opts *o, double *p, double *zipf_used)
{
    const int32_t n = o->shape.n_ff;
    const double p_mean = 1.0 - o->sparsity;
    double s = o->zipf;
    if (o->hot_share > 0) {
        /* The share grows with s (from 0.3 at s = 0): bisect. */
        double lo = 0.0, hi = SYN_ZIPF_MAX;
        syn_zipf_probs(p, n, hi, p_mean);
        if (o->hot_share <= SYNTH_HOT_FRAC || o->hot_share > syn_hot_share(p, n))
            return pi_fail(PI_E_INVAL, "synth: --hot-share %g is out of reach (between %g and %.3f at sparsity %g)",
                           o->hot_share, SYNTH_HOT_FRAC, syn_hot_share(p, n), o->sparsity);
        for (int it = 0; it < SYN_BISECT_STEPS / 2; it++) {
            s = 0.5 * (lo + hi);
            syn_zipf_probs(p, n, s, p_mean);
            if (syn_hot_share(p, n) < o->hot_share)
                lo = s;
            else
                hi = s;
        }
        s = hi;
    }
    syn_zipf_probs(p, n, s, p_mean);
    *zipf_used = s;
    return 0;
}

int synth_design_get(const struct synth_opts *o, struct synth_design *d)
{
    const struct synth_shape *s = &o->shape;
    memset(d, 0, sizeof *d);
    if (s->n_embd % s->n_head || s->n_head % s->n_head_kv || (s->n_embd / s->n_head) % 2)
        return pi_fail(PI_E_INVAL, "synth: %d heads (%d kv) do not split n_embd %d into even head dims", s->n_head,
                       s->n_head_kv, s->n_embd);
    const struct pi_type_traits *tt = quant_traits(o->type);
    if (!tt || (o->type != PI_TYPE_F32 && (!tt->from_float || !tt->to_float || o->type == PI_TYPE_Q8_K)))
        return pi_fail(PI_E_INVAL, "synth: type %u: expected a weight type with a quantizer (f32, f16, q8_0, q4_k...)",
                       o->type);
    if (s->n_embd % SYNTH_SUB_OFF)
        return pi_fail(PI_E_INVAL, "synth: n_embd %d must be a multiple of %d", s->n_embd, SYNTH_SUB_OFF);
    if (s->n_embd % tt->blck_size || s->n_ff % tt->blck_size)
        return pi_fail(PI_E_INVAL, "synth: n_embd %d and n_ff %d must be multiples of %s's block of %d", s->n_embd,
                       s->n_ff, tt->name, (int)tt->blck_size);
    const struct pi_type_traits *pt = quant_traits(o->pred_type);
    if (!pt || (o->pred_type != PI_TYPE_F32 && o->pred_type != PI_TYPE_F16 && o->pred_type != PI_TYPE_Q8_0 &&
                o->pred_type != PI_TYPE_Q4_0))
        return pi_fail(PI_E_INVAL, "synth: predictor type %u: expected f32, f16, q8_0 or q4_0", o->pred_type);
    if (s->rank % pt->blck_size)
        return pi_fail(PI_E_INVAL, "synth: predictor rank %d must be a multiple of %d for %s predictors", s->rank,
                       pt->blck_size, pt->name);
    if (!(o->sparsity > 0.0 && o->sparsity < 1.0))
        return pi_fail(PI_E_INVAL, "synth: sparsity %g is not in (0, 1)", o->sparsity);
    if (!(o->zipf >= 0.0 && o->zipf <= SYN_ZIPF_MAX))
        return pi_fail(PI_E_INVAL, "synth: zipf exponent %g is not in [0, %g]", o->zipf, SYN_ZIPF_MAX);
    if (s->rank < 2 * SYN_SUB_MIN + 1)
        return pi_fail(PI_E_INVAL, "synth: predictor rank %d is below %d", s->rank, 2 * SYN_SUB_MIN + 1);
    d->sub_dim = syn_sub_dim(s);
    d->rank = s->rank;
    if (d->sub_dim < SYN_SUB_MIN)
        return pi_fail(PI_E_INVAL, "synth: n_embd %d leaves a token subspace of %d dims (< %d)", s->n_embd, d->sub_dim,
                       SYN_SUB_MIN);
    double *p = malloc((size_t)s->n_ff * sizeof *p);
    if (!p)
        return pi_fail(PI_E_NOMEM, "synth: out of memory");
    int rc = synth_rank_probs(o, p, &d->zipf);
    if (!rc) {
        d->p_mean = 1.0 - o->sparsity;
        d->hot_share = syn_hot_share(p, s->n_ff);
        d->p_max = p[0];
        d->p_min = p[s->n_ff - 1];
    }
    free(p);
    return rc;
}

/* ---- the quantile of u1, one coordinate of a uniform unit vector in R^d ----
 * density ∝ (1 - x²)^((d-3)/2) on [-1, 1], tabulated and integrated (trapezoid) once. */
int synth_quantile_init(struct synth_quantile *q, int32_t d)
{
    q->n = SYN_QUANTILE_POINTS;
    q->cdf = malloc((size_t)(q->n + 1) * sizeof *q->cdf);
    if (!q->cdf)
        return pi_fail(PI_E_NOMEM, "synth: out of memory");
    const double h = 2.0 / q->n, e = 0.5 * (d - 3);
    double prev = 0.0, acc = 0.0; /* density at x = -1 is 0 for d > 3 */
    q->cdf[0] = 0.0;
    for (int32_t i = 1; i <= q->n; i++) {
        double x = -1.0 + i * h, f = pow(fmax(0.0, 1.0 - x * x), e);
        acc += 0.5 * (prev + f) * h;
        q->cdf[i] = acc;
        prev = f;
    }
    for (int32_t i = 0; i <= q->n; i++)
        q->cdf[i] /= acc;
    return 0;
}

void synth_quantile_fini(struct synth_quantile *q)
{
    free(q->cdf);
    q->cdf = NULL;
}

/* x with P(u1 > x) = p (p = 1 → -1: fires unless exactly opposite; p = 0 → 1). */
double synth_quantile_upper(const struct synth_quantile *q, double p)
{
    double target = 1.0 - p;
    if (target <= 0.0)
        return -1.0;
    if (target >= 1.0)
        return 1.0;
    int32_t lo = 0, hi = q->n; /* cdf[lo] <= target < cdf[hi] */
    while (hi - lo > 1) {
        int32_t mid = (lo + hi) / 2;
        if (q->cdf[mid] <= target)
            lo = mid;
        else
            hi = mid;
    }
    double span = q->cdf[hi] - q->cdf[lo], t = span > 0 ? (target - q->cdf[lo]) / span : 0.0;
    return -1.0 + (lo + t) * (2.0 / q->n);
}

/* train.c — one layer's activation predictor, trained on the recorded (h, fired) pairs.
 *
 * Model: logits (n_ff) = w2 (n_ff, r) · relu(w1 (r, n_embd) · h), no biases (PowerInfer's format).
 * Loss: binary cross-entropy on the raw logits, positives (fired neurons, ~5-40 % of them) weighted by
 * pos_weight so that the optimum leans towards recall; Adam on mini-batches with a cosine-decayed step.
 * Inputs are scaled per dimension to unit RMS while training (the residual stream has dimensions of
 * very different size); the scale is folded into w1's columns afterwards, so the stored predictor
 * takes h as it is. Every product goes through the cal_gemm backend. Deterministic for a seed. */
#include "cal_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"

#define TRAIN_DEFAULT_EPOCHS 6
#define TRAIN_DEFAULT_BATCH 128
#define TRAIN_DEFAULT_LR 4e-3f
#define TRAIN_DEFAULT_SEED 0x5eed
/* Sharpness of the gate initialisation's logits (standardized pre-activations have unit scale). */
#define TRAIN_DEFAULT_INIT_SCALE 2.0f
/* Adam's moment decay rates and denominator guard (Kingma & Ba defaults). */
#define ADAM_BETA1 0.9f
#define ADAM_BETA2 0.999f
#define ADAM_EPS 1e-8f
/* The step decays along a cosine from lr to LR_FLOOR · lr over the whole run. */
#define LR_FLOOR 0.05f
/* Automatic positive weight: sqrt of the negative/positive ratio, clamped to [1, POS_WEIGHT_MAX]. */
#define POS_WEIGHT_MAX 8.0f
/* Dimensions whose RMS is below this fraction of the mean RMS are scaled as if they had it (avoids
 * blowing up a dead dimension). */
#define RMS_FLOOR 1e-3
/* Rows per block when scanning held-out logits. */
#define SCAN_ROWS 256

void cal_train_defaults(struct cal_train_params *p)
{
    p->epochs = TRAIN_DEFAULT_EPOCHS;
    p->batch = TRAIN_DEFAULT_BATCH;
    p->lr = TRAIN_DEFAULT_LR;
    p->pos_weight = 0.0f;
    p->select_recall = 0.0;
    p->init_scale = TRAIN_DEFAULT_INIT_SCALE;
    p->seed = TRAIN_DEFAULT_SEED;
}

int cal_pred_init(struct cal_pred *p, int32_t rank, int32_t n_embd, int32_t n_ff)
{
    memset(p, 0, sizeof *p);
    p->rank = rank;
    p->n_embd = n_embd;
    p->n_ff = n_ff;
    p->w1 = calloc((size_t)rank * (size_t)n_embd, sizeof(float));
    p->w2 = calloc((size_t)n_ff * (size_t)rank, sizeof(float));
    if (!p->w1 || !p->w2) {
        cal_pred_fini(p);
        return pi_fail(PI_E_NOMEM, "calibrate: out of memory for a rank-%d predictor", rank);
    }
    return 0;
}

void cal_pred_fini(struct cal_pred *p)
{
    free(p->w1);
    free(p->w2);
    memset(p, 0, sizeof *p);
}

/* splitmix64: a small, good, seedable generator (reproducible across platforms). */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float rng_sym(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0); }

/* w ~ U(-a, a) with a = std · sqrt(3) (a uniform of that std). */
static void init_uniform(float *w, size_t n, float std, uint64_t *s)
{
    const float a = std * sqrtf(3.0f);
    for (size_t i = 0; i < n; i++)
        w[i] = a * rng_sym(s);
}

/* Adam: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²; w -= lr_t · m / (sqrt(v) + eps), lr_t bias-corrected. */
static void adam_step(float *w, const float *g, float *m, float *v, size_t n, float lr_t)
{
    for (size_t i = 0; i < n; i++) {
        m[i] = ADAM_BETA1 * m[i] + (1.0f - ADAM_BETA1) * g[i];
        v[i] = ADAM_BETA2 * v[i] + (1.0f - ADAM_BETA2) * g[i] * g[i];
        w[i] -= lr_t * m[i] / (sqrtf(v[i]) + ADAM_EPS);
    }
}

/* Per-dimension RMS of the training inputs (floored), in double. */
static int input_scale(const struct cal_rec *r, int layer, float *inv_scale)
{
    const int32_t E = r->n_embd;
    double *ss = calloc((size_t)E, sizeof *ss);
    if (!ss)
        return pi_fail(PI_E_NOMEM, "calibrate: out of memory");
    for (int32_t t = 0; t < r->n_train; t++) {
        const float *h = r->h[layer] + (size_t)t * E;
        for (int32_t j = 0; j < E; j++)
            ss[j] += (double)h[j] * h[j];
    }
    double mean_rms = 0.0;
    for (int32_t j = 0; j < E; j++) {
        ss[j] = sqrt(ss[j] / (r->n_train > 0 ? r->n_train : 1));
        mean_rms += ss[j] / E;
    }
    for (int32_t j = 0; j < E; j++) {
        const double rms = ss[j] > RMS_FLOOR * mean_rms ? ss[j] : RMS_FLOOR * mean_rms;
        inv_scale[j] = rms > 0.0 ? (float)(1.0 / rms) : 1.0f;
    }
    free(ss);
    return 0;
}

struct train_bufs {
    float *x, *z1, *a, *lg, *da, *dw1, *dw2, *m1, *v1, *m2, *v2, *inv_scale;
    int32_t *perm;
};

static void train_bufs_fini(struct train_bufs *b)
{
    free(b->x), free(b->z1), free(b->a), free(b->lg), free(b->da), free(b->dw1), free(b->dw2);
    free(b->m1), free(b->v1), free(b->m2), free(b->v2), free(b->inv_scale), free(b->perm);
    memset(b, 0, sizeof *b);
}

static int train_bufs_init(struct train_bufs *b, int32_t B, int32_t E, int32_t F, int32_t R, int32_t n)
{
    memset(b, 0, sizeof *b);
    const size_t sB = (size_t)B, sE = (size_t)E, sF = (size_t)F, sR = (size_t)R;
    b->x = malloc(sB * sE * sizeof(float));
    b->z1 = malloc(sB * sR * sizeof(float));
    b->a = malloc(sB * sR * sizeof(float));
    b->lg = malloc(sB * sF * sizeof(float));
    b->da = malloc(sB * sR * sizeof(float));
    b->dw1 = malloc(sR * sE * sizeof(float));
    b->dw2 = malloc(sF * sR * sizeof(float));
    b->m1 = calloc(sR * sE, sizeof(float));
    b->v1 = calloc(sR * sE, sizeof(float));
    b->m2 = calloc(sF * sR, sizeof(float));
    b->v2 = calloc(sF * sR, sizeof(float));
    b->inv_scale = malloc(sE * sizeof(float));
    b->perm = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!b->x || !b->z1 || !b->a || !b->lg || !b->da || !b->dw1 || !b->dw2 || !b->m1 || !b->v1 || !b->m2 ||
        !b->v2 || !b->inv_scale || !b->perm) {
        train_bufs_fini(b);
        return pi_fail(PI_E_NOMEM, "calibrate: out of memory for training buffers");
    }
    return 0;
}

/* Fraction of (training row, neuron) pairs that fired. */
static double train_pos_rate(const struct cal_rec *r, int layer)
{
    uint64_t pos = 0;
    const uint8_t *m = r->fired[layer];
    for (size_t i = 0; i < (size_t)r->n_train * r->mask_stride; i++)
        pos += (uint64_t)__builtin_popcount(m[i]);
    const double n = (double)r->n_train * r->n_ff;
    return n > 0 ? (double)pos / n : 0.0;
}

/* G (B, F) = w_y · (sigmoid(L) - y) / B, in place over the logits: the gradient of the weighted
 * binary cross-entropy w_y · (softplus(l) - y·l), averaged over the batch. */
static void bce_grad(const struct cal_rec *r, int layer, const int32_t *rows, int32_t B, float *lg, float pos_w)
{
    const int32_t F = r->n_ff;
    const float inv_b = 1.0f / (float)B;
    for (int32_t b = 0; b < B; b++) {
        const uint8_t *mask = r->fired[layer] + (size_t)rows[b] * r->mask_stride;
        float *l = lg + (size_t)b * F;
        for (int32_t j = 0; j < F; j++)
            l[j] = 1.0f / (1.0f + expf(-l[j]));
        for (int32_t j = 0; j < F; j++)
            if ((mask[j >> 3] >> (j & 7)) & 1)
                l[j] = pos_w * (l[j] - 1.0f);
        for (int32_t j = 0; j < F; j++)
            l[j] *= inv_b;
    }
}

/* Held-out predicted-active fraction at the selection recall of p, whose w1 still takes the scaled
 * input x = h ⊙ inv_scale (tmp receives the folded copy). */
static int heldout_pred_frac(const struct cal_gemm *g, const struct cal_rec *r, int layer, const struct cal_pred *p,
                             const float *inv_scale, double recall, struct cal_pred *tmp, double *frac)
{
    const int32_t E = r->n_embd;
    for (int32_t k = 0; k < p->rank; k++)
        for (int32_t j = 0; j < E; j++)
            tmp->w1[(size_t)k * E + j] = p->w1[(size_t)k * E + j] * inv_scale[j];
    memcpy(tmp->w2, p->w2, (size_t)p->n_ff * p->rank * sizeof(float));
    float thr;
    struct cal_stats st;
    int rc = cal_threshold(g, r, layer, r->n_train, r->n_rows, tmp, recall, &thr, NULL);
    if (!rc)
        rc = cal_evaluate(g, r, layer, r->n_train, r->n_rows, tmp, thr, &st);
    *frac = rc ? 0.0 : cal_pred_frac(&st); /* st is set only when both succeeded */
    return rc;
}

int cal_train(const struct cal_gemm *g, const struct cal_rec *r, int layer, const float *gate,
              const struct cal_train_params *tp, struct cal_pred *p, struct cal_progress *prog)
{
    const int32_t E = r->n_embd, F = r->n_ff, R = p->rank, N = r->n_train;
    const int32_t BS = tp->batch > 0 ? tp->batch : TRAIN_DEFAULT_BATCH;
    if (N <= 0)
        return pi_fail(PI_E_INVAL, "calibrate: no training tokens");
    struct train_bufs b;
    struct cal_pred tmp = { 0 }, best = { 0 };
    int rc = train_bufs_init(&b, BS, E, F, R, N);
    if (rc)
        return rc;
    if ((rc = input_scale(r, layer, b.inv_scale)))
        goto out;

    uint64_t seed = tp->seed ^ ((uint64_t)(layer + 1) * 0x100000001b3ull) ^ ((uint64_t)R << 32);
    /* He init for the ReLU layer (inputs have unit RMS), 1/sqrt(r) for the output layer. */
    init_uniform(p->w1, (size_t)R * E, sqrtf(2.0f / (float)E), &seed);
    init_uniform(p->w2, (size_t)F * R, sqrtf(1.0f / (float)R), &seed);
    if (gate) {
        if ((rc = cal_init_gate(g, r, layer, gate, b.inv_scale, p, &seed)))
            goto out;
        for (size_t i = 0; i < (size_t)F * R; i++)
            p->w2[i] *= tp->init_scale;
    }
    float pos_w = tp->pos_weight;
    if (pos_w <= 0.0f) {
        const double rate = train_pos_rate(r, layer);
        pos_w = rate > 0.0 ? (float)sqrt((1.0 - rate) / rate) : 1.0f;
        pos_w = pos_w < 1.0f ? 1.0f : pos_w > POS_WEIGHT_MAX ? POS_WEIGHT_MAX : pos_w;
    }
    for (int32_t i = 0; i < N; i++)
        b.perm[i] = i;
    /* Early stopping: keep the epoch (0 = the initialisation) with the lowest held-out predicted-
     * active fraction at the selection recall. BCE optimizes the average log-loss, not the tail
     * of hard positives that a high-recall threshold has to reach, so more epochs can make a good
     * initialisation worse at high rank. */
    const bool select = tp->select_recall > 0.0 && r->n_rows > r->n_train;
    double best_frac = INFINITY;
    if (select) {
        if ((rc = cal_pred_init(&tmp, R, E, F)) || (rc = cal_pred_init(&best, R, E, F)) ||
            (rc = heldout_pred_frac(g, r, layer, p, b.inv_scale, tp->select_recall, &tmp, &best_frac)))
            goto out;
        memcpy(best.w1, p->w1, (size_t)R * E * sizeof(float));
        memcpy(best.w2, p->w2, (size_t)F * R * sizeof(float));
    }

    const int32_t steps_per_epoch = (N + BS - 1) / BS;
    const int64_t total_steps = (int64_t)steps_per_epoch * tp->epochs;
    int64_t step = 0;
    for (int32_t ep = 0; ep < tp->epochs; ep++) {
        /* Fisher-Yates shuffle of the training rows */
        for (int32_t i = N - 1; i > 0; i--) {
            const int32_t j = (int32_t)(rng_next(&seed) % (uint64_t)(i + 1));
            const int32_t t = b.perm[i];
            b.perm[i] = b.perm[j];
            b.perm[j] = t;
        }
        for (int32_t b0 = 0; b0 < N; b0 += BS, step++) {
            const int32_t Bn = N - b0 < BS ? N - b0 : BS;
            const int32_t *rows = b.perm + b0;
            /* X (Bn, E) = h[rows] · inv_scale */
            for (int32_t i = 0; i < Bn; i++) {
                const float *h = r->h[layer] + (size_t)rows[i] * E;
                float *x = b.x + (size_t)i * E;
                for (int32_t j = 0; j < E; j++)
                    x[j] = h[j] * b.inv_scale[j];
            }
            /* Z1 (Bn, R) = X · W1^T;  A = relu(Z1) */
            g->sgemm(g->self, false, true, Bn, R, E, 1.0f, b.x, E, p->w1, E, 0.0f, b.z1, R);
            for (size_t i = 0; i < (size_t)Bn * R; i++)
                b.a[i] = b.z1[i] > 0.0f ? b.z1[i] : 0.0f;
            /* L (Bn, F) = A · W2^T, then dL/dlogits in place */
            g->sgemm(g->self, false, true, Bn, F, R, 1.0f, b.a, R, p->w2, R, 0.0f, b.lg, F);
            bce_grad(r, layer, rows, Bn, b.lg, pos_w);
            /* dW2 (F, R) = G^T · A;  dA (Bn, R) = G · W2;  dZ1 = dA ⊙ [Z1 > 0];  dW1 (R, E) = dZ1^T · X */
            g->sgemm(g->self, true, false, F, R, Bn, 1.0f, b.lg, F, b.a, R, 0.0f, b.dw2, R);
            g->sgemm(g->self, false, false, Bn, R, F, 1.0f, b.lg, F, p->w2, R, 0.0f, b.da, R);
            for (size_t i = 0; i < (size_t)Bn * R; i++)
                b.da[i] = b.z1[i] > 0.0f ? b.da[i] : 0.0f;
            g->sgemm(g->self, true, false, R, E, Bn, 1.0f, b.da, R, b.x, E, 0.0f, b.dw1, E);

            const float frac = total_steps > 1 ? (float)step / (float)(total_steps - 1) : 1.0f;
            const float lr = tp->lr * (LR_FLOOR + (1.0f - LR_FLOOR) * 0.5f * (1.0f + cosf((float)M_PI * frac)));
            const float t = (float)(step + 1);
            const float lr_t = lr * sqrtf(1.0f - powf(ADAM_BETA2, t)) / (1.0f - powf(ADAM_BETA1, t));
            adam_step(p->w1, b.dw1, b.m1, b.v1, (size_t)R * E, lr_t);
            adam_step(p->w2, b.dw2, b.m2, b.v2, (size_t)F * R, lr_t);
            prog_update(prog, (uint64_t)step + 1, (uint64_t)total_steps);
        }
        double frac;
        if (select) {
            if ((rc = heldout_pred_frac(g, r, layer, p, b.inv_scale, tp->select_recall, &tmp, &frac)))
                goto out;
            if (frac < best_frac) {
                best_frac = frac;
                memcpy(best.w1, p->w1, (size_t)R * E * sizeof(float));
                memcpy(best.w2, p->w2, (size_t)F * R * sizeof(float));
            }
        }
    }
    if (select) {
        memcpy(p->w1, best.w1, (size_t)R * E * sizeof(float));
        memcpy(p->w2, best.w2, (size_t)F * R * sizeof(float));
    }
    /* Fold the input scale into fc1: w1 · (h ⊙ s) = (w1 ⊙ s) · h. */
    for (int32_t k = 0; k < R; k++)
        for (int32_t j = 0; j < E; j++)
            p->w1[(size_t)k * E + j] *= b.inv_scale[j];
out:
    cal_pred_fini(&tmp);
    cal_pred_fini(&best);
    train_bufs_fini(&b);
    return rc;
}

/* Logits of rows [row0, row1) block by block, handed to a visitor with the block's first row. */
typedef void (*scan_fn)(void *user, const struct cal_rec *r, int layer, int32_t row0, int32_t n, const float *lg);

static int scan_logits(const struct cal_gemm *g, const struct cal_rec *r, int layer, int32_t row0, int32_t row1,
                       const struct cal_pred *p, scan_fn fn, void *user)
{
    const int32_t E = r->n_embd, F = r->n_ff, R = p->rank;
    float *z = malloc((size_t)SCAN_ROWS * R * sizeof(float));
    float *lg = malloc((size_t)SCAN_ROWS * F * sizeof(float));
    if (!z || !lg) {
        free(z);
        free(lg);
        return pi_fail(PI_E_NOMEM, "calibrate: out of memory");
    }
    for (int32_t t0 = row0; t0 < row1; t0 += SCAN_ROWS) {
        const int32_t n = row1 - t0 < SCAN_ROWS ? row1 - t0 : SCAN_ROWS;
        /* Z (n, R) = relu(H · W1^T);  L (n, F) = Z · W2^T */
        g->sgemm(g->self, false, true, n, R, E, 1.0f, r->h[layer] + (size_t)t0 * E, E, p->w1, E, 0.0f, z, R);
        for (size_t i = 0; i < (size_t)n * R; i++)
            z[i] = z[i] > 0.0f ? z[i] : 0.0f;
        g->sgemm(g->self, false, true, n, F, R, 1.0f, z, R, p->w2, R, 0.0f, lg, F);
        fn(user, r, layer, t0, n, lg);
    }
    free(z);
    free(lg);
    return 0;
}

struct thr_scan {
    float *pos; /* logits of fired (row, neuron) pairs */
    size_t n_pos, cap;
    double sum, sum2;
    uint64_t n;
    bool nomem;
};

static void thr_visit(void *user, const struct cal_rec *r, int layer, int32_t row0, int32_t n, const float *lg)
{
    struct thr_scan *s = user;
    const int32_t F = r->n_ff;
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < F; j++) {
            const float l = lg[(size_t)i * F + j];
            s->sum += l;
            s->sum2 += (double)l * l;
            s->n++;
            if (!cal_fired(r, layer, row0 + i, j))
                continue;
            if (s->n_pos == s->cap) {
                size_t cap = s->cap ? 2 * s->cap : 65536;
                float *np = realloc(s->pos, cap * sizeof *np);
                if (!np) {
                    s->nomem = true;
                    return;
                }
                s->pos = np;
                s->cap = cap;
            }
            s->pos[s->n_pos++] = l;
        }
}

/* The k-th smallest of v[0..n) (v is reordered): Hoare's selection, expected O(n). */
static float select_kth(float *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const float pivot = v[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot) i++;
            while (v[j] > pivot) j--;
            if (i <= j) {
                const float t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                if (j == 0) break;
                j--;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return v[k];
    }
    return v[k];
}

int cal_threshold(const struct cal_gemm *g, const struct cal_rec *r, int layer, int32_t row0, int32_t row1,
                  const struct cal_pred *p, double recall, float *thr, float *logit_std)
{
    struct thr_scan s = { 0 };
    int rc = scan_logits(g, r, layer, row0, row1, p, thr_visit, &s);
    if (!rc && s.nomem)
        rc = pi_fail(PI_E_NOMEM, "calibrate: out of memory for held-out logits");
    if (rc) {
        free(s.pos);
        return rc;
    }
    if (s.n_pos == 0) {
        *thr = 0.0f; /* nothing fired: any threshold has recall 1 */
    } else {
        /* logit >= the k-th smallest positive keeps n_pos - k >= recall · n_pos of the positives */
        size_t k = (size_t)floor((1.0 - recall) * (double)s.n_pos);
        if (k >= s.n_pos)
            k = s.n_pos - 1;
        *thr = select_kth(s.pos, s.n_pos, k);
    }
    if (logit_std) {
        const double mean = s.n ? s.sum / (double)s.n : 0.0, var = s.n ? s.sum2 / (double)s.n - mean * mean : 0.0;
        *logit_std = (float)sqrt(var > 0.0 ? var : 0.0);
    }
    free(s.pos);
    return 0;
}

struct eval_scan {
    struct cal_stats *st;
    float thr;
};

static void eval_visit(void *user, const struct cal_rec *r, int layer, int32_t row0, int32_t n, const float *lg)
{
    struct eval_scan *s = user;
    const int32_t F = r->n_ff;
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < F; j++) {
            const bool pred = lg[(size_t)i * F + j] >= s->thr, y = cal_fired(r, layer, row0 + i, j);
            s->st->tp += pred && y;
            s->st->fp += pred && !y;
            s->st->fn += !pred && y;
            s->st->n++;
        }
}

int cal_evaluate(const struct cal_gemm *g, const struct cal_rec *r, int layer, int32_t row0, int32_t row1,
                 const struct cal_pred *p, float thr, struct cal_stats *st)
{
    memset(st, 0, sizeof *st);
    struct eval_scan s = { st, thr };
    return scan_logits(g, r, layer, row0, row1, p, eval_visit, &s);
}

/* init_gate.c — start a predictor from the layer's own gate weights instead of noise.
 *
 * In a ReLU-family FFN neuron j fires iff its gate pre-activation z_j = w_j · ffn_norm(h) is > 0 (and,
 * for ReGLU, its up value is not exactly 0; for dReLU also u_j > 0). ffn_norm only scales h by a
 * positive number, so the firing pattern is the sign of a linear map of h: W (n_ff, n_embd) = gate
 * rows ⊙ ffn_norm weight. A predictor of rank r can hold any linear map of rank k = r/2 exactly,
 * since a·h = relu(a·h) − relu(−a·h): hidden units in ± pairs. The best rank-k map for the recorded
 * inputs keeps the top-k principal directions of the neurons' standardized pre-activations
 * z̃ = D⁻¹ W x (D = their standard deviations, so quiet neurons count as much as loud ones):
 *     C = D⁻¹ W Σ Wᵀ D⁻¹,  Σ = E[x xᵀ] over training tokens (x = h / rms(h)),
 *     U (n_ff, k) = top-k eigenvectors of C (subspace iteration through the GEMM backend),
 *     logits ≈ U Uᵀ D⁻¹ W h  →  fc1 = [B; −B], fc2 = [U, −U], B = Uᵀ D⁻¹ W.
 * Training then refines this from the labels (it also learns the up/dReLU part the gate misses). */
#include "cal_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"

/* Subspace iterations: the eigenvalues of C fall off fast, so the top-k span settles in a few dozen. */
#define INIT_ITERS 24
#define INIT_ROWS 256
/* A column whose norm falls below this after orthogonalization is redrawn at random. */
#define INIT_TINY 1e-6f

/* uniform in [-1, 1) from splitmix64 */
static float init_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* Modified Gram-Schmidt over the k rows (length n) of Q, in place. */
static void orthonormalize_rows(float *Q, int32_t k, int32_t n, uint64_t *seed)
{
    for (int32_t i = 0; i < k; i++) {
        float *qi = Q + (size_t)i * n;
        for (int attempt = 0; attempt < 2; attempt++) {
            for (int32_t j = 0; j < i; j++) {
                const float *qj = Q + (size_t)j * n;
                double d = 0.0;
                for (int32_t t = 0; t < n; t++)
                    d += (double)qi[t] * qj[t];
                for (int32_t t = 0; t < n; t++)
                    qi[t] -= (float)d * qj[t];
            }
            double nn = 0.0;
            for (int32_t t = 0; t < n; t++)
                nn += (double)qi[t] * qi[t];
            if (sqrt(nn) > INIT_TINY) {
                const float inv = (float)(1.0 / sqrt(nn));
                for (int32_t t = 0; t < n; t++)
                    qi[t] *= inv;
                break;
            }
            for (int32_t t = 0; t < n; t++) /* degenerate: a fresh direction, orthogonalized again */
                qi[t] = init_rand(seed);
        }
    }
}

int cal_init_gate(const struct cal_gemm *g, const struct cal_rec *r, int layer, const float *gate,
                  const float *inv_scale, struct cal_pred *p, uint64_t *seed)
{
    const int32_t E = r->n_embd, F = r->n_ff, R = p->rank, k = R / 2;
    if (k < 1)
        return 0; /* rank 1: nothing to pair; keep the random init */
    float *wx = calloc((size_t)F * E, sizeof(float));     /* (F, E): W in the trainer's input space */
    float *xs = malloc((size_t)INIT_ROWS * E * sizeof(float));
    float *sig = calloc((size_t)E * E, sizeof(float));   /* (E, E) Σ */
    float *t = malloc((size_t)F * E * sizeof(float));    /* (F, E) W Σ */
    float *c = malloc((size_t)F * F * sizeof(float));    /* (F, F) C */
    float *q = malloc((size_t)k * F * sizeof(float));    /* (k, F) eigenvector estimates, one per row */
    float *q2 = malloc((size_t)k * F * sizeof(float));
    float *b = malloc((size_t)k * E * sizeof(float));
    float *dinv = malloc((size_t)F * sizeof(float));
    int rc = 0;
    if (!wx || !xs || !sig || !t || !c || !q || !q2 || !b || !dinv) {
        rc = pi_fail(PI_E_NOMEM, "calibrate: out of memory for the predictor initialisation");
        goto out;
    }
    /* The trainer feeds x = h ⊙ inv_scale, so W h = (W ⊙ 1/inv_scale) x. */
    for (int32_t j = 0; j < F; j++)
        for (int32_t i = 0; i < E; i++)
            wx[(size_t)j * E + i] = gate[(size_t)j * E + i] / inv_scale[i];
    /* Σ (E, E) = mean over training tokens of x xᵀ / |x|²·E: each token enters as ffn_norm sees it */
    for (int32_t t0 = 0; t0 < r->n_train; t0 += INIT_ROWS) {
        const int32_t n = r->n_train - t0 < INIT_ROWS ? r->n_train - t0 : INIT_ROWS;
        for (int32_t s = 0; s < n; s++) {
            const float *h = r->h[layer] + (size_t)(t0 + s) * E;
            float *x = xs + (size_t)s * E;
            double ss = 0.0;
            for (int32_t i = 0; i < E; i++) {
                x[i] = h[i] * inv_scale[i];
                ss += (double)x[i] * x[i];
            }
            const float norm = ss > 0.0 ? (float)sqrt((double)E / ss) : 0.0f;
            for (int32_t i = 0; i < E; i++)
                x[i] *= norm;
        }
        g->sgemm(g->self, true, false, E, E, n, 1.0f / (float)r->n_train, xs, E, xs, E, 1.0f, sig, E);
    }
    /* C (F, F) = W Σ Wᵀ, then standardized: C̃_ij = C_ij / (σ_i σ_j) */
    g->sgemm(g->self, false, false, F, E, E, 1.0f, wx, E, sig, E, 0.0f, t, E);
    g->sgemm(g->self, false, true, F, F, E, 1.0f, t, E, wx, E, 0.0f, c, F);
    for (int32_t j = 0; j < F; j++) {
        const float v = c[(size_t)j * F + j];
        dinv[j] = v > 0.0f ? 1.0f / sqrtf(v) : 0.0f;
    }
    for (int32_t i = 0; i < F; i++)
        for (int32_t j = 0; j < F; j++)
            c[(size_t)i * F + j] *= dinv[i] * dinv[j];
    /* subspace iteration: Q ← orth(Q C̃) (C̃ symmetric) */
    for (size_t i = 0; i < (size_t)k * F; i++)
        q[i] = init_rand(seed);
    orthonormalize_rows(q, k, F, seed);
    for (int it = 0; it < INIT_ITERS; it++) {
        g->sgemm(g->self, false, false, k, F, F, 1.0f, q, F, c, F, 0.0f, q2, F);
        orthonormalize_rows(q2, k, F, seed);
        float *tmp = q;
        q = q2;
        q2 = tmp;
    }
    /* B (k, E) = Q D⁻¹ Wx;  fc1 = [B; −B] (then rows 2k.. keep their random init), fc2 = [Qᵀ, −Qᵀ] */
    for (int32_t j = 0; j < F; j++)
        for (int32_t i = 0; i < E; i++)
            wx[(size_t)j * E + i] *= dinv[j];
    g->sgemm(g->self, false, false, k, E, F, 1.0f, q, F, wx, E, 0.0f, b, E);
    for (int32_t m = 0; m < k; m++)
        for (int32_t i = 0; i < E; i++) {
            p->w1[(size_t)m * E + i] = b[(size_t)m * E + i];
            p->w1[(size_t)(k + m) * E + i] = -b[(size_t)m * E + i];
        }
    for (int32_t j = 0; j < F; j++) {
        float *row = p->w2 + (size_t)j * R;
        for (int32_t m = 0; m < k; m++) {
            row[m] = q[(size_t)m * F + j];
            row[k + m] = -q[(size_t)m * F + j];
        }
    }
out:
    free(wx), free(xs), free(sig), free(t), free(c), free(q), free(q2), free(b), free(dinv);
    return rc;
}

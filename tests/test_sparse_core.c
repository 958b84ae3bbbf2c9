/* test_sparse_core — the sparse FFN core on the CPU:
 *  - ffn_runs_build equals a per-neuron reference (sizes around the 64-neuron word, densities, masks);
 *  - AXPY kernels (y += a · x) of every type: the kernels in use (AVX2 where available) equal the
 *    scalar reference bit for bit (odd lengths too), and both match f64 within rounding;
 *  - PowerInfer (PWRI) files load: ffn_down_t, fc1/fc2 (rank from the file), act_freq, threshold,
 *    ReGLU for llama and dReLU for bamboo; weight bytes count them; corrupt files give clear errors
 *    (missing fc1, wrong fc1/fc2 shapes, missing ffn_down_t);
 *  - ctx_ffn over down_t only equals an f64 reference; with ffn_down too, both paths agree;
 *  - ffn_partial through down_t: hot + cold = all neurons (1e-5 at every type) and = the f64
 *    reference (1e-5 for f32/f16, quantization tolerance for q8_0/q4_0); bytes counted exactly;
 *  - the predictor: an exact predictor (fc2 · relu(fc1 · h) = gate · ffn_norm(h) up to a positive
 *    factor) marks exactly the ReLU-active neurons and the sparse forward equals the dense one; an
 *    all-positive predictor gives the dense logits bit for bit; an all-negative one zeroes the FFN;
 *    the counters report neurons, tokens and bytes. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ffn_split.h"
#include "eval.h"
#include "gguf.h"
#include "model.h"
#include "pi_err.h"
#include "predictor.h"
#include "pwri_testmodel.h"
#include "quant.h"
#include "threadpool.h"
#include "testutil.h"

#define B 3          /* tokens per batch */
#define N_TOK 6      /* tokens of the forward comparisons */
#define F32_TOL 1e-5 /* relative, f32 accumulation */
#define Q_TOL 3e-2   /* relative, q8_0-quantized activations into gate/up */

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static float urand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)(rs >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

static double rel(const float *a, const double *b, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs(b[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

static double relf(const float *a, const float *b, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - b[i]));
        mr = fmax(mr, fabs((double)b[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

/* ---- AXPY kernels ---- */

static void test_axpy(void)
{
    const uint32_t types[] = { PI_TYPE_F32, PI_TYPE_F16, PI_TYPE_BF16, PI_TYPE_Q8_0, PI_TYPE_Q4_0 };
    const int64_t lens[] = { 32, 96, 4096, 77, 5, 1000 }; /* the last three only for float types */
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const struct pi_type_traits *fast = quant_traits(types[ti]), *ref = quant_traits_ref(types[ti]);
        REQUIRE(fast && ref && fast->axpy && ref->axpy, "%s: no axpy kernel", ref ? ref->name : "?");
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int64_t n = lens[li];
            if (n % ref->blck_size)
                continue;
            float *x = malloc((size_t)n * sizeof *x), *xd = malloc((size_t)n * sizeof *xd);
            float *y0 = malloc((size_t)n * sizeof *y0), *y1 = malloc((size_t)n * sizeof *y1);
            double *yr = malloc((size_t)n * sizeof *yr);
            void *q = malloc(quant_row_size(types[ti], n));
            for (int64_t i = 0; i < n; i++) {
                x[i] = urand() * 3.0f;
                y0[i] = y1[i] = urand();
            }
            ref->from_float(x, q, n);
            ref->to_float(q, xd, n);
            const float a = -1.7f + urand() * 0.01f;
            for (int64_t i = 0; i < n; i++)
                yr[i] = (double)y0[i] + (double)a * xd[i];
            ref->axpy(n, y0, a, q);
            fast->axpy(n, y1, a, q);
            CHECK(memcmp(y0, y1, (size_t)n * sizeof *y0) == 0, "%s n=%lld: fast axpy differs from the reference",
                  ref->name, (long long)n);
            double d = rel(y0, yr, n);
            CHECK(d < 1e-6, "%s n=%lld: axpy differs from f64 by %.3g", ref->name, (long long)n, d);
            /* a = 0 leaves y as it is */
            memcpy(y1, y0, (size_t)n * sizeof *y0);
            fast->axpy(n, y1, 0.0f, q);
            CHECK(memcmp(y0, y1, (size_t)n * sizeof *y0) == 0, "%s: axpy with a = 0 changed y", ref->name);
            free(x), free(xd), free(y0), free(y1), free(yr), free(q);
        }
    }
    printf("axpy: kernels match the reference (%s)\n", quant_has_avx2() ? "avx2" : "scalar");
}

/* ---- ffn_runs_build against a per-neuron reference ---- */

/* neuron i selected and (no mask: n_mask < 0) on in some mask row */
static bool ref_on(const uint8_t *sel, uint8_t want, const uint8_t *mask, int32_t n_mask, int64_t n, int64_t i)
{
    if (sel[i] != want)
        return false;
    bool any = n_mask < 0;
    for (int32_t b = 0; b < n_mask; b++)
        any |= mask[b * n + i] != 0;
    return any;
}

static void test_runs(void)
{
    const int64_t sizes[] = { 1, 7, 63, 64, 65, 128, 130, 1000 };
    const float dens[] = { 0.0f, 0.1f, 0.5f, 0.97f, 1.0f };
    struct ffn_runs r = { 0 };
    int cases = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t di = 0; di < sizeof dens / sizeof dens[0]; di++)
            for (int32_t n_mask = -1; n_mask <= 3; n_mask++) { /* -1: no mask */
                const int64_t n = sizes[si];
                uint8_t *sel = malloc((size_t)n), *mask = malloc((size_t)(n * 3 + 1));
                for (int64_t i = 0; i < n; i++)
                    sel[i] = (uint8_t)(urand() > 0.8f ? 2 : urand() * 0.5f + 0.5f < dens[di]);
                for (int64_t i = 0; i < n * 3; i++)
                    mask[i] = (uint8_t)((urand() * 0.5f + 0.5f < dens[di]) * (1 + (i % 3))); /* any nonzero counts */
                for (uint8_t want = 0; want <= 1; want++) {
                    CHECK_OK(ffn_runs_build(&r, sel, want, n_mask < 0 ? NULL : mask, n_mask < 0 ? 0 : n_mask, n));
                    /* reference: walk the neurons one by one */
                    int32_t k = 0;
                    int64_t total = 0, i = 0;
                    bool same = true;
                    while (i < n) {
                        if (!ref_on(sel, want, mask, n_mask, n, i)) {
                            i++;
                            continue;
                        }
                        const int64_t st = i;
                        while (i < n && ref_on(sel, want, mask, n_mask, n, i))
                            i++;
                        same &= k < r.n && r.run[k][0] == st && r.run[k][1] == i - st;
                        total += i - st;
                        k++;
                    }
                    same &= k == r.n && total == r.n_neurons;
                    CHECK(same, "runs of n=%lld density %.2f masks %d want %d: %d runs, reference %d", (long long)n,
                          dens[di], n_mask, want, r.n, k);
                    cases++;
                }
                free(sel), free(mask);
            }
    ffn_runs_fini(&r);
    printf("ffn_runs_build: %d cases equal the per-neuron reference\n", cases);
}

/* ---- models ---- */

static struct pwri_cfg base_cfg(void)
{
    return (struct pwri_cfg){ .arch = "llama", .pwri = true, .n_embd = 64, .n_layer = 2, .n_ff = 128, .n_head = 4,
                              .n_head_kv = 2, .head_dim = 16, .ffn_type = PI_TYPE_F32, .down_t = true,
                              .pred = PRED_EXACT, .act_freq = true };
}

static struct pi_model *load_ok(const char *path)
{
    struct pi_model *m = NULL;
    int rc = model_load(&m, path);
    REQUIRE(rc == 0, "load %s: %s %s", path, pi_strerror(rc), pi_errmsg());
    return m;
}

static uint64_t tbytes(const struct pi_tensor *t)
{
    return t->data ? (uint64_t)t->row_bytes * (uint64_t)t->ne[1] : 0;
}

static void test_load(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/load.gguf", dir);
    struct pwri_cfg c = base_cfg();
    c.set_threshold = true;
    c.threshold = -0.25f;
    struct pwri_weights w;
    pwri_make(&c, &w, 11);
    pwri_write(path, &c, &w);
    struct pi_model *m = load_ok(path);
    CHECK(m->hp.powerinfer, "a PWRI file must be marked powerinfer");
    CHECK(m->hp.sparse_threshold == -0.25f, "sparse_threshold %g", m->hp.sparse_threshold);
    CHECK(m->hp.act == PI_ACT_REGLU, "PWRI llama must run ReGLU (got %s)", model_act_name(m->hp.act));
    CHECK(pred_available(m), "predictors must be available");
    uint64_t want = tbytes(&m->output) + tbytes(&m->output_norm);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct pi_layer *l = &m->layers[il];
        CHECK(!l->ffn_down.data && l->ffn_down_t.data, "layer %d: down_t only", il);
        CHECK(l->ffn_down_t.ne[0] == c.n_embd && l->ffn_down_t.ne[1] == c.n_ff, "down_t shape");
        CHECK(l->fc1.ne[0] == c.n_embd && l->fc1.ne[1] == w.rank && l->fc2.ne[0] == w.rank && l->fc2.ne[1] == c.n_ff,
              "predictor shapes");
        CHECK(l->act_freq && l->act_freq[5] == w.act_freq[il][5], "act_freq bound");
        const struct pi_tensor *ts[] = { &l->attn_norm, &l->wq, &l->wk, &l->wv, &l->wo, &l->ffn_norm,
                                         &l->ffn_gate, &l->ffn_up, &l->ffn_down_t, &l->fc1, &l->fc2 };
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
            want += tbytes(ts[i]);
    }
    CHECK(model_weight_bytes(m) == want, "weight bytes %llu, expected %llu (down_t, fc1, fc2 included)",
          (unsigned long long)model_weight_bytes(m), (unsigned long long)want);
    model_free(m);
    pwri_free(&c, &w);

    /* no threshold key: default 0; bamboo: dReLU; a plain GGUF: no predictors */
    c = base_cfg();
    c.arch = "bamboo";
    pwri_make(&c, &w, 12);
    pwri_write(path, &c, &w);
    m = load_ok(path);
    CHECK(m->hp.sparse_threshold == 0.0f && m->hp.act == PI_ACT_DRELU, "bamboo: threshold %g act %s",
          m->hp.sparse_threshold, model_act_name(m->hp.act));
    model_free(m);
    pwri_free(&c, &w);

    /* errors */
    struct {
        enum pwri_bad bad;
        int code;
        const char *needle;
    } errs[] = {
        { BAD_NO_FC1, -PI_E_NOTFOUND, "PowerInfer file lacks predictor tensor 'blk.1.fc1.weight'" },
        { BAD_FC2_SHAPE, -PI_E_TYPE, "'blk.0.fc2.weight' has shape [128, 64, 1, 1], expected [128, 128]" },
        { BAD_FC1_SHAPE, -PI_E_TYPE, "'blk.0.fc1.weight' has shape [32, 256" },
        { BAD_NO_DOWN_T, -PI_E_NOTFOUND, "'blk.1.ffn_down_t.weight' is missing" },
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        c = base_cfg();
        c.bad = errs[i].bad;
        pwri_make(&c, &w, 13);
        pwri_write(path, &c, &w);
        m = NULL;
        int rc = model_load(&m, path);
        CHECK(rc == errs[i].code && strstr(pi_errmsg(), errs[i].needle), "corruption %zu gave %d '%s'", i, rc,
              pi_errmsg());
        model_free(m);
        pwri_free(&c, &w);
    }
    unlink(path);
}

/* ---- ffn_partial through down_t at every type ---- */

static void test_partial(const char *dir, uint32_t type, struct pi_pool *pool)
{
    char path[512];
    snprintf(path, sizeof path, "%s/partial-%u.gguf", dir, type);
    struct pwri_cfg c = base_cfg();
    c.ffn_type = type;
    c.n_embd = 128;
    c.n_ff = 256;
    c.pred = PRED_RANDOM;
    struct pwri_weights w;
    pwri_make(&c, &w, 20 + type);
    pwri_write(path, &c, &w);
    struct pi_model *m = load_ok(path);
    const int64_t E = c.n_embd, F = c.n_ff;
    const double eps = m->hp.norm_eps;
    float *h = malloc((size_t)(B * E) * sizeof *h), *xn = malloc((size_t)(B * E) * sizeof *xn);
    float *yall = malloc((size_t)(B * E) * sizeof *yall), *y1 = malloc((size_t)(B * E) * sizeof *y1),
          *y2 = malloc((size_t)(B * E) * sizeof *y2);
    double *yr = malloc((size_t)(B * E) * sizeof *yr), *act = malloc((size_t)(B * F) * sizeof *act);
    uint8_t *sel = malloc((size_t)F);
    for (int64_t i = 0; i < B * E; i++)
        h[i] = urand();
    struct ffn_runs all = { 0 }, r0 = { 0 }, r1 = { 0 };
    struct ffn_scratch s = { 0 };
    memset(sel, 1, (size_t)F);
    CHECK_OK(ffn_runs_build(&all, sel, 1, NULL, 0, F));
    const double tol = type == PI_TYPE_Q8_0 || type == PI_TYPE_Q4_0 ? Q_TOL : F32_TOL;
    for (int layer = 0; layer < c.n_layer; layer++) {
        const struct pi_layer *l = &m->layers[layer];
        for (int b = 0; b < B; b++) {
            ops_rmsnorm(xn + b * E, h + b * E, l->ffn_norm.data, E, m->hp.norm_eps);
            pwri_ref_ffn(&c, &w, layer, h + b * E, eps, yr + b * E, act + b * F);
        }
        uint64_t bytes_all = 0, b0 = 0, b1 = 0;
        CHECK_OK(ffn_partial(pool, &s, m, (struct pi_layer_weights[]){ model_layer_weights(m, layer) }, xn, B, &all, NULL, yall, &bytes_all));
        double d = rel(yall, yr, B * E);
        CHECK(d < tol, "%s layer %d: all neurons via down_t differ from f64 by %.3g", quant_traits(type)->name, layer,
              d);
        /* bytes: gate + up rows of every neuron, down_t rows of the live ones only */
        int64_t live = 0;
        for (int64_t i = 0; i < F; i++) {
            bool on = false;
            for (int b = 0; b < B; b++)
                on |= s.act[(size_t)b * F + i] != 0.0f;
            live += on;
        }
        CHECK(live > F / 8 && live < F, "%s: %lld live neurons of %lld: ReLU must zero some", quant_traits(type)->name,
              (long long)live, (long long)F);
        const uint64_t want = (uint64_t)F * (l->ffn_gate.row_bytes + l->ffn_up.row_bytes) +
                              (uint64_t)live * l->ffn_down_t.row_bytes;
        CHECK(bytes_all == want, "%s: bytes %llu, expected %llu", quant_traits(type)->name,
              (unsigned long long)bytes_all, (unsigned long long)want);
        /* the same layer through a cache view: the odd neurons' three rows copied into slots (in
         * reverse order, so no slot is at its neuron's index): the same bits, masked or not */
        {
            const size_t gb = l->ffn_gate.row_bytes, ub = l->ffn_up.row_bytes, db = l->ffn_down_t.row_bytes;
            const size_t stride = gb + ub + db;
            char *cache = malloc((size_t)F * stride);
            int32_t *slot = malloc((size_t)F * sizeof *slot);
            uint8_t *mask = malloc((size_t)(B * F));
            for (int64_t i = 0; i < F; i++) {
                slot[i] = i % 2 ? (int32_t)(F - 1 - i) : -1;
                if (slot[i] >= 0) {
                    char *dst = cache + (size_t)slot[i] * stride;
                    memcpy(dst, (const char *)l->ffn_gate.data + (size_t)i * gb, gb);
                    memcpy(dst + gb, (const char *)l->ffn_up.data + (size_t)i * ub, ub);
                    memcpy(dst + gb + ub, (const char *)l->ffn_down_t.data + (size_t)i * db, db);
                }
            }
            for (int64_t i = 0; i < B * F; i++)
                mask[i] = urand() > 0.3f;
            const struct pi_layer_weights lw = { .l = l, .layer = layer, .slot = slot, .cache = cache,
                                                 .stride = stride, .up_off = gb, .down_off = gb + ub };
            CHECK_OK(ffn_runs_build(&r0, sel, 1, mask, B, F));
            CHECK_OK(ffn_partial(pool, &s, m, (struct pi_layer_weights[]){ model_layer_weights(m, layer) }, xn, B, &r0,
                                 mask, y1, &b0));
            CHECK_OK(ffn_partial(pool, &s, m, &lw, xn, B, &r0, mask, y2, &b1));
            CHECK(!memcmp(y1, y2, (size_t)(B * E) * sizeof *y1) && b0 == b1,
                  "%s layer %d: the FFN through a cache view differs from the mapping's", quant_traits(type)->name, layer);
            CHECK_OK(ffn_partial(pool, &s, m, &lw, xn, B, &all, NULL, y2, NULL));
            d = relf(y2, yall, B * E);
            CHECK(d < F32_TOL, "%s layer %d: unmasked through a cache view differs by %.3g", quant_traits(type)->name,
                  layer, d);
            free(cache), free(slot), free(mask);
        }
        for (int variant = 0; variant < 2; variant++) {
            /* 0: random neurons (no block alignment needed on the down_t path); 1: first third */
            for (int64_t i = 0; i < F; i++)
                sel[i] = variant == 0 ? (urand() > 0.0f) : i < F / 3;
            CHECK_OK(ffn_runs_build(&r0, sel, 1, NULL, 0, F));
            CHECK_OK(ffn_runs_build(&r1, sel, 0, NULL, 0, F));
            CHECK_OK(ffn_partial(pool, &s, m, (struct pi_layer_weights[]){ model_layer_weights(m, layer) }, xn, B, &r0, NULL, y1, &b0));
            CHECK_OK(ffn_partial(pool, &s, m, (struct pi_layer_weights[]){ model_layer_weights(m, layer) }, xn, B, &r1, NULL, y2, &b1));
            for (int64_t i = 0; i < B * E; i++)
                y1[i] += y2[i];
            d = relf(y1, yall, B * E);
            CHECK(d < F32_TOL, "%s layer %d split %d: hot + cold differ from all by %.3g", quant_traits(type)->name,
                  layer, variant, d);
            CHECK(b0 + b1 == bytes_all, "%s: split bytes %llu + %llu != %llu", quant_traits(type)->name,
                  (unsigned long long)b0, (unsigned long long)b1, (unsigned long long)bytes_all);
        }
    }
    printf("ffn_partial down_t %s: hot + cold = all = f64 reference\n", quant_traits(type)->name);
    ffn_runs_fini(&all), ffn_runs_fini(&r0), ffn_runs_fini(&r1);
    ffn_scratch_fini(&s);
    free(h), free(xn), free(yall), free(y1), free(y2), free(yr), free(act), free(sel);
    model_free(m);
    pwri_free(&c, &w);
    unlink(path);
}

/* ---- ffn_partial through down_t: the same bits at any thread count and batch ----
 * Several neuron groups (the last one partial) and a batch of two token passes; under per-token
 * masks: y is bitwise the same for pools of 1..7 threads, and a token alone (its own mask row) gets
 * its row of the batch's y bit for bit (the fused group + reduction job, ffn_split.c); and the same
 * with the AXPYs split by columns instead of by groups (ffn_scratch.split), against the same y. */
#define INV_B 19 /* two passes of AXPY_TOKENS (16) */

/* ffn_partial_bits' wait: the bits come after a few hundred polls (spun in the first caller; the
 * others find them come or wait too), or never */
struct bits_arrival {
    _Atomic int polls;
    int after; /* < 0: never */
};
static bool bits_arrive(void *arg)
{
    struct bits_arrival *a = arg;
    if (a->after < 0)
        return false;
    while (atomic_fetch_add(&a->polls, 1) < a->after)
        ;
    return true;
}
static void test_partial_invariance(const char *dir, uint32_t type)
{
    char path[512];
    snprintf(path, sizeof path, "%s/inv-%u.gguf", dir, type);
    struct pwri_cfg c = base_cfg();
    c.ffn_type = type;
    c.n_embd = 128;
    c.n_ff = 256 * 9 + 96; /* the last group partial, and not whole 64-neuron words of bits */
    c.n_layer = 1;
    c.pred = PRED_RANDOM;
    struct pwri_weights w;
    pwri_make(&c, &w, 40 + type);
    pwri_write(path, &c, &w);
    struct pi_model *m = load_ok(path);
    const int64_t E = c.n_embd, F = c.n_ff;
    float *xn = malloc((size_t)(INV_B * E) * sizeof *xn), *y0 = malloc((size_t)(INV_B * E) * sizeof *y0),
          *y1 = malloc((size_t)(INV_B * E) * sizeof *y1), *yt = malloc((size_t)E * sizeof *yt),
          *yb = malloc((size_t)E * sizeof *yb);
    uint8_t *sel = malloc((size_t)F), *mask = malloc((size_t)(INV_B * F));
    /* bits past n_ff set: they must not count */
    uint64_t *bits = malloc((size_t)(F + 63) / 64 * sizeof *bits);
    memset(bits, 0xff, (size_t)(F + 63) / 64 * sizeof *bits);
    for (int64_t i = 0; i < INV_B * E; i++)
        xn[i] = urand();
    for (int64_t i = 0; i < F; i++)
        sel[i] = urand() > -0.6f; /* ~80 % cold */
    for (int64_t i = 0; i < INV_B * F; i++)
        mask[i] = urand() > 0.4f;
    struct ffn_runs r = { 0 }, rt = { 0 };
    struct ffn_scratch s = { 0 };
    const struct pi_layer_weights lw = model_layer_weights(m, 0);
    CHECK_OK(ffn_runs_build(&r, sel, 1, mask, INV_B, F));
    struct pi_pool *p1 = NULL;
    CHECK_OK(pool_new(&p1, 1));
    s.split = FFN_SPLIT_GROUPS;
    CHECK_OK(ffn_partial(p1, &s, m, &lw, xn, INV_B, &r, mask, y0, NULL));
    static const enum ffn_split_mode modes[] = { FFN_SPLIT_GROUPS, FFN_SPLIT_COLS };
    static const char *const mode_name[] = { "by groups", "by columns" };
    for (int mi = 0; mi < 2; mi++) {
        s.split = modes[mi];
        int differ = 0;
        for (int nt = 1; nt <= 7; nt++) {
            struct pi_pool *p = NULL;
            CHECK_OK(pool_new(&p, nt));
            for (int rep = 0; rep < 20; rep++) {
                CHECK_OK(ffn_partial(p, &s, m, &lw, xn, INV_B, &r, mask, y1, NULL));
                differ += memcmp(y0, y1, (size_t)(INV_B * E) * sizeof *y0) != 0;
            }
            for (int t = 0; t < INV_B; t += 6) {
                CHECK_OK(ffn_runs_build(&rt, sel, 1, mask + (size_t)t * F, 1, F));
                uint64_t br = 0, bb = 0;
                CHECK_OK(ffn_partial(p, &s, m, &lw, xn + (size_t)t * E, 1, &rt, mask + (size_t)t * F, yt, &br));
                CHECK(!memcmp(yt, y0 + (size_t)t * E, (size_t)E * sizeof *yt), "%s %s, %d threads: token %d alone "
                      "differs from its row in the batch", quant_traits(type)->name, mode_name[mi], nt, t);
                /* the same neurons as bits still on their way (ffn_partial_bits): the same y and bytes */
                for (int64_t i = 0; i < F; i++)
                    if (sel[i] && mask[(size_t)t * F + i])
                        bits[i / 64] |= 1ull << (i % 64);
                    else
                        bits[i / 64] &= ~(1ull << (i % 64));
                struct bits_arrival ba = { .after = 300 * t };
                struct ffn_bits src = { .bits = bits, .wait = bits_arrive, .arg = &ba };
                CHECK(ffn_partial_bits(p, &s, m, &lw, xn + (size_t)t * E, &src, yb, &bb) == 0, "ffn_partial_bits");
                CHECK(!memcmp(yb, yt, (size_t)E * sizeof *yt) && bb == br, "%s %s, %d threads: token %d from bits "
                      "differs from its runs (%llu / %llu bytes)", quant_traits(type)->name, mode_name[mi], nt, t,
                      (unsigned long long)bb, (unsigned long long)br);
                ba.after = -1;
                CHECK(ffn_partial_bits(p, &s, m, &lw, xn + (size_t)t * E, &src, yb, NULL) == 1,
                      "bits that never come: ffn_partial_bits says so");
            }
            pool_free(p);
        }
        CHECK(differ == 0, "%s %s: %d runs at 1-7 threads differ from 1 thread by groups", quant_traits(type)->name,
              mode_name[mi], differ);
    }
    double mx = 0;
    for (int64_t i = 0; i < INV_B * E; i++)
        mx = fmax(mx, fabs((double)y0[i]));
    CHECK(mx > 0, "%s: the masked cold share is not all zero", quant_traits(type)->name);
    printf("ffn_partial down_t %s: bitwise the same at 1-7 threads, by groups and by columns, and alone as in a "
           "batch of %d\n",
           quant_traits(type)->name, INV_B);
    pool_free(p1);
    ffn_runs_fini(&r), ffn_runs_fini(&rt);
    ffn_scratch_fini(&s);
    free(xn), free(y0), free(y1), free(yt), free(yb), free(sel), free(mask), free(bits);
    model_free(m);
    pwri_free(&c, &w);
    unlink(path);
}

/* ---- forward: dense via down_t, sparse with predictors ---- */

/* x (B, E) random; ctx_ffn of one layer; returns the FFN output x' - x in out */
static void ffn_once(struct pi_ctx *ctx, int layer, const float *x0, int64_t E, float *out)
{
    float *x = ctx_x(ctx);
    memcpy(x, x0, (size_t)(B * E) * sizeof *x);
    CHECK_OK(ctx_ffn(ctx, layer, B));
    for (int64_t i = 0; i < B * E; i++)
        out[i] = x[i] - x0[i];
}

static void eval_logits(const struct pi_model *m, bool sparse, int threads, float *lg)
{
    struct pi_ctx *ctx = NULL;
    struct pi_ctx_params cp = { .n_ctx = 16, .n_batch = 4, .n_threads = threads, .sparse = sparse };
    CHECK_OK(ctx_new(&ctx, m, &cp));
    CHECK(ctx_is_sparse(ctx) == (sparse && pred_available(m)), "ctx_is_sparse");
    const int32_t toks[N_TOK] = { 1, 40, 77, 200, 5, 9 };
    const int V = m->hp.n_vocab;
    CHECK_OK(ctx_eval(ctx, toks, 4, 0, lg, true));
    for (int t = 4; t < N_TOK; t++)
        CHECK_OK(ctx_eval(ctx, toks + t, 1, t, lg + (size_t)t * V, false));
    ctx_free(ctx);
}

struct hook_rec {
    int calls;
    int64_t n_ff, nonzero;
};

static void hook_fn(void *user, int layer, int32_t nb, int32_t pos, const float *h, const float *act)
{
    struct hook_rec *r = user;
    (void)layer, (void)pos, (void)h;
    r->calls++;
    for (int64_t i = 0; i < (int64_t)nb * r->n_ff; i++)
        r->nonzero += act[i] != 0.0f;
}

static void test_forward(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/fwd.gguf", dir);
    const enum pwri_pred preds[] = { PRED_EXACT, PRED_ON, PRED_OFF };
    const char *arches[] = { "llama", "bamboo" };
    for (size_t ai = 0; ai < 2; ai++)
        for (size_t pi = 0; pi < sizeof preds / sizeof preds[0]; pi++) {
            struct pwri_cfg c = base_cfg();
            c.arch = arches[ai];
            c.pred = preds[pi];
            struct pwri_weights w;
            pwri_make(&c, &w, 30 + pi);
            pwri_write(path, &c, &w);
            struct pi_model *m = load_ok(path);
            const int64_t E = c.n_embd, F = c.n_ff;
            const int V = m->hp.n_vocab;
            float *x0 = malloc((size_t)(B * E) * sizeof *x0), *yd = malloc((size_t)(B * E) * sizeof *yd),
                  *ys = malloc((size_t)(B * E) * sizeof *ys);
            double *yr = malloc((size_t)(B * E) * sizeof *yr), *act = malloc((size_t)(B * F) * sizeof *act);
            for (int64_t i = 0; i < B * E; i++)
                x0[i] = urand();
            struct pi_ctx *dense = NULL, *sparse = NULL;
            struct pi_ctx_params cp = { .n_ctx = 8, .n_batch = B, .n_threads = 2 };
            CHECK_OK(ctx_new(&dense, m, &cp));
            cp.sparse = true;
            CHECK_OK(ctx_new(&sparse, m, &cp));
            struct hook_rec hr = { .n_ff = F }, hs = { .n_ff = F };
            ctx_set_ffn_hook(dense, hook_fn, &hr);
            ctx_set_ffn_hook(sparse, hook_fn, &hs);
            struct pi_pool *pool = NULL;
            struct ops_scratch ps = { 0 };
            uint8_t *mask = malloc((size_t)(B * F));
            CHECK_OK(pool_new(&pool, 2));
            for (int layer = 0; layer < c.n_layer; layer++) {
                const struct pi_layer *l = &m->layers[layer];
                ffn_once(dense, layer, x0, E, yd);
                ffn_once(sparse, layer, x0, E, ys);
                int64_t true_on = 0;
                for (int b = 0; b < B; b++) {
                    pwri_ref_ffn(&c, &w, layer, x0 + b * E, m->hp.norm_eps, yr + b * E, act + b * F);
                    for (int64_t i = 0; i < F; i++)
                        true_on += act[b * F + i] != 0.0;
                }
                double d = rel(yd, yr, B * E);
                CHECK(d < F32_TOL, "%s pred %zu layer %d: dense ctx_ffn via down_t differs from f64 by %.3g",
                      c.arch, pi, layer, d);
                int64_t on = -1;
                CHECK_OK(pred_eval(pool, &ps, l, x0, B, m->hp.sparse_threshold, mask, &on));
                int64_t ones = 0, missed = 0;
                for (int64_t i = 0; i < B * F; i++) {
                    ones += mask[i];
                    missed += act[i] != 0.0 && !mask[i];
                }
                CHECK(on == ones, "n_active %lld != ones in the mask %lld", (long long)on, (long long)ones);
                uint64_t neurons = 0, tokens = 0, bytes = 0, dbytes = 0;
                ctx_sparse_stats(sparse, layer, &neurons, &tokens, &bytes);
                ctx_sparse_stats(dense, layer, NULL, NULL, &dbytes);
                CHECK(tokens == B && ctx_sparse_predicted(sparse, layer) == (uint64_t)ones, "sparse counters");
                if (preds[pi] == PRED_ON) {
                    CHECK(ones == B * F, "all-positive predictor: %lld of %d active", (long long)ones, B * (int)F);
                    CHECK(memcmp(yd, ys, (size_t)(B * E) * sizeof *yd) == 0, "all active must equal dense exactly");
                    CHECK(neurons == (uint64_t)F && bytes == dbytes, "all active: neurons %llu bytes %llu/%llu",
                          (unsigned long long)neurons, (unsigned long long)bytes, (unsigned long long)dbytes);
                } else if (preds[pi] == PRED_OFF) {
                    CHECK(ones == 0, "all-negative predictor: %lld active", (long long)ones);
                    bool zero = true;
                    for (int64_t i = 0; i < B * E; i++)
                        zero &= ys[i] == 0.0f;
                    CHECK(zero, "no neuron predicted: the FFN must add nothing");
                    CHECK(neurons == 0 && bytes == 0, "nothing predicted: nothing read");
                } else {
                    /* exact: the mask is the set of positive gates (a superset of the nonzero
                     * activations: dReLU also needs up > 0) */
                    CHECK(missed == 0, "%s: %lld active neurons not predicted", c.arch, (long long)missed);
                    CHECK(ones < B * F * 3 / 4 && ones > B * F / 4, "%s: %lld of %d predicted", c.arch,
                          (long long)ones, B * (int)F);
                    if (!strcmp(c.arch, "llama"))
                        CHECK(ones == true_on, "llama: predicted %lld, active %lld", (long long)ones,
                              (long long)true_on);
                    d = relf(ys, yd, B * E);
                    CHECK(d < 1e-6, "%s layer %d: sparse differs from dense by %.3g", c.arch, layer, d);
                    CHECK(neurons < (uint64_t)F && bytes < dbytes, "%s: sparse read %llu of %llu bytes", c.arch,
                          (unsigned long long)bytes, (unsigned long long)dbytes);
                }
            }
            CHECK(hr.calls == c.n_layer && hr.nonzero > 0, "dense hook: %d calls", hr.calls);
            CHECK(hs.calls == 0, "the hook is not called in sparse mode");
            /* whole forward: all-positive sparse = dense bit for bit; exact ≈ dense */
            if (preds[pi] != PRED_OFF) {
                float *ld = malloc((size_t)N_TOK * V * sizeof *ld), *ls = malloc((size_t)N_TOK * V * sizeof *ls);
                eval_logits(m, false, 2, ld);
                eval_logits(m, true, 2, ls);
                if (preds[pi] == PRED_ON)
                    CHECK(memcmp(ld, ls, (size_t)N_TOK * V * sizeof *ld) == 0,
                          "%s: all-active sparse logits must equal dense bit for bit", c.arch);
                else
                    CHECK(relf(ls, ld, (int64_t)N_TOK * V) < 1e-5, "%s: exact-predictor logits differ by %.3g",
                          c.arch, relf(ls, ld, (int64_t)N_TOK * V));
                eval_logits(m, true, 3, ls);
                CHECK(relf(ls, ld, (int64_t)N_TOK * V) < 1e-5, "%s: 3 threads differ", c.arch);
                free(ld), free(ls);
            }
            ctx_sparse_stats_reset(sparse);
            uint64_t n0 = 1;
            ctx_sparse_stats(sparse, 0, &n0, NULL, NULL);
            CHECK(n0 == 0, "reset clears the counters");
            ops_scratch_fini(&ps);
            pool_free(pool);
            free(mask);
            ctx_free(dense), ctx_free(sparse);
            free(x0), free(yd), free(ys), free(yr), free(act);
            model_free(m);
            pwri_free(&c, &w);
        }
    printf("forward: dense via down_t = f64; sparse exact/all-on/all-off predictors behave\n");

    /* a PWRI file with ffn_down and ffn_down_t: dense GEMM and down_t AXPY agree */
    struct pwri_cfg c = base_cfg();
    c.down = true;
    c.ffn_type = PI_TYPE_F16;
    struct pwri_weights w;
    pwri_make(&c, &w, 40);
    pwri_write(path, &c, &w);
    struct pi_model *m = load_ok(path);
    CHECK(m->layers[0].ffn_down.data && m->layers[0].ffn_down_t.data, "both down projections bound");
    const int V = m->hp.n_vocab;
    float *ld = malloc((size_t)N_TOK * V * sizeof *ld), *ls = malloc((size_t)N_TOK * V * sizeof *ls);
    eval_logits(m, false, 2, ld);
    eval_logits(m, true, 2, ls);
    CHECK(relf(ls, ld, (int64_t)N_TOK * V) < 1e-5, "both: sparse (down_t) vs dense (ffn_down) differ by %.3g",
          relf(ls, ld, (int64_t)N_TOK * V));
    free(ld), free(ls);
    model_free(m);
    pwri_free(&c, &w);
    unlink(path);
}

int main(void)
{
    char dir[] = "/tmp/pinfer-sparseXXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    test_axpy();
    test_runs();
    test_load(dir);
    struct pi_pool *pool = NULL;
    CHECK_OK(pool_new(&pool, 3));
    const uint32_t types[] = { PI_TYPE_F32, PI_TYPE_F16, PI_TYPE_Q8_0, PI_TYPE_Q4_0 };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        test_partial(dir, types[i], pool);
    pool_free(pool);
    test_partial_invariance(dir, PI_TYPE_F16);
    test_partial_invariance(dir, PI_TYPE_BF16);
    test_partial_invariance(dir, PI_TYPE_Q4_0);
    test_forward(dir);
    rmdir(dir);
    return tu_finish("sparse_core");
}

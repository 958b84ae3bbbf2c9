/* bench_cuda — the CUDA executor in-process on one model: decode and prefill rates, weight upload,
 * VRAM by kind, and the HBM read floor. One JSON line per case on stdout (BENCH.md's runs):
 *
 *   bench_cuda --hbm [GiB]                         read-only kernel over GiB of device memory
 *   bench_cuda MODEL [--mode dense|sparse|both] [-n 256] [-c 2048] [-p PROMPT] [--pp 512]
 *                    [--eager N] [--batch 1,4,8]
 *
 * Decode: the prompt (default "Once upon a time", with BOS) evaluated, then n - 1 greedy steps of one
 * token each as a CUDA graph, never stopping at EOS; rate = (n − 1) / decode time. --eager N also
 * times N steps without the graph (the launch-overhead figure). Prefill: pp tokens of the prompt
 * repeated, as one batch, tokens per second: through the own (batch-invariant) kernels, and
 * through cuBLAS GEMMs (the pre-invariance path, kept for this comparison; path "cublas"); the
 * first ids of the own path's decode after it are also those of a one-token-at-a-time prefill
 * ("pp_invariant": the prefill's last logits bitwise equal). Bytes per token: the weights a dense
 * token streams (all but the embedding table), or for sparse the same with the FFN rows actually
 * computed (counted on the device over 16 steps); kv_bytes_per_tok beside it: the f16 K and V cells the
 * attention reads, averaged over the decode steps (not in bytes_per_tok, which BENCH.md defines from
 * the tensor sizes). --batch: aggregate decode rate with B sequences
 * stepping together (one batch of B tokens per step, own GEMV path): op by op (agg_tok_s) and, for
 * B ≤ 8, as the graph of a decode step that gpud replays (agg_tok_s_graph). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudev.h"
#include "pi_err.h"
#include "tokenizer.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t tbytes(const struct pi_tensor *t) { return t->data ? (uint64_t)t->row_bytes * (uint64_t)t->ne[1] : 0; }

/* Bytes one token streams: dense = every weight but token_embd; ffn = the FFN part of that. */
static void token_bytes(const struct pi_model *m, uint64_t *dense, uint64_t *ffn, uint64_t *pred)
{
    uint64_t all = tbytes(&m->output), f = 0, p = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct pi_layer *l = &m->layers[il];
        all += tbytes(&l->wq) + tbytes(&l->wk) + tbytes(&l->wv) + tbytes(&l->wo);
        /* a PowerInfer file's dense FFN reads gate, up and down_t (ffn_down when there is no down_t) */
        f += tbytes(&l->ffn_gate) + tbytes(&l->ffn_up) + (l->ffn_down_t.data ? tbytes(&l->ffn_down_t) : tbytes(&l->ffn_down));
        p += tbytes(&l->fc1) + tbytes(&l->fc2);
    }
    *dense = all + f;
    *ffn = f;
    *pred = p;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run_decode(struct cudev *d, const struct pi_model *m, const int32_t *prompt, int32_t np, int n, bool sparse,
                      int eager, const char *path)
{
    int32_t tok = -1;
    double t0 = now_s();
    int rc = cudev_eval(d, prompt, np, 0, 0, sparse, NULL, &tok);
    const double t_prompt = now_s() - t0;
    /* warm the graph (capture + first replay) outside the timed loop, at a position overwritten later */
    int32_t next = 0;
    if (!rc)
        rc = cudev_step(d, tok, np, 0, sparse, &next);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    ids[0] = tok;
    t0 = now_s();
    for (int i = 1; !rc && i < n; i++) {
        rc = cudev_step(d, ids[i - 1], np + i - 1, 0, sparse, &ids[i]);
    }
    const double t_dec = now_s() - t0;
    double t_eager = 0;
    if (!rc && eager > 0) {
        int32_t id = ids[0];
        t0 = now_s();
        for (int i = 1; !rc && i <= eager; i++)
            rc = cudev_eval(d, &id, 1, np + i - 1, 0, sparse, NULL, &id);
        t_eager = now_s() - t0;
    }
    /* neurons computed, over 16 steps of the same sequence (not in the timings) */
    double active_frac = 1.0;
    if (!rc && sparse) {
        const int L = m->hp.n_layer;
        uint64_t *cnt = calloc((size_t)L, sizeof *cnt), tot = 0;
        rc = cudev_count_active(d, true, NULL);
        int32_t id = ids[0];
        for (int i = 1; !rc && i <= 16; i++)
            rc = cudev_eval(d, &id, 1, np + i - 1, 0, true, NULL, &id);
        if (!rc)
            rc = cudev_count_active(d, false, cnt);
        for (int l = 0; l < L; l++)
            tot += cnt[l];
        active_frac = (double)tot / (16.0 * L * m->hp.n_ff);
        free(cnt);
    }
    double prof[CUDEV_PROF_N] = { 0 };
    if (!rc) /* at the last position decoded: rewrites that cell with the same token */
        rc = cudev_profile(d, &ids[n - 2], 1, np + n - 2, sparse, prof);
    if (rc) {
        fprintf(stderr, "bench_cuda: decode: %s\n", pi_errmsg());
        free(ids);
        return rc;
    }
    uint64_t dense_b, ffn_b, pred_b;
    token_bytes(m, &dense_b, &ffn_b, &pred_b);
    const double bytes = sparse ? (double)(dense_b - ffn_b) + active_frac * (double)ffn_b + (double)pred_b
                                : (double)dense_b;
    /* step s (1..n-1) attends over np + s cells, 2 B a K or V element (bench_cuda's cache is f16) */
    const double kv_b = (double)m->hp.n_layer * 2.0 * m->hp.n_head_kv * m->hp.head_dim * 2.0 * (np + n / 2.0);
    const double rate = (n - 1) / t_dec;
    struct cudev_mem mem;
    cudev_mem(d, &mem);
    printf("{\"case\":\"decode\",\"model\":\"%s\",\"mode\":\"%s\",\"n_gen\":%d,\"prompt_tokens\":%d,\"prompt_s\":%.6f,"
           "\"decode_s\":%.6f,\"tok_s\":%.2f,\"ms_per_tok\":%.4f,\"eager_steps\":%d,\"eager_tok_s\":%.2f,"
           "\"active_frac\":%.4f,\"bytes_per_tok\":%.0f,\"kv_bytes_per_tok\":%.0f,\"achieved_gbps\":%.1f,\"first_ids\":[%d,%d,%d,%d,%d,%d,%d,%d],"
           "\"profile_ms\":{\"qkv\":%.4f,\"attn\":%.4f,\"wo\":%.4f,\"pred\":%.4f,\"ffn\":%.4f,\"output\":%.4f,"
           "\"fc1\":%.4f,\"fc2\":%.4f,\"compact\":%.4f,\"glu\":%.4f,\"axpy\":%.4f},"
           "\"vram\":{\"weights\":%llu,\"kv\":%llu,\"scratch\":%llu,\"context\":%llu,\"device_used\":%llu}}\n",
           path, sparse ? "sparse" : "dense", n, np, t_prompt, t_dec, rate, 1e3 * t_dec / (n - 1), eager,
           eager ? eager / t_eager : 0.0, active_frac, bytes, kv_b, bytes * rate / 1e9, ids[0], ids[1], ids[2], ids[3],
           ids[4], ids[5], ids[6], ids[7], prof[0], prof[1], prof[2], prof[3], prof[4], prof[5], prof[CUDEV_PROF_FC1],
           prof[CUDEV_PROF_FC2], prof[CUDEV_PROF_COMPACT], prof[CUDEV_PROF_GLU], prof[CUDEV_PROF_AXPY],
           (unsigned long long)mem.weights, (unsigned long long)mem.kv,
           (unsigned long long)mem.scratch, (unsigned long long)mem.context, (unsigned long long)mem.device_used);
    fflush(stdout);
    free(ids);
    return 0;
}

static int32_t g_vocab;

static int run_pp(struct cudev *d, const int32_t *prompt, int32_t np, int pp, bool sparse, bool blas,
                  const char *path)
{
    int32_t *t = malloc((size_t)pp * sizeof *t);
    for (int i = 0; i < pp; i++)
        t[i] = prompt[i % np];
    int32_t id;
    int rc = cudev_blas_prefill(d, blas);
    if (!rc)
        rc = cudev_eval(d, t, pp, 0, 0, sparse, NULL, &id); /* warm-up: cuBLAS heuristics, caches */
    double best = 1e30, all[3];
    for (int r = 0; !rc && r < 3; r++) {
        const double t0 = now_s();
        rc = cudev_eval(d, t, pp, 0, 0, sparse, NULL, &id);
        all[r] = now_s() - t0;
        best = all[r] < best ? all[r] : best;
    }
    /* invariance on the real shape: the last logits of the whole prompt in one batch = of the same
     * prompt in chunks of 7 and 1 (the own kernels only; cuBLAS is not invariant) */
    int inv = -1;
    const int32_t V = g_vocab;
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    if (!rc && !blas && la && lb) {
        rc = cudev_eval(d, t, pp, 0, 0, sparse, la, NULL);
        for (int p0 = 0; !rc && p0 < pp; p0 += 7)
            rc = cudev_eval(d, t + p0, pp - p0 < 7 ? pp - p0 : 7, p0, 0, sparse, lb, NULL);
        inv = !rc && !memcmp(la, lb, (size_t)V * sizeof *la);
    }
    free(la), free(lb);
    double prof[CUDEV_PROF_N] = { 0 }; /* one prompt batch, eager, with events between the parts */
    if (!rc)
        rc = cudev_profile(d, t, pp, 0, sparse, prof);
    if (!rc)
        rc = cudev_blas_prefill(d, false);
    free(t);
    if (rc) {
        fprintf(stderr, "bench_cuda: prefill: %s\n", pi_errmsg());
        return rc;
    }
    qsort(all, 3, sizeof all[0], cmp_d);
    printf("{\"case\":\"prefill\",\"model\":\"%s\",\"mode\":\"%s\",\"path\":\"%s\",\"tokens\":%d,\"best_s\":%.6f,"
           "\"median_s\":%.6f,\"tok_s\":%.1f,\"pp_invariant\":%s,"
           "\"profile_ms\":{\"qkv\":%.3f,\"attn\":%.3f,\"wo\":%.3f,\"pred\":%.3f,\"ffn\":%.3f,\"output\":%.3f}}\n",
           path, sparse ? "sparse" : "dense", blas ? "cublas" : "own", pp, best, all[1], pp / all[1],
           inv < 0 ? "null" : inv ? "true" : "false", prof[0], prof[1], prof[2], prof[3], prof[4], prof[5]);
    fflush(stdout);
    return 0;
}

static int g_layers;
static int bench_layers(struct cudev *d, int32_t n, bool sparse)
{
    for (int il = 0; il < g_layers; il++) {
        int rc = cudev_attn(d, il, n);
        if (!rc && sparse)
            rc = cudev_predict(d, il, n);
        if (!rc)
            rc = cudev_ffn(d, il, n, sparse, false);
        if (rc)
            return rc;
    }
    return 0;
}

/* B ≤ 8 sequences decoding together as gpud's decode steps go on a GPU that holds every layer: the
 * graph of B tokens ending in each one's best candidate (cudev_step_top, k = 1), its capture in an
 * untimed first step; tokens a second over the timed steps, or < 0 on an error. */
static double batch_graph(struct cudev *d, const int32_t *prompt, int32_t np, int B, int steps, bool sparse)
{
    int32_t tok[CUDEV_GEMV_MAX], pos[CUDEV_GEMV_MAX], seq[CUDEV_GEMV_MAX], id = 0;
    float val[CUDEV_GEMV_MAX];
    int rc = 0;
    for (int s = 0; !rc && s < B; s++)
        rc = cudev_eval(d, prompt, np, 0, s, sparse, NULL, &id);
    double t0 = now_s();
    for (int i = 0; !rc && i <= steps; i++) {
        if (i == 1)
            t0 = now_s();
        for (int s = 0; s < B; s++)
            tok[s] = i ? tok[s] : id, pos[s] = np + i, seq[s] = s;
        rc = cudev_step_top(d, B, tok, pos, seq, sparse, 1, tok, val);
    }
    return rc ? -1.0 : B * steps / (now_s() - t0);
}

/* B sequences decoding together: the same prompt in each, then steps of B tokens. */
static int run_batch(struct cudev *d, const int32_t *prompt, int32_t np, int B, int steps, bool sparse,
                     const char *path)
{
    int32_t tok[64], pos[64], seq[64], id = 0;
    int rc = 0;
    for (int s = 0; !rc && s < B; s++)
        rc = cudev_eval(d, prompt, np, 0, s, sparse, NULL, &id);
    const double t0 = now_s();
    for (int i = 0; !rc && i < steps; i++) {
        for (int s = 0; s < B; s++)
            tok[s] = i ? tok[s] : id, pos[s] = np + i, seq[s] = s;
        rc = cudev_batch(d, B, tok, pos, seq);
        if (!rc)
            rc = cudev_embed(d, B);
        if (!rc) /* the per-layer steps, as gpud runs them */
            rc = bench_layers(d, B, sparse);
        if (!rc)
            rc = cudev_output(d, B, 0, NULL);
        if (!rc)
            rc = cudev_argmax(d, B, 0, tok);
    }
    const double t = now_s() - t0;
    const double graph = rc || B > CUDEV_GEMV_MAX ? 0.0 : batch_graph(d, prompt, np, B, steps, sparse);
    if (rc || graph < 0) {
        fprintf(stderr, "bench_cuda: batch: %s\n", pi_errmsg());
        return rc ? rc : -PI_E_DEVICE;
    }
    printf("{\"case\":\"batch\",\"model\":\"%s\",\"mode\":\"%s\",\"batch\":%d,\"steps\":%d,\"agg_tok_s\":%.1f,"
           "\"agg_tok_s_graph\":%.1f}\n",
           path, sparse ? "sparse" : "dense", B, steps, B * steps / t, graph);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    char why[160];
    if (!cudev_available(why, sizeof why)) {
        fprintf(stderr, "bench_cuda: %s\n", why);
        return 77;
    }
    if (argc >= 2 && !strcmp(argv[1], "--hbm")) {
        const double gib = argc > 2 ? atof(argv[2]) : 8.0;
        double best = 0;
        int rc = cudev_hbm_read((size_t)(gib * (1 << 30)) / 16 * 16, 10, &best);
        if (rc) {
            fprintf(stderr, "bench_cuda: %s\n", pi_errmsg());
            return 1;
        }
        printf("{\"case\":\"hbm_read\",\"gib\":%.1f,\"best_gbps\":%.1f}\n", gib, best);
        return 0;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: bench_cuda --hbm [GiB] | MODEL [--mode dense|sparse|both] [-n N] [-c CTX] [-p PROMPT] "
                        "[--pp N] [--eager N] [--batch B,B,...]\n");
        return 2;
    }
    const char *path = argv[1], *mode = "both", *prompt_text = "Once upon a time", *batches = "";
    int n = 256, n_ctx = 2048, pp = 512, eager = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "-n")) n = atoi(v);
        else if (!strcmp(a, "-c")) n_ctx = atoi(v);
        else if (!strcmp(a, "-p")) prompt_text = v;
        else if (!strcmp(a, "--pp")) pp = atoi(v);
        else if (!strcmp(a, "--eager")) eager = atoi(v);
        else if (!strcmp(a, "--batch")) batches = v;
        else {
            fprintf(stderr, "bench_cuda: unknown option %s\n", a);
            return 2;
        }
    }
    struct pi_model *m = NULL;
    double t0 = now_s();
    if (model_load(&m, path)) {
        fprintf(stderr, "bench_cuda: %s: %s\n", path, pi_errmsg());
        return 1;
    }
    const double t_load = now_s() - t0;
    g_layers = m->hp.n_layer;
    g_vocab = m->hp.n_vocab;
    int32_t *prompt = NULL;
    size_t np = 0;
    if (tok_encode(m->tok, prompt_text, strlen(prompt_text), true, false, &prompt, &np) || np == 0) {
        fprintf(stderr, "bench_cuda: cannot tokenize the prompt: %s\n", pi_errmsg());
        return 1;
    }
    struct cudev *d = NULL;
    struct cudev_params dp = { .n_ctx = n_ctx, .n_seq = 8, .n_batch = pp > 64 ? pp : 64, .blas_prefill = true };
    if (cudev_open(&d, m, &dp)) {
        fprintf(stderr, "bench_cuda: %s\n", pi_errmsg());
        return 1;
    }
    struct cudev_mem mem;
    cudev_mem(d, &mem);
    printf("{\"case\":\"open\",\"model\":\"%s\",\"device\":\"%s\",\"mmap_s\":%.3f,\"upload_s\":%.3f,\"upload_gbps\":%.2f,"
           "\"weights\":%llu,\"kv\":%llu,\"scratch\":%llu,\"context\":%llu,\"device_used\":%llu,\"accounted_vs_used\":%lld,"
           "\"sparse_ok\":%s}\n",
           path, cudev_device_name(d), t_load, mem.upload_s, (double)mem.weights / mem.upload_s / 1e9,
           (unsigned long long)mem.weights, (unsigned long long)mem.kv, (unsigned long long)mem.scratch,
           (unsigned long long)mem.context, (unsigned long long)mem.device_used,
           (long long)mem.device_used - (long long)(mem.weights + mem.kv + mem.scratch + mem.context),
           cudev_sparse_ok(d) ? "true" : "false");
    fflush(stdout);
    int rc = 0;
    for (int sp = 0; sp < 2 && !rc; sp++) {
        const bool sparse = sp == 1;
        if ((sparse && !strcmp(mode, "dense")) || (!sparse && !strcmp(mode, "sparse")) ||
            (sparse && !cudev_sparse_ok(d)))
            continue;
        rc = run_decode(d, m, prompt, (int32_t)np, n, sparse, eager, path);
        if (!rc && pp > 0)
            rc = run_pp(d, prompt, (int32_t)np, pp, sparse, false, path);
        if (!rc && pp > 0)
            rc = run_pp(d, prompt, (int32_t)np, pp, sparse, true, path);
        for (const char *b = batches; !rc && *b;) {
            const int B = atoi(b);
            if (B >= 1 && B <= 8)
                rc = run_batch(d, prompt, (int32_t)np, B, 64, sparse, path);
            const char *c = strchr(b, ',');
            b = c ? c + 1 : b + strlen(b);
        }
    }
    cudev_close(d);
    free(prompt);
    model_free(m);
    return rc ? 1 : 0;
}

/* bench_batch — aggregate decode rate with 1, 2, 4, 8 sequences decoded together in one batch per
 * step (the engine's continuous batching, in process, CPU backend), and for a sparse model how fast
 * the union of the sequences' masks grows: neurons computed per token at each batch size.
 *
 *   bench_batch -m MODEL.gguf [-t THREADS] [-n TOKENS] [--seqs 1,2,4,8] [--rounds R] [--dense]
 *
 * Each sequence gets its own prompt (the same length: BENCH.md's batching run), is prefilled alone,
 * then all decode greedily in lockstep for -n tokens. One JSON line per (batch size, round) and a
 * summary line per batch size with min / median / max of the aggregate tok/s. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eval.h"
#include "model.h"
#include "pi_err.h"

#define MAX_SEQS 16
#define MAX_ROUNDS 16
#define PROMPT_LEN 8

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int32_t argmax(const float *v, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

/* One round at batch size S: tok/s aggregate, and FFN neurons computed per token (Σ layers). */
static int round_once(const struct pi_model *m, int S, int threads, int n_tok, bool dense, double *tps,
                      double *neurons_per_tok)
{
    const int32_t V = m->hp.n_vocab, n_ctx = PROMPT_LEN + n_tok + 1;
    struct pi_ctx *c = NULL;
    const struct pi_ctx_params cp = { .n_ctx = n_ctx, .n_batch = S > PROMPT_LEN ? S : PROMPT_LEN,
                                      .n_threads = threads, .n_seq = S, .sparse = !dense };
    int rc = ctx_new(&c, m, &cp);
    if (rc)
        return rc;
    float *logits = malloc((size_t)S * V * sizeof *logits);
    int32_t last[MAX_SEQS], tok[MAX_SEQS], pos[MAX_SEQS], seq[MAX_SEQS];
    uint8_t want[MAX_SEQS];
    if (!logits) {
        ctx_free(c);
        return pi_fail(PI_E_NOMEM, "bench_batch: out of memory");
    }
    /* prefill each sequence alone: a prompt of PROMPT_LEN tokens of its own */
    for (int s = 0; s < S && !rc; s++) {
        int32_t p[PROMPT_LEN];
        for (int i = 0; i < PROMPT_LEN; i++) {
            p[i] = (int32_t)((1 + s * 977 + i * 131) % V);
            tok[0] = p[i], pos[0] = i, seq[0] = s, want[0] = i == PROMPT_LEN - 1;
            const struct pi_batch b = { .n = 1, .tok = tok, .pos = pos, .seq = seq, .logits = want };
            rc = ctx_eval_batch(c, &b, logits);
        }
        last[s] = argmax(logits, V);
    }
    ctx_sparse_stats_reset(c);
    const double t0 = now_s();
    for (int step = 0; step < n_tok && !rc; step++) {
        for (int s = 0; s < S; s++)
            tok[s] = last[s], pos[s] = PROMPT_LEN + step, seq[s] = s, want[s] = 1;
        const struct pi_batch b = { .n = S, .tok = tok, .pos = pos, .seq = seq, .logits = want };
        rc = ctx_eval_batch(c, &b, logits);
        for (int s = 0; s < S && !rc; s++)
            last[s] = argmax(logits + (size_t)s * V, V);
    }
    const double dt = now_s() - t0;
    uint64_t neurons = 0, toks = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        uint64_t nl, tl;
        ctx_sparse_stats(c, l, &nl, &tl, NULL);
        neurons += nl;
        if (l == 0)
            toks = tl;
    }
    /* neurons counts the union once per step; per token = per step / S */
    *tps = rc ? 0 : (double)S * n_tok / dt;
    *neurons_per_tok = toks ? (double)neurons / (double)toks : 0;
    free(logits);
    ctx_free(c);
    return rc;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *seqs_arg = "1,2,4,8";
    int threads = 2, n_tok = 64, rounds = 3;
    bool dense = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n_tok = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seqs") && i + 1 < argc)
            seqs_arg = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dense"))
            dense = true;
        else {
            fprintf(stderr, "usage: bench_batch -m MODEL.gguf [-t T] [-n TOKENS] [--seqs 1,2,4,8] [--rounds R] "
                            "[--dense]\n");
            return 2;
        }
    }
    if (!path || threads < 1 || n_tok < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench_batch: -m MODEL is required; -t, -n >= 1; 1 <= --rounds <= %d\n", MAX_ROUNDS);
        return 2;
    }
    int S_list[MAX_SEQS], n_S = 0;
    for (const char *p = seqs_arg; *p && n_S < MAX_SEQS;) {
        const int v = atoi(p);
        if (v < 1 || v > MAX_SEQS) {
            fprintf(stderr, "bench_batch: --seqs values must be in [1, %d]\n", MAX_SEQS);
            return 2;
        }
        S_list[n_S++] = v;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    struct pi_model *m = NULL;
    int rc = model_load(&m, path);
    if (rc) {
        fprintf(stderr, "bench_batch: %s: %s: %s\n", path, pi_strerror(rc), pi_errmsg());
        return 1;
    }
    double tps[MAX_SEQS][MAX_ROUNDS], npt[MAX_SEQS] = { 0 };
    /* rounds interleaved over the batch sizes */
    for (int r = 0; r < rounds && !rc; r++)
        for (int k = 0; k < n_S && !rc; k++) {
            rc = round_once(m, S_list[k], threads, n_tok, dense, &tps[k][r], &npt[k]);
            if (!rc)
                printf("{\"bench\":\"batch_decode\",\"model\":\"%s\",\"seqs\":%d,\"round\":%d,\"threads\":%d,"
                       "\"n\":%d,\"tok_per_s\":%.2f,\"ffn_neurons_per_token\":%.1f}\n",
                       m->name, S_list[k], r, threads, n_tok, tps[k][r], npt[k]);
        }
    for (int k = 0; k < n_S && !rc; k++) {
        qsort(tps[k], (size_t)rounds, sizeof tps[k][0], cmp_d);
        printf("{\"bench\":\"batch_decode_summary\",\"model\":\"%s\",\"mode\":\"%s\",\"seqs\":%d,\"threads\":%d,"
               "\"rounds\":%d,\"min\":%.2f,\"median\":%.2f,\"max\":%.2f,\"unit\":\"tok/s\","
               "\"ffn_neurons_per_token\":%.1f,\"union_neurons_per_step\":%.1f,\"n_ff_x_layers\":%lld}\n",
               m->name, dense ? "dense" : "sparse-if-pwri", S_list[k], threads, rounds, tps[k][0],
               tps[k][rounds / 2], tps[k][rounds - 1], npt[k], npt[k] * S_list[k],
               (long long)m->hp.n_ff * m->hp.n_layer);
    }
    if (rc)
        fprintf(stderr, "bench_batch: %s: %s\n", pi_strerror(rc), pi_errmsg());
    model_free(m);
    return rc ? 1 : 0;
}

/* cudev_graph.c — the steps of the device context (see cudev.h): a whole evaluation of a prompt, and
 * the decode step of one or a few tokens captured as a CUDA graph per shape and bucket of positions,
 * then replayed (no host round trip per layer). */
#include "cudev_impl.h"

#include <stdlib.h>
#include <string.h>

#include "cuk_topk.h"
#include "pi_err.h"

/* The layers of one step over the batch already on the device. */
static int layers(struct cudev *d, int32_t n, bool sparse)
{
    TRY(cudev_embed(d, n));
    for (int il = 0; il < d->m->hp.n_layer; il++) {
        TRY(cudev_attn(d, il, n));
        if (sparse)
            TRY(cudev_predict(d, il, n));
        TRY(cudev_ffn(d, il, n, sparse, false));
    }
    return 0;
}

int cudev_eval(struct cudev *d, const int32_t *tok, int32_t n, int32_t pos, int32_t seq, bool sparse, float *logits,
               int32_t *id)
{
    sparse = sparse && d->sparse_ok;
    int32_t *pv = malloc((size_t)d->p.n_batch * 2 * sizeof(int32_t));
    if (!pv)
        return pi_fail(PI_E_NOMEM, "cuda: out of memory");
    int32_t *sv = pv + d->p.n_batch;
    int rc = 0;
    for (int32_t done = 0; !rc && done < n; done += d->p.n_batch) {
        const int32_t B = n - done < d->p.n_batch ? n - done : d->p.n_batch;
        for (int32_t i = 0; i < B; i++)
            pv[i] = pos + done + i, sv[i] = seq;
        rc = cudev_batch(d, B, tok + done, pv, sv);
        if (!rc)
            rc = layers(d, B, sparse);
        if (!rc && done + B == n) {
            rc = cudev_output(d, B, B - 1, logits);
            if (!rc && id)
                rc = cudev_argmax(d, B, B - 1, id);
        }
    }
    if (!rc)
        rc = cudev_sync(d);
    free(pv);
    return rc;
}

/* The decode step of the n tokens in h_batch as a graph: their layers, the output, and the first
 * token's greedy id (k = 0, n = 1: argmax into h_ids) or each token's k best (ids and logits into
 * h_ids, h_tvals). A batch of n ≤ CUDEV_GEMV_MAX tokens launches the same kernels whatever its
 * positions and sequences (cuk_pattn's choice by runs starts above that size), so the graph replays
 * any such batch at positions ≤ max_pos (-1: any; the attention launches the chunks up to there). */
static int capture(struct cudev *d, int32_t n, bool sparse, int32_t k, int32_t max_pos, cudaGraphExec_t *out)
{
    cudaGraph_t g = NULL;
    const double t0 = cudev_now_s();
    TRY(CU(cudaStreamBeginCapture(d->st, cudaStreamCaptureModeThreadLocal)));
    d->capturing = true;
    d->cap_max_pos = max_pos;
    const int32_t B = d->p.n_batch;
    int rc = CU(cudaMemcpyAsync(d->batch, d->h_batch, 3 * (size_t)B * sizeof(int32_t), cudaMemcpyHostToDevice, d->st));
    if (!rc)
        rc = layers(d, n, sparse);
    if (!rc)
        rc = cudev_output(d, n, 0, NULL);
    if (!rc && !k)
        rc = CK(cuk_argmax(d->logits, 1, d->m->hp.n_vocab, d->ids, d->st));
    if (!rc && k)
        rc = CK(cuk_topk(d->logits, n, d->m->hp.n_vocab, k, d->ids, d->tvals, d->tpart, d->st));
    const size_t cells = (size_t)n * (size_t)(k ? k : 1);
    if (!rc)
        rc = CU(cudaMemcpyAsync(d->h_ids, d->ids, cells * sizeof(int32_t), cudaMemcpyDeviceToHost, d->st));
    if (!rc && k)
        rc = CU(cudaMemcpyAsync(d->h_tvals, d->tvals, cells * sizeof(float), cudaMemcpyDeviceToHost, d->st));
    const int rc2 = CU(cudaStreamEndCapture(d->st, &g));
    d->capturing = false;
    if (!rc)
        rc = rc2;
    if (!rc)
        rc = CU(cudaGraphInstantiate(out, g, 0));
    if (g)
        cudaGraphDestroy(g);
    d->n_captured += rc == 0;
    d->capture_s += cudev_now_s() - t0;
    return rc;
}

/* The bucket of the batch's positions (cudev_host_batch's max_pos) for a decode graph of n tokens: b for
 * positions below STEP_BUCKET0 · 2^b, the last bucket the whole context (*max_pos: the graph's largest
 * position, -1 any). Why graphs by position: the attention launches the chunks up to the graph's
 * position — B tokens' empty chunks were on the chain (8 tokens at position ~40 under the whole
 * context's graph: 8 % slower than op by op, bench/gpu/NOTES.md p2), and below STEP_BUCKET0 (cuk_attn.cu's
 * ATTN_CLUSTER chunks) a token's chunks merge in a cluster where geom.cluster. One token without
 * clusters: one graph for any position (its blocks past the position leave at once, off the chain;
 * by bucket the Q4_0 files lost 1-1.5 %, r6). */
static int step_bucket(const struct cudev *d, int32_t n, int32_t *max_pos)
{
    int b = 0;
    *max_pos = -1;
    if (n == 1 && !d->geom.cluster)
        return 0;
    int32_t cells = STEP_BUCKET0;
    while (cells <= d->max_pos && cells < d->p.n_ctx && b < STEP_BUCKETS - 1)
        cells *= 2, b++;
    *max_pos = cells > d->max_pos && cells < d->p.n_ctx ? cells - 1 : -1;
    return b;
}

int cudev_step(struct cudev *d, int32_t tok, int32_t pos, int32_t seq, bool sparse, int32_t *next)
{
    sparse = sparse && d->sparse_ok;
    TRY(cudev_host_batch(d, 1, &tok, &pos, &seq));
    int32_t max_pos;
    const int b = step_bucket(d, 1, &max_pos);
    if (!d->graph[sparse][b])
        TRY(capture(d, 1, sparse, 0, max_pos, &d->graph[sparse][b]));
    TRY(CU(cudaGraphLaunch(d->graph[sparse][b], d->st)));
    TRY(CU(cudaStreamSynchronize(d->st)));
    *next = d->h_ids[0];
    return 0;
}

int cudev_step_top(struct cudev *d, int32_t n, const int32_t *tok, const int32_t *pos, const int32_t *seq, bool sparse,
                   int32_t k, int32_t *ids, float *vals)
{
    if (sparse && !d->sparse_ok)
        return pi_fail(PI_E_UNSUPPORTED, "cuda: the model's predictors are not on the device");
    if (k < 1 || k > CUK_TOPK_MAX || k > d->m->hp.n_vocab)
        return pi_fail(PI_E_RANGE, "cuda: top %d of %d logits (1..%d)", k, d->m->hp.n_vocab, CUK_TOPK_MAX);
    if (n < 1 || n > CUDEV_GEMV_MAX)
        return pi_fail(PI_E_RANGE, "cuda: a decode graph of %d tokens (1..%d)", n, CUDEV_GEMV_MAX);
    TRY(cudev_host_batch(d, n, tok, pos, seq));
    int32_t max_pos;
    const int b = step_bucket(d, n, &max_pos);
    /* greedy and sampling requests mixed in a batch's life (one joining, one leaving) would otherwise
     * recapture at each change of the largest k (2-4 ms each): a graph for k = 1 and one for the
     * largest k > 1 asked for, whose rows' first k are the k best (samp_best's order: top-k is a
     * prefix of top-K) */
    const int sampling = k > 1;
    cudaGraphExec_t *g = &d->top_graph[n][sparse][b][sampling];
    int32_t *gk = &d->top_k[n][sparse][b][sampling];
    if (*g && *gk < k) { /* more candidates than the graph's topk launch takes */
        cudaGraphExecDestroy(*g);
        *g = NULL;
    }
    if (!*g) {
        TRY(capture(d, n, sparse, k, max_pos, g));
        *gk = k;
    }
    TRY(CU(cudaGraphLaunch(*g, d->st)));
    TRY(CU(cudaStreamSynchronize(d->st)));
    for (int32_t r = 0; r < n; r++) {
        memcpy(ids + (size_t)r * k, d->h_ids + (size_t)r * *gk, (size_t)k * sizeof *ids);
        memcpy(vals + (size_t)r * k, d->h_tvals + (size_t)r * *gk, (size_t)k * sizeof *vals);
    }
    return 0;
}

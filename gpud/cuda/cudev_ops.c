/* cudev_ops.c — the forward pass's parts on the device context's stream (see cudev.h): the matrix
 * products, the batch and its embeddings, the attention, the predictor and masks, the FFN (dense,
 * sparse, and the hybrid hand-off with the CPU's cold share), the output and sampling, and the
 * per-part profile. Each is a few kernel launches; cudev_graph.c composes them into steps. */
#include "cudev_impl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cuk_hand.h"
#include "cuk_mmv.h"
#include "cuk_pattn.h"
#include "cuk_place.h"
#include "cuk_topk.h"
#include "pi_err.h"
#include "quant.h"

/* ---- matrix products: the own GEMV kernel for every batch; cuBLAS only when a benchmark asks ---- */

int cudev_blas_prefill(struct cudev *d, bool on)
{
    if (on && !d->blas)
        return pi_fail(PI_E_INVAL, "cuda: the context was opened without blas_prefill");
    d->blas_on = on;
    return 0;
}

static bool use_blas(const struct cudev *d, int32_t n) { return d->blas_on && n > CUDEV_GEMV_MAX; }

static int blas_mm(struct cudev *d, const struct cuk_w *w, const float *x, int n, float *y, bool add)
{
    const float one = 1.0f, zero = 0.0f;
    const float *beta = add ? &one : &zero;
    const void *A = w->q;
    cudaDataType_t ta = CUDA_R_16F;
    const void *Bm = d->xh;
    cudaDataType_t tb = CUDA_R_16F;
    if (w->type == PI_TYPE_F32) {
        ta = tb = CUDA_R_32F;
        Bm = x;
    } else {
        const bool bf = w->type == PI_TYPE_BF16;
        if (bf)
            ta = tb = CUDA_R_16BF;
        if (w->d) {
            TRY(CK(cuk_dequant_f16(w, d->wdeq, d->st)));
            A = d->wdeq;
        }
        TRY(CK(cuk_to_half(x, d->xh, (int64_t)n * w->n_in, bf, d->st)));
    }
    return CB(cublasGemmEx(d->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->n_out, n, (int)w->n_in, &one, A, ta,
                           (int)w->n_in, Bm, tb, (int)w->n_in, beta, y, CUDA_R_32F, (int)w->n_out, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT));
}

/* y (n, n_embd) (+)= act (n, n_ff) @ down_t (n_ff, n_embd), for the dense prefill of down_t layers */
static int blas_mm_t(struct cudev *d, const struct cuk_w *w, const float *act, int n, float *y, bool add)
{
    const float one = 1.0f, zero = 0.0f;
    const void *A = w->q;
    cudaDataType_t t = w->type == PI_TYPE_BF16 ? CUDA_R_16BF : w->type == PI_TYPE_F32 ? CUDA_R_32F : CUDA_R_16F;
    const void *Bm = act;
    if (w->type != PI_TYPE_F32) {
        if (w->d) {
            TRY(CK(cuk_dequant_f16(w, d->wdeq, d->st)));
            A = d->wdeq;
        }
        TRY(CK(cuk_to_half(act, d->xh, (int64_t)n * w->n_out, w->type == PI_TYPE_BF16, d->st)));
        Bm = d->xh;
    }
    return CB(cublasGemmEx(d->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)w->n_in, n, (int)w->n_out, &one, A, t,
                           (int)w->n_in, Bm, t, (int)w->n_out, add ? &one : &zero, y, CUDA_R_32F, (int)w->n_in,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static int mm(struct cudev *d, const struct cuk_w *w, const float *x, int n, float *y, enum cuk_mode mode)
{
    if (!use_blas(d, n))
        return CK(cuk_gemv(w, x, n, y, mode, 0.0f, d->xq, d->st));
    return blas_mm(d, w, x, n, y, mode == CUK_ADD);
}

/* ---- steps ---- */

/* profiling (cudev_profile): an event after the kernels so far, the time since the last one counted
 * in slot; nothing when not profiling */
static void mark(struct cudev *d, int slot)
{
    if (d->pn < 0 || d->pn >= PROF_EV || d->prc)
        return;
    d->prc = CU(cudaEventRecord(d->pev[d->pn], d->st));
    d->plab[d->pn++] = slot;
}

static int check_n(const struct cudev *d, int32_t n)
{
    if (n < 1 || n > d->p.n_batch)
        return pi_fail(PI_E_RANGE, "cuda: batch of %d tokens (1..%d)", n, d->p.n_batch);
    return 0;
}

static int check_layer(const struct cudev *d, int layer)
{
    if (layer < 0 || layer >= d->n_dev_layers)
        return pi_fail(PI_E_RANGE, "cuda: layer %d is not on the device (%d layers there)", layer, d->n_dev_layers);
    return 0;
}

/* The batch's tokens, positions and sequences (seq NULL: all 0), checked, into the pinned h_batch
 * once the stream has passed every earlier read of it (cudev_batch's copy, or a decode graph's) */
int cudev_host_batch(struct cudev *d, int32_t n, const int32_t *tok, const int32_t *pos, const int32_t *seq)
{
    TRY(check_n(d, n));
    const int32_t B = d->p.n_batch;
    for (int32_t i = 0; i < n; i++) {
        if (tok[i] < 0 || tok[i] >= d->m->hp.n_vocab)
            return pi_fail(PI_E_RANGE, "cuda: token id %d out of range [0, %d)", tok[i], d->m->hp.n_vocab);
        const int32_t s = seq ? seq[i] : 0;
        if (pos[i] < 0 || pos[i] >= d->p.n_ctx || s < 0 || s >= d->p.n_seq)
            return pi_fail(PI_E_RANGE, "cuda: token %d at (seq %d, pos %d) outside %d sequences of %d cells", i, s,
                           pos[i], d->p.n_seq, d->p.n_ctx);
    }
    TRY(CU(cudaStreamSynchronize(d->st)));
    d->max_pos = 0;
    for (int32_t i = 0; i < n; i++) {
        d->max_pos = pos[i] > d->max_pos ? pos[i] : d->max_pos;
        d->h_batch[i] = tok[i];
        d->h_batch[B + i] = pos[i];
        d->h_batch[2 * B + i] = seq ? seq[i] : 0;
    }
    return 0;
}

int cudev_batch(struct cudev *d, int32_t n, const int32_t *tok, const int32_t *pos, const int32_t *seq)
{
    TRY(cudev_host_batch(d, n, tok, pos, seq));
    return CU(cudaMemcpyAsync(d->batch, d->h_batch, 3 * (size_t)d->p.n_batch * sizeof(int32_t), cudaMemcpyHostToDevice,
                              d->st));
}

int cudev_embed(struct cudev *d, int32_t n)
{
    TRY(check_n(d, n));
    return CK(cuk_get_rows(&d->tok_embd, d->batch, n, d->x, d->st));
}

/* attention in three parts (the profile times them apart): norm + q/k/v, rope + cache + attention, wo */
static int attn_qkv(struct cudev *d, int layer, int32_t n)
{
    const struct pi_hparams *hp = &d->m->hp;
    const struct cu_layer *c = &d->L[layer];
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    if (c->wqkv.q && !use_blas(d, n)) { /* the norm in the product's kernel where it can (cuk_mmv.h) */
        TRY(CK(cuk_norm_gemv_split3(&c->wqkv, d->x, c->attn_norm, hp->norm_eps, n, d->xn, d->q, Q, d->k, KV, d->v,
                                    d->xq, d->st)));
    } else {
        TRY(CK(cuk_rmsnorm(d->xn, d->x, c->attn_norm, n, E, E, hp->norm_eps, d->st)));
        TRY(mm(d, &c->wq, d->xn, n, d->q, CUK_SET));
        TRY(mm(d, &c->wk, d->xn, n, d->k, CUK_SET));
        TRY(mm(d, &c->wv, d->xn, n, d->v, CUK_SET));
    }
    if (c->bq)
        TRY(CK(cuk_add_bias(d->q, c->bq, n, Q, d->st)));
    if (c->bk)
        TRY(CK(cuk_add_bias(d->k, c->bk, n, KV, d->st)));
    if (c->bv)
        TRY(CK(cuk_add_bias(d->v, c->bv, n, KV, d->st)));
    return 0;
}

static int attn_core(struct cudev *d, int layer, int32_t n)
{
    const int32_t *pos = d->batch + d->p.n_batch, *seq = d->batch + 2 * d->p.n_batch;
    /* a captured graph replays at other positions: launch for its bucket's (or the whole context) */
    const int32_t max_pos = d->capturing ? d->cap_max_pos : d->max_pos;
    if (n == 1) /* RoPE, the cache store and attention in one kernel fewer; the same bits as below */
        return CK(cuk_rope_attn(&d->geom, d->q, d->k, d->v, pos, seq, d->k_cache[layer], d->v_cache[layer], d->rope_inv,
                                d->att, d->apart, n, max_pos, &d->L[layer].wo, d->st));
    TRY(CK(cuk_rope_store(&d->geom, d->q, d->k, d->v, pos, seq, d->k_cache[layer], d->v_cache[layer], d->rope_inv, n,
                          d->st)));
    const int32_t *hs = d->h_batch + 2 * d->p.n_batch; /* the batch's sequences, as cudev_batch sent them */
    int runs = 1;
    for (int32_t i = 1; i < n; i++)
        runs += hs[i] != hs[i - 1];
    return CK(cuk_pattn(&d->geom, d->q, d->k_cache[layer], d->v_cache[layer], pos, seq, d->att, d->apart, n, max_pos,
                        runs, d->st)); /* the tiled kernel for a prompt batch, else cuk_attn: the same bits */
}

static int attn_out(struct cudev *d, int layer, int32_t n) { return mm(d, &d->L[layer].wo, d->att, n, d->x, CUK_ADD); }

int cudev_attn(struct cudev *d, int layer, int32_t n)
{
    TRY(check_n(d, n));
    TRY(check_layer(d, layer));
    TRY(attn_qkv(d, layer, n));
    TRY(attn_core(d, layer, n));
    return attn_out(d, layer, n);
}

int cudev_get_x(struct cudev *d, int32_t n, float *h)
{
    TRY(check_n(d, n));
    TRY(CU(cudaMemcpyAsync(h, d->x, (size_t)n * d->m->hp.n_embd * sizeof(float), cudaMemcpyDeviceToHost, d->st)));
    return CU(cudaStreamSynchronize(d->st));
}

/* The predictor's kernels; hd (not NULL): x handed out into hd with *khd = seq by fc1's kernel where
 * it can (*h_out = true), else left to the hand-out after the masks. */
static int predict(struct cudev *d, int layer, int32_t n, void *hd, uint64_t *khd, uint64_t seq, bool *h_out)
{
    TRY(check_n(d, n));
    TRY(check_layer(d, layer));
    if (!d->sparse_ok)
        return pi_fail(PI_E_UNSUPPORTED, "cuda: the model's predictors are not on the device");
    const struct cu_layer *c = &d->L[layer];
    const int64_t F = d->m->hp.n_ff;
    const float thr = d->m->hp.sparse_threshold;
    *h_out = false;
    if (!use_blas(d, n)) {
        const int rc = hd ? cuk_gemv_hand_h(&c->fc1, d->x, n, d->p1, CUK_RELU, 0.0f, hd,
                                            (int64_t)n * d->m->hp.n_embd * (int64_t)sizeof(float), khd, seq, d->st)
                          : 1;
        if (rc <= 0) /* launched (or failed) */
            TRY(CK(rc));
        else
            TRY(CK(cuk_gemv(&c->fc1, d->x, n, d->p1, CUK_RELU, 0.0f, d->xq, d->st)));
        *h_out = rc == 0;
        mark(d, CUDEV_PROF_FC1);
        TRY(CK(cuk_gemv(&c->fc2, d->p1, n, d->mask, CUK_MASK, thr, d->xq, d->st)));
        mark(d, CUDEV_PROF_FC2);
    } else {
        TRY(blas_mm(d, &c->fc1, d->x, n, d->p1, false));
        TRY(CK(cuk_relu(d->p1, (int64_t)n * c->fc1.n_out, d->st)));
        TRY(blas_mm(d, &c->fc2, d->p1, n, d->g, false));
        TRY(CK(cuk_threshold(d->g, d->mask, (int64_t)n * F, thr, d->st)));
    }
    d->mask_valid = false;
    d->mask_raw = !use_blas(d, n);
    return 0;
}

int cudev_predict(struct cudev *d, int layer, int32_t n)
{
    bool h_out;
    return predict(d, layer, n, NULL, NULL, 0, &h_out);
}

int cudev_set_mask(struct cudev *d, int32_t n, const uint8_t *mask)
{
    TRY(check_n(d, n));
    const int64_t F = d->m->hp.n_ff;
    TRY(CU(cudaMemcpyAsync(d->mask, mask, (size_t)n * F, cudaMemcpyHostToDevice, d->st)));
    TRY(CK(cuk_compact(d->mask, n, F, d->idx, d->cnt, d->st)));
    d->mask_valid = true;
    d->mask_raw = false;
    /* the host buffer may be reused as soon as we return */
    return CU(cudaStreamSynchronize(d->st));
}

int cudev_get_mask(struct cudev *d, int32_t n, uint8_t *mask)
{
    TRY(check_n(d, n));
    TRY(CU(cudaMemcpyAsync(mask, d->mask, (size_t)n * d->m->hp.n_ff, cudaMemcpyDeviceToHost, d->st)));
    return CU(cudaStreamSynchronize(d->st));
}

/* The FFN of a compact layer: its n_hot placed neurons only, their rows compacted on the device
 * (row j = neuron hot_ids[j]); masked: each token's mask gathered onto the hot rows first. The
 * AXPY's chunks run over the list of active rows, which is the same list in the same order as the
 * uncompacted kernels see, so the result has the same bits as a full upload computing only these
 * neurons. */
static int ffn_compact(struct cudev *d, const struct cu_layer *c, int layer, int32_t n, bool masked, float *y,
                       bool add)
{
    const struct pi_hparams *hp = &d->m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff, H = c->n_hot;
    if (H == 0) { /* every neuron of the layer is cold: the device share is zero */
        if (!add)
            TRY(CU(cudaMemsetAsync(y, 0, (size_t)n * E * sizeof(float), d->st)));
        return 0;
    }
    if (masked)
        TRY(CK(cuk_gather_mask(d->mask, n, F, c->hot_ids, H, d->mask_c, d->st)));
    if (use_blas(d, n)) { /* benchmarks' cuBLAS prefill only: without it g/u/xh do not exist */
        TRY(CK(cuk_rmsnorm(d->xn, d->x, c->ffn_norm, n, E, E, hp->norm_eps, d->st)));
        TRY(blas_mm(d, &c->gate, d->xn, n, d->g, false));
        TRY(blas_mm(d, &c->up, d->xn, n, d->u, false));
        TRY(CK(cuk_glu_ew(d->act, d->g, d->u, (int64_t)n * H, (int)hp->act, d->st)));
        if (masked)
            TRY(CK(cuk_mask_mul(d->act, d->mask_c, (int64_t)n * H, d->st)));
        return blas_mm_t(d, &c->down_t, d->act, n, y, add);
    }
    const int32_t *idx = NULL, *cnt = NULL;
    if (masked) {
        TRY(CK(cuk_compact(d->mask_c, n, H, d->idx, d->cnt, d->st)));
        idx = d->idx, cnt = d->cnt;
        d->mask_valid = false; /* idx/cnt now list hot rows, not the layer's neurons */
        if (d->active) { /* counting (benchmarks): a sync per layer */
            TRY(CU(cudaMemcpyAsync(d->h_cnt, d->cnt, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, d->st)));
            TRY(CU(cudaStreamSynchronize(d->st)));
            for (int32_t i = 0; i < n; i++)
                d->active[layer] += (uint64_t)d->h_cnt[i];
        }
    }
    /* the norm in the product's kernel where it can (cuk_mmv.h; the Q types: cuk_normq_glu), as the
     * uncompacted layers: one launch fewer on the hybrid chain, the same bits */
    TRY(CK(cuk_norm_glu(&c->gate, &c->up, d->x, c->ffn_norm, hp->norm_eps, n, d->xn, d->act, (int)hp->act, idx, cnt,
                        H, true, d->xq, d->st)));
    return CK(cuk_axpy_rows(&c->down_t, d->act, n, idx, cnt, H, d->part, y, add, d->st));
}

int cudev_ffn(struct cudev *d, int layer, int32_t n, bool masked, bool to_pending)
{
    TRY(check_n(d, n));
    TRY(check_layer(d, layer));
    const struct pi_hparams *hp = &d->m->hp;
    const struct cu_layer *c = &d->L[layer];
    const int64_t E = hp->n_embd, F = hp->n_ff;
    float *y = to_pending ? d->pending : d->x;
    const bool add = !to_pending;
    if (c->compact)
        return ffn_compact(d, c, layer, n, masked, y, add);
    if (use_blas(d, n)) {
        TRY(CK(cuk_rmsnorm(d->xn, d->x, c->ffn_norm, n, E, E, hp->norm_eps, d->st)));
        /* benchmarks' cuBLAS prefill: dense products, the mask (each token its own) applied to the
         * activations — another summation order than the decode path's */
        TRY(blas_mm(d, &c->gate, d->xn, n, d->g, false));
        TRY(blas_mm(d, &c->up, d->xn, n, d->u, false));
        TRY(CK(cuk_glu_ew(d->act, d->g, d->u, (int64_t)n * F, (int)hp->act, d->st)));
        if (masked)
            TRY(CK(cuk_mask_mul(d->act, d->mask, (int64_t)n * F, d->st)));
        if (c->down_t.q)
            return blas_mm_t(d, &c->down_t, d->act, n, y, add);
        return blas_mm(d, &c->down, d->act, n, y, add);
    }
    bool glu_done = false; /* gate/up already run, by the kernel that listed the mask */
    if (masked && !d->mask_valid && d->mask_raw) { /* the predictor's mask, listed now (cudev_predict) */
        /* one token of the float types: the gathered gate/up lists the mask itself (one kernel fewer
         * a layer, the same bits); else the compaction, then gate/up below */
        const int rc = c->down_t.q ? cuk_norm_glu_mask(&c->gate, &c->up, d->x, c->ffn_norm, hp->norm_eps, n, d->act,
                                                       (int)hp->act, d->mask, d->idx, d->cnt, F, d->st)
                                   : 1;
        if (rc <= 0) {
            TRY(CK(rc));
            glu_done = true;
            mark(d, CUDEV_PROF_GLU);
        } else {
            TRY(CK(cuk_compact(d->mask, n, F, d->idx, d->cnt, d->st)));
            mark(d, CUDEV_PROF_COMPACT);
        }
        d->mask_valid = true;
        d->mask_raw = false;
    }
    if (masked && !d->mask_valid)
        return pi_fail(PI_E_INVAL, "cuda: masked FFN without a mask for this batch");
    if (masked && d->active) { /* counting (benchmarks): a sync per layer */
        TRY(CU(cudaMemcpyAsync(d->h_cnt, d->cnt, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, d->st)));
        TRY(CU(cudaStreamSynchronize(d->st)));
        for (int32_t i = 0; i < n; i++)
            d->active[layer] += (uint64_t)d->h_cnt[i];
    }
    if (c->down_t.q) {
        /* gate/up over each token's listed rows (all of them when dense), AXPY over their down_t rows */
        const int32_t *idx = masked ? d->idx : NULL, *cnt = masked ? d->cnt : NULL;
        if (!glu_done) {
            TRY(CK(cuk_norm_glu(&c->gate, &c->up, d->x, c->ffn_norm, hp->norm_eps, n, d->xn, d->act, (int)hp->act,
                                idx, cnt, F, true, d->xq, d->st)));
            mark(d, CUDEV_PROF_GLU);
        }
        TRY(CK(cuk_axpy_rows(&c->down_t, d->act, n, idx, cnt, F, d->part, y, add, d->st)));
        mark(d, CUDEV_PROF_AXPY);
        return 0;
    }
    if (masked)
        TRY(CU(cudaMemsetAsync(d->act, 0, (size_t)n * F * sizeof(float), d->st)));
    /* RMSNorm + gate/up, the norm in the product's kernel where it can (cuk_mmv.h) */
    TRY(CK(cuk_norm_glu(&c->gate, &c->up, d->x, c->ffn_norm, hp->norm_eps, n, d->xn, d->act, (int)hp->act,
                        masked ? d->idx : NULL, masked ? d->cnt : NULL, F, false, d->xq, d->st)));
    return CK(cuk_gemv(&c->down, d->act, n, y, add ? CUK_ADD : CUK_SET, 0.0f, d->xq, d->st));
}

static bool registered(const struct cudev *d, const void *p, size_t n)
{
    for (int i = 0; i < d->n_reg; i++)
        if ((const char *)p >= (const char *)d->reg[i] && (const char *)p + n <= (const char *)d->reg[i] + d->reg_bytes[i])
            return true;
    return false;
}

/* The device address of [p, p + n) inside a registered (and mapped) range, or NULL */
static void *dev_addr(const struct cudev *d, const void *p, size_t n)
{
    for (int i = 0; i < d->n_reg; i++)
        if (d->reg_dev[i] && (const char *)p >= (const char *)d->reg[i] &&
            (const char *)p + n <= (const char *)d->reg[i] + d->reg_bytes[i])
            return (char *)d->reg_dev[i] + ((const char *)p - (const char *)d->reg[i]);
    return NULL;
}

int cudev_ffn_add(struct cudev *d, int32_t n, const float *y_cold)
{
    TRY(check_n(d, n));
    const int64_t ne = (int64_t)n * d->m->hp.n_embd;
    if (y_cold)
        TRY(CU(cudaMemcpyAsync(d->ycold, y_cold, (size_t)ne * sizeof(float), cudaMemcpyHostToDevice, d->st)));
    TRY(CK(cuk_add2(d->x, d->pending, y_cold ? d->ycold : NULL, ne, d->st)));
    /* a plain host array may be reused once we return; a registered one is the caller's to keep
     * until the stream has passed this copy */
    if (y_cold && !registered(d, y_cold, (size_t)ne * sizeof(float)))
        TRY(CU(cudaStreamSynchronize(d->st)));
    return 0;
}

int cudev_host_register(struct cudev *d, void *ptr, size_t bytes)
{
    if (d->n_reg >= CUDEV_MAX_REG)
        return pi_fail(PI_E_RANGE, "cuda: more than %d registered host ranges", CUDEV_MAX_REG);
    void *dp;
    if (!d->rel_blk) { /* the release word and share of cold_add, for the hand-off this range serves */
        const size_t yb = (size_t)d->p.n_batch * (size_t)d->m->hp.n_embd * sizeof(float);
        void *blk;
        TRY(CU(cudaHostAlloc(&blk, REL_Y_OFF + yb, cudaHostAllocMapped)));
        memset(blk, 0, REL_Y_OFF + yb); /* nothing released: this context's steps are all ahead */
        const int rc = CU(cudaHostGetDevicePointer(&dp, blk, 0));
        if (rc) {
            cudaFreeHost(blk);
            return rc;
        }
        d->rel_blk = blk;
        d->rel_d = dp;
        d->rel_y_d = (float *)((char *)dp + REL_Y_OFF);
    }
    TRY(CU(cudaHostRegister(ptr, bytes, cudaHostRegisterMapped)));
    d->reg[d->n_reg] = ptr; /* pinned from here on: unregistered at close */
    d->reg_bytes[d->n_reg] = bytes;
    d->reg_dev[d->n_reg++] = NULL;
    TRY(CU(cudaHostGetDevicePointer(&dp, ptr, 0)));
    d->reg_dev[d->n_reg - 1] = dp;
    return 0;
}

int cudev_stage_out(struct cudev *d, int32_t n, float *h, uint8_t *mask, uint64_t *key, uint64_t seq)
{
    TRY(check_n(d, n));
    const size_t nh = (size_t)n * (size_t)d->m->hp.n_embd * sizeof(float), nm = (size_t)n * (size_t)d->m->hp.n_ff;
    void *hd = dev_addr(d, h, nh), *md = mask ? dev_addr(d, mask, nm) : NULL, *kd = dev_addr(d, key, sizeof *key);
    if (!hd || (mask && !md) || !kd)
        return pi_fail(PI_E_INVAL, "cuda: stage_out's h, masks and key must lie in a registered host range");
    return CK(cuk_hand_out(d->x, (int64_t)nh, mask ? d->mask : NULL, (int64_t)nm, hd, md, NULL, kd, seq, d->st));
}

int cudev_predict_out(struct cudev *d, int layer, int32_t n, float *h, uint8_t *mask, uint64_t *bits, uint64_t *key_h,
                      uint64_t *key, uint64_t seq, bool *bits_out)
{
    *bits_out = false;
    TRY(check_n(d, n));
    TRY(check_layer(d, layer));
    const int64_t F = d->m->hp.n_ff;
    const size_t nh = (size_t)n * (size_t)d->m->hp.n_embd * sizeof(float), nm = (size_t)n * (size_t)F,
                 nb = (size_t)(F + 63) / 64 * sizeof(uint64_t);
    void *hd = dev_addr(d, h, nh), *md = dev_addr(d, mask, nm), *kd = dev_addr(d, key, sizeof *key);
    uint64_t *khd = key_h ? dev_addr(d, key_h, sizeof *key_h) : NULL;
    uint64_t *bd = n == 1 && bits ? dev_addr(d, bits, nb) : NULL;
    if (!hd || !md || !kd || (key_h && !khd) || (n == 1 && bits && !bd))
        return pi_fail(PI_E_INVAL, "cuda: predict_out's h, masks, bits and keys must lie in a registered host range");
    bool h_out;
    TRY(predict(d, layer, n, khd ? hd : NULL, khd, seq, &h_out));
    /* the one token's cold active neurons: its mask less the layer's placed ones (a layer held whole
     * for the host's masking has no list of them; sparse files have none: predict needs down_t) */
    const struct cu_layer *c = &d->L[layer];
    if (c->host_masked)
        bd = NULL;
    const struct cuk_cold cold = { .cold_tab = c->compact ? c->cold_tab : NULL, .n_hot = c->n_hot, .n_ff = F,
                                   .bits = bd };
    TRY(CK(cuk_hand_out(d->x, h_out ? 0 : (int64_t)nh, d->mask, (int64_t)nm, hd, md, bd ? &cold : NULL, kd, seq,
                        d->st)));
    *bits_out = bd != NULL;
    return 0;
}

/* Polls of a stage_out key between two questions to the stream whether it failed (a kernel that
 * faults never stores its key) */
#define STAGE_QUERY_POLLS 1024

int cudev_stage_wait(struct cudev *d, const uint64_t *key, uint64_t seq)
{
    for (uint32_t polls = 1;; polls++) {
        /* acquire: pairs with cuk_hand_out's system-scope release of the key after h and the masks */
        const uint64_t k = atomic_load_explicit((const _Atomic uint64_t *)key, memory_order_acquire);
        if (k >= seq)
            return k == seq ? 0 : 1;
        if (polls % STAGE_QUERY_POLLS)
            continue;
        const cudaError_t e = cudaStreamQuery(d->st);
        if (e == cudaSuccess) /* everything enqueued is done, and the key is not there */
            return pi_fail(PI_E_DEVICE, "cuda: the stream is idle but step %llu was never announced",
                           (unsigned long long)seq);
        if (e != cudaErrorNotReady)
            return CU(e);
    }
}

int cudev_cold_add(struct cudev *d, int32_t n, const uint64_t *key, const float *y, uint64_t seq)
{
    TRY(check_n(d, n));
    const int64_t ne = (int64_t)n * d->m->hp.n_embd;
    const void *yd = dev_addr(d, y, (size_t)ne * sizeof(float)), *kd = dev_addr(d, key, sizeof *key);
    if (!yd || !kd || !d->rel_blk)
        return pi_fail(PI_E_INVAL, "cuda: cold_add's share and key must lie in a registered host range");
    return CK(cuk_hand_add(d->x, d->pending, yd, kd, d->rel_y_d, d->rel_d, seq, ne, d->st));
}

float *cudev_cold_buf(struct cudev *d) { return d->rel_blk ? (float *)((char *)d->rel_blk + REL_Y_OFF) : NULL; }

void cudev_cold_release(struct cudev *d, uint64_t seq)
{
    if (!d->rel_blk)
        return;
    _Atomic uint64_t *rel = (_Atomic uint64_t *)d->rel_blk;
    /* release: the share in cold_buf is written before the device can see the word (it reads the
     * share after it, cuk_hand.h); never lowered, so a release covers every earlier step too */
    if (atomic_load_explicit(rel, memory_order_relaxed) < seq)
        atomic_store_explicit(rel, seq, memory_order_release);
}

int cudev_output(struct cudev *d, int32_t n, int32_t first, float *logits)
{
    TRY(check_n(d, n));
    const struct pi_hparams *hp = &d->m->hp;
    const int32_t k = n - first;
    const int64_t E = hp->n_embd;
    if (d->n_dev_layers < hp->n_layer)
        return pi_fail(PI_E_UNSUPPORTED, "cuda: the output layer is on the host (%d of %d layers here)",
                       d->n_dev_layers, hp->n_layer);
    if (first < 0 || k < 1)
        return pi_fail(PI_E_RANGE, "cuda: output rows %d..%d", first, n - 1);
    const float *x = d->x + (size_t)first * E;
    if (!use_blas(d, k)) { /* the norm in the product's kernel where it can (cuk_mmv.h): the bits of the
                            * two below; a single-block k_rmsnorm held the chain ~13 µs a token */
        TRY(CK(cuk_norm_gemv_split3(&d->output, x, d->output_norm, hp->norm_eps, k, d->xn, d->logits, hp->n_vocab,
                                    NULL, 0, NULL, d->xq, d->st)));
    } else {
        TRY(CK(cuk_rmsnorm(d->xn, x, d->output_norm, k, E, E, hp->norm_eps, d->st)));
        TRY(mm(d, &d->output, d->xn, k, d->logits, CUK_SET));
    }
    if (!logits)
        return 0;
    TRY(CU(cudaMemcpyAsync(logits, d->logits, (size_t)k * hp->n_vocab * sizeof(float), cudaMemcpyDeviceToHost,
                           d->st)));
    return CU(cudaStreamSynchronize(d->st));
}

int cudev_argmax(struct cudev *d, int32_t n, int32_t first, int32_t *ids)
{
    const int32_t k = n - first;
    TRY(CK(cuk_argmax(d->logits, k, d->m->hp.n_vocab, d->ids, d->st)));
    TRY(CU(cudaMemcpyAsync(d->h_ids, d->ids, (size_t)k * sizeof(int32_t), cudaMemcpyDeviceToHost, d->st)));
    TRY(CU(cudaStreamSynchronize(d->st)));
    memcpy(ids, d->h_ids, (size_t)k * sizeof(int32_t));
    return 0;
}

int cudev_topk(struct cudev *d, int32_t n, int32_t first, int32_t k, int32_t *ids, float *vals)
{
    const int32_t rows = n - first;
    const size_t cells = (size_t)rows * (size_t)k;
    TRY(CK(cuk_topk(d->logits, rows, d->m->hp.n_vocab, k, d->ids, d->tvals, d->tpart, d->st)));
    TRY(CU(cudaMemcpyAsync(d->h_ids, d->ids, cells * sizeof(int32_t), cudaMemcpyDeviceToHost, d->st)));
    TRY(CU(cudaMemcpyAsync(d->h_tvals, d->tvals, cells * sizeof(float), cudaMemcpyDeviceToHost, d->st)));
    TRY(CU(cudaStreamSynchronize(d->st)));
    memcpy(ids, d->h_ids, cells * sizeof(int32_t));
    memcpy(vals, d->h_tvals, cells * sizeof(float));
    return 0;
}

int cudev_count_active(struct cudev *d, bool on, uint64_t *per_layer)
{
    const int L = d->m->hp.n_layer;
    if (per_layer && d->active)
        memcpy(per_layer, d->active, (size_t)L * sizeof *per_layer);
    free(d->active);
    d->active = on ? calloc((size_t)L, sizeof *d->active) : NULL;
    return on && !d->active ? pi_fail(PI_E_NOMEM, "cuda: out of memory") : 0;
}

int cudev_sync(struct cudev *d) { return CU(cudaStreamSynchronize(d->st)); }

int cudev_profile(struct cudev *d, const int32_t *tok, int32_t n, int32_t pos, bool sparse, double ms[CUDEV_PROF_N])
{
    sparse = sparse && d->sparse_ok;
    TRY(check_n(d, n));
    int rc = 0, made = 0;
    for (; made < PROF_EV && !rc; made++)
        rc = CU(cudaEventCreate(&d->pev[made]));
    for (int i = 0; i < CUDEV_PROF_N; i++)
        ms[i] = 0;
    int32_t *pv = malloc((size_t)n * 2 * sizeof *pv);
    if (!rc && !pv)
        rc = pi_fail(PI_E_NOMEM, "cuda: out of memory");
    for (int32_t i = 0; !rc && i < n; i++)
        pv[i] = pos + i, pv[n + i] = 0;
    if (!rc)
        rc = cudev_batch(d, n, tok, pv, pv + n);
    free(pv);
    if (!rc)
        rc = cudev_embed(d, n);
    /* per layer (and the output layer after them): an event after each part, and inside the
     * predictor and the masked FFN after each kernel; the times between them summed into the slot
     * each event names */
    for (int il = 0; !rc && il <= d->m->hp.n_layer; il++) {
        d->pn = 0, d->prc = 0;
        mark(d, CUDEV_PROF_OUTPUT); /* the start: its label is not used */
        if (il == d->m->hp.n_layer) {
            rc = cudev_output(d, n, n - 1, NULL);
            if (!rc)
                rc = CK(cuk_argmax(d->logits, 1, d->m->hp.n_vocab, d->ids, d->st));
            mark(d, CUDEV_PROF_OUTPUT);
        } else {
            rc = attn_qkv(d, il, n);
            mark(d, CUDEV_PROF_QKV);
            if (!rc)
                rc = attn_core(d, il, n);
            mark(d, CUDEV_PROF_ATTN);
            if (!rc)
                rc = attn_out(d, il, n);
            mark(d, CUDEV_PROF_WO);
            if (!rc && sparse)
                rc = cudev_predict(d, il, n);
            mark(d, CUDEV_PROF_PRED);
            if (!rc)
                rc = cudev_ffn(d, il, n, sparse, false);
            mark(d, CUDEV_PROF_FFN);
        }
        if (!rc)
            rc = d->prc;
        if (!rc && d->pn > 0)
            rc = CU(cudaEventSynchronize(d->pev[d->pn - 1]));
        for (int i = 1; !rc && i < d->pn; i++) {
            float t = 0;
            rc = CU(cudaEventElapsedTime(&t, d->pev[i - 1], d->pev[i]));
            ms[d->plab[i]] += t;
        }
    }
    d->pn = -1;
    /* the parts are the sums of their kernels */
    ms[CUDEV_PROF_PRED] += ms[CUDEV_PROF_FC1] + ms[CUDEV_PROF_FC2] + ms[CUDEV_PROF_COMPACT];
    ms[CUDEV_PROF_FFN] += ms[CUDEV_PROF_GLU] + ms[CUDEV_PROF_AXPY];
    for (int i = 0; i < made; i++)
        cudaEventDestroy(d->pev[i]);
    return rc;
}

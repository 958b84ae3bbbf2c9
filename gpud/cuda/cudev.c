/* cudev.c — the GPU executor's device context (see cudev.h): allocation, weight upload, the
 * forward-pass steps over device buffers, and the decode step as a CUDA graph. */
#include "cudev.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuk.h"
#include "cuk_hand.h"
#include "cuk_mmv.h"
#include "cuk_pattn.h"
#include "cuk_place.h"
#include "cuk_topk.h"
#include "cudev_trace.h"
#include "sampling.h"
#include "vram_plan.h"

_Static_assert(CUK_TOPK_MAX == SAMP_BEST_MAX, "the device returns as many candidates as the sampler takes");
#include "pi_err.h"
#include "predictor.h"
#include "quant.h"

#define ALIGN 256
#define STAGE_BYTES ((size_t)64 << 20) /* pinned staging for the weight upload, two of them */

/* ---- errors: every CUDA call checked, failures are -PI_E_DEVICE naming the call ----
 *
 * Fault injection (tests): PINFER_CUDA_FAIL_CALL=N fails the Nth checked call of the process as if
 * the device had failed; with PINFER_CUDA_FAIL_ONCE=PATH only the first process to reach it fails
 * (it creates PATH; a restarted stage that finds PATH runs clean). PINFER_CUDA_COUNT_CALLS=1 prints
 * the number of checked calls at close (and at the end of open), to aim N at a phase. */

static atomic_long cu_calls;
static long cu_fail_at = -2; /* -2: not read yet, -1: off */

static bool cu_inject(void)
{
    if (cu_fail_at == -2) {
        const char *e = getenv("PINFER_CUDA_FAIL_CALL");
        cu_fail_at = e && *e ? atol(e) : -1;
    }
    /* every checked call counts (one relaxed add), so that PINFER_CUDA_COUNT_CALLS sees them */
    const long k = atomic_fetch_add_explicit(&cu_calls, 1, memory_order_relaxed) + 1;
    if (cu_fail_at <= 0 || k != cu_fail_at)
        return false;
    const char *once = getenv("PINFER_CUDA_FAIL_ONCE");
    if (once && *once) {
        const int fd = open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
            return false; /* an earlier process failed already */
        close(fd);
    }
    return true;
}

static long cu_count(void)
{
    return atomic_load_explicit(&cu_calls, memory_order_relaxed);
}

static void cu_report_count(const char *when)
{
    const char *e = getenv("PINFER_CUDA_COUNT_CALLS");
    if (e && *e && *e != '0')
        fprintf(stderr, "cuda: %ld checked CUDA calls %s\n", cu_count(), when);
}

static int cu_check(int err, const char *what, int line)
{
    if (cu_inject())
        return pi_fail(PI_E_DEVICE, "cuda: %s failed: injected fault (PINFER_CUDA_FAIL_CALL=%ld, cudev.c:%d)", what,
                       cu_fail_at, line);
    if (err == 0)
        return 0;
    return pi_fail(PI_E_DEVICE, "cuda: %s failed: %s (cudev.c:%d)", what, cudaGetErrorString((cudaError_t)err), line);
}
#define CU(call) cu_check((int)(call), #call, __LINE__)
/* kernel launchers return 0 or -cudaError_t */
#define CK(call) cu_check(-(call), #call, __LINE__)
#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

static int cb_check(cublasStatus_t s, const char *what, int line)
{
    if (cu_inject())
        return pi_fail(PI_E_DEVICE, "cublas: %s failed: injected fault (PINFER_CUDA_FAIL_CALL=%ld, cudev.c:%d)", what,
                       cu_fail_at, line);
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return pi_fail(PI_E_DEVICE, "cublas: %s failed: status %d (cudev.c:%d)", what, (int)s, line);
}
#define CB(call) cb_check((call), #call, __LINE__)

/* ---- the context ---- */

struct cu_layer {
    /* gate, up, down_t: the whole tensors, or with compact the n_hot placed rows in ascending order */
    struct cuk_w wq, wk, wv, wo, gate, up, down, down_t, fc1, fc2;
    bool compact;     /* a partial placement applied here: only the hot rows are on the device */
    bool host_masked; /* a partial placement of a layer held whole (no ffn_down_t): the caller masks */
    int64_t n_hot;    /* neurons computed on the device (n_ff when held whole) */
    int32_t *hot_ids; /* (n_hot) device: the placed neurons' ids, when compact */
    uint64_t *cold_tab; /* device, beside hot_ids: the neurons not placed as bits (cuk_cold_table) */
    int32_t *h_hot;   /* (n_hot) host copy, for the upload */
    struct cuk_w wqkv; /* wq, wk, wv stacked (one GEMV launch); q NULL when their shapes differ */
    float *attn_norm, *ffn_norm, *bq, *bk, *bv;
};

/* the decode graphs by the bucket of their positions: below STEP_BUCKET0, 2·STEP_BUCKET0, ...; the
 * last bucket any position (step_bucket) */
#define STEP_BUCKET0 256
#define STEP_BUCKETS 18

struct cudev {
    const struct pi_model *m;
    struct cudev_params p;
    cudaStream_t st;
    cublasHandle_t blas;
    struct cudaDeviceProp prop;
    struct cuk_attn_geom geom;
    struct cu_layer *L;
    struct cuk_w tok_embd, output;
    float *output_norm;
    bool sparse_ok;
    /* memory by kind; hot and pred live in the weights arena, counted apart */
    void *w_arena, *kv_arena, *s_arena;
    size_t w_bytes, kv_bytes, s_bytes, ctx_bytes, w_used, s_used, hot_used, pred_used;
    int32_t n_dev_layers;    /* layers on the device (whole-layer placement: the first ones) */
    int64_t hot_neurons;
    double upload_s;
    /* KV cache per layer */
    void **k_cache, **v_cache;
    /* scratch, n_batch tokens unless noted */
    int32_t *batch;          /* [3][n_batch]: tok, pos, seq */
    int32_t *h_batch;        /* pinned host copy */
    float *x, *xn, *q, *k, *v, *att, *pending, *ycold;
    float *g, *u, *act;      /* (n_batch, n_ff) */
    float *p1;               /* (n_batch, rank) predictor hidden */
    uint8_t *mask;           /* (n_batch, n_ff) */
    uint8_t *mask_c;         /* (n_batch, n_hot) the masks of a compact layer's hot rows */
    int32_t *idx, *cnt;      /* (n_batch, n_ff), (n_batch) */
    float *part;             /* AXPY chunk sums, CUK_AXPY_MAX_B tokens */
    float *logits;           /* (n_batch, n_vocab) */
    int32_t *ids, *h_ids;    /* (n_batch, CUK_TOPK_MAX) device, pinned host: argmax and topk ids */
    float *tvals, *h_tvals;  /* (n_batch, CUK_TOPK_MAX) topk's logits */
    void *tpart;             /* topk's slices' candidates (cuk_topk_scratch_bytes) */
    void *xh;                /* (n_batch, max(n_in)) half for cuBLAS */
    void *xq;                /* (n_batch) rows of quantized activations for the Q-type GEMV */
    float *apart;            /* attention chunk partials */
    float *rope_inv;         /* (rope_dim / 2) RoPE inverse frequencies */
    void *wdeq;              /* largest Q weight as f16 (blas_prefill, Q models) */
    void *blas_ws;
    size_t blas_ws_bytes;
    bool mask_valid;         /* idx/cnt hold the compacted mask */
    bool mask_raw;           /* mask holds the predictor's mask, compacted into idx/cnt only when an
                              * uncompacted layer's FFN needs the list (a hybrid step's hot FFN
                              * compacts its own rows: the launch would sit before the hand-off) */
    bool blas_on;            /* benchmarks: batches > CUDEV_GEMV_MAX through cuBLAS (not invariant) */
    int32_t *h_cnt;          /* (n_batch) pinned: active counts when counting */
    bool capturing;          /* a decode graph is being captured */
    int32_t cap_max_pos;     /* ... for positions up to this one (-1: any; cudev_step_top's buckets) */
    int32_t max_pos;         /* largest position of the batch on the device */
    /* decode graphs: [sparse][bucket]; the steps of n tokens ending in their k best (cudev_step_top):
     * [n][sparse][bucket][k > 1], the greedy one for k = 1, the other for top_k[...] best (the
     * largest k asked for so far; a smaller k reads each row's first k) */
    cudaGraphExec_t graph[2][STEP_BUCKETS], top_graph[CUDEV_GEMV_MAX + 1][2][STEP_BUCKETS][2];
    int32_t top_k[CUDEV_GEMV_MAX + 1][2][STEP_BUCKETS][2];
    int n_captured;          /* decode graphs captured, and the time they took (the log at close) */
    double capture_s;
    int64_t max_rank;
    uint64_t *active;        /* (n_layer) when counting: Σ neurons the masked FFN computed */
    /* the pipeline's hand-off: registered (mapped) host ranges and their device addresses; the
     * release word and share the host gives a cold_add wait when the key's writer will not (pinned,
     * mapped; rel on its own line: the device polls it) */
#define CUDEV_MAX_REG 4
    void *reg[CUDEV_MAX_REG], *reg_dev[CUDEV_MAX_REG];
    size_t reg_bytes[CUDEV_MAX_REG];
    int n_reg;
    void *rel_blk;           /* host: [0, 64) the release word, [REL_Y_OFF, ...) the share */
    uint64_t *rel_d;         /* their device addresses */
    float *rel_y_d;
    /* cudev_profile: events between kernels, each labelled with the slot of the time before it */
#define PROF_EV 16
    cudaEvent_t pev[PROF_EV];
    int plab[PROF_EV];
    int pn; /* events recorded this layer; -1: not profiling */
    int prc;
};

#define REL_Y_OFF 256

/* The kernels are built for compute capability 9.0 (gpud/cuda/meson.build: sm_90 code and compute_90
 * PTX, which newer GPUs compile at load) and the streamed decode kernel asks for ~223 KiB of shared
 * memory a block; a GPU without either would fail at the first launch, so it is refused here with
 * the reason, and `--backend auto` runs on the CPU instead. */
#define CUDEV_MIN_CC_MAJOR 9

bool cudev_available(char *why, size_t cap)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why)
            snprintf(why, cap, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return false;
    }
    struct cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) {
        if (why)
            snprintf(why, cap, "CUDA device 0: cannot read its properties: %s", cudaGetErrorString(e));
        return false;
    }
    if (prop.major < CUDEV_MIN_CC_MAJOR) {
        if (why)
            snprintf(why, cap, "CUDA device 0 (%s) has compute capability %d.%d; this build's kernels need %d.0 or "
                     "newer (Hopper)", prop.name, prop.major, prop.minor, CUDEV_MIN_CC_MAJOR);
        return false;
    }
    if (prop.sharedMemPerBlockOptin < cuk_mmv_block_smem()) { /* e.g. a GeForce Blackwell, ~100 KiB */
        if (why)
            snprintf(why, cap, "CUDA device 0 (%s) lets a block use %zu KiB of shared memory; the decode kernels "
                     "need %zu KiB", prop.name, prop.sharedMemPerBlockOptin / 1024, cuk_mmv_block_smem() / 1024);
        return false;
    }
    return true;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t al(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* Bump allocation inside an arena; with base NULL only counts. */
static void *take(void *base, size_t *used, size_t n)
{
    void *p = base ? (char *)base + *used : NULL;
    *used += al(n);
    return p;
}

static bool is_vec(const struct pi_tensor *t) { return t->data && t->ne[1] <= 1; }

/* Lay out (base NULL: count) one weight tensor in the arena: all its rows, or n_rows (>= 0) of them. */
static int w_place_n(struct cudev *d, const struct pi_tensor *t, struct cuk_w *w, int64_t n_rows)
{
    memset(w, 0, sizeof *w);
    if (!t->data)
        return 0;
    if (!cuk_type_ok(t->type))
        return pi_fail(PI_E_UNSUPPORTED, "cuda: tensor '%s' has type %s, which the GPU kernels do not support", t->name,
                       quant_traits(t->type) ? quant_traits(t->type)->name : "?");
    w->type = t->type;
    w->n_in = t->ne[0];
    w->n_out = n_rows >= 0 ? n_rows : t->ne[1];
    const size_t qb = cuk_w_qbytes(t->type, w->n_in, w->n_out), db = cuk_w_dbytes(t->type, w->n_in, w->n_out);
    if (!qb)
        return pi_fail(PI_E_UNSUPPORTED, "cuda: tensor '%s': row of %lld not a whole number of blocks", t->name,
                       (long long)w->n_in);
    w->q = take(d->w_arena, &d->w_used, qb);
    w->d = db ? take(d->w_arena, &d->w_used, db) : NULL;
    return 0;
}

static int w_place(struct cudev *d, const struct pi_tensor *t, struct cuk_w *w) { return w_place_n(d, t, w, -1); }

/* q, k, v of a layer stacked in the arena (q arrays, then scale arrays), so that one GEMV reads them. */
static int w_place_qkv(struct cudev *d, const struct pi_layer *l, struct cu_layer *c)
{
    const struct pi_tensor *t[3] = { &l->wq, &l->wk, &l->wv };
    struct cuk_w *w[3] = { &c->wq, &c->wk, &c->wv };
    memset(&c->wqkv, 0, sizeof c->wqkv);
    if (t[1]->type != t[0]->type || t[2]->type != t[0]->type || t[1]->ne[0] != t[0]->ne[0] ||
        t[2]->ne[0] != t[0]->ne[0] || !cuk_type_ok(t[0]->type)) {
        for (int i = 0; i < 3; i++)
            TRY(w_place(d, t[i], w[i]));
        return 0;
    }
    size_t qb[3], db[3], qs = 0, ds = 0;
    for (int i = 0; i < 3; i++) {
        qb[i] = cuk_w_qbytes(t[i]->type, t[i]->ne[0], t[i]->ne[1]);
        db[i] = cuk_w_dbytes(t[i]->type, t[i]->ne[0], t[i]->ne[1]);
        if (!qb[i])
            return pi_fail(PI_E_UNSUPPORTED, "cuda: tensor '%s': row not a whole number of blocks", t[i]->name);
        qs += qb[i], ds += db[i];
    }
    char *q = take(d->w_arena, &d->w_used, qs), *dd = ds ? take(d->w_arena, &d->w_used, ds) : NULL;
    for (int i = 0; i < 3; i++) {
        *w[i] = (struct cuk_w){ .type = t[i]->type, .n_in = t[i]->ne[0], .n_out = t[i]->ne[1], .q = q, .d = dd };
        if (q)
            q += qb[i];
        if (dd)
            dd += db[i];
    }
    c->wqkv = (struct cuk_w){ .type = t[0]->type, .n_in = t[0]->ne[0],
                              .n_out = t[0]->ne[1] + t[1]->ne[1] + t[2]->ne[1], .q = c->wq.q, .d = c->wq.d };
    return 0;
}

static int v_place(struct cudev *d, const struct pi_tensor *t, float **out)
{
    *out = NULL;
    if (!t->data)
        return 0;
    if (t->type != PI_TYPE_F32)
        return pi_fail(PI_E_UNSUPPORTED, "cuda: vector '%s' is not f32", t->name);
    *out = take(d->w_arena, &d->w_used, (size_t)t->ne[0] * sizeof(float));
    return 0;
}

/* The placed neurons of each layer (host lists; once, before the counting pass). */
static int place_neurons(struct cudev *d)
{
    const struct pi_model *m = d->m;
    const int64_t F = m->hp.n_ff;
    d->hot_neurons = 0;
    for (int il = 0; il < d->n_dev_layers; il++) {
        struct cu_layer *c = &d->L[il];
        const uint8_t *on = d->p.on_device ? d->p.on_device + (size_t)il * (size_t)F : NULL;
        int64_t n = F;
        if (on) {
            n = 0;
            for (int64_t i = 0; i < F; i++)
                n += on[i] != 0;
        }
        /* down columns of a file without ffn_down_t cannot be compacted: the whole FFN as soon as one
         * neuron is placed, masked by the caller (host_masked); none placed: no FFN on the device */
        c->compact = n < F && (m->layers[il].ffn_down_t.data || n == 0);
        c->host_masked = n < F && !c->compact;
        c->n_hot = c->compact ? n : F;
        d->hot_neurons += n;
        if (c->compact && n > 0) {
            if (!(c->h_hot = malloc((size_t)n * sizeof *c->h_hot)))
                return pi_fail(PI_E_NOMEM, "cuda: out of memory");
            for (int64_t i = 0, k = 0; i < F; i++)
                if (on[i])
                    c->h_hot[k++] = (int32_t)i;
        }
    }
    return 0;
}

static int place_all(struct cudev *d)
{
    const struct pi_model *m = d->m;
    const bool pred = !d->p.no_sparse && pred_available(m);
    const int32_t N = d->n_dev_layers;
    d->w_used = d->hot_used = d->pred_used = 0;
    if (N > 0)
        TRY(w_place(d, &m->token_embd, &d->tok_embd));
    if (N == m->hp.n_layer) {
        TRY(w_place(d, &m->output, &d->output));
        TRY(v_place(d, &m->output_norm, &d->output_norm));
    }
    bool down_t_all = true;
    for (int il = 0; il < N; il++) {
        const struct pi_layer *l = &m->layers[il];
        struct cu_layer *c = &d->L[il];
        TRY(w_place_qkv(d, l, c));
        TRY(w_place(d, &l->wo, &c->wo));
        size_t u0 = d->w_used;
        if (!c->compact) {
            TRY(w_place(d, &l->ffn_gate, &c->gate));
            TRY(w_place(d, &l->ffn_up, &c->up));
            /* with ffn_down_t both the GEMV and the cuBLAS path read down_t: ffn_down stays on the host */
            if (!l->ffn_down_t.data)
                TRY(w_place(d, &l->ffn_down, &c->down));
            TRY(w_place(d, &l->ffn_down_t, &c->down_t));
        } else if (c->n_hot > 0) {
            TRY(w_place_n(d, &l->ffn_gate, &c->gate, c->n_hot));
            TRY(w_place_n(d, &l->ffn_up, &c->up, c->n_hot));
            TRY(w_place_n(d, &l->ffn_down_t, &c->down_t, c->n_hot));
            c->hot_ids = take(d->w_arena, &d->w_used, (size_t)c->n_hot * sizeof(int32_t));
            c->cold_tab = take(d->w_arena, &d->w_used, vram_cold_table_bytes(m));
            d->hot_used += d->w_used - u0;
        } else {
            memset(&c->gate, 0, sizeof c->gate);
            memset(&c->up, 0, sizeof c->up);
            memset(&c->down_t, 0, sizeof c->down_t);
        }
        if (pred) {
            u0 = d->w_used;
            TRY(w_place(d, &l->fc1, &c->fc1));
            TRY(w_place(d, &l->fc2, &c->fc2));
            d->pred_used += d->w_used - u0;
            if (l->fc1.ne[1] > d->max_rank)
                d->max_rank = l->fc1.ne[1];
        }
        TRY(v_place(d, &l->attn_norm, &c->attn_norm));
        TRY(v_place(d, &l->ffn_norm, &c->ffn_norm));
        TRY(v_place(d, &l->bq, &c->bq));
        TRY(v_place(d, &l->bk, &c->bk));
        TRY(v_place(d, &l->bv, &c->bv));
        /* the tensors, not c's pointers: this also runs as the counting pass, before the arena exists */
        if (!l->ffn_down_t.data)
            down_t_all = false;
        if (!l->ffn_down.data && !l->ffn_down_t.data)
            return pi_fail(PI_E_NOTFOUND, "cuda: layer %d has neither ffn_down nor ffn_down_t", il);
    }
    d->sparse_ok = pred && down_t_all;
    return 0;
}

/* Upload one tensor through the pinned staging buffers (and a device buffer for Q repacking). */
struct upl {
    void *stage[2];
    cudaEvent_t ev[2];
    void *raw[2]; /* device: the two halves of the scratch arena (unused before the first step) */
    size_t bytes; /* of each staging buffer */
    int k;
};

/* rows: the tensor rows that make w's rows 0.. (NULL: all of them, in order) */
static int w_upload(struct cudev *d, struct upl *u, const struct pi_tensor *t, const struct cuk_w *w,
                    const int32_t *rows)
{
    if (!t->data || !w->q)
        return 0;
    const size_t row = t->row_bytes;
    const int64_t per = (int64_t)(u->bytes / row);
    if (per < 1)
        return pi_fail(PI_E_UNSUPPORTED, "cuda: row of '%s' exceeds the staging buffer", t->name);
    for (int64_t r0 = 0; r0 < w->n_out; r0 += per) {
        const int64_t nr = w->n_out - r0 < per ? w->n_out - r0 : per;
        const int k = u->k++ & 1;
        TRY(CU(cudaEventSynchronize(u->ev[k])));
        if (rows)
            for (int64_t r = 0; r < nr; r++)
                memcpy((char *)u->stage[k] + (size_t)r * row, (const char *)t->data + (size_t)rows[r0 + r] * row, row);
        else
            memcpy(u->stage[k], (const char *)t->data + (size_t)r0 * row, (size_t)nr * row);
        TRY(CU(cudaMemcpyAsync(u->raw[k], u->stage[k], (size_t)nr * row, cudaMemcpyHostToDevice, d->st)));
        TRY(CK(cuk_repack(w, u->raw[k], r0, nr, d->st)));
        TRY(CU(cudaEventRecord(u->ev[k], d->st)));
    }
    return 0;
}

static int v_upload(struct cudev *d, const struct pi_tensor *t, float *dst)
{
    if (!t->data)
        return 0;
    return CU(cudaMemcpy(dst, t->data, (size_t)t->ne[0] * sizeof(float), cudaMemcpyHostToDevice));
}

/* The layer's cold table from its hot ids, through the host */
static int upload_cold_table(const struct pi_model *m, const struct cu_layer *c)
{
    const size_t nb = vram_cold_table_bytes(m);
    uint64_t *tab = malloc(nb);
    if (!tab)
        return pi_fail(PI_E_NOMEM, "cuda: out of memory");
    cuk_cold_table(c->h_hot, c->n_hot, m->hp.n_ff, tab);
    const int rc = CU(cudaMemcpy(c->cold_tab, tab, nb, cudaMemcpyHostToDevice));
    free(tab);
    return rc;
}

static int upload_all(struct cudev *d)
{
    const struct pi_model *m = d->m;
    struct upl u = { 0 };
    int rc = 0;
    /* the device staging is the scratch arena's two halves: the upload needs no memory of its own */
    u.bytes = d->s_bytes / 2 / ALIGN * ALIGN;
    u.bytes = u.bytes < STAGE_BYTES ? u.bytes : STAGE_BYTES;
    for (int k = 0; k < 2 && !rc; k++) {
        if (!(rc = CU(cudaMallocHost(&u.stage[k], u.bytes))) && !(rc = CU(cudaEventCreate(&u.ev[k]))))
            rc = CU(cudaEventRecord(u.ev[k], d->st));
        u.raw[k] = (char *)d->s_arena + (size_t)k * u.bytes;
    }
    const double t0 = now_s();
    if (!rc)
        rc = w_upload(d, &u, &m->token_embd, &d->tok_embd, NULL);
    if (!rc)
        rc = w_upload(d, &u, &m->output, &d->output, NULL);
    if (!rc && d->output_norm)
        rc = v_upload(d, &m->output_norm, d->output_norm);
    for (int il = 0; !rc && il < d->n_dev_layers; il++) {
        const struct pi_layer *l = &m->layers[il];
        struct cu_layer *c = &d->L[il];
        const struct pi_tensor *ts[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->ffn_gate, &l->ffn_up, &l->ffn_down,
                                         &l->ffn_down_t, &l->fc1, &l->fc2 };
        const struct cuk_w *ws[] = { &c->wq, &c->wk, &c->wv, &c->wo, &c->gate, &c->up, &c->down, &c->down_t,
                                     &c->fc1, &c->fc2 };
        for (size_t i = 0; !rc && i < sizeof ts / sizeof ts[0]; i++) {
            const bool ffn_row = ts[i] == &l->ffn_gate || ts[i] == &l->ffn_up || ts[i] == &l->ffn_down_t;
            rc = w_upload(d, &u, ts[i], ws[i], c->compact && ffn_row ? c->h_hot : NULL);
        }
        if (!rc && c->hot_ids)
            rc = CU(cudaMemcpy(c->hot_ids, c->h_hot, (size_t)c->n_hot * sizeof(int32_t), cudaMemcpyHostToDevice));
        if (!rc && c->cold_tab)
            rc = upload_cold_table(m, c);
        const struct pi_tensor *vs[] = { &l->attn_norm, &l->ffn_norm, &l->bq, &l->bk, &l->bv };
        float *vd[] = { c->attn_norm, c->ffn_norm, c->bq, c->bk, c->bv };
        for (size_t i = 0; !rc && i < sizeof vs / sizeof vs[0]; i++)
            rc = v_upload(d, vs[i], vd[i]);
    }
    if (!rc)
        rc = CU(cudaStreamSynchronize(d->st));
    d->upload_s = now_s() - t0;
    for (int k = 0; k < 2; k++) {
        if (u.stage[k])
            cudaFreeHost(u.stage[k]);
        if (u.ev[k])
            cudaEventDestroy(u.ev[k]);
    }
    return rc;
}

static int64_t max_n_in(const struct cudev *d)
{
    const struct pi_hparams *hp = &d->m->hp;
    int64_t n = hp->n_embd > hp->n_ff ? hp->n_embd : hp->n_ff;
    const int64_t q = (int64_t)hp->n_head * hp->head_dim;
    return n > q ? n : q;
}

/* Scratch layout (base NULL: count). */
static void place_scratch(struct cudev *d)
{
    const struct pi_hparams *hp = &d->m->hp;
    const size_t B = (size_t)d->p.n_batch, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff,
                 Q = (size_t)hp->n_head * hp->head_dim, KV = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t Bg = B < CUK_AXPY_MAX_B ? B : CUK_AXPY_MAX_B, R = d->max_rank > 0 ? (size_t)d->max_rank : 1;
    void *s = d->s_arena;
    size_t *u = &d->s_used;
    *u = 0;
    d->batch = take(s, u, 3 * B * sizeof(int32_t));
    d->x = take(s, u, B * E * 4);
    d->xn = take(s, u, B * E * 4);
    d->q = take(s, u, B * Q * 4);
    d->k = take(s, u, B * KV * 4);
    d->v = take(s, u, B * KV * 4);
    d->att = take(s, u, B * Q * 4);
    d->pending = take(s, u, B * E * 4);
    d->ycold = take(s, u, B * E * 4);
    const bool blas = B > CUDEV_GEMV_MAX && d->p.blas_prefill;
    d->g = blas ? take(s, u, B * F * 4) : NULL; /* cuBLAS prefill only */
    d->u = blas ? take(s, u, B * F * 4) : NULL;
    d->act = take(s, u, B * F * 4);
    d->p1 = take(s, u, B * R * 4);
    d->mask = take(s, u, B * F);
    d->idx = take(s, u, B * F * 4);
    d->cnt = take(s, u, B * 4);
    d->part = take(s, u, cuk_axpy_part_floats((int64_t)F, (int64_t)E, (int)Bg) * 4);
    d->logits = take(s, u, B * (size_t)hp->n_vocab * 4);
    d->ids = take(s, u, B * CUK_TOPK_MAX * 4);
    d->tvals = take(s, u, B * CUK_TOPK_MAX * 4);
    d->tpart = take(s, u, cuk_topk_scratch_bytes((int)B, hp->n_vocab));
    d->xq = take(s, u, B * cuk_xq_row_bytes(max_n_in(d)));
    d->apart = take(s, u, cuk_attn_part_floats(&d->geom, (int)B) * sizeof(float));
    d->rope_inv = take(s, u, (size_t)(hp->rope_dim / 2 + 1) * sizeof(float));
    d->mask_c = take(s, u, B * F);
    if (blas) {
        d->xh = take(s, u, B * (size_t)max_n_in(d) * 2);
        /* the largest Q weight any layer could hold, dequantized for cuBLAS (the model's tensors, not
         * the placed ones: the scratch does not depend on the placement; vram_plan.c max_deq) */
        size_t big = 0;
        const bool pred = !d->p.no_sparse && pred_available(d->m);
        const struct pi_tensor *all[] = { &d->m->output, &d->m->token_embd };
        for (size_t i = 0; i < 2; i++)
            if (all[i]->data && cuk_w_dbytes(all[i]->type, 32, 1) && (size_t)(all[i]->ne[0] * all[i]->ne[1]) > big)
                big = (size_t)(all[i]->ne[0] * all[i]->ne[1]);
        for (int il = 0; il < hp->n_layer; il++) {
            const struct pi_layer *l = &d->m->layers[il];
            const struct pi_tensor *ts[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->ffn_gate, &l->ffn_up, &l->ffn_down,
                                             &l->ffn_down_t, &l->fc1, &l->fc2 };
            for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
                if ((ts[i] == &l->fc1 || ts[i] == &l->fc2) && !pred)
                    continue;
                if (ts[i]->data && cuk_w_dbytes(ts[i]->type, 32, 1) && (size_t)(ts[i]->ne[0] * ts[i]->ne[1]) > big)
                    big = (size_t)(ts[i]->ne[0] * ts[i]->ne[1]);
            }
        }
        d->wdeq = big ? take(s, u, big * 2) : NULL;
        d->blas_ws_bytes = (size_t)32 << 20;
        d->blas_ws = take(s, u, d->blas_ws_bytes);
    }
}

static uint64_t dev_used(void)
{
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        return 0;
    return (uint64_t)(tot - fr);
}

void cudev_close(struct cudev *d)
{
    if (!d)
        return;
    cu_report_count("at close");
    if (d->n_captured) /* what the graphs cost their first steps (a new k, batch size or bucket) */
        fprintf(stderr, "cuda: %d decode graphs captured in %.1f ms\n", d->n_captured, d->capture_s * 1e3);
    /* a cold_add still waiting (its step abandoned on an error) must end before anything waits on
     * the stream: release every step */
    if (d->rel_blk)
        cudev_cold_release(d, UINT64_MAX);
    if (d->st)
        cudaStreamSynchronize(d->st);
    cudev_trace_close(d);
    for (int i = 0; i < 2; i++) {
        for (int b = 0; b < STEP_BUCKETS; b++)
            if (d->graph[i][b])
                cudaGraphExecDestroy(d->graph[i][b]);
        for (int n = 0; n <= CUDEV_GEMV_MAX; n++)
            for (int b = 0; b < STEP_BUCKETS; b++)
                for (int s = 0; s < 2; s++)
                    if (d->top_graph[n][i][b][s])
                        cudaGraphExecDestroy(d->top_graph[n][i][b][s]);
    }
    if (d->blas)
        cublasDestroy(d->blas);
    for (int i = 0; i < d->n_reg; i++)
        cudaHostUnregister(d->reg[i]);
    cudaFreeHost(d->rel_blk);
    cudaFree(d->w_arena);
    cudaFree(d->kv_arena);
    cudaFree(d->s_arena);
    cudaFreeHost(d->h_batch);
    cudaFreeHost(d->h_ids);
    cudaFreeHost(d->h_tvals);
    cudaFreeHost(d->h_cnt);
    if (d->st)
        cudaStreamDestroy(d->st);
    free(d->k_cache);
    free(d->v_cache);
    free(d->active);
    for (int il = 0; d->L && il < d->m->hp.n_layer; il++)
        free(d->L[il].h_hot);
    free(d->L);
    free(d);
}

int cudev_open(struct cudev **out, const struct pi_model *m, const struct cudev_params *p)
{
    char why[160];
    if (!cudev_available(why, sizeof why))
        return pi_fail(PI_E_UNSUPPORTED, "cuda: %s", why);
    const struct pi_hparams *hp = &m->hp;
    struct cudev *d = calloc(1, sizeof *d);
    if (!d)
        return pi_fail(PI_E_NOMEM, "cuda: out of memory");
    d->m = m;
    d->p = *p;
    d->pn = -1;
    if (d->p.n_seq < 1)
        d->p.n_seq = 1;
    if (d->p.n_batch < 1)
        d->p.n_batch = 64;
    if (d->p.n_ctx < 1)
        d->p.n_ctx = hp->n_ctx_train;
    if (!cuk_attn_ok(hp->head_dim) || hp->n_head % hp->n_head_kv) {
        free(d);
        return pi_fail(PI_E_UNSUPPORTED, "cuda: head size %d (%d heads, %d kv heads) not supported", hp->head_dim,
                       hp->n_head, hp->n_head_kv);
    }
    d->n_dev_layers = p->n_gpu_layers > 0 && p->n_gpu_layers < hp->n_layer ? p->n_gpu_layers : hp->n_layer;
    d->L = calloc((size_t)hp->n_layer, sizeof *d->L);
    d->k_cache = calloc((size_t)hp->n_layer, sizeof(void *));
    d->v_cache = calloc((size_t)hp->n_layer, sizeof(void *));
    int rc = 0;
    if (!d->L || !d->k_cache || !d->v_cache)
        rc = pi_fail(PI_E_NOMEM, "cuda: out of memory");
    if (!rc)
        rc = place_neurons(d);
    if (!rc)
        rc = CU(cudaSetDevice(0));
    if (!rc)
        rc = CU(cudaFree(0)); /* creates the context */
    if (!rc)
        rc = CU(cudaGetDeviceProperties(&d->prop, 0));
    if (!rc)
        rc = CU(cudaStreamCreateWithFlags(&d->st, cudaStreamNonBlocking));
    if (!rc && d->p.blas_prefill)
        rc = CB(cublasCreate(&d->blas));
    if (!rc && d->p.blas_prefill)
        rc = CB(cublasSetStream(d->blas, d->st));
    if (!rc)
        d->ctx_bytes = dev_used();
    /* weights */
    if (!rc)
        rc = place_all(d);
    if (!rc) {
        d->w_bytes = d->w_used;
        rc = CU(cudaMalloc(&d->w_arena, d->w_bytes));
    }
    if (!rc)
        rc = place_all(d);
    /* KV cache */
    const size_t KV = (size_t)hp->n_head_kv * hp->head_dim, es = p->kv_f32 ? 4 : 2;
    const size_t per = al((size_t)d->p.n_seq * (size_t)d->p.n_ctx * KV * es);
    d->kv_bytes = per * 2 * (size_t)d->n_dev_layers;
    if (!rc)
        rc = CU(cudaMalloc(&d->kv_arena, d->kv_bytes));
    if (!rc)
        rc = CU(cudaMemset(d->kv_arena, 0, d->kv_bytes));
    for (int il = 0; !rc && il < d->n_dev_layers; il++) {
        d->k_cache[il] = (char *)d->kv_arena + per * (size_t)(2 * il);
        d->v_cache[il] = (char *)d->kv_arena + per * (size_t)(2 * il + 1);
    }
    d->geom = (struct cuk_attn_geom){ .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                                      .rope_dim = hp->rope_dim, .rope_mode = (int)hp->rope_mode,
                                      .rope_theta = hp->rope_theta, .n_ctx = d->p.n_ctx, .n_seq = d->p.n_seq,
                                      .f16 = !p->kv_f32 };
    d->geom.cluster = d->n_dev_layers > 0;
    for (int il = 0; il < d->n_dev_layers; il++)
        d->geom.cluster &= cuk_attn_cluster_ok(d->L[il].wqkv.q ? &d->L[il].wqkv : NULL);
    /* scratch */
    if (!rc) {
        place_scratch(d);
        d->s_bytes = d->s_used;
        rc = CU(cudaMalloc(&d->s_arena, d->s_bytes));
    }
    if (!rc)
        place_scratch(d);
    /* the upload stages through the scratch arena, which is cleared after it */
    if (!rc)
        rc = upload_all(d);
    if (!rc)
        rc = CU(cudaMemset(d->s_arena, 0, d->s_bytes));
    if (!rc && d->blas_ws)
        rc = CB(cublasSetWorkspace(d->blas, d->blas_ws, d->blas_ws_bytes));
    if (!rc) { /* the CPU's inverse frequencies (ops_rope), so that both rotate by the same angles */
        const int half = hp->rope_dim / 2;
        float *inv = malloc((size_t)(half + 1) * sizeof *inv);
        if (!inv)
            rc = pi_fail(PI_E_NOMEM, "cuda: out of memory");
        for (int i = 0; !rc && i < half; i++)
            inv[i] = 1.0f / powf(hp->rope_theta, (float)(2 * i) / (float)hp->rope_dim);
        if (!rc)
            rc = CU(cudaMemcpy(d->rope_inv, inv, (size_t)half * sizeof *inv, cudaMemcpyHostToDevice));
        free(inv);
    }
    if (!rc)
        rc = CU(cudaMallocHost((void **)&d->h_batch, 3 * (size_t)d->p.n_batch * sizeof(int32_t)));
    if (!rc)
        rc = CU(cudaMallocHost((void **)&d->h_ids, (size_t)d->p.n_batch * CUK_TOPK_MAX * sizeof(int32_t)));
    if (!rc)
        rc = CU(cudaMallocHost((void **)&d->h_tvals, (size_t)d->p.n_batch * CUK_TOPK_MAX * sizeof(float)));
    if (!rc)
        rc = CU(cudaMallocHost((void **)&d->h_cnt, (size_t)d->p.n_batch * sizeof(int32_t)));
    if (!rc)
        cudev_trace_open(d); /* after the arenas: the ring is not in the plan's bytes (trace builds only) */
    if (!rc)
        rc = CU(cudaStreamSynchronize(d->st));
    if (rc) {
        cudev_close(d);
        return rc;
    }
    cu_report_count("at the end of open");
    *out = d;
    return 0;
}

void cudev_mem(const struct cudev *d, struct cudev_mem *mem)
{
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    *mem = (struct cudev_mem){ .weights = d->w_bytes - d->hot_used - d->pred_used, .hot = d->hot_used,
                               .pred = d->pred_used, .kv = d->kv_bytes, .scratch = d->s_bytes,
                               .context = d->ctx_bytes, .device_used = tot - fr, .device_total = tot,
                               .hot_neurons = d->hot_neurons, .upload_s = d->upload_s };
}

bool cudev_sparse_ok(const struct cudev *d) { return d->sparse_ok; }
bool cudev_ffn_compact(const struct cudev *d, int layer) { return !d->L[layer].host_masked; }
int32_t cudev_n_layers(const struct cudev *d) { return d->n_dev_layers; }
int64_t cudev_layer_hot(const struct cudev *d, int layer) { return d->L[layer].n_hot; }
const char *cudev_device_name(const struct cudev *d) { return d->prop.name; }

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
static int host_batch(struct cudev *d, int32_t n, const int32_t *tok, const int32_t *pos, const int32_t *seq)
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
    TRY(host_batch(d, n, tok, pos, seq));
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
    const double t0 = now_s();
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
    d->capture_s += now_s() - t0;
    return rc;
}

/* The bucket of the batch's positions (host_batch's max_pos) for a decode graph of n tokens: b for
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
    TRY(host_batch(d, 1, &tok, &pos, &seq));
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
    TRY(host_batch(d, n, tok, pos, seq));
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

bool cudev_whole(const struct cudev *d)
{
    if (d->n_dev_layers < d->m->hp.n_layer)
        return false;
    for (int il = 0; il < d->n_dev_layers; il++)
        if (d->L[il].compact || d->L[il].host_masked)
            return false;
    return true;
}

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

int cudev_hbm_read(size_t bytes, int reps, double *gbps)
{
    void *buf = NULL;
    unsigned long long *sink = NULL;
    cudaEvent_t a = NULL, b = NULL;
    int rc = CU(cudaMalloc(&buf, bytes));
    if (!rc)
        rc = CU(cudaMalloc((void **)&sink, sizeof *sink));
    if (!rc)
        rc = CU(cudaMemset(buf, 0x5a, bytes)); /* not zeros */
    if (!rc)
        rc = CU(cudaEventCreate(&a));
    if (!rc)
        rc = CU(cudaEventCreate(&b));
    float best = 0;
    for (int r = -1; !rc && r < reps; r++) { /* r = -1: warm-up */
        rc = CU(cudaEventRecord(a, 0));
        if (!rc)
            rc = CK(cuk_read_bench(buf, bytes, sink, 0));
        if (!rc)
            rc = CU(cudaEventRecord(b, 0));
        if (!rc)
            rc = CU(cudaEventSynchronize(b));
        float ms = 0;
        if (!rc)
            rc = CU(cudaEventElapsedTime(&ms, a, b));
        if (!rc && r >= 0 && (best == 0 || ms < best))
            best = ms;
    }
    *gbps = best > 0 ? (double)bytes / (best * 1e-3) / 1e9 : 0;
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    cudaFree(buf);
    cudaFree(sink);
    return rc;
}

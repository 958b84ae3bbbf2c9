/* cudev_impl.h — the device context's insides, shared by its files (the interface is cudev.h):
 * struct cudev and its layers, the checked-call macros (cudev_check.c), and the two helpers one file
 * lends another. cudev.c opens the context, places and uploads the weights, lays out the scratch and
 * closes; cudev_ops.c runs the forward pass's parts on the stream; cudev_graph.c composes them into
 * steps and captures the decode graphs. */
#ifndef PI_CUDEV_IMPL_H
#define PI_CUDEV_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "cudev.h"
#include "cuk.h"

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

/* ---- checked calls (cudev_check.c): 0, or -PI_E_DEVICE with the call, its file and line ---- */

int cudev_cu_check(int err, const char *what, const char *file, int line);
int cudev_cb_check(cublasStatus_t s, const char *what, const char *file, int line);
/* PINFER_CUDA_COUNT_CALLS: the checked calls so far, on stderr */
void cudev_report_calls(const char *when);
#define CU(call) cudev_cu_check((int)(call), #call, __FILE__, __LINE__)
/* kernel launchers return 0 or -cudaError_t */
#define CK(call) cudev_cu_check(-(call), #call, __FILE__, __LINE__)
#define CB(call) cudev_cb_check((call), #call, __FILE__, __LINE__)
#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

/* seconds on the monotonic clock (cudev.c) */
double cudev_now_s(void);
/* the batch's tokens, positions and sequences, checked, into the pinned h_batch (cudev_ops.c) */
int cudev_host_batch(struct cudev *d, int32_t n, const int32_t *tok, const int32_t *pos, const int32_t *seq);

#endif

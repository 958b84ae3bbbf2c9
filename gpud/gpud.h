/* gpud.h — the executor stage: embeddings, attention and KV cache, its share of the FFN, the merge
 * with cpud's share, the output layer and sampling; it owns the sequence state and runs the
 * requests queued in the control segment (CPU backend here; the CUDA backend implements the same
 * per-layer steps). */
#ifndef PI_GPUD_H
#define PI_GPUD_H

#include <stdint.h>

#include "act.h"
#include "backend.h"
#include "batch.h"
#include "eval.h"
#include "sampling.h"
#include "model.h"
#include "stage.h"

struct gpud {
    struct stage_rt rt;
    struct pi_model *m;
    const struct be_ops *be_ops; /* the device gpud runs on (the CPU backend until CUDA lands) */
    struct be *be;
    struct pi_pool *host_pool;   /* host threads beside a device backend (NULL for the CPU one) */
    struct shm_seg act_seg;
    struct act_view act;
    uint64_t epoch;      /* this session's epoch */
    uint64_t seq;        /* last step issued */
    uint64_t req_id;     /* request being run */
    bool req_dense;      /* the request asked for every neuron (--dense) */
    bool use_predictor;  /* the model has predictors: route steps through predictord */
    bool pred_on_device; /* the backend runs the predictor itself (a GPU: masks stay there) */
    bool pred_local;     /* masks computed here, not by predictord: on the device, or (--predict-in gpud,
                          * no audit) on gpud's host threads */
    bool act_pinned;     /* the act segment is registered with the backend (cudaHostRegister) */
    int64_t *n_cold;     /* (n_layer) neurons with gpu_idx 0: none → cpud is not involved */
    struct eval ev;      /* the evaluator, its FFN step routed through the other stages */
    /* beside a device: the step whose cold share the host has not settled yet (pipeline.c) */
    struct gpud_pend {
        bool on, sparse, cpu_sent;
        int layer;
        int32_t B;
        uint64_t seq;
    } pend;
    struct pi_batch_buf bb;
    /* continuous batching (sched.c) */
    int32_t n_seq;             /* sequences the KV cache holds (--parallel) */
    struct gpud_seq *seqs;     /* (n_seq) */
    float *logits;             /* (n_batch, n_vocab) the step's logits rows */
    int32_t *top_ids;          /* (n_batch, SAMP_BEST_MAX) a candidate step's best ids per row */
    float *top_vals;           /*   and their logits (the backend's topk op) */
    int32_t *row_seq;          /* (n_batch) the sequence of each logits row */
    struct samp_state *ss;
    bool last_dense;           /* FFN mode of the last step (dense and sparse requests alternate) */
    uint64_t steps, prefix_reused;
    /* decode steps (every row a sequence's next token): where a step's wall time goes, for the log
     * line at exit — the host around the evaluator, its layers' enqueueing, its output and wait */
    struct gpud_step_time {
        uint64_t steps, wall_ns, outside_ns, layers_ns, output_ns;
    } dec;
};

/* One KV-cache sequence and the request it runs. */
struct gpud_seq {
    int slot;              /* ctl request index, -1 when free */
    uint64_t req_id;
    int32_t n_past;        /* tokens of the request already in this sequence's cells */
    int32_t n_known;       /* prompt + generated tokens */
    int32_t max_new;       /* generated tokens at which the request ends */
    bool dense;            /* the request's FFN mode */
    bool in_step;          /* already has tokens in the step being built */
    int logits_fd;         /* --dump-logits file, or -1 */
    uint64_t start_ns, first_ns;
    int32_t *cached;       /* (n_ctx) tokens of the cells, kept after the request for prefix reuse */
    int32_t n_cached;
    bool cached_dense;     /* the FFN mode those cells were computed in */
};

int gpud_init(struct gpud *g, int argc, char **argv);
/* Serve requests until a stop is requested (sched.c). */
int gpud_run(struct gpud *g);
/* One line on stderr (gpud's log): where a decode step's time went (struct gpud_step_time). */
void gpud_log_step_time(const struct gpud *g);
void gpud_fini(struct gpud *g);

/* Route the evaluator's FFN step through predictord and cpud (pipeline.c). */
void gpud_route_ffn(struct gpud *g);
/* After a failed batch: release every step the device may still wait on (pipeline.c). */
void gpud_ffn_abandon(struct gpud *g);

/* Continuous batching over n_seq sequences (sched.c); gpud_run is its loop. */
int sched_init(struct gpud *g, int32_t n_seq);
void sched_fini(struct gpud *g);

#endif

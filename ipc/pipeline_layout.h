/* pipeline_layout.h — the shared-memory segments of one pinfer instance (part of ipc/layout.h's
 * rules: offsets never pointers, fixed-width fields, explicit enum values, static_asserts below).
 *
 * Segments of instance N of user U (names from ipc/shm.h: /pinfer-U-N-<segment>):
 *
 *   "ctl"     (PI_SEG_KIND_CTL)      struct pi_ctl at offsets[0]. Created and removed by the
 *             supervisor (pictl). Instance state, the gpud session epoch, load progress, one
 *             struct pi_stage_info per stage (pid, state, restarts, heartbeat, counters and
 *             per-layer profile), and the request table (struct pi_request[PI_MAX_REQUESTS]):
 *             prompt and generated tokens of every request in flight, so that a restarted gpud
 *             replays them and clients stream tokens from here whatever stage dies. Then
 *             the log-probability records (struct pi_logprob logprobs[slot][i], i < PI_LP_MAX_TOKENS)
 *             of requests that asked for them: gpud writes record i of a slot before it publishes
 *             generated token i (the release store of n_gen), clients read it after their acquire.
 *   "weights" (PI_SEG_KIND_WEIGHTS)  struct pi_weights_info at offsets[0]; the model file's exact
 *             byte image (GGUF header, metadata, tensor data) at offsets[1], 4096-aligned, so every
 *             stage parses it with gguf_open_mem and gets weight views without copies; a tensor
 *             directory (struct pi_tensor_dirent[n_tensors]) at offsets[2]. Created by the
 *             supervisor (sized from the file), filled by loaderd; survives the restart of any
 *             stage, so a restarted stage re-attaches instead of reloading.
 *   "act"     (PI_SEG_KIND_ACT)      the per-layer exchange between gpud, predictord and cpud:
 *             see data_layout in gpud/ (struct pi_act_hdr at offsets[0], rings at offsets[1..]).
 *
 * Writers. Each field has one writer process; others only read it (relaxed unless noted):
 * supervisor — pi_ctl.state/instance fields, stage pid/state/restarts, request allocation
 * (FREE→QUEUED) and release (DONE/FAILED→FREE); loaderd — load progress and pi_weights_info;
 * every stage — its own heartbeat, counters and profile; gpud — epoch, request execution fields
 * (QUEUED→RUNNING→DONE/FAILED, tokens, n_gen). */
#ifndef PI_IPC_PIPELINE_LAYOUT_H
#define PI_IPC_PIPELINE_LAYOUT_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "layout.h"

#define PI_SEG_KIND_CTL 2u
#define PI_SEG_KIND_WEIGHTS 3u
#define PI_SEG_KIND_ACT 4u

#define PI_MAX_LAYERS 256        /* profile rows per stage; deeper models fold into the last */
#define PI_MAX_REQUESTS 16       /* requests in flight per instance */
#define PI_REQ_MAX_TOKENS 8192   /* prompt + generated tokens a request slot holds */
#define PI_PATH_MAX 1024
#define PI_MSG_MAX 256           /* error messages carried in shared memory */
#define PI_INSTANCE_MAX 32

enum pi_stage {
    PI_STAGE_LOADERD = 0,
    PI_STAGE_PREDICTORD = 1,
    PI_STAGE_CPUD = 2,
    PI_STAGE_GPUD = 3,
    PI_STAGE_APID = 4,  /* optional: the HTTP front door, only with `pictl start --http` */
    PI_STAGE_COUNT = 5,
};

enum pi_stage_state {
    PI_STAGE_DOWN = 0,     /* not running (before start, or after exit) */
    PI_STAGE_STARTING = 1, /* spawned, attaching */
    PI_STAGE_READY = 2,    /* serving its role; heartbeat advancing */
    PI_STAGE_FAILED = 3,   /* exited and will not be restarted (gave up, or fatal config error) */
};

enum pi_instance_state {
    PI_INST_STARTING = 0,
    PI_INST_LOADING = 1,
    PI_INST_SERVING = 2,
    PI_INST_STOPPING = 3,
    PI_INST_FAILED = 4,   /* start failed: ctl.error says why */
};

enum pi_req_state {
    PI_REQ_FREE = 0,
    PI_REQ_QUEUED = 1,   /* written by the supervisor; gpud has not taken it yet */
    PI_REQ_RUNNING = 2,  /* gpud is prefilling or decoding it */
    PI_REQ_DONE = 3,
    PI_REQ_FAILED = 4,   /* error/errmsg say why */
};

#define PI_REQ_IGNORE_EOS 1u
#define PI_REQ_DENSE 2u      /* every FFN neuron, even when the model has predictors (--dense) */
#define PI_REQ_LOGPROBS 4u   /* record each generated token's log-probabilities (n_probs best) */

/* Log-probabilities of one generated token, from the distribution it was sampled from (the
 * penalized logits' log-softmax at temperature 1: common/sampling.h). Bounded: at most
 * PI_LP_MAX_TOP candidates (OpenAI's top_logprobs limit), never a whole logits row; and recorded for
 * the first PI_LP_MAX_TOKENS generated tokens of a request (the supervisor refuses a request with
 * logprobs whose n_predict is larger), so the table costs 16 * 1024 * 168 B = 2.6 MiB. */
#define PI_LP_MAX_TOP 20
#define PI_LP_MAX_TOKENS 1024
struct pi_logprob {
    float logprob;                      /* the generated token's */
    int32_t n_top;                      /* entries below, most likely first (ties: lower id) */
    int32_t top_id[PI_LP_MAX_TOP];
    float top_logprob[PI_LP_MAX_TOP];   /* may be -INFINITY (a banned token) */
};

/* Per-layer profile of one stage: relaxed atomic adds by the stage, relaxed loads by pictl. */
struct pi_layer_prof {
    _Atomic uint64_t items;      /* work items (layer evaluations) done */
    _Atomic uint64_t compute_ns; /* time computing */
    _Atomic uint64_t wait_ns;    /* time waiting on rings for this layer's inputs */
    _Atomic uint64_t bytes;      /* weight bytes read computing */
};

struct pi_stage_info {
    _Atomic int32_t pid;            /* supervisor writes at spawn; 0 when down */
    _Atomic uint32_t state;         /* enum pi_stage_state: supervisor, and the stage sets READY */
    _Atomic uint32_t restarts;      /* supervisor: times restarted after a death */
    _Atomic int32_t last_exit;      /* supervisor: wait status of the last death */
    _Atomic uint64_t started_ns;    /* CLOCK_MONOTONIC at spawn (supervisor) */
    _Atomic uint64_t ready_ns;      /* CLOCK_MONOTONIC when it became READY (stage) */
    _Atomic uint64_t heartbeat_ns;  /* CLOCK_MONOTONIC, advanced by the stage at least every 100 ms */
    _Atomic uint64_t died_ns;       /* CLOCK_MONOTONIC of the last death (supervisor) */
    _Atomic uint64_t items;         /* totals over layers, for status */
    _Atomic uint64_t compute_ns;
    _Atomic uint64_t wait_ns;
    _Atomic uint64_t bytes;
    _Atomic uint64_t fallbacks;     /* gpud: layers where it computed a dead stage's share */
    _Atomic uint64_t stale_dropped; /* results discarded because their key was stale */
    /* gpud beside a device: bytes of the per-layer hand-off over PCIe (h and masks to the host,
     * the cold share back), for the PCIe readouts of pictl profile and --json-stats */
    _Atomic uint64_t d2h_bytes, h2d_bytes;
    uint64_t reserved[2];
    char last_error[PI_MSG_MAX];    /* the stage's last fatal error, for pictl status */
    struct pi_layer_prof layers[PI_MAX_LAYERS];
};

struct pi_request {
    _Atomic uint32_t state;     /* enum pi_req_state */
    _Atomic uint32_t n_gen;     /* generated tokens published in tokens[n_prompt..]; gpud stores
                                   with release after writing the token, clients load with
                                   acquire; also the futex word clients sleep on */
    uint64_t id;                /* supervisor: unique per instance */
    /* sampling and limits (supervisor, before QUEUED) */
    float temp, top_p, min_p, repeat_penalty;
    int32_t top_k, repeat_last_n;
    float frequency_penalty, presence_penalty; /* 0: off (common/sampling.h) */
    uint64_t seed;
    int32_t n_predict;
    uint32_t flags;             /* PI_REQ_* */
    int32_t n_prompt;
    int32_t error;              /* negative code when FAILED */
    uint64_t prefill_ns, decode_ns; /* gpud, for the client's [perf] line */
    uint32_t replays;           /* gpud: times this request was replayed after a gpud restart */
    uint32_t queued_steps;      /* gpud: scheduler steps it waited QUEUED while every sequence was
                                   busy (continuous batching's queue; --json-stats reports it) */
    _Atomic uint32_t cancel;    /* supervisor: 1 = the client asked or went away; gpud stops the
                                   request at its next step and fails it as cancelled */
    _Atomic int32_t seq;        /* gpud: the KV-cache sequence running it, -1 while none */
    int32_t n_probs;            /* supervisor, with PI_REQ_LOGPROBS: candidates per token, 0..PI_LP_MAX_TOP */
    char errmsg[PI_MSG_MAX];
    char logits_path[PI_PATH_MAX]; /* supervisor: "" or an absolute path; gpud appends one
                                      n_vocab float32 row per generated token (--dump-logits) */
    int32_t tokens[PI_REQ_MAX_TOKENS]; /* prompt, then generated */
};

/* Recent work items of one stage, for `pictl profile --trace` (Chrome trace events). The stage
 * writes ev[head % PI_TRACE_EVENTS] with relaxed stores, then bumps head with release; a reader
 * loads head with acquire and copies the last min(head, PI_TRACE_EVENTS) events (an event being
 * overwritten while read is a profiling glitch, never a correctness problem). */
#define PI_TRACE_EVENTS 8192
enum pi_trace_kind { PI_TRACE_COMPUTE = 0, PI_TRACE_WAIT = 1 };
struct pi_trace_event {
    uint64_t ts_ns;    /* CLOCK_MONOTONIC start */
    uint32_t dur_ns;
    int16_t layer;     /* -1: not per layer (prefill setup, sampling) */
    uint16_t kind;     /* enum pi_trace_kind */
    int64_t pos;       /* token position */
};
struct pi_trace {
    _Atomic uint64_t head;
    uint64_t pad[7];
    struct pi_trace_event ev[PI_TRACE_EVENTS];
};

/* Predictor audit (--audit-rate): for a sampled fraction of tokens predictord also computes every
 * neuron's gate and counts the neurons that fired but were not predicted (false negatives).
 * Relaxed atomic adds by predictord, relaxed loads by pictl status/profile. */
struct pi_audit_row {
    _Atomic uint64_t tokens;     /* audited token-layer evaluations */
    _Atomic uint64_t fired;      /* neurons that were actually active */
    _Atomic uint64_t predicted;  /* neurons predicted active */
    _Atomic uint64_t missed;     /* fired but not predicted: recall = 1 - missed / fired */
};

struct pi_ctl {
    char instance[PI_INSTANCE_MAX];
    char model_path[PI_PATH_MAX];
    char error[PI_MSG_MAX];          /* why the instance failed to start */
    _Atomic uint32_t state;          /* enum pi_instance_state (supervisor) */
    _Atomic uint32_t req_seq;        /* bumped (release) by the supervisor when it queues a request;
                                        futex word gpud sleeps on when idle */
    _Atomic uint64_t slot_waits;     /* supervisor: requests that found every request slot taken and
                                        waited in its queue, since the instance started (status) */
    _Atomic uint64_t epoch;          /* gpud session: bumped by each new gpud before it works */
    int32_t n_threads;               /* cpud workers */
    int32_t n_ctx;                   /* KV cells per sequence (the context of one request) */
    int32_t n_layer, n_embd, n_ff, n_vocab; /* from the model, for status/profile */
    float gpu_ffn_share;             /* fraction of FFN neurons gpud computes */
    int32_t n_parallel;              /* sequences gpud runs at once (--parallel); KV cells n_ctx each */
    _Atomic uint64_t load_done_bytes;  /* loaderd progress */
    _Atomic uint64_t load_total_bytes;
    _Atomic uint64_t load_ns;          /* loaderd: time the load took */
    char load_method[64];              /* loaderd: "io_uring O_DIRECT", "io_uring buffered", "pread" */
    uint64_t supervisor_pid;
    char backend[16];                /* supervisor (--backend): "cpu", "cuda" or "auto" for gpud; gpud
                                        writes the one it opened into backend_used */
    char backend_used[16];
    uint64_t ram_budget;             /* supervisor (--ram-budget): bytes of host weights + neuron cache; 0 =
                                        all in RAM. cpud then reads its disk-tier neurons from the bundle */
    /* cpud: the generation of the "ncache" segment it created (ipc/ncache_shm.h), 0 = none; loaderd
     * (re-)attaches when it changes */
    _Atomic uint64_t ncache_gen;
    /* loaderd, with --ram-budget and no FFN row on gpud: the FFN rows are punched out of the weights
     * segment (bytes; UINT64_MAX while it is being done). Non-zero: no stage reads an FFN row from
     * the image — cpud reads them through its neuron cache, gpud waits for cpud instead of computing
     * its share itself */
    _Atomic uint64_t weights_trimmed;
    struct pi_stage_info stages[PI_STAGE_COUNT];
    struct pi_request reqs[PI_MAX_REQUESTS];
    struct pi_trace traces[PI_STAGE_COUNT];
    float audit_rate;                /* supervisor (--audit-rate): fraction of tokens audited */
    int32_t cache_type;              /* supervisor (--cache-type): KV cache elements, enum be_cache_type */
    struct pi_audit_row audit[PI_MAX_LAYERS];
    /* Worker threads per stage (supervisor; 0 = n_threads). With the CPU backend gpud and cpud share
     * the same cores: when the FFN is split they compute their shares at the same time, so -t is
     * divided between them instead of given to each (4 threads on 2 cores would fight). */
    int32_t gpud_threads, cpud_threads;
    /* Where the masks come from when gpud's backend has no predict op of its own (the CPU backend):
     * supervisor, --predict-in. In gpud (default) the predictor runs on gpud's threads between
     * attention and the FFN; in predictord each layer makes a round trip to it and back (measured
     * 0.67x of in-process at -t 16 on a 7B, docs/BENCHMARKS.md). An audit (audit_rate > 0) always
     * routes the masks through predictord, which audits. */
    int32_t predict_in; /* enum pi_predict_in */
    /* gpud, for requests with PI_REQ_LOGPROBS: record i of slot s before token i's n_gen release */
    struct pi_logprob logprobs[PI_MAX_REQUESTS][PI_LP_MAX_TOKENS];
    /* The VRAM plan (supervisor, engine/vram_plan.h) and what gpud's backend allocated (gpud, after it
     * opened; bytes by kind, read from its allocator; device_used: cudaMemGetInfo's used bytes). */
    int64_t vram_budget;             /* bytes; -1: none given */
    uint64_t vram_planned;           /* the plan's total for the placement (0: no plan) */
    int64_t hot_neurons;             /* FFN neurons placed on gpud (all layers) */
    double hot_coverage;             /* share of all activations (act_freq) they cover; -1 unknown */
    uint64_t vram_weights, vram_hot, vram_pred, vram_kv, vram_scratch, vram_context, vram_device_used;
    int32_t n_gpu_layers;            /* supervisor: whole-layer placement (-ngl, or the budget's
                                        fallback): the first N layers on the GPU; -1: by neurons */
    int32_t reserved2;
    char backend_why[PI_MSG_MAX];    /* gpud: why `auto` did not open the device backend ("" if it did) */
};

enum pi_predict_in { PI_PREDICT_IN_GPUD = 0, PI_PREDICT_IN_PREDICTORD = 1 };

/* "gpud" / "predictord" → enum pi_predict_in, or -1 */
static inline int predict_in_parse(const char *s)
{
    return !strcmp(s, "gpud") ? PI_PREDICT_IN_GPUD : !strcmp(s, "predictord") ? PI_PREDICT_IN_PREDICTORD : -1;
}
static inline const char *predict_in_name(int32_t v) { return v == PI_PREDICT_IN_PREDICTORD ? "predictord" : "gpud"; }

enum pi_weights_state {
    PI_WEIGHTS_EMPTY = 0,
    PI_WEIGHTS_LOADING = 1,
    PI_WEIGHTS_READY = 2,   /* image complete and validated: stages may use it */
    PI_WEIGHTS_FAILED = 3,
};

struct pi_tensor_dirent {
    char name[64];
    uint32_t type;       /* enum pi_type */
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t offset;     /* from the start of the image */
    uint64_t nbytes;
};

struct pi_weights_info {
    _Atomic uint32_t state;  /* enum pi_weights_state: loaderd stores READY with release after the
                                image and directory are written; stages load with acquire */
    uint32_t n_tensors;      /* directory entries */
    uint64_t file_size;      /* bytes of the image == the model file's size */
    uint64_t file_ino, file_dev, file_mtime_ns; /* identity of the file loaded: a restarted
                                loaderd re-attaches only if the file is unchanged */
    char error[PI_MSG_MAX];
};

#define PI_WEIGHTS_ALIGN 4096 /* image offset alignment: O_DIRECT reads land in place */

static_assert(sizeof(struct pi_layer_prof) == 32, "layer profile row");
static_assert(sizeof(struct pi_trace_event) == 24, "trace event");
static_assert((PI_TRACE_EVENTS & (PI_TRACE_EVENTS - 1)) == 0, "trace ring is a power of two");
static_assert(offsetof(struct pi_stage_info, layers) % 8 == 0, "stage profile alignment");
static_assert(offsetof(struct pi_request, tokens) % 4 == 0, "request tokens alignment");
static_assert(offsetof(struct pi_request, n_gen) == 4, "n_gen is the client futex word");
static_assert(offsetof(struct pi_ctl, req_seq) % 4 == 0, "req_seq futex alignment");
static_assert(sizeof(struct pi_tensor_dirent) == 120, "tensor directory entry");
static_assert(sizeof(struct pi_logprob) == 8 + 8 * PI_LP_MAX_TOP, "log-probability record");
static_assert(offsetof(struct pi_ctl, logprobs) % 4 == 0, "log-probability records alignment");
static_assert(sizeof(struct pi_weights_info) % 8 == 0, "weights info");

#endif

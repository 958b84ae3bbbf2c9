/* supervisor.h — the daemon that owns one instance: creates its shared-memory segments, starts the
 * stages, restarts the ones that die or hang, and answers commands on ipc://<dir>/ctl.ipc.
 *
 * Start:   ctl segment (struct pi_ctl) → weights segment (sized from the file, filled by loaderd)
 *          → act segment → loaderd (and apid, with --http: it answers /health with 503 while the
 *          instance loads); when the weights are READY: predictord, cpud, gpud; when gpud and the
 *          optional data stages are READY: SERVING. apid is optional: restarted like the others,
 *          never waited for, never a reason to fail. A failure before SERVING (the loader's
 *          message, a stage that keeps dying) stops everything, removes the segments and exits 1.
 * Serving: a stage that dies is restarted (first at once, then after 100 ms doubling to 5 s; the
 *          delay resets after 30 s of uptime); 10 deaths within a minute → the stage is FAILED
 *          (ctl.error says why). predictord and cpud are optional (gpud falls back), loaderd is
 *          optional once the weights are READY, gpud is required: giving up on it fails the
 *          instance and the requests in flight. A READY stage without a heartbeat for
 *          STAGE_HUNG_MS is killed (and restarted as a death).
 * Stop:    {"cmd":"stop"}, SIGTERM/SIGINT/SIGHUP, or the death of an owner process (ephemeral
 *          instances of `pictl run`): SIGTERM to every stage, SIGKILL after 5 s, requests in flight
 *          marked FAILED, segments, socket and pid file removed (logs stay).
 *
 * Commands (one JSON object per message; every reply is {"ok":true,...} or {"ok":false,"error":E}):
 *   {"cmd":"status"}                          → {"ok":true,"status":{...}} (as `pictl status --json`)
 *   {"cmd":"stop"}                            → reply after the cleanup, then the supervisor exits 0
 *   {"cmd":"restart","stage":"cpud"}          → SIGTERM and respawn (counts as a restart)
 *   {"cmd":"generate","prompt":S, "n_predict":N, "temp":T, "top_k":K, "top_p":P, "min_p":M,
 *    "repeat_penalty":R, "repeat_last_n":L, "seed":S (integer or decimal string), "ignore_eos":B, "dense":B,
 *    "dump_logits":"/abs/path", "client_pid":PID}   (all but prompt optional)
 *                                             → {"ok":true,"id":ID,"slot":I,"n_prompt":N}
 *   {"cmd":"release","slot":I,"id":ID}        → frees a DONE/FAILED slot
 *                                             or, when all PI_MAX_REQUESTS slots are taken, the
 *                                             request waits in order: {"ok":true,"ticket":T,"queued":K}
 *   {"cmd":"ticket","ticket":T}               → the slot reply above once the request has one, else
 *                                               {"ok":true,"ticket":T,"queued":K} (its place)
 *   {"cmd":"cancel","slot":I,"id":ID}         → gpud stops the request at its next step (it ends
 *                                               FAILED, "cancelled"); the slot is freed then
 * A request whose client_pid has exited is cancelled, and its slot freed once it has ended. */
#ifndef PI_SUPERVISOR_H
#define PI_SUPERVISOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pipeline_layout.h"

struct pi_model;

#define SUP_N_BATCH 32 /* most tokens per pipeline step (act segment buffers) */
/* Default share of each layer's FFN neurons that gpud computes when no --vram-budget chooses them.
 * gpud runs the CPU backend until the CUDA executor lands, so gpud and cpud share the same cores:
 * splitting the FFN between them only adds two hand-offs of those cores per layer (measured in
 * docs/BENCHMARKS.md), and cpud is then the fallback path. --gpu-ffn-share sets any split. */
#define SUP_DEFAULT_GPU_FFN_SHARE 1.0f
/* Sequences gpud runs at once when --parallel is not given (llama-server's default is 4 too). */
#define SUP_DEFAULT_PARALLEL 4

struct sup_config {
    char name[PI_INSTANCE_MAX];
    char model_path[PI_PATH_MAX];   /* absolute */
    const struct pi_model *model;   /* loaded by the caller (hparams, tokenizer); not freed here */
    int32_t n_threads, n_ctx;       /* n_ctx: KV cells per sequence */
    int32_t n_parallel;             /* sequences gpud runs at once (--parallel) */
    int32_t cache_type;             /* KV cache elements (--cache-type, enum be_cache_type); -1: default */
    char backend[16];               /* gpud's device (--backend): cpu, cuda, auto */
    float gpu_ffn_share;
    int64_t vram_budget;     /* bytes; < 0: no budget, the hot set is gpu_ffn_share of each layer */
    uint64_t ram_budget;     /* bytes (--ram-budget); 0: no disk tier. cpud computes the FFN then
                                (gpu_ffn_share 0 unless a VRAM budget places neurons on the GPU) */
    bool reset_gpu_index, disable_gpu_index;
    float audit_rate;
    int32_t predict_in; /* enum pi_predict_in (--predict-in) */
    pid_t owner_pid;   /* > 0: stop when this process is gone (ephemeral instance) */
    int lock_fd;       /* supervisor.pid, opened and flock'ed by the caller; the supervisor keeps
                          the lock for its lifetime and writes its pid there */
    int ready_fd;      /* -1, or a pipe: one line "ok" or "error: MESSAGE" once SERVING or failed */
    bool http;         /* run the apid stage (its settings: <runtime dir>/apid.json, see apid/) */
};

/* Run the supervisor in this process until the instance stops. Returns the exit code (0 after a
 * stop, 1 after a failed start). Stdio redirection and detaching are the caller's job. */
int supervisor_run(const struct sup_config *cfg);

#endif

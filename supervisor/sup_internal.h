/* sup_internal.h — the supervisor's process-local state, shared by supervisor.c (lifecycle of the
 * stages) and sup_cmd.c (the JSON commands). Nothing here lives in shared memory. */
#ifndef PI_SUPERVISOR_SUP_INTERNAL_H
#define PI_SUPERVISOR_SUP_INTERNAL_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct pi_tokenizer;

#include "instance.h"
#include "sampling.h"
#include "supervisor.h"

#define SUP_QUEUE_MAX 64   /* generate requests that wait for a table slot (beyond PI_MAX_REQUESTS) */
#define SUP_GIVEUP_DEATHS 10 /* deaths within SUP_GIVEUP_WINDOW_MS that make us give up a stage */

struct sup_stage {
    char exe[PATH_MAX];
    pid_t pid;                 /* 0 when not running */
    bool spawned_once;
    bool restart_requested;    /* a restart command: respawn at once when it exits */
    bool gave_up;
    bool hung_killed;          /* SIGKILLed for a stale heartbeat, not reaped yet */
    unsigned backoff_n;        /* deaths in a row without SUP_BACKOFF_RESET_MS of uptime */
    uint64_t next_spawn_ns;    /* scheduled respawn (0: none) */
    uint64_t kill_at_ns;       /* SIGTERM sent: SIGKILL at this time (0: none) */
    uint64_t deaths[SUP_GIVEUP_DEATHS]; /* ring of recent death times */
    unsigned n_deaths;
};

struct sup {
    const struct sup_config *cfg;
    char dir[INST_PATH_MAX];
    struct shm_seg ctl_seg, weights_seg, act_seg;
    struct pi_ctl *ctl;
    struct pi_weights_info *winfo;
    int sock;                  /* nanomsg REP */
    int ready_fd;              /* the starting client's pipe until SERVING or failure, then -1 */
    struct sup_stage st[PI_STAGE_COUNT];
    bool data_stages_spawned;  /* predictord/cpud/gpud started (after the weights are READY) */
    bool served;               /* reached SERVING once */
    bool stop;                 /* leave the main loop and clean up */
    bool stop_reply;           /* the stop came from a command: reply after the cleanup */
    int exit_code;
    uint64_t req_counter;
    pid_t req_owner[PI_MAX_REQUESTS];
    bool req_autorelease[PI_MAX_REQUESTS]; /* cancelled: free the slot once gpud has ended it */
    /* generate requests beyond the table's PI_MAX_REQUESTS slots wait here, in order, for a slot
     * (sup_promote); their clients poll with {"cmd":"ticket"} */
    struct sup_waiting {
        uint64_t ticket;
        json_t *req;        /* the request's JSON (a reference held) */
        int32_t *ids;       /* its tokens (malloc'd) */
        size_t n_ids;
        pid_t client;
    } queue[SUP_QUEUE_MAX];
    int n_queue;
    struct sup_assigned {   /* promoted tickets whose client has not asked yet */
        uint64_t ticket, id;
        int slot, n_prompt;
    } assigned[SUP_QUEUE_MAX];
    int n_assigned;
    uint64_t ticket_counter;
};

/* A command parsed and checked against everything but the instance's state (sup_cmd_parse), so
 * that the fuzz target (fuzz/fuzz_sup_cmd.c) drives it without a live instance. */
enum sup_cmd_kind { SUP_CMD_STATUS, SUP_CMD_STOP, SUP_CMD_GENERATE, SUP_CMD_RELEASE, SUP_CMD_RESTART, SUP_CMD_CANCEL,
                    SUP_CMD_TICKET };

struct sup_gen_args {
    const char *prompt;        /* into the request's JSON; NULL when prompt_tokens is given */
    size_t prompt_len;         /* may hold NULs */
    json_t *prompt_tokens;     /* borrowed: an array of token ids instead of a prompt, or NULL */
    struct samp_params sp;     /* temp, top_p, min_p, repeat/frequency/presence penalties */
    long long n_predict, top_k, last_n, client;
    long long n_probs;         /* -1: no log-probabilities; else candidates per token (0..20) */
    bool ignore_eos, dense;
    uint64_t seed;
    const char *dump;          /* "" or an absolute path, into the request's JSON */
};

struct sup_cmd {
    enum sup_cmd_kind kind;
    struct sup_gen_args gen;   /* generate */
    long long slot, id;        /* release, cancel */
    long long ticket;          /* ticket */
    enum pi_stage stage;       /* restart */
    const char *stage_name;
};

/* Parse one message (any bytes). NULL: *cmd is filled and *req holds the JSON its strings point
 * into (json_decref it after use); otherwise the error reply (and *req is NULL). */
json_t *sup_cmd_parse(const char *msg, size_t len, json_t **req, struct sup_cmd *cmd);
/* A generate's prompt → tokens (*ids malloc'd), checked against the context: NULL, or the error
 * reply (and *ids NULL). */
json_t *sup_gen_tokenize(const struct pi_tokenizer *tok, const struct sup_gen_args *g, int32_t n_ctx, int32_t **ids,
                         size_t *n_ids);

/* sup_cmd.c: handle one message (any bytes); returns the reply. A stop command sets s->stop and
 * s->stop_reply and returns NULL: the reply is sent after the cleanup. */
json_t *sup_handle(struct sup *s, const char *msg, size_t len);
json_t *sup_reply_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Cancel the requests of clients that have exited, free DONE/FAILED slots whose client has exited or
 * that were cancelled, drop waiting requests of dead clients, and move waiting requests into free
 * slots. */
void sup_sweep_requests(struct sup *s);
/* Free the waiting requests (at stop). */
void sup_queue_fini(struct sup *s);
/* Fail every QUEUED/RUNNING request (gpud gone for good, or stopping): only when no gpud runs. */
void sup_fail_requests(struct sup *s, const char *why);

/* supervisor.c, used by the restart command. Returns 0 or a negative code with a message. */
int sup_restart_stage(struct sup *s, enum pi_stage id);
void sup_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

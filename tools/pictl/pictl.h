/* pictl.h — the subcommands of pictl. Each takes argv from its own name on and returns the process
 * exit code; only main() exits. */
#ifndef PI_PICTL_H
#define PI_PICTL_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct run_opts;

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bundle(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_calibrate(int argc, char **argv); /* tools/calibrate: profile, train predictors, write PWRI */
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv); /* tools/quantize: GGUF -> GGUF in llama-quantize's types */

/* The control plane (instance.h describes an instance, supervisor.h the daemon). */
int cmd_start(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_restart(int argc, char **argv);
int cmd_logs(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_chat(int argc, char **argv); /* on apid's chat templates */

/* Print "pictl CMD: <what>: <pi_strerror>: <detail>" to stderr; returns exit code 1. */
int pictl_error(const char *cmd, const char *what, int rc);

struct start_opts {
    const char *name, *model;
    int32_t n_threads, n_ctx;
    bool n_ctx_given;       /* -c N on the command line: warned past the model's trained context */
    int32_t n_parallel;     /* sequences gpud runs at once; 0 = SUP_DEFAULT_PARALLEL */
    int32_t cache_type;     /* KV cache elements (enum be_cache_type); -1: the backend's default */
    const char *backend;    /* gpud's device: "cpu", "cuda", "auto" (NULL = auto) */
    float gpu_ffn_share;
    double vram_budget_gib; /* < 0: none; else the hot set is chosen by the split solver (gpuidx) */
    double ram_budget_gib;  /* < 0: none; else the disk tier: cpud reads cold neurons from the bundle */
    int32_t n_gpu_layers;   /* -ngl: the first N whole layers on the GPU; < 0: by neurons */
    bool reset_gpu_index;   /* regenerate the gpuidx even if one matches */
    bool disable_gpu_index; /* no FFN split: every neuron on the CPU side */
    float audit_rate;       /* fraction of tokens predictord audits densely */
    int32_t predict_in;     /* enum pi_predict_in: where the CPU backend's masks are computed */
    bool foreground;
    bool quiet;      /* no summary line (pictl run) */
    pid_t owner_pid; /* > 0: the instance stops when this process is gone */
    /* --http: run the apid stage on HOST:PORT; its settings go to <runtime dir>/apid.json (0600:
     * the API key is not put on a command line) */
    const char *http, *api_key, *chat_template;
};
/* Start an instance and wait until it serves (cmd_start.c). 0 or a negative code with a message;
 * on failure nothing of the instance is left running. */
int inst_start(const struct start_opts *o);
/* Stop an instance and wait until its supervisor is gone (cmd_stop.c). */
int inst_stop(const char *name);

/* Send one generate request from run_opts (prompt, n_predict, sampling, --dump-logits) to a
 * running instance, stream the completion to stdout like `pictl run --inproc`, print the [perf]
 * line, write --json-stats, release the slot (cmd_generate.c). *interrupted (may be NULL) is polled:
 * non-zero abandons the stream. Returns 0 or a negative code with a message. */
int gen_client_run(const char *name, const struct run_opts *o, const volatile sig_atomic_t *interrupted);

/* Take "--name X" / "--name=X" out of argv (for commands whose other flags another parser reads);
 * returns the new argc (argv[argc] = NULL). */
int pictl_take_name(int argc, char **argv, const char **name);

/* pictl run without --inproc: an ephemeral instance "run<pid>" for one completion. */
int run_pipeline(const struct run_opts *o);

#endif

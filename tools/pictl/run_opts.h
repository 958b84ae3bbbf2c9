/* run_opts.h — the flags shared by run / tokenize / perplexity, with llama.cpp's names. */
#ifndef PI_RUN_OPTS_H
#define PI_RUN_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "generate.h"

enum run_opts_cmd { RUN_OPTS_RUN, RUN_OPTS_TOKENIZE, RUN_OPTS_PERPLEXITY, RUN_OPTS_GENERATE };

struct run_opts {
    const char *model;
    char *prompt;       /* -p, or the contents of -f for run/tokenize (owned) */
    const char *file;   /* -f */
    const char *dump_logits, *json_stats;
    int32_t n_ctx, n_batch, n_threads;
    bool n_ctx_given;   /* -c N (N > 0) was on the command line: warn past the model's trained context */
    struct gen_params gen;
    bool inproc;
    bool dense;            /* --dense: all neurons even when the model has predictors */
    double vram_budget_gib; /* --vram-budget (pipeline path), < 0: none */
    int32_t n_gpu_layers;   /* -ngl / --n-gpu-layers (pipeline path): whole layers on the GPU; < 0: none given */
    bool reset_gpu_index, disable_gpu_index;
    float audit_rate;
    int32_t predict_in;    /* --predict-in (pipeline): enum pi_predict_in */
    bool seed_given;
    int32_t cache_type;    /* --cache-type: enum be_cache_type; -1: the backend's default */
    const char *backend;   /* --backend cpu|cuda|auto (default auto: cuda when a device opens) */
    double ram_budget_gib; /* --ram-budget: the disk tier (in process), < 0: none */
    const char *bundle;    /* --bundle: the FFN bundle (default MODEL.ffnbundle) */
    int32_t stream_qd;     /* --stream-qd: reads in flight (0: STREAM_QD) */
    bool disk_floor;       /* --disk-floor: measure the random-read floor after the run */
    int32_t weights;       /* --mmap / --no-mmap (in process): enum model_weights; -1: none given (mapped) */
};

/* 0: parsed; 1: --help printed (exit 0); negative: error printed (exit 2). */
int run_opts_parse(struct run_opts *o, int argc, char **argv, enum run_opts_cmd cmd);
void run_opts_fini(struct run_opts *o);
/* Rewrite llama.cpp's -ngl into --n-gpu-layers in place (getopt would read -n -g -l). */
void run_opts_ngl_alias(int argc, char **argv);

/* The model used without -m and $PINFER_MODEL: the installed embedded model for an installed pictl,
 * the source tree's for one in a build tree. */
const char *run_opts_default_model(void);

/* Prompt bytes must be UTF-8: the tokenizers would take any bytes, but the pipeline's JSON request
 * cannot carry them, so every command refuses them alike. 0, or -PI_E_INVAL with the offset of the
 * first bad byte in pi_errmsg(). */
int run_opts_check_utf8(const char *s, size_t len);

/* How an in-process command holds the model's weights (enum model_weights), and why: the file's
 * mapping unless --no-mmap. */
int run_opts_weights(const struct run_opts *o, const char **why);

/* Say on stderr why `--backend auto` runs on the CPU ("WHO: running on the CPU: WHY"; why:
 * be_open_named's reason, "" when it did not fall back). Silent in a build without the CUDA backend:
 * there the CPU is the only choice. */
void run_opts_note_backend(const char *who, const char *why);

/* A context the user asked for (-c N) past the model's trained one: say so on stderr, as llama.cpp
 * warns ("WHO: warning: -c N is beyond ..."); the run goes on. Silent otherwise, and for the
 * defaults, so that a plain run prints only its completion and [perf] line. */
void run_opts_warn_ctx(const char *who, int32_t n_ctx, int32_t n_ctx_train);

/* Read a whole file into a NUL-terminated buffer (malloc'd). */
int read_text_file(const char *path, char **out, size_t *len);

#endif
